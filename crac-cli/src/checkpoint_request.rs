//! `crac checkpoint PID`: the requester's side of the control channel
//! ([`crac_criu::control`] describes the protocol; the listener is inside the process).

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::sys;
use crac_criu::control::{control_file, open_channel, printable, request_signal};
use crac_criu::safe_dir::Dir;

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
    /// The process checkpointed in stop mode and is gone; the sealed image is in this
    /// directory, and CRIU's account of the dump (where the frozen time went), if it left one.
    Stopped(PathBuf, Option<String>),
    /// The process checkpointed in stop mode through the checkpoint broker and is gone; the
    /// image is the broker's, of this name (`crac restore --broker NAME`).
    StoppedToBroker(String),
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
            let ack = read_answer(chan, &names[1], uid)?.unwrap_or_default();
            let field = |k: &str| ack.lines().find_map(|l| l.strip_prefix(k));
            if let Some(name) = field("broker=") {
                let name = crac_criu::broker::valid_name(name)
                    .map_err(|e| format!("process {pid} reported a broker image: {e}"))?;
                return Ok(Answer::StoppedToBroker(name.to_owned()));
            }
            return stopped(pid, field("dir=").map(PathBuf::from), uid, deadline);
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
    crac_criu::image::manifest::wait_sealed(&image, left).map_err(|e| e.to_string())?;
    let stats = crac_criu::criu::stats::DumpStats::read(&image).map(|s| s.summary());
    match image.stat(crac_criu::image::MANIFEST_FILE) {
        Ok(Some(_)) => Ok(Answer::Stopped(d, stats)),
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
