//! Checkpoints requested from outside the process (`crac checkpoint PID`), like
//! `jcmd PID JDK.checkpoint`: a request to a process, which must never kill one.
//!
//! The channel is a directory per user, in a runtime directory: `$XDG_RUNTIME_DIR/crac` of the
//! target process when it has one, else `/run/crac/<uid>`, the directory `0700` and owned by
//! the target's user (root, who may checkpoint anyone's process, creates it for that user).
//! Everything in it is opened through the directory's descriptor.
//!
//! Protocol:
//!
//! 1. the requester opens a pidfd of the target, reads its `/proc` status (the uid, and
//!    `SigCgt`: a process without the handler is refused, never signalled, since the signal
//!    would kill it) and its runtime directory, and checks through the pidfd that the process
//!    it read about is still the one it holds;
//! 2. it writes `<pid>.<token>.req` (`mode=`, `dir=` lines) and sends [`request_signal()`]
//!    (`SIGRTMIN+6`) through the pidfd (`pidfd_send_signal`, the token as the value), so a
//!    pid reused meanwhile is never hit;
//! 3. in the process, a signal handler installed before `main` forwards (sender, uid, token)
//!    over a pipe to the `crac-control` thread, which reads and deletes the request (only one
//!    owned by root or by the process's own user, in its own private channel), writes
//!    `<pid>.<token>.ack` with the image directory, and calls
//!    [`Core::checkpoint_restore_with`];
//! 4. in the original it then writes `<pid>.<token>.res`: `ok` and the outcome, or `error` and
//!    the message. With stop-after-dump a successful checkpoint ends the process instead: the
//!    requester sees it exit and finds the image, sealed.
//!
//! The requester trusts nothing the target writes: the channel is the target user's, so every
//! answer file is opened without blocking (a FIFO planted there never hangs it) and taken only
//! if it is a regular file of that user or root; the whole exchange is bounded by the
//! request's timeout; control characters in anything printed are escaped; a reported image
//! directory is taken only if it is absolute and the target user's.
//!
//! Set `CRAC_CHECKPOINT_SIGNAL=0` to not install the handler and thread.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_api::{CheckpointMode, CheckpointOptions, Core};

use crate::image::dir::{self, Access, Dir};
use crate::sys;

/// The real-time signal that asks a process to checkpoint itself: `SIGRTMIN+6`.
pub fn request_signal() -> i32 {
    sys::sigrtmin() + 6
}

/// The directory of a control channel: `XDG/crac` when the process has an (absolute)
/// `XDG_RUNTIME_DIR`, else `/run/crac/<uid>`.
pub fn channel_path(uid: u32, xdg_runtime_dir: Option<&std::ffi::OsStr>) -> PathBuf {
    match xdg_runtime_dir.map(Path::new).filter(|p| p.is_absolute()) {
        Some(x) => x.join("crac"),
        None => PathBuf::from(format!("/run/crac/{uid}")),
    }
}

