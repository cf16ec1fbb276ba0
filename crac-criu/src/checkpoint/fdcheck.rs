//! The file-descriptor check run before CRIU: everything CRIU would refuse (or restore
//! wrongly), listed per fd with the fix, instead of a CRIU log to decipher.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;

/// One fd CRIU would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The fd.
    pub fd: i32,
    /// What it is and why it blocks the checkpoint.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fd {}: {}", self.fd, self.reason)
    }
}

/// What the scan found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// fds that block the checkpoint.
    pub refused: Vec<Refusal>,
    /// Unix sockets among fds 0–2 connected outside: dumped as `--external unix[ino]`.
    pub external_unix: Vec<u64>,
}

#[derive(Debug, Clone)]
struct TcpEntry {
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
}

#[derive(Debug, Clone)]
struct UnixEntry {
    ty: u32,
    state: u8,
    listening: bool,
    path: String,
}

fn parse_v4(hex: &str) -> Option<SocketAddr> {
    let (a, p) = hex.split_once(':')?;
    let a = u32::from_str_radix(a, 16).ok()?;
    let p = u16::from_str_radix(p, 16).ok()?;
    // The kernel prints the address in host byte order (little endian here).
    Some(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(a.to_le_bytes())),
        p,
    ))
}

fn parse_v6(hex: &str) -> Option<SocketAddr> {
    let (a, p) = hex.split_once(':')?;
    if a.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for i in 0..4 {
        let w = u32::from_str_radix(&a[i * 8..i * 8 + 8], 16).ok()?;
        bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    let p = u16::from_str_radix(p, 16).ok()?;
    let ip = Ipv6Addr::from(bytes);
    let ip = ip
        .to_ipv4_mapped()
        .map(IpAddr::V4)
        .unwrap_or(IpAddr::V6(ip));
    Some(SocketAddr::new(ip, p))
}

fn read_tcp(map: &mut HashMap<u64, TcpEntry>, path: &str, v6: bool) {
    let Ok(text) = fs::read_to_string(path) else {
        return;
    };
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let parse = if v6 { parse_v6 } else { parse_v4 };
        let (Some(local), Some(remote), Ok(state), Ok(ino)) = (
            parse(f[1]),
            parse(f[2]),
            u8::from_str_radix(f[3], 16),
            f[9].parse::<u64>(),
        ) else {
            continue;
        };
        if ino != 0 {
            map.insert(
                ino,
                TcpEntry {
                    local,
                    remote,
                    state,
                },
            );
        }
    }
}

fn read_unix() -> HashMap<u64, UnixEntry> {
    let mut map = HashMap::new();
    let Ok(text) = fs::read_to_string("/proc/net/unix") else {
        return map;
    };
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 {
            continue;
        }
        let (Ok(flags), Ok(ty), Ok(state), Ok(ino)) = (
            u32::from_str_radix(f[3], 16),
            u32::from_str_radix(f[4], 16),
            u8::from_str_radix(f[5], 16),
            f[6].parse::<u64>(),
        ) else {
            continue;
        };
        map.insert(
            ino,
            UnixEntry {
                ty,
                state,
                listening: flags & 0x0001_0000 != 0,
                path: f.get(7).copied().unwrap_or("").to_owned(),
            },
        );
    }
    map
}

fn tcp_state_name(s: u8) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        _ => "?",
    }
}

/// `(device, inode)` of a lock line of `/proc/locks` and whether it is a POSIX lock of `pid`
/// or a flock/OFD lock of anyone.
fn read_locks(pid: i32) -> Vec<(String, u32, u32, u64)> {
    let mut out = Vec::new();
    let Ok(text) = fs::read_to_string("/proc/locks") else {
        return out;
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK ADVISORY WRITE 1234 00:2a:5678 0 EOF"; waiters have "->" after the id.
        if f.len() < 6 || f.get(1) == Some(&"->") {
            continue;
        }
        let (kind, mode, lpid, dev) = (f[1], f[3], f[4], f[5]);
        let posix_of_other = kind == "POSIX" && lpid.parse::<i32>().ok() != Some(pid);
        if posix_of_other {
            continue;
        }
        let parts: Vec<&str> = dev.split(':').collect();
        if parts.len() != 3 {
            continue;
        }
        let (Ok(maj), Ok(min), Ok(ino)) = (
            u32::from_str_radix(parts[0], 16),
            u32::from_str_radix(parts[1], 16),
            parts[2].parse::<u64>(),
        ) else {
            continue;
        };
        out.push((format!("{kind} {mode}"), maj, min, ino));
    }
    out
}

