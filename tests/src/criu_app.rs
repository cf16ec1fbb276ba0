//! Running `src/bin/criu_app.rs`, the test program of the CRIU tests, the same way in every
//! test file.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::{Proc, criu};

/// The test program at `exe`, checkpointing into `dir`, with extra environment.
pub fn app_command(exe: &str, dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(exe);
    c.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", dir)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("APP_MB", "8")
        // Never the test runner's stdin: it may be a file of another mount namespace, which
        // CRIU cannot dump.
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Waits for a program CRIU dumped in stop mode to be gone: CRIU kills it with SIGKILL.
pub fn assert_killed_by_dump(p: &mut Proc, timeout: Duration) {
    let st = p.wait(timeout);
    assert_eq!(
        st.signal(),
        Some(9),
        "the dumped process should be killed by criu, got {st:?}; it printed:\n{}",
        p.transcript()
    );
}

/// Waits until the dump helper sealed the image in `img` (wrote its manifest): the process is
/// gone before that, and a test that changes the image must wait (a restore waits by itself).
pub fn wait_sealed(img: &Path, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    while !img.join("crac-manifest.txt").exists() {
        assert!(std::time::Instant::now() < deadline, "image not sealed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Copies an executable with `cp`, so no write descriptor of the copy is ever open in this
/// process: one open while another test thread forks would make exec'ing the copy fail with
/// "Text file busy".
pub fn copy_executable(from: impl AsRef<Path>, to: impl AsRef<Path>) {
    let (from, to) = (from.as_ref(), to.as_ref());
    let st = Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("cp {}: {e}", from.display()));
    assert!(st.success(), "cp {} {}", from.display(), to.display());
}

/// The first file of the image in `img` whose name starts with `prefix` (`pages-`, `core-`).
pub fn image_file(img: &Path, prefix: &str) -> std::path::PathBuf {
    std::fs::read_dir(img)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no {prefix}* in {}", img.display()))
}

/// Flips one bit of `file` at `at` bytes from its end (what an edit or damage does).
pub fn flip_byte(file: &Path, at_from_end: usize) {
    let mut data = std::fs::read(file).unwrap();
    let at = data.len() - at_from_end;
    data[at] ^= 0x01;
    std::fs::write(file, &data).unwrap();
}