fn other(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// Checks that `d` is `uid`'s and private.
fn check_private(d: &Dir, uid: u32) -> std::io::Result<()> {
    let m = d.metadata()?;
    dir::check_owner_mode(&m, uid, Access::ReadWrite).map_err(|why| {
        other(format!(
            "{} is not a private directory of uid {uid} ({why:?}); remove it, it is recreated",
            d.path().display()
        ))
    })?;
    if m.mode() & 0o077 != 0 {
        return Err(other(format!(
            "{} has mode {:04o}, not 0700; remove it, it is recreated",
            d.path().display(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Opens (with `create`, creating it for `uid`) the control channel of a process of `uid` with
/// the runtime directory `xdg`. Root creates it owned by `uid`; `/run/crac` itself is root's.
pub fn open_channel(uid: u32, xdg: Option<&std::ffi::OsStr>, create: bool) -> std::io::Result<Dir> {
    let path = channel_path(uid, xdg);
    let me = sys::euid();
    let parent_path = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| other(format!("{}: not a channel path", path.display())))?;
    let parent = if xdg.is_some() {
        let p = Dir::open_trusted(parent_path, uid)?;
        // XDG_RUNTIME_DIR is the user's own, 0700 (the XDG base directory specification).
        check_private(&p, uid)?;
        p
    } else {
        crate::run_dir::open(create && me == 0).map_err(|e| {
            other(format!(
                "{e}; as root, create {} for the service's user (install -d -m 0700 -o USER \
                 {}), or give the service an XDG_RUNTIME_DIR",
                path.display(),
                path.display()
            ))
        })?
    };
    let d = if create {
        let d = parent.subdir(name).map_err(|e| {
            other(format!(
                "cannot create the control channel {}: {e}",
                path.display()
            ))
        })?;
        if me == 0 && uid != 0 {
            let m = d.metadata()?;
            if m.uid() == 0 && m.mode() & 0o077 == 0 {
                sys::fchown(d.fd(), uid, m.gid())?;
            }
        }
        d
    } else {
        parent.open_subdir(name)?
    };
    check_private(&d, uid)?;
    Ok(d)
}

/// Name of a control file of `pid` for request `token` with extension `ext`
/// (`req`, `ack`, `res`).
fn control_file(pid: i32, token: i32, ext: &str) -> String {
    format!("{pid}.{token}.{ext}")
}

/// This process's `XDG_RUNTIME_DIR` as it was when the program started (as the requester reads
/// it from `/proc/PID/environ`).
static OWN_XDG: OnceLock<Option<OsString>> = OnceLock::new();

/// Installs the signal handler and starts the `crac-control` thread. Runs before `main`.
pub fn init() {
    if std::env::var_os("CRAC_CHECKPOINT_SIGNAL").is_some_and(|v| v == "0") {
        return;
    }
    let _ = OWN_XDG.set(std::env::var_os("XDG_RUNTIME_DIR"));
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

fn listen(r: OwnedFd) {
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

/// Reads and deletes the request file, if it is one this process may trust.
fn take_request(chan: &Dir, name: &str) -> Option<String> {
    let f = chan.open_file(name).ok()?;
    let m = f.metadata().ok()?;
    let owner_ok = m.uid() == 0 || m.uid() == sys::euid();
    if !m.is_file() || !owner_ok || m.mode() & 0o022 != 0 {
        tracing::warn!(file = name, "unsafe checkpoint request file ignored");
        return None;
    }
    let mut text = String::new();
    f.take(64 * 1024).read_to_string(&mut text).ok()?;
    chan.remove(name).ok();
    Some(text)
}

fn handle(sender: i32, uid: u32, token: i32) {
    let me = std::process::id() as i32;
    let my_uid = sys::euid();
    if uid != 0 && uid != my_uid {
        tracing::warn!(sender, uid, "checkpoint request from another user ignored");
        return;
    }
    let xdg = OWN_XDG.get().cloned().flatten();
    let chan = match open_channel(my_uid, xdg.as_deref(), false) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(sender, error = %e, "checkpoint signal, but no usable control channel; ignored");
            return;
        }
    };
    let Some(text) = take_request(&chan, &control_file(me, token, "req")) else {
        tracing::warn!(sender, "checkpoint signal without a request file; ignored");
        return;
    };
    let mut options = CheckpointOptions::new();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("mode", "leave-running")) => options.mode = Some(CheckpointMode::LeaveRunning),
            Some(("mode", "stop")) => options.mode = Some(CheckpointMode::StopAfterDump),
            Some(("dir", d)) if !d.is_empty() => options.image_dir = Some(PathBuf::from(d)),
            _ => {}
        }
    }
    let dir = crate::checkpoint::engine::Config::resolve(&options)
        .map(|c| c.image_dir.display().to_string())
        .unwrap_or_default();
    let write = |ext: &str, text: &str| {
        let _ = chan.write_atomic(&control_file(me, token, ext), text.as_bytes(), 0o600);
    };
    write("ack", &format!("dir={dir}\n"));
    tracing::info!(sender, ?options, "checkpoint requested from outside");
    let result = Core::checkpoint_restore_with(&options);
    let text = match &result {
        Ok(o) if o.is_restored() => return, // a restored copy: the requester is long gone
        Ok(o) => format!("ok\n{o}\n"),
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
    write("res", &text);
}

/// A checkpoint request, as `crac checkpoint` makes it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `stop` or `leave-running`; `None`: the process's own configuration.
    pub mode: Option<&'static str>,
    /// The image directory (absolute); `None`: the process's own configuration.
    pub dir: Option<PathBuf>,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The process checkpointed and goes on (or the checkpoint failed there): `(ok, text)`.
    Answered(bool, String),
    /// The process checkpointed in stop mode and is gone; the sealed image is in this directory.
    Stopped(PathBuf),
}

/// What `/proc/PID/status` and `/proc/PID/environ` say about a request's target.
struct Target {
    uid: u32,
    handler: bool,
    xdg: Option<OsString>,
}

fn read_target(pid: i32) -> Result<Target, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or("")
    };
    // Uid: real, effective, saved, fs; the files it writes are its effective uid's.
    let uid = field("Uid:")
        .split_whitespace()
        .nth(1)
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status has no Uid line"))?;
    let caught = u64::from_str_radix(field("SigCgt:"), 16)
        .map_err(|_| format!("/proc/{pid}/status has no SigCgt line"))?;
    let handler = caught & (1u64 << (request_signal() - 1)) != 0;
    let mut environ = Vec::new();
    fs::File::open(format!("/proc/{pid}/environ"))
        .and_then(|f| f.take(1 << 20).read_to_end(&mut environ))
        .map_err(|e| format!("cannot read /proc/{pid}/environ: {e}"))?;
    let xdg = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"XDG_RUNTIME_DIR="))
        .map(|v| std::ffi::OsStr::from_bytes(v).to_owned());
    Ok(Target { uid, handler, xdg })
}

