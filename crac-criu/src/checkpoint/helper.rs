//! The dump helper: what runs `criu swrk` for a self-dump, bounds it in time, and seals the
//! image once CRIU is done.
//!
//! CRIU cannot dump its own ancestor, so the process starts the helper detached (double fork,
//! [`sys::spawn_detached`]). The helper is this very program (its executable opened before the
//! fork and run with `fexecve`), started with [`HELPER_ENV`] set: the crate's start-up hook
//! sees it, runs [`run_if_helper`] instead of the program's `main`, and exits. So the helper
//! needs nothing installed beside the program, and it can do what a bare `criu swrk` cannot:
//!
//! - hold the seal lock ([`SEAL_LOCK`](crate::image::SEAL_LOCK)) from before the dump until the manifest is
//!   written, so a restorer that sees the process gone waits for the seal instead of finding an
//!   unsealed image;
//! - stop a CRIU that runs longer than [`CRIU_TIMEOUT`](crate::settings::CRIU_TIMEOUT) (default 300 s); the process is then
//!   released and gets a named error;
//! - write the manifest ([`manifest::seal`]) when the dump is complete, also in stop mode,
//!   where CRIU has ended the process by then;
//! - report how it went through a pipe the process reads (`sealed …`, `timeout …`,
//!   `no-image …`, `seal-failed …`).

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::criu::invocation;
use crate::error::{Error, ErrorKind};
use crate::image::manifest;
use crate::safe_dir::Dir;
use crate::{settings, sys};

/// Set in the helper's environment: `SOCK DIR STATUS TIMEOUT_MS` (descriptor numbers).
use crate::settings::DUMP_HELPER as HELPER_ENV;

/// Whether the crate's start-up hook ran in this program: without it a re-executed program
/// would run its `main` instead of the helper.
static HOOK_RAN: AtomicBool = AtomicBool::new(false);

/// Starts the helper for one dump: it runs `criu swrk` on `sock` (the socket's other end stays
/// with the caller) with `dir` as the image directory. Returns the read end of the status pipe.
pub(crate) fn start(
    criu: &Path,
    sock: &OwnedFd,
    dir: &Dir,
    timeout: Duration,
) -> Result<OwnedFd, Error> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorKind::Unavailable,
            format!("cannot start the dump helper ({what}): {e}"),
        )
        .with_source(e)
    };
    if !HOOK_RAN.load(Ordering::Relaxed) {
        return Err(Error::new(
            ErrorKind::Unavailable,
            "crac-criu's start-up hook did not run in this program, so it cannot start its \
             dump helper; link the engine with `use crac_criu as _;` in the program's main.rs",
        ));
    }
    let exe = sys::open(Path::new("/proc/self/exe"), libc::O_RDONLY)
        .map_err(|e| fail("open /proc/self/exe", e))?;
    let (status_r, status_w) = sys::pipe().map_err(|e| fail("pipe", e))?;
    let fds = [sock.as_raw_fd(), dir.fd().as_raw_fd(), status_w.as_raw_fd()];
    let spec = format!("{} {} {} {}", fds[0], fds[1], fds[2], timeout.as_millis());
    let env = [
        (HELPER_ENV.to_owned(), spec),
        (settings::CRIU.to_owned(), criu.display().to_string()),
    ];
    let plan = sys::SpawnPlan::new(exe, &["crac-criu-dump-helper".to_owned()], &env, &fds)
        .map_err(|e| fail("prepare", e))?;
    sys::spawn_detached(&plan).map_err(|e| fail("spawn", e))?;
    Ok(status_r)
}

/// Reads the helper's status line, waiting up to `timeout` for it to end.
pub(crate) fn read_status(status: &OwnedFd, timeout: Duration) -> String {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    match sys::poll_readable(status, ms) {
        Ok(true) => {}
        _ => {
            return format!(
                "no word from the dump helper within {:.0} s",
                timeout.as_secs_f64()
            );
        }
    }
    let mut buf = [0u8; 4096];
    let n = sys::read_full(status, &mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).trim().to_owned()
}

/// Called by the crate's start-up hook: in a program started as a dump helper, does the
/// helper's work and exits; anywhere else, notes that the hook ran and returns.
pub(crate) fn run_if_helper() {
    HOOK_RAN.store(true, Ordering::Relaxed);
    let Some(spec) = settings::dump_helper() else {
        return;
    };
    let code = match run(&spec) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "dump helper failed");
            1
        }
    };
    std::process::exit(code);
}

fn run(spec: &str) -> std::io::Result<()> {
    let bad = || std::io::Error::other(format!("{HELPER_ENV}={spec}: malformed"));
    let v: Vec<u64> = spec
        .split(' ')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [sock, dir, status, timeout_ms] = v[..] else {
        return Err(bad());
    };
    // The process may be gone when the status is written (stop mode): no SIGPIPE for that.
    sys::ignore_sigpipe()?;
    let fd = |n: u64| sys::inherited_fd(i32::try_from(n).map_err(|_| bad())?);
    let (sock, dir, status) = (fd(sock)?, Dir::from_fd(fd(dir)?)?, fd(status)?);
    // Only the socket goes on to criu.
    sys::set_cloexec(dir.fd(), true)?;
    sys::set_cloexec(&status, true)?;
    let mut status = std::fs::File::from(status);
    let lock = dir.open_rw(crate::image::SEAL_LOCK)?;
    sys::flock(&lock, libc::LOCK_EX)?;
    let criu = settings::criu().ok_or_else(bad)?;
    let mut child = Command::new(&criu)
        .args(invocation::swrk_args(sock.as_raw_fd()))
        .env_remove(HELPER_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // The process sees CRIU's end of the socket close when CRIU ends: keep no copy here.
    drop(sock);
    let timeout = Duration::from_millis(timeout_ms);
    let deadline = Instant::now() + timeout;
    let exit = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            // Killing CRIU detaches it from the process (ptrace), which then runs on.
            let _ = child.kill();
            let _ = child.wait();
            let _ = writeln!(status, "timeout {:.0}", timeout.as_secs_f64());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if dir.stat("inventory.img")?.is_none() {
        let _ = writeln!(status, "no-image criu {exit}");
        return Ok(());
    }
    let _ = match manifest::seal(&dir) {
        Ok(c) => writeln!(
            status,
            "sealed files={} bytes={} ms={:.1}",
            c.files,
            c.bytes,
            c.took.as_secs_f64() * 1e3
        ),
        Err(e) => writeln!(status, "seal-failed {e}"),
    };
    drop(lock);
    Ok(())
}