fn dev_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)) as u32
}

fn dev_minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)) as u32
}

/// A unix socket `u` (inode `ino`) at fd `fd`: connected to another process, it blocks the
/// checkpoint, unless it is one of fds 0–2 (dumped as external then).
fn unix_peer(fd: i32, ino: u64, u: &UnixEntry, me: i32, scan: &mut Scan) {
    // Connected stream/seqpacket sockets whose peer is another process.
    let connected = u.state == 3 && !u.listening && (u.ty == 1 || u.ty == 5);
    if connected {
        let peer = crate::sys::peer_pid(fd);
        if peer != Some(me) {
            if fd <= 2 {
                scan.external_unix.push(ino);
            } else {
                let who = match peer {
                    Some(p) => {
                        let comm = fs::read_to_string(format!("/proc/{p}/comm"))
                            .map(|s| s.trim().to_owned())
                            .unwrap_or_else(|_| "exited".into());
                        format!("pid {p} ({comm})")
                    }
                    None => "another process".to_owned(),
                };
                let kind = if u.ty == 1 { "stream" } else { "seqpacket" };
                let path = if u.path.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", u.path)
                };
                scan.refused.push(Refusal {
                    fd,
                    reason: format!(
                        "unix {kind} socket{path} connected to {who} is still open \
                         (a connection to a process outside the image cannot be \
                         checkpointed; close it in before_checkpoint)"
                    ),
                });
            }
        }
    }
}

/// The numeric names in a `/proc` directory (`/proc/self/fd`, `/proc/self/task`), sorted; none
/// if it cannot be read.
pub(super) fn numbered_entries(dir: &str) -> Vec<i32> {
    let mut v: Vec<i32> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Scans `/proc/self/fd` (with `/proc/net/*` and `/proc/locks`).
pub fn scan() -> Scan {
    let me = std::process::id() as i32;
    let mut tcp = HashMap::new();
    read_tcp(&mut tcp, "/proc/net/tcp", false);
    read_tcp(&mut tcp, "/proc/net/tcp6", true);
    let unix = read_unix();
    let locks = read_locks(me);
    let mounts = own_mount_ids();
    let mut scan = Scan::default();

    for fd in numbered_entries("/proc/self/fd") {
        let Ok(target) = fs::read_link(format!("/proc/self/fd/{fd}")) else {
            continue; // the read_dir fd itself, already closed
        };
        let target = target.to_string_lossy().into_owned();
        if let Some(ino) = target
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse::<u64>().ok())
        {
            if let Some(t) = tcp.get(&ino) {
                if t.state != 10 && t.state != 7 {
                    scan.refused.push(Refusal {
                        fd,
                        reason: format!(
                            "TCP {} -> {} is still open ({}; connected TCP sockets cannot be \
                             checkpointed; close it in before_checkpoint)",
                            t.local,
                            t.remote,
                            tcp_state_name(t.state)
                        ),
                    });
                }
            } else if let Some(u) = unix.get(&ino) {
                unix_peer(fd, ino, u, me, &mut scan);
            }
        } else if target == "anon_inode:[io_uring]" {
            scan.refused.push(Refusal {
                fd,
                reason: "anon_inode:[io_uring] is open: an io_uring instance (an async runtime \
                         on io_uring such as tokio-uring, glommio or monoio, or the ring used \
                         directly), which CRIU cannot checkpoint; run the I/O on an epoll-based \
                         runtime (tokio's default, smol, async-std), or close the ring in \
                         before_checkpoint and open a new one in after_restore"
                    .to_owned(),
            });
        } else if target == "anon_inode:[userfaultfd]" {
            scan.refused.push(Refusal {
                fd,
                reason: format!(
                    "{target} is open (CRIU cannot checkpoint it; close it in before_checkpoint)"
                ),
            });
        } else if target.starts_with('/')
            && let Some(id) = fd_mount_id(fd)
            && !mounts.is_empty()
            && !mounts.contains(&id)
        {
            scan.refused.push(Refusal {
                fd,
                reason: format!(
                    "{target} was opened in another mount namespace (its mount {id} is not in \
                     /proc/self/mountinfo; most likely inherited from whatever started this \
                     process), which CRIU cannot checkpoint; close it, or start the program \
                     without it"
                ),
            });
        } else if target.starts_with('/')
            && !locks.is_empty()
            && let Ok(m) = fs::metadata(format!("/proc/self/fd/{fd}"))
        {
            let (maj, min) = (dev_major(m.dev()), dev_minor(m.dev()));
            if let Some((kind, ..)) = locks
                .iter()
                .find(|(_, lmaj, lmin, ino)| *lmaj == maj && *lmin == min && *ino == m.ino())
            {
                scan.refused.push(Refusal {
                    fd,
                    reason: format!(
                        "{target} holds a {kind} lock (held file locks are not checkpointed; \
                         release the lock or close the file in before_checkpoint)"
                    ),
                });
            }
        }
    }
    scan
}

