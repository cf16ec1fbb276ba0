//! The caller of one request, and every exchange with it.
//!
//! Who the caller is comes from the kernel, once, when it connected: `SO_PEERCRED` (pid,
//! uid, gid), `SO_PEERGROUPS` (its supplementary groups) and `SO_PEERPIDFD` (its process,
//! held: a pid reused after the caller exited never stands for it). Nothing is read from
//! `/proc/PID` for the caller's identity; what is read there (the bounding set, the tree) is
//! taken only while the held process still runs, and refused when `/proc` disagrees with
//! what the kernel recorded ("identity changed").
//!
//! A root service must never wait on a user: every read from and write to a caller is
//! bounded by a deadline and never blocks past it (a caller that stops reading, fills its
//! answer pipe or sends nothing costs its own request, nobody else's turn).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use crac_criu::broker::MAX_PACKET;

use crate::sys;

/// The caller, as the kernel recorded it at `connect`.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Its pid then.
    pub(crate) pid: i32,
    /// Its uid.
    pub(crate) uid: u32,
    /// Its gid.
    pub(crate) gid: u32,
    /// Its supplementary groups.
    pub(crate) groups: Vec<u32>,
    /// Its process.
    pub(crate) pidfd: OwnedFd,
}

impl Peer {
    /// The caller of `conn`, as the kernel recorded it when it connected.
    pub(crate) fn of(conn: &impl AsFd) -> Result<Peer, String> {
        let (pid, uid, gid) = sys::peer_cred(conn).map_err(|e| format!("SO_PEERCRED: {e}"))?;
        let groups = sys::peer_groups(conn).map_err(|e| format!("SO_PEERGROUPS: {e}"))?;
        // SO_PEERPIDFD where the kernel has it (6.5); else a pidfd now, which the checks of
        // `same_process` hold against the recorded identity.
        let pidfd = match sys::peer_pidfd(conn) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
                sys::pidfd_open(pid).map_err(|e| format!("the caller ({pid}): {e}"))?
            }
            Err(e) => {
                return Err(format!(
                    "identity changed: the process that connected (pid {pid}) is gone ({e})"
                ));
            }
        };
        Ok(Peer {
            pid,
            uid,
            gid,
            groups,
            pidfd,
        })
    }

    /// Checks that the process that connected still runs and is as the kernel recorded it:
    /// its `/proc` status (read now) shows the recorded uids, gids and groups. Returns that
    /// status text, which is then the caller's own.
    pub(crate) fn same_process(&self) -> Result<String, String> {
        let gone = || {
            format!(
                "identity changed: the process that connected (pid {}) has exited; requests \
                 are answered only while it runs",
                self.pid
            )
        };
        if !sys::pidfd_alive(&self.pidfd) {
            return Err(gone());
        }
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).map_err(|_| gone())?;
        // Read while the process ran, and it still runs: the text is its own (a pid is not
        // reused while its process exists).
        if !sys::pidfd_alive(&self.pidfd) {
            return Err(gone());
        }
        self.matches(&status)?;
        Ok(status)
    }

    /// Whether `status` (`/proc/PID/status`) shows the identity recorded at connect.
    fn matches(&self, status: &str) -> Result<(), String> {
        let ids = |key: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or("")
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        };
        let mut groups = ids("Groups:");
        let mut recorded = self.groups.clone();
        groups.sort_unstable();
        recorded.sort_unstable();
        // Effective ids: what SO_PEERCRED records.
        if ids("Uid:").get(1) != Some(&self.uid)
            || ids("Gid:").get(1) != Some(&self.gid)
            || groups != recorded
        {
            return Err(format!(
                "identity changed: pid {} now runs with other ids or groups than when it \
                 connected (uid {}, gid {}, groups {:?})",
                self.pid, self.uid, self.gid, self.groups
            ));
        }
        Ok(())
    }
}

/// Milliseconds left until `deadline`, rounded up, for `poll` (0 when past).
fn ms_left(deadline: Instant) -> i32 {
    let ns = deadline
        .saturating_duration_since(Instant::now())
        .as_nanos();
    ns.div_ceil(1_000_000).min(i32::MAX as u128) as i32
}

