//! The broker's check of a process tree before it dumps it: every task (threads included)
//! of the caller and of everything under it runs with the caller's uid and gid alone
//! (real, effective, saved, file system), holds no capability (permitted, effective,
//! inheritable, ambient) and is no program that gained privileges on exec (a setuid or
//! setgid program shows a uid or gid not the caller's; a file-capability program shows
//! capabilities). What CRIU then writes is checked again (`creds`): a task forked meanwhile
//! is in the image but not in this look.

use std::fs;

use super::peer::Peer;

/// What the broker knows of the caller: what the kernel recorded when it connected (pid,
/// uid, gid, groups) and its bounding set, read while that process still ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Its pid.
    pub pid: i32,
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
    /// Its capability bounding set.
    pub bnd: u64,
}

/// The most tasks a tree may have.
const MAX_TASKS: usize = 4096;

/// The fields of `/proc/PID/task/TID/status` this check reads.
fn status(pid: i32, tid: i32) -> Result<String, String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .map_err(|e| format!("task {tid} of {pid}: {e}"))
}

fn field<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or("")
}

fn hex(status: &str, key: &str) -> u64 {
    u64::from_str_radix(field(status, key), 16).unwrap_or(u64::MAX)
}

/// The caller of a request: its identity as recorded at connect, checked against what
/// `/proc` shows of the process that connected, which must still run.
pub fn caller(peer: &Peer) -> Result<Caller, String> {
    let s = peer.same_process()?;
    Ok(Caller {
        pid: peer.pid,
        uid: peer.uid,
        gid: peer.gid,
        groups: peer.groups.clone(),
        bnd: hex(&s, "CapBnd:"),
    })
}

/// Checks one task's status text against the caller.
pub fn check_task(s: &str, c: &Caller) -> Result<(), String> {
    let ids = |key: &str| -> Vec<u32> {
        field(s, key)
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    };
    let (uids, gids) = (ids("Uid:"), ids("Gid:"));
    if uids.len() != 4 || uids.iter().any(|u| *u != c.uid) {
        return Err(format!("runs with uids {uids:?}, not all {}", c.uid));
    }
    if gids.len() != 4 || gids.iter().any(|g| *g != c.gid) {
        return Err(format!("runs with gids {gids:?}, not all {}", c.gid));
    }
    for key in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        let v = hex(s, key);
        if v != 0 {
            return Err(format!("holds capabilities ({key} {v:016x})"));
        }
    }
    Ok(())
}

/// Checks every task of the tree under `c.pid`; the pids of the tree's processes.
pub fn check_tree(c: &Caller) -> Result<Vec<i32>, String> {
    let mut procs = vec![c.pid];
    let mut i = 0;
    let mut tasks = 0;
    while i < procs.len() {
        let pid = procs[i];
        i += 1;
        let dir = fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| format!("{pid}: {e}"))?;
        for t in dir.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            tasks += 1;
            if tasks > MAX_TASKS {
                return Err(format!("more than {MAX_TASKS} tasks"));
            }
            let s = status(pid, tid)?;
            check_task(&s, c)
                .map_err(|why| format!("task {tid} ({}) of the tree {why}", field(&s, "Name:")))?;
            let kids = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            procs.extend(
                kids.split_whitespace()
                    .filter_map(|k| k.parse::<i32>().ok()),
            );
        }
    }
    Ok(procs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_text(uid: u32, euid: u32, capeff: u64) -> String {
        format!(
            "Name:\tsvc\nUid:\t{uid}\t{euid}\t{uid}\t{uid}\nGid:\t100\t100\t100\t100\n\
             CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
             CapEff:\t{capeff:016x}\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n"
        )
    }

    #[test]
    fn a_task_with_another_uid_or_a_capability_is_refused() {
        let c = Caller {
            pid: 1,
            uid: 1000,
            gid: 100,
            groups: vec![],
            bnd: 0x1ff_ffff_ffff,
        };
        assert_eq!(check_task(&status_text(1000, 1000, 0), &c), Ok(()));
        // A setuid-root program: effective uid 0.
        assert!(
            check_task(&status_text(1000, 0, 0), &c)
                .unwrap_err()
                .contains("uids")
        );
        // A file-capability program: CAP_SYS_PTRACE effective.
        assert!(
            check_task(&status_text(1000, 1000, 1 << 19), &c)
                .unwrap_err()
                .contains("CapEff")
        );
        assert!(check_task("garbage", &c).is_err());
    }

    #[test]
    fn this_test_s_own_tree_is_read() {
        // The peer of one end of a socket pair is this very process.
        let (a, _b) = crate::sys::seqpacket_pair().unwrap();
        let peer = Peer::of(&a).unwrap();
        assert_eq!(peer.pid, std::process::id() as i32);
        let c = caller(&peer).unwrap();
        let s = status(peer.pid, peer.pid).unwrap();
        assert_eq!(c.bnd, hex(&s, "CapBnd:"));
        let r = check_tree(&c);
        if c.uid == 0 {
            // Root holds capabilities: refused, naming the task.
            assert!(r.unwrap_err().contains("holds capabilities"));
        }
    }
}
