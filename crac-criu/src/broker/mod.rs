//! The checkpoint broker: a small root service (`crac daemon`) through which services of
//! users who are not root checkpoint themselves and are restored, without any of them being
//! able to execute a capability-bearing criu (whoever can, holds its capabilities: CRIU's
//! unprivileged mode trusts its plugins and the credentials an image records).
//!
//! - `server`: the daemon. It identifies the caller by `SO_PEERCRED` (and a pidfd), dumps
//!   only the caller's own tree of unprivileged tasks (`tree`), checks the credentials CRIU
//!   recorded (`creds`), seals each image with a host key only root reads (`seal`), and
//!   restores only images it sealed for that same user, with those credentials checked
//!   again. It runs criu itself, with a cleared environment, no plugins and no action
//!   scripts, every wait bounded. Images live in its store (`/var/lib/crac/images/UID/NAME`,
//!   root's): a user names them, never reads or writes them.
//! - `client`: the engine's side (a checkpoint through the broker, chosen when not root and
//!   the socket is there) and `crac restore --broker NAME`.
//!
//! The protocol: one connection per request on a `SOCK_SEQPACKET` socket, text packets of at
//! most [`MAX_PACKET`] bytes, descriptors passed with `SCM_RIGHTS`.

pub(crate) mod client;
mod creds;
mod seal;
pub(crate) mod server;
mod tree;

use std::path::PathBuf;

/// The broker's socket (`CRAC_BROKER_SOCKET` overrides it).
pub const DEFAULT_SOCKET: &str = "/run/crac/daemon.sock";

/// Overrides the broker's socket path (for clients and the daemon).
pub const SOCKET_ENV: &str = "CRAC_BROKER_SOCKET";

/// `1`: checkpoint through the broker (an error if there is none); `0`: never; unset: when
/// not root and the socket exists.
pub const BROKER_ENV: &str = "CRAC_BROKER";

/// The largest packet either side sends or takes.
pub const MAX_PACKET: usize = 64 * 1024;

/// The socket path in use.
pub fn socket_path() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
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
