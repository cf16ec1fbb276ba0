//! The control channel of checkpoints requested from outside the process (`crac checkpoint
//! PID`), like `jcmd PID JDK.checkpoint`: a request to a process, which must never kill one.
//! This module is what both sides agree on (the signal, the channel, its file names); the
//! listener inside the process is `checkpoint::listener`, the requester is `crac checkpoint`
//! (`crac-cli`).
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
//!    [`crac_api::Core::checkpoint_restore_with`];
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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::run_dir;
use crate::safe_dir::{self, Access, Dir};
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
    safe_dir::check_owner_mode(&m, uid, Access::ReadWrite).map_err(|why| {
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
        run_dir::open(create && me == 0).map_err(|e| {
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
pub fn control_file(pid: i32, token: i32, ext: &str) -> String {
    format!("{pid}.{token}.{ext}")
}

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
}