/// Asks process `pid` to checkpoint itself and waits for the outcome.
pub fn request(pid: i32, req: &Request) -> Result<Answer, String> {
    let pidfd = sys::pidfd_open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => format!("no running process {pid}"),
        _ => format!("pidfd_open({pid}): {e}"),
    })?;
    let target = read_target(pid)?;
    // What /proc said was about the process this pidfd holds only if it still runs now: a pid
    // is not reused while its process exists.
    if !sys::pidfd_alive(&pidfd) {
        return Err(format!("process {pid} exited"));
    }
    let sig = request_signal();
    if !target.handler {
        return Err(format!(
            "process {pid} has no handler for the checkpoint request signal (SIGRTMIN+6, {sig}): \
             it is not a crac-criu program (`use crac_criu as _;`), or it runs with \
             CRAC_CHECKPOINT_SIGNAL=0; it was not signalled (the signal would have killed it)"
        ));
    }
    let chan = open_channel(target.uid, target.xdg.as_deref(), true)
        .map_err(|e| format!("control channel of process {pid} (uid {}): {e}", target.uid))?;
    let token = std::process::id() as i32;
    let names = ["req", "ack", "res"].map(|ext| control_file(pid, token, ext));
    let mut text = String::new();
    if let Some(m) = req.mode {
        text.push_str(&format!("mode={m}\n"));
    }
    if let Some(d) = &req.dir {
        text.push_str(&format!("dir={}\n", d.display()));
    }
    // Root's request to another user's process must be readable by it (the channel is its own,
    // private directory).
    let mode = if sys::euid() == 0 && target.uid != 0 {
        0o644
    } else {
        0o600
    };
    chan.write_atomic(&names[0], text.as_bytes(), mode)
        .map_err(|e| format!("{}: {e}", chan.path().join(&names[0]).display()))?;
    let cleanup = || {
        for n in &names {
            chan.remove(n).ok();
        }
    };
    if let Err(e) = sys::pidfd_sigqueue(&pidfd, sig, token) {
        cleanup();
        return Err(format!("cannot signal process {pid}: {e}"));
    }
    let deadline = Instant::now() + req.timeout;
    let answer = wait_answer(pid, &pidfd, &chan, &names, target.uid, deadline);
    cleanup();
    answer
}

/// Waits until `deadline` for the answer of the process of `pidfd`: its `.res` file, or its
/// end (stop mode). Every file is the target's to write, so each is opened without blocking
/// and taken only if it is a regular file of the target's user (or root's).
fn wait_answer(
    pid: i32,
    pidfd: &OwnedFd,
    chan: &Dir,
    names: &[String; 3],
    uid: u32,
    deadline: Instant,
) -> Result<Answer, String> {
    loop {
        if let Some(t) = read_answer(chan, &names[2], uid)? {
            let (status, rest) = t.split_once('\n').unwrap_or((&t, ""));
            return Ok(Answer::Answered(status == "ok", printable(rest.trim())));
        }
        if !sys::pidfd_alive(pidfd) {
            let dir = read_answer(chan, &names[1], uid)?.and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("dir=").map(PathBuf::from))
            });
            return stopped(pid, dir, uid, deadline);
        }
        if Instant::now() >= deadline {
            return Err(format!("process {pid} did not answer in time (--timeout)"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads the control file `name` if there is one: `Ok(None)` while it is not there, an error
/// if what is there is not a regular file of `uid` (or root) that others cannot write.
fn read_answer(chan: &Dir, name: &str, uid: u32) -> Result<Option<String>, String> {
    let shown = || chan.path().join(name).display().to_string();
    let f = match chan.open_file(name) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "{}: {e}; the request was abandoned",
                printable(&shown())
            ));
        }
    };
    let m = f.metadata().map_err(|e| format!("{}: {e}", shown()))?;
    if (m.uid() != uid && m.uid() != 0) || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} belongs to uid {} with mode {:04o}, not to the target's user {uid} alone; the \
             request was abandoned",
            printable(&shown()),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    let mut t = String::new();
    f.take(MAX_ANSWER)
        .read_to_string(&mut t)
        .map_err(|e| format!("{}: {e}", shown()))?;
    Ok(Some(t))
}