/// Receives the request: one packet (and its descriptors) within `wait`.
pub(crate) fn recv_request(
    conn: &impl AsFd,
    wait: Duration,
) -> Result<(String, Vec<OwnedFd>), String> {
    let deadline = Instant::now() + wait;
    if !sys::poll_readable(conn, ms_left(deadline)).map_err(|e| e.to_string())? {
        return Err(format!("no request within {:.0} s", wait.as_secs_f64()));
    }
    let mut buf = vec![0u8; MAX_PACKET];
    let (n, fds) =
        sys::recv_with_fds(conn, &mut buf).map_err(|e| format!("reading the request: {e}"))?;
    let text =
        String::from_utf8(buf[..n].to_vec()).map_err(|_| "the request is not UTF-8".to_owned())?;
    Ok((text, fds))
}

/// Waits, at most `wait`, for the caller to close its side (it must not be in its image).
pub(crate) fn wait_closed(conn: &impl AsFd, wait: Duration) -> Result<(), String> {
    let late = || "the caller did not close its connection in time".to_owned();
    if !sys::poll_readable(conn, ms_left(Instant::now() + wait)).map_err(|e| e.to_string())? {
        return Err(late());
    }
    let mut byte = [0u8; 1];
    match sys::recv(conn, &mut byte) {
        Ok(0) => Ok(()),
        _ => Err(late()),
    }
}

/// How long one answer to a caller may wait for room: a caller that does not read loses it.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// Sends `text` as one packet, waiting at most [`ANSWER_WAIT`] for room; `false` when the
/// caller did not take it.
pub(crate) fn reply(conn: &impl AsFd, text: &str) -> bool {
    let deadline = Instant::now() + ANSWER_WAIT;
    loop {
        match sys::send_nonblocking(conn, text.as_bytes()) {
            Ok(true) => return true,
            Ok(false) if ms_left(deadline) > 0 => {
                if sys::poll_writable(conn, ms_left(deadline)).is_err() {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// Answers a caller that is not served, without waiting on it: what it sent so far is read
/// first (a socket closed with unread data resets the connection, and the caller would not
/// see the answer), the answer goes out only if there is room.
pub(crate) fn refuse(conn: &impl AsFd, text: &str) {
    let mut buf = vec![0u8; MAX_PACKET];
    // What is there now, no more (a caller that keeps sending is not read for ever).
    for _ in 0..4 {
        if !matches!(sys::poll_readable(conn, 0), Ok(true)) {
            break;
        }
        match sys::recv_with_fds(conn, &mut buf) {
            Ok((n, _fds)) if n > 0 => {}
            _ => break,
        }
    }
    let _ = sys::send_nonblocking(conn, text.as_bytes());
}

/// Writes `text` into the caller's answer pipe without blocking past `wait` (a pipe the
/// caller filled and does not read loses the answer, not the broker's time); `false` when
/// not all of it went in.
pub(crate) fn write_pipe(pipe: File, text: &str, wait: Duration) -> bool {
    if sys::set_nonblocking(&pipe).is_err() {
        return false;
    }
    let deadline = Instant::now() + wait;
    let mut left = text.as_bytes();
    let mut pipe = pipe;
    while !left.is_empty() {
        match pipe.write(left) {
            Ok(n) => left = &left[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if ms_left(deadline) == 0 || sys::poll_writable(&pipe, ms_left(deadline)).is_err() {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            pid: std::process::id() as i32,
            uid,
            gid,
            groups: groups.to_vec(),
            pidfd: sys::pidfd_open(std::process::id() as i32).unwrap(),
        }
    }

    #[test]
    fn the_identity_recorded_at_connect_must_match_proc() {
        let status =
            "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t27 100 \n";
        peer(1000, 100, &[100, 27]).matches(status).unwrap();
        for (uid, gid, groups) in [
            (1001, 100, vec![27, 100]),
            (1000, 101, vec![27, 100]),
            (1000, 100, vec![27]),
        ] {
            let e = peer(uid, gid, &groups).matches(status).unwrap_err();
            assert!(e.starts_with("identity changed"), "{e}");
        }
    }

    #[test]
    fn a_full_answer_pipe_costs_the_answer_not_the_broker() {
        let (r, w) = sys::pipe().unwrap();
        // Fill the pipe; nobody reads it.
        sys::set_nonblocking(&w).unwrap();
        let mut w = File::from(w);
        while w.write(&[0u8; 4096]).is_ok() {}
        let wait = Duration::from_millis(100);
        let t = Instant::now();
        assert!(!write_pipe(w, "crac-dumped ok /x\n", wait));
        assert!(t.elapsed() >= wait);
        // With room, it goes in.
        let (r2, w2) = sys::pipe().unwrap();
        assert!(write_pipe(File::from(w2), "crac-dumped ok /x\n", wait));
        drop((r, r2));
    }
}
