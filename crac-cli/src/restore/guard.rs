//! The guard of a restore whose checks are not over: a small process of ours
//! (`crac __restore-guard`) that ends what the restore started if `crac restore` dies first.
//!
//! Under `--verify metadata` the restored process runs before its page files' digests are
//! checked, and a lazy restore's pages arrive while it runs; both checks live in `crac
//! restore`, and a failure ends the process. Were `crac restore` killed meanwhile (SIGKILL,
//! a closed terminal), nobody would check: a tampered image would run on, the lazy-pages
//! daemon keep serving, its work directory stay. So before criu runs, `crac restore` starts
//! this guard, in its own process group, with the read end of a pipe (the lifeline) whose
//! write end only `crac restore` holds. Over it, `crac restore` tells the guard what to end
//! and remove: criu and everything under it, the restored tree (a plain restore's processes
//! keep the image's pids, so those pids are named before they exist), the `unshare` whose end
//! ends a PID namespace, the lazy-pages daemon, the work directories. When every check has
//! passed it writes `release` and the guard exits doing nothing. If the pipe ends without
//! `release` (`crac restore` died, or a check failed), the guard stops every process of those
//! trees, kills them, and removes the directories.
//!
//! A process is named by pid and start time (`/proc/PID/stat`), and ended through a pidfd
//! opened before its start time is compared, so a pid reused meanwhile is never hit.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::sys;

/// The hidden `crac` subcommand that runs the guard: `crac __restore-guard --lifeline-fd N`.
pub const GUARD_COMMAND: &str = "__restore-guard";

/// `crac restore`'s side: the guard process and the lifeline's write end.
#[derive(Debug)]
pub struct Guard {
    lifeline: Option<fs::File>,
    child: Child,
}

impl Guard {
    /// Starts the guard (`exe` runs [`GUARD_COMMAND`] through `cli::run`).
    pub fn start(exe: &Path) -> Result<Guard, Error> {
        let fail = |what: &str, e: std::io::Error| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot start the restore's guard ({what}): {e}"),
            )
            .with_source(e)
        };
        // Both ends close on exec: criu and the lazy-pages daemon must not hold the write end,
        // or the guard would not see `crac restore` die.
        let (r, w) = sys::pipe().map_err(|e| fail("pipe", e))?;
        sys::set_cloexec(&r, false).map_err(|e| fail("fcntl", e))?;
        let child = Command::new(exe)
            .arg(GUARD_COMMAND)
            .arg("--lifeline-fd")
            .arg(r.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Its own process group: a Ctrl-C meant for `crac restore` must not end it too.
            .process_group(0)
            .spawn()
            .map_err(|e| fail(&exe.display().to_string(), e))?;
        drop(r);
        Ok(Guard {
            lifeline: Some(fs::File::from(w)),
            child,
        })
    }

    fn say(&mut self, line: &str) {
        // One short line per write: atomic on a pipe. A guard that died cannot act anyway.
        if let Some(w) = &mut self.lifeline {
            let _ = w.write_all(format!("{line}\n").as_bytes());
        }
    }

    /// Ends `pid` (and everything under it) unless released.
    pub fn end_tree(&mut self, pid: i32) {
        if let Some(t) = start_time(pid) {
            self.say(&format!("tree {pid} {t}"));
        }
    }

    /// Ends whatever holds one of `pids` (and everything under it) unless released, if it
    /// started after the guard: the pids a plain restore gives the restored processes.
    pub fn end_new(&mut self, pids: &[i32]) {
        let list: Vec<String> = pids.iter().map(i32::to_string).collect();
        self.say(&format!("new {}", list.join(" ")));
    }

    /// Removes the directory `path` unless released.
    pub fn remove(&mut self, path: &Path) {
        if let Some(p) = path.to_str().filter(|p| !p.contains('\n')) {
            self.say(&format!("remove {p}"));
        }
    }

    /// Leaves the directory `path` after all (it holds what an error names).
    pub fn keep(&mut self, path: &Path) {
        if let Some(p) = path.to_str().filter(|p| !p.contains('\n')) {
            self.say(&format!("keep {p}"));
        }
    }

    /// Every check passed: the guard exits without acting.
    pub fn release(mut self) {
        self.say("release");
        self.close();
    }

    /// Closes the lifeline and waits (bounded) for the guard: it acts at once unless released.
    fn close(&mut self) {
        self.lifeline = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        // A subreaping waiter may reap it first (ECHILD): then it is done too.
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Guard {
    /// Not released: the guard ends what it was told about.
    fn drop(&mut self) {
        if self.lifeline.is_some() {
            self.close();
        }
    }
}

/// The start time of `pid` in clock ticks since boot (`/proc/PID/stat`, field 22), read
/// after the command name, which may hold spaces and parentheses.
pub fn start_time(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    // After ")": state is field 3, so start time (22) is the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What the guard was told.
#[derive(Debug, Default, PartialEq, Eq)]
struct Orders {
    trees: Vec<(i32, u64)>,
    new: Vec<i32>,
    remove: Vec<PathBuf>,
    released: bool,
}

impl Orders {
    fn take(&mut self, line: &str) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("tree") => {
                let pid = words.next().and_then(|p| p.parse().ok());
                let t = words.next().and_then(|t| t.parse().ok());
                if let (Some(pid), Some(t)) = (pid, t) {
                    self.trees.push((pid, t));
                }
            }
            Some("new") => self.new.extend(words.filter_map(|p| p.parse::<i32>().ok())),
            Some("remove") => {
                if let Some(p) = line.strip_prefix("remove ") {
                    self.remove.push(PathBuf::from(p));
                }
            }
            Some("keep") => {
                if let Some(p) = line.strip_prefix("keep ") {
                    self.remove.retain(|r| r != Path::new(p));
                }
            }
            Some("release") => self.released = true,
            _ => {}
        }
    }
}

