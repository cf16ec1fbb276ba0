//! The daemon's children, each waited on through its pidfd.
//!
//! A child the broker needs the status of (criu dumping a caller, the init of a restore
//! until the restored service runs) is spawned through [`Children::spawn`], which takes its
//! pidfd and marks its pid as owned before anything can reap it; its owner reaps it through
//! that pidfd ([`Children::wait`]), so a status never answers for another process, however
//! pids are reused. Everything else that ends under the daemon (its own children released to
//! run on, and orphans it adopts as a subreaper) is reaped by one thread and forgotten: no
//! table of statuses nobody asked for.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sys;

/// A running child of the daemon, held by its pidfd.
#[derive(Debug)]
pub(crate) struct Child {
    pid: i32,
    pidfd: OwnedFd,
}

impl Child {
    /// Its pid (for messages and `/proc`; it is held by the pidfd).
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }
}

/// The pids of the children whose owners will reap them.
#[derive(Debug, Default)]
pub(crate) struct Children {
    owned: Mutex<HashSet<i32>>,
    released: Condvar,
}

impl Children {
    /// The daemon's children, with the thread that reaps what no owner waits for. The caller
    /// must be a child subreaper (orphans of restored services come here otherwise lost).
    pub(crate) fn start() -> Arc<Children> {
        let c = Arc::new(Children::default());
        let reaper = c.clone();
        std::thread::Builder::new()
            .name("crac-reaper".into())
            .spawn(move || reaper.reap_others())
            .expect("spawn the reaper thread");
        c
    }

    fn owned(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns `cmd` as an owned child: its pidfd is taken, and its pid marked owned, before
    /// the reaper can see it end.
    pub(crate) fn spawn(&self, cmd: &mut Command) -> std::io::Result<Child> {
        let mut owned = self.owned();
        let pid = cmd.spawn()?.id() as i32;
        // Not reaped yet (the reaper waits for this lock), so the pid is still this child.
        let pidfd = sys::pidfd_open(pid)?;
        owned.insert(pid);
        Ok(Child { pid, pidfd })
    }

    /// Waits at most `timeout` for `child` to end and reaps it: its exit code (128+signal),
    /// `None` when it still runs (it stays owned: kill it and wait again, or release it).
    pub(crate) fn wait(&self, child: &Child, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Ok(Some(code)) = sys::reap_pidfd(&child.pidfd) {
                self.disown(child.pid);
                return Some(code);
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return None;
            }
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // The pidfd turns readable when the child ends.
            if sys::poll_readable(&child.pidfd, ms).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Kills `child` (through its pidfd) and reaps it, waiting at most 10 s.
    pub(crate) fn kill(&self, child: &Child) {
        let _ = sys::pidfd_kill(&child.pidfd, libc::SIGKILL);
        let _ = self.wait(child, Duration::from_secs(10));
    }

    /// Lets `child` run on unowned: the reaper reaps it when it ends.
    pub(crate) fn release(&self, child: Child) {
        self.disown(child.pid);
    }

    fn disown(&self, pid: i32) {
        self.owned().remove(&pid);
        self.released.notify_all();
    }

    /// Reaps every child that ends unowned; an owned one is left to its owner.
    fn reap_others(&self) {
        loop {
            match sys::peek_ended_child() {
                Ok(Some(pid)) => {
                    let owned = self.owned();
                    if owned.contains(&pid) {
                        // Its owner reaps it; until then this peek finds it first.
                        let _ = self.released.wait_timeout(owned, Duration::from_millis(50));
                        continue;
                    }
                    drop(owned);
                    let _ = sys::try_wait_pid(pid);
                }
                // No children: nothing to reap until one is spawned.
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}
