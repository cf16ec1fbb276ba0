//! Checkpoints requested from outside the process (`crac checkpoint PID`), like
//! `jcmd PID JDK.checkpoint`.
//!
//! Protocol:
//!
//! 1. the requester writes `CONTROL_DIR/<pid>.<token>.req` (a directory `0700`, the file
//!    `0600`, owned by the requester) with `mode=` and optionally `dir=` lines, then sends
//!    [`request_signal()`] (`SIGRTMIN+6`) to `pid` with `sigqueue`, the token as its value;
//! 2. in the process, a signal handler installed before `main` forwards (sender, uid, token)
//!    over a pipe to the `crac-control` thread, which reads and deletes the request (only from
//!    root or the process's own uid), writes `<pid>.<token>.ack` with the image directory, and
//!    calls [`Core::checkpoint_restore_with`](crac_api::Core::checkpoint_restore_with);
//! 3. in the original it then writes `<pid>.<token>.res`: `ok` and the outcome, or `error` and
//!    the message. With stop-after-dump a successful checkpoint ends the process instead: the
//!    requester sees it exit and finds the image.
//!
//! Set `CRAC_CHECKPOINT_SIGNAL=0` to not install the handler and thread.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use crac_api::{CheckpointMode, CheckpointOptions, Core};

use crate::sys;

/// Where request and result files live.
pub const CONTROL_DIR: &str = "/tmp/crac-control";

/// The real-time signal that asks a process to checkpoint itself: `SIGRTMIN+6`.
pub fn request_signal() -> i32 {
    sys::sigrtmin() + 6
}

/// Path of a control file of `pid` for request `token` with extension `ext`
/// (`req`, `ack`, `res`).
pub fn control_file(pid: i32, token: i32, ext: &str) -> PathBuf {
    PathBuf::from(CONTROL_DIR).join(format!("{pid}.{token}.{ext}"))
}

/// Creates [`CONTROL_DIR`] (`0700`) if needed and checks it is ours and private.
pub fn ensure_control_dir() -> std::io::Result<()> {
    let p = std::path::Path::new(CONTROL_DIR);
    match fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = fs::symlink_metadata(p)?;
    if !m.is_dir() || m.uid() != sys::euid() || m.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{CONTROL_DIR} must be a directory of uid {} with mode 0700",
            sys::euid()
        )));
    }
    Ok(())
}

/// Writes a control file `0600` atomically.
pub fn write_control_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    fs::rename(&tmp, path)
}

/// Installs the signal handler and starts the `crac-control` thread. Runs before `main`.
pub fn init() {
    if std::env::var_os("CRAC_CHECKPOINT_SIGNAL").is_some_and(|v| v == "0") {
        return;
    }
    let Ok((r, w)) = sys::pipe() else {
        return;
    };
    if sys::install_request_handler(request_signal(), w).is_err() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("crac-control".into())
        .spawn(move || listen(r));
}

fn listen(r: std::os::fd::OwnedFd) {
    let mut f = fs::File::from(r);
    let mut msg = [0u8; 12];
    loop {
        if f.read_exact(&mut msg).is_err() {
            return;
        }
        let word = |i: usize| i32::from_ne_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
        let (sender, uid, token) = (word(0), word(4) as u32, word(8));
        handle(sender, uid, token);
    }
}

fn handle(sender: i32, uid: u32, token: i32) {
    let me = std::process::id() as i32;
    if uid != 0 && uid != sys::euid() {
        tracing::warn!(sender, uid, "checkpoint request from another user ignored");
        return;
    }
    let req_path = control_file(me, token, "req");
    let Ok(m) = fs::symlink_metadata(&req_path) else {
        tracing::warn!(sender, path = %req_path.display(), "checkpoint signal without a request file; ignored");
        return;
    };
    if !m.is_file() || (m.uid() != 0 && m.uid() != uid) || m.permissions().mode() & 0o022 != 0 {
        tracing::warn!(path = %req_path.display(), "unsafe checkpoint request file ignored");
        return;
    }
    let text = fs::read_to_string(&req_path).unwrap_or_default();
    fs::remove_file(&req_path).ok();
    let mut options = CheckpointOptions::new();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("mode", "leave-running")) => options.mode = Some(CheckpointMode::LeaveRunning),
            Some(("mode", "stop")) => options.mode = Some(CheckpointMode::StopAfterDump),
            Some(("dir", d)) if !d.is_empty() => options.image_dir = Some(PathBuf::from(d)),
            _ => {}
        }
    }
    let dir = crate::engine::Config::resolve(&options)
        .map(|c| c.image_dir.display().to_string())
        .unwrap_or_default();
    let _ = write_control_file(&control_file(me, token, "ack"), &format!("dir={dir}\n"));
    tracing::info!(sender, ?options, "checkpoint requested from outside");
    let result = Core::checkpoint_restore_with(&options);
    let text = match &result {
        Ok(o) if o.is_restored() => return, // a restored copy: the requester is long gone
        Ok(o) => format!("ok\n{o}\n"),
        Err(e) if e.to_string().is_empty() => "error\ncheckpoint failed\n".to_owned(),
        Err(e) => {
            let restored = matches!(
                e,
                crac_api::CheckpointError::Resources { outcome: Some(o), .. } if o.is_restored()
            );
            if restored {
                return;
            }
            format!("error\n{e}\n")
        }
    };
    let _ = write_control_file(&control_file(me, token, "res"), &text);
}