/// The ids of the mounts this process's mount namespace holds (first field of mountinfo).
fn own_mount_ids() -> HashSet<u64> {
    fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The `mnt_id` an fd's file lives on, from fdinfo.
fn fd_mount_id(fd: i32) -> Option<u64> {
    fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))?
        .trim()
        .parse()
        .ok()
}

/// `readlink /proc/self/fd/N` and the open flags from fdinfo; an empty target for a closed fd.
pub fn describe_fd(fd: i32) -> (String, u32) {
    let target = fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let flags = fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0);
    (target, flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_v4("0100007F:2384").unwrap().to_string(),
            "127.0.0.1:9092"
        );
        assert_eq!(
            parse_v6("0000000000000000FFFF00000100007F:2384")
                .unwrap()
                .to_string(),
            "127.0.0.1:9092"
        );
    }

    #[test]
    fn finds_a_connected_tcp_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let s = std::net::TcpStream::connect(addr).unwrap();
        let (_a, _) = l.accept().unwrap();
        let scan = scan();
        use std::os::fd::AsRawFd;
        let r = scan
            .refused
            .iter()
            .find(|r| r.fd == s.as_raw_fd())
            .expect("the client socket is refused");
        assert!(r.reason.contains(&format!("-> {addr}")), "{r}");
        // The listener itself is fine.
        assert!(!scan.refused.iter().any(|r| r.fd == l.as_raw_fd()));
    }

    #[test]
    fn a_file_of_this_mount_namespace_is_fine() {
        use std::os::fd::AsRawFd;
        let f = fs::File::open("/dev/null").unwrap();
        let id = fd_mount_id(f.as_raw_fd()).expect("fdinfo has mnt_id");
        assert!(own_mount_ids().contains(&id));
        assert!(!scan().refused.iter().any(|r| r.fd == f.as_raw_fd()));
    }

    #[test]
    fn own_socketpair_is_fine() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        assert!(!scan().refused.iter().any(|r| r.fd == a.as_raw_fd()));
    }

    #[test]
    fn finds_a_held_flock() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("crac-fdcheck-lock-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.lock().unwrap();
        let found = scan()
            .refused
            .into_iter()
            .find(|r| r.fd == f.as_raw_fd())
            .map(|r| r.reason);
        f.unlock().unwrap();
        let after = scan().refused.into_iter().any(|r| r.fd == f.as_raw_fd());
        std::fs::remove_file(&path).ok();
        let reason = found.expect("the locked file is refused");
        assert!(
            reason.contains("FLOCK") && reason.contains("lock"),
            "{reason}"
        );
        assert!(!after, "an unlocked file is fine");
    }
}
