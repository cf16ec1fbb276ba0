//! The checkpoint broker's wire protocol, shared by its clients and its server.
//!
//! The broker is a small root service (`crac daemon`, in the `crac-cli` crate) through which
//! services of users who are not root checkpoint themselves and are restored, without any of
//! them being able to execute a capability-bearing criu (whoever can, holds its
//! capabilities: CRIU's unprivileged mode trusts its plugins and the credentials an image
//! records). This engine is one of its clients: a checkpoint of a process that is not root
//! goes through it when its socket is there (`checkpoint::via_broker`).
//!
//! - `server`: the daemon. It identifies the caller by `SO_PEERCRED` (and a pidfd), dumps
//!   only the caller's own tree of unprivileged tasks (`tree`), checks the credentials CRIU
//!   recorded (`creds`), seals each image with a host key only root reads (`seal`), and
//!   restores only images it sealed for that same user, with those credentials checked
//!   again. It runs criu itself, with a cleared environment, no plugins and no action
//!   scripts, every wait bounded. Images live in its store (`/var/lib/crac/images/UID/NAME`,
//!   root's): a user names them, never reads or writes them.
//! - its clients: the engine's checkpoint through the broker (chosen when not root and the
//!   socket is there), and `crac restore --broker NAME` and `crac check` in `crac-cli`.
//!
//! The protocol: one connection per request on a `SOCK_SEQPACKET` socket, text packets of at
//! most [`MAX_PACKET`] bytes, descriptors passed with `SCM_RIGHTS`.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::{settings, sys};

/// The largest packet either side sends or takes.
pub const MAX_PACKET: usize = 64 * 1024;

/// The socket path in use ([`settings::broker_socket`]).
pub fn socket_path() -> Result<PathBuf, Error> {
    settings::broker_socket()
}

/// Whether `name` may name an image in the store: 1–64 of `[A-Za-z0-9._-]`, not starting with
/// a dot.
pub fn valid_name(name: &str) -> Result<&str, String> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(name)
    } else {
        Err(format!(
            "image name {name:?}: use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot)"
        ))
    }
}

/// The `key=value` header lines of a request, up to the first empty line, and what follows.
pub fn headers(text: &str) -> (Vec<(&str, &str)>, &str) {
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let pairs = head.lines().filter_map(|l| l.split_once('=')).collect();
    (pairs, body)
}

/// The value of header `key`.
pub fn header<'a>(h: &[(&'a str, &'a str)], key: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn unavailable(msg: String) -> Error {
    Error::new(ErrorKind::Unavailable, msg)
}

/// Connects to the broker, with a bound on every answer.
pub fn connect(bound: Duration) -> Result<OwnedFd, Error> {
    let path = socket_path()?;
    let conn = sys::seqpacket_connect(&path).map_err(|e| {
        unavailable(format!(
            "no checkpoint broker at {} ({e}); as root, start `crac daemon` (see \
             docs/non-root.md), or set {}=0 to use a criu with capabilities",
            path.display(),
            settings::BROKER
        ))
    })?;
    sys::set_recv_timeout(&conn, Some(bound))
        .map_err(|e| unavailable(format!("SO_RCVTIMEO: {e}")))?;
    Ok(conn)
}

/// Receives one answer packet as text (control characters escaped: it is shown to users).
pub fn answer(conn: &impl AsFd) -> Result<String, Error> {
    let mut buf = vec![0u8; MAX_PACKET];
    let n = sys::recv(conn, &mut buf)
        .map_err(|e| unavailable(format!("the checkpoint broker did not answer: {e}")))?;
    if n == 0 {
        return Err(unavailable(
            "the checkpoint broker closed the connection".into(),
        ));
    }
    Ok(crate::control::printable(&String::from_utf8_lossy(
        &buf[..n],
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_headers() {
        assert!(valid_name("svc-1.a_b").is_ok());
        for bad in ["", ".x", "a/b", "..", "a b", &"x".repeat(65)] {
            assert!(valid_name(bad).is_err(), "{bad}");
        }
        let (h, body) = headers("checkpoint\nname=svc\nmode=stop\n\nmeta=1\nx=2");
        assert_eq!(header(&h, "name"), Some("svc"));
        assert_eq!(header(&h, "meta"), None);
        assert_eq!(body, "meta=1\nx=2");
    }
}