/// The guard's command line after [`GUARD_COMMAND`] (a hidden subcommand of `crac`).
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The lifeline's read end: `crac restore` holds the write end.
    #[arg(long, value_name = "N")]
    lifeline_fd: i32,
}

/// Runs the guard; returns when `crac restore` released it or the lifeline ended.
pub fn run_guard(a: &GuardArgs) -> Result<i32, String> {
    let fd = a.lifeline_fd;
    let lifeline = sys::inherited_fd(fd).map_err(|e| format!("lifeline fd {fd}: {e}"))?;
    let born = start_time(std::process::id() as i32).unwrap_or(0);
    let mut orders = Orders::default();
    let mut line = String::new();
    let mut r = BufReader::new(fs::File::from(lifeline));
    // Lines are short; a longer one is not ours and is cut (bounded memory).
    while matches!(r.by_ref().take(8192).read_line(&mut line), Ok(n) if n > 0) {
        orders.take(line.trim_end());
        line.clear();
    }
    if orders.released {
        return Ok(0);
    }
    let mut roots: Vec<OwnedFd> = orders
        .trees
        .iter()
        .filter_map(|&(pid, t)| pidfd_if_started(pid, |s| s == t))
        .collect();
    roots.extend(
        orders
            .new
            .iter()
            .filter_map(|&pid| pidfd_if_started(pid, |s| s >= born)),
    );
    end_trees(&roots);
    for p in &orders.remove {
        let _ = fs::remove_dir_all(p);
    }
    tracing::warn!(
        processes = roots.len(),
        "crac restore ended before its checks did: what it restored was ended"
    );
    Ok(0)
}

/// A pidfd of `pid` if its start time passes `ok` (read after the pidfd is open, so the
/// process it holds is the one whose start time was read).
fn pidfd_if_started(pid: i32, ok: impl Fn(u64) -> bool) -> Option<OwnedFd> {
    let fd = sys::pidfd_open(pid).ok()?;
    start_time(pid).filter(|&s| ok(s)).map(|_| fd)
}