/// The most of an answer that is read.
const MAX_ANSWER: u64 = 64 * 1024;

/// `text` with every control character but newline and tab written as an escape: the answer
/// comes from the target process and is printed on the requester's terminal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The target is gone after taking the request: it checkpointed in stop mode, or died. The
/// directory it reported is taken only if it is absolute and its user's (reached without
/// following another user's link): the target chooses what it reports.
fn stopped(pid: i32, dir: Option<PathBuf>, uid: u32, deadline: Instant) -> Result<Answer, String> {
    let Some(d) = dir else {
        return Err(format!("process {pid} exited without taking the request"));
    };
    let shown = printable(&d.display().to_string());
    if !d.is_absolute() {
        return Err(format!(
            "process {pid} reported a relative image directory {shown}"
        ));
    }
    let image = Dir::open_trusted(&d, uid).map_err(|e| format!("{shown}: {e}"))?;
    let m = image.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if m.uid() != uid {
        return Err(format!(
            "process {pid} (uid {uid}) reported the image directory {shown}, which belongs to \
             uid {}: refused",
            m.uid()
        ));
    }
    // Its dump helper may still be sealing the image.
    let left = deadline.saturating_duration_since(Instant::now());
    crate::image::manifest::wait_sealed(&image, left).map_err(|e| e.to_string())?;
    match image.stat(crate::image::MANIFEST_FILE) {
        Ok(Some(_)) => Ok(Answer::Stopped(d)),
        _ => Err(format!(
            "process {pid} exited during the checkpoint and {shown} holds no complete, sealed \
             image"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent_to_the_terminal() {
        assert_eq!(printable("ok\tdone\n"), "ok\tdone\n");
        assert_eq!(
            printable("a\u{1b}]0;owned\u{7}b"),
            "a\\u{1b}]0;owned\\u{7}b"
        );
        assert_eq!(printable("\r\u{9b}"), "\\r\\u{9b}");
    }

    #[test]
    fn an_answer_that_is_a_fifo_or_writable_by_others_is_refused_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("crac-control-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let chan = Dir::create_private(&base).unwrap();
        let uid = sys::euid();
        assert_eq!(read_answer(&chan, "1.2.res", uid), Ok(None));
        let st = std::process::Command::new("mkfifo")
            .arg(base.join("1.2.res"))
            .status()
            .unwrap();
        assert!(st.success());
        let e = read_answer(&chan, "1.2.res", uid).unwrap_err();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        chan.remove("1.2.res").unwrap();
        chan.write_atomic("1.2.res", b"ok\nfine\n", 0o600).unwrap();
        assert_eq!(
            read_answer(&chan, "1.2.res", uid),
            Ok(Some("ok\nfine\n".into()))
        );
        fs::set_permissions(base.join("1.2.res"), fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_answer(&chan, "1.2.res", uid).unwrap_err();
        assert!(e.contains("mode 0666"), "{e}");
        if uid == 0 {
            // Root takes an answer in user 4242's channel only if it is 4242's (or root's).
            fs::set_permissions(base.join("1.2.res"), fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(base.join("1.2.res"), Some(4243), None).unwrap();
            let e = read_answer(&chan, "1.2.res", 4242).unwrap_err();
            assert!(e.contains("belongs to uid 4243"), "{e}");
            assert!(read_answer(&chan, "1.2.res", 4243).unwrap().is_some());
        }
        fs::remove_dir_all(&base).unwrap();
    }
}