/// Stops every process of the trees under `roots` (again until no new one appears: a running
/// process may fork meanwhile), then kills them all.
fn end_trees(roots: &[OwnedFd]) {
    let mut all: Vec<(i32, OwnedFd)> = Vec::new();
    let mut todo: Vec<i32> = Vec::new();
    for fd in roots {
        let _ = sys::pidfd_kill(fd, libc::SIGSTOP);
        if let Some(pid) = pidfd_pid(fd) {
            todo.push(pid);
        }
    }
    // Bounded: a tree of more than this many processes is not a restored service.
    let mut budget = 100_000;
    while let Some(pid) = todo.pop() {
        budget -= 1;
        if budget == 0 {
            break;
        }
        for c in crate::sys::children(pid) {
            if all.iter().any(|(p, _)| *p == c) {
                continue;
            }
            if let Ok(fd) = sys::pidfd_open(c) {
                let _ = sys::pidfd_kill(&fd, libc::SIGSTOP);
                todo.push(c);
                all.push((c, fd));
            }
        }
    }
    for fd in roots.iter().chain(all.iter().map(|(_, fd)| fd)) {
        let _ = sys::pidfd_kill(fd, libc::SIGKILL);
    }
}

/// The pid a pidfd holds (`Pid:` in `/proc/self/fdinfo/N`).
fn pidfd_pid(fd: &OwnedFd) -> Option<i32> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
        .filter(|p: &i32| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_command_line_is_parsed() {
        use crate::cli::args::{Command, parse};
        let Ok(Command::RestoreGuard(a)) = parse(&[GUARD_COMMAND, "--lifeline-fd", "5"]) else {
            panic!("not parsed");
        };
        assert_eq!(a.lifeline_fd, 5);
        assert!(parse(&[GUARD_COMMAND, "--lifeline-fd", "x"]).is_err());
        assert!(parse(&[GUARD_COMMAND]).is_err());
    }

    #[test]
    fn orders_are_read_line_by_line_and_junk_is_ignored() {
        let mut o = Orders::default();
        for l in [
            "tree 42 1234",
            "new 7 8 x 9",
            "remove /run/crac/lazy-ab cd",
            "tree x",
            "garbage",
        ] {
            o.take(l);
        }
        assert_eq!(o.trees, vec![(42, 1234)]);
        assert_eq!(o.new, vec![7, 8, 9]);
        assert_eq!(o.remove, vec![PathBuf::from("/run/crac/lazy-ab cd")]);
        o.take("keep /run/crac/lazy-ab");
        assert_eq!(o.remove.len(), 1, "only the directory named is kept");
        o.take("keep /run/crac/lazy-ab cd");
        assert!(o.remove.is_empty());
        assert!(!o.released);
        o.take("release");
        assert!(o.released);
    }

    #[test]
    fn the_start_time_of_a_process_is_read_past_its_name() {
        let me = std::process::id() as i32;
        let t = start_time(me).unwrap();
        assert!(t > 0);
        let fd = pidfd_if_started(me, |s| s == t).unwrap();
        assert_eq!(pidfd_pid(&fd), Some(me));
        assert!(pidfd_if_started(me, |s| s != t).is_none());
    }

    #[test]
    fn a_tree_is_stopped_then_killed_children_too() {
        // sh with a child sleep: both must end.
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(sh.stdout.take().unwrap());
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        let sleep: i32 = l.trim().parse().unwrap();
        let root = sys::pidfd_open(sh.id() as i32).unwrap();
        let child = sys::pidfd_open(sleep).unwrap();
        end_trees(&[root]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(sh.wait().unwrap().signal(), Some(libc::SIGKILL));
        let deadline = Instant::now() + Duration::from_secs(5);
        while sys::pidfd_alive(&child) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!sys::pidfd_alive(&child), "the child was ended too");
    }
}
