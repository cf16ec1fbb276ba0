//! Lazy restore: the restored process runs before its memory is in.
//!
//! `criu lazy-pages` (the daemon) is started first; `criu restore --lazy-pages` then restores
//! the process without its anonymous memory and hands the daemon a userfaultfd for it. Pages
//! the process touches are served on demand, the rest streamed in the background; the daemon
//! exits once every page is in (or the process is gone). The two find each other through a
//! socket in a work directory private to this restore (`--work-dir`), so several restores of
//! one image can run at once.
//!
//! The daemon's lifetime is tied to the restore:
//! - It is started in its own process group (a Ctrl-C at the terminal must not stop the pages
//!   of a process that keeps running) and watched through a pidfd.
//! - If it fails, the restored process is ended and the failure reported: its missing pages
//!   would otherwise read as zeros (the kernel unregisters a userfaultfd whose last holder is
//!   gone), and a process running on zeroed memory is worse than none.
//! - To close the window between the daemon's death and that kill, `crac restore` holds
//!   duplicates of the daemon's userfaultfds (`pidfd_getfd`): the kernel then keeps them
//!   registered, so a fault of the restored process waits (killably) instead of reading zeros.
//! - Every wait has a bound: the daemon's start, and the whole load (`CRAC_LAZY_TIMEOUT`).
//!   A bound that fires stops the daemon and ends the process.
//! - A fault the daemon dropped is retried ([`Kicker`]): CRIU 4.2 answers a page fault with
//!   `UFFDIO_COPY`/`UFFDIO_ZEROPAGE`, and when that fails with `EAGAIN` (another thread of the
//!   process is unmapping or `madvise`-freeing memory at that moment, e.g. a thread that ends)
//!   it leaves the page to its background stream, or for a page that was never dumped to no
//!   one: the faulting thread then waits until the whole image is in. Measured with the 1 GB
//!   service: the producer's first ack after a restore came with the last page (420 ms)
//!   instead of at 40 ms, in 3 of 4 restores.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crac_criu::criu::invocation::{Invocation, Launch};
use crac_criu::settings;

use crate::error::{Error, ErrorKind};
use crate::sys;
use crac_criu::safe_dir::Dir;

/// The bound on the load of `page_bytes` of memory: `CRAC_LAZY_TIMEOUT` seconds, by default
/// 30 s plus 15 s per GiB of page files.
pub fn load_timeout(page_bytes: u64) -> Result<Duration, Error> {
    settings::lazy_timeout(default_load_timeout(page_bytes))
}

fn default_load_timeout(page_bytes: u64) -> Duration {
    Duration::from_secs(30)
        + Duration::from_secs_f64(15.0 * page_bytes as f64 / (1u64 << 30) as f64)
}

fn err(kind: ErrorKind, msg: String) -> Error {
    Error::new(kind, msg)
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    err(ErrorKind::Other, format!("lazy restore: {what}: {e}"))
}

/// Exit statuses of children that one thread reaped for another: a plain restore's waiter
/// reaps every child (it is a subreaper), the daemon's watcher needs the daemon's status.
#[derive(Debug, Default)]
pub struct Reaped {
    statuses: Mutex<Vec<(i32, i32)>>,
    cv: Condvar,
}

impl Reaped {
    /// Records that `pid` ended with the raw wait `status`.
    pub fn put(&self, pid: i32, status: i32) {
        self.statuses
            .lock()
            .expect("reaped statuses")
            .push((pid, status));
        self.cv.notify_all();
    }

    /// The raw status of `pid` once another thread reaped it (`None` after `timeout`).
    fn take(&self, pid: i32, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let mut v = self.statuses.lock().expect("reaped statuses");
        loop {
            if let Some(i) = v.iter().position(|(p, _)| *p == pid) {
                return Some(v.swap_remove(i).1);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            v = self.cv.wait_timeout(v, left).expect("reaped statuses").0;
        }
    }
}

/// The running `criu lazy-pages` daemon of one restore.
#[derive(Debug)]
pub struct Daemon {
    pid: i32,
    pidfd: Arc<OwnedFd>,
    place: Place,
    holder: Option<Holder>,
}

/// Where a daemon's files are.
#[derive(Debug)]
pub struct Place {
    /// The private work directory (the socket, CRIU's restore statistics).
    pub work: PathBuf,
    /// The daemon's log (as shown to the user).
    pub log: PathBuf,
    /// Whether the work directory goes with the daemon (the broker removes its own).
    pub remove_work: bool,
}

impl Daemon {
    /// Starts the daemon for the image `image` and waits (at most `timeout`) until it listens.
    /// `work` is this restore's private work directory (removed with the daemon), `token`
    /// names its log.
    pub fn start(
        criu: &Path,
        image: &Dir,
        work_dir: Dir,
        token: &str,
        timeout: Duration,
    ) -> Result<Daemon, Error> {
        let work = work_dir.path().to_owned();
        let stderr = work_dir
            .open_rw("lazy-pages.stderr")
            .map_err(|e| io_err("its stderr file", e))?;
        let log_name = format!("lazy-pages-{token}.log");
        let (ready_r, ready_w) = sys::pipe().map_err(|e| io_err("pipe", e))?;
        sys::set_cloexec(&ready_w, false).map_err(|e| io_err("fcntl", e))?;
        let mut cmd = Invocation::lazy_pages(image, &work)
            .log(&log_name)
            .status_fd(ready_w.as_raw_fd())
            .command(criu, &Launch::Direct);
        // Its own process group: terminal signals for the restorer never reach it.
        cmd.process_group(0);
        let place = Place {
            log: image.path().join(&log_name),
            work,
            remove_work: true,
        };
        Daemon::launch(cmd, stderr, (ready_r, ready_w), place, timeout)
    }

    /// Starts the daemon `cmd` (a `criu lazy-pages` command line, wrapped or not) whose
    /// `--status-fd` is the write end of `ready`, and waits (at most `timeout`) until it
    /// listens. What the restore of the checkpoint broker's init uses: the broker builds the
    /// command, the init runs it (in the init's process group, which the broker ends should
    /// the restore not finish in time).
    pub fn launch(
        mut cmd: Command,
        stderr: std::fs::File,
        ready: (OwnedFd, OwnedFd),
        place: Place,
        timeout: Duration,
    ) -> Result<Daemon, Error> {
        let (ready_r, ready_w) = ready;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        tracing::debug!(?cmd, "starting criu lazy-pages");
        let child = cmd.spawn().map_err(|e| {
            err(
                ErrorKind::Unavailable,
                format!("cannot run {:?} (criu lazy-pages): {e}", cmd.get_program()),
            )
        })?;
        drop(ready_w);
        let pid = child.id() as i32;
        // std's Child is not waited on: the daemon is reaped by pid (see `Reaped`).
        drop(child);
        let pidfd = Arc::new(sys::pidfd_open(pid).map_err(|e| io_err("pidfd_open", e))?);
        let mut d = Daemon {
            pid,
            pidfd,
            place,
            holder: None,
        };
        if let Err(e) = d.wait_ready(ready_r, timeout) {
            d.abort();
            return Err(e);
        }
        d.holder = Some(Holder::start(pid, d.pidfd.clone()));
        Ok(d)
    }

    /// Waits for the daemon's `\0` on the status pipe (EOF: it ended first).
    fn wait_ready(&self, ready: OwnedFd, timeout: Duration) -> Result<(), Error> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let readable = sys::poll_readable(&ready, ms).unwrap_or(false);
        let mut b = [0u8; 1];
        if readable && sys::read_full(&ready, &mut b).unwrap_or(0) == 1 {
            return Ok(());
        }
        let why = if readable {
            "ended before it was ready".to_owned()
        } else {
            format!("was not ready within {:.0} s", timeout.as_secs_f64())
        };
        let stderr = std::fs::read_to_string(self.place.work.join("lazy-pages.stderr"))
            .unwrap_or_default()
            .chars()
            .take(2000)
            .collect::<String>();
        Err(err(
            ErrorKind::Unavailable,
            format!(
                "criu lazy-pages {why}; {}from {}:\n  {}",
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("it said: {}; ", stderr.trim())
                },
                self.place.log.display(),
                crac_criu::criu::log::log_errors(&self.place.log)
            ),
        ))
    }

    /// The work directory `criu restore` finds this daemon in
    /// ([`Invocation::through_lazy_pages`]).
    pub fn work_dir(&self) -> &Path {
        &self.place.work
    }

    /// The restore failed: stops the daemon and removes the work directory (what dropping it
    /// does).
    pub fn abort(self) {
        drop(self)
    }

    /// The restore is over: takes the userfaultfds the daemon holds, and watches it until it
    /// exits or `deadline` passes, ending `victim` (a pidfd of the restored process, or of
    /// what ends it, if any) on any failure. Returns when the daemon is gone.
    pub fn watch(
        mut self,
        victim: Option<&OwnedFd>,
        deadline: Instant,
        bound: Duration,
        reaped: &Reaped,
    ) -> Result<Loaded, Error> {
        // Kept until the daemon is gone: see the module's comment.
        let held = self.holder.take().map(Holder::finish).unwrap_or_default();
        let mut kicker = Kicker::new(&held);
        let result = self.wait_exit(deadline, reaped, &mut kicker);
        if matches!(result, Ok(Some(_))) {
            self.pid = 0; // reaped: nothing for Drop to wait for
        }
        let end = |why: String| {
            if let Some(v) = victim {
                let _ = sys::pidfd_kill(v, libc::SIGKILL);
            }
            err(
                ErrorKind::Snapshot,
                format!(
                    "lazy restore: {why}; the restored process was ended, as its missing pages \
                     would have read as zeros; from {}:\n  {}",
                    self.place.log.display(),
                    crac_criu::criu::log::log_errors(&self.place.log)
                ),
            )
        };
        let r = match result {
            Ok(Some(status)) if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 => {
                Ok(Loaded {
                    held: held.len(),
                    pages: transferred_pages(&self.place.log),
                })
            }
            Ok(Some(status)) => Err(end(format!(
                "the lazy-pages daemon failed (exit code {}) before every page was in",
                sys::exit_code(status)
            ))),
            Ok(None) => {
                let _ = sys::pidfd_kill(&*self.pidfd, libc::SIGKILL);
                Err(end(format!(
                    "the pages were not all in within {:.0} s ({}); the \
                     daemon was stopped",
                    bound.as_secs_f64(),
                    settings::LAZY_TIMEOUT
                )))
            }
            Err(e) => Err(end(format!("cannot watch the lazy-pages daemon: {e}"))),
        };
        // Only now (the victim ended on failure) may the kernel release the userfaultfds.
        drop(held);
        r
    }

    /// Waits for the daemon to exit: its raw status, or `None` at the deadline. Meanwhile,
    /// every [`KICK_EVERY`], wakes the faults the daemon may have dropped.
    fn wait_exit(
        &self,
        deadline: Instant,
        reaped: &Reaped,
        kicker: &mut Kicker<'_>,
    ) -> std::io::Result<Option<i32>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = left.min(KICK_EVERY).as_millis() as i32;
            if sys::poll_readable(&*self.pidfd, ms)? {
                break;
            }
            if left.is_zero() {
                return Ok(None);
            }
            kicker.kick();
        }
        match sys::try_wait_pid(self.pid) {
            Ok(Some(st)) => Ok(Some(st)),
            // A zombie not reaped yet shows up at once; a moment more is harmless.
            Ok(None) => Ok(Some(sys::wait_pid(self.pid)?)),
            // Reaped by the restore's waiter (a subreaper reaps every child).
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => reaped
                .take(self.pid, Duration::from_secs(10))
                .map(Some)
                .ok_or_else(|| std::io::Error::other("the daemon's status was lost")),
            Err(e) => Err(e),
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Daemon {
    /// Stops a daemon still running (a restore that failed, or a watch that gave up) and
    /// removes the work directory.
    fn drop(&mut self) {
        if let Some(h) = self.holder.take() {
            drop(h.finish());
        }
        if self.pid > 0 {
            if sys::pidfd_alive(&*self.pidfd) {
                let _ = sys::pidfd_kill(&*self.pidfd, libc::SIGKILL);
            }
            // ECHILD when a subreaping waiter took it: nothing to do then.
            let _ = sys::wait_pid(self.pid);
        }
        if self.place.remove_work {
            let _ = std::fs::remove_dir_all(&self.place.work);
        }
    }
}

/// How often the faults of a lazily restored process are woken to be retried: the longest a
/// fault the daemon dropped waits.
const KICK_EVERY: Duration = Duration::from_millis(5);

/// Wakes every thread of the restored process that waits on a page fault (`UFFDIO_WAKE` over
/// its whole address space, through the userfaultfds `crac restore` holds). A thread whose page
/// is in by then goes on; one whose page is still missing faults again, and the daemon, which
/// dropped the first request (see the module's comment), serves the new one. Waking a fault
/// the daemon is serving anyway costs one more request of a page it then finds present.
struct Kicker<'a> {
    uffds: &'a [OwnedFd],
    start: u64,
    len: u64,
}

impl<'a> Kicker<'a> {
    fn new(uffds: &'a [OwnedFd]) -> Kicker<'a> {
        // Page-aligned, from the lowest address a mapping may have to the top of the 47-bit
        // user address space (the kernel refuses a range outside [mmap_min_addr, TASK_SIZE)).
        let min = std::fs::read_to_string("/proc/sys/vm/mmap_min_addr")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(65536);
        let start = min.max(4096).next_multiple_of(4096);
        const TOP: u64 = 0x7fff_ffff_f000;
        Kicker {
            uffds,
            start,
            len: TOP.saturating_sub(start),
        }
    }

    fn kick(&mut self) {
        for fd in self.uffds {
            if let Err(e) = sys::uffd_wake(fd, self.start, self.len) {
                // The process is gone (its faults with it), or the kernel refuses the range: a
                // dropped fault then waits for the daemon's stream, as without this.
                tracing::debug!("lazy restore: UFFDIO_WAKE: {e}; no more wakes");
                self.uffds = &[];
                return;
            }
        }
    }
}

/// A lazy load that completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// How many userfaultfds `crac restore` held while the pages arrived (0: it could not take
    /// them, and only the kill on failure protects the process).
    pub held: usize,
    /// Pages the daemon transferred, of those it had to (its log's summary), if it said.
    pub pages: Option<(u64, u64)>,
}

/// Sums the daemon's `UFFD transferred pages: (copied/total)` lines (one per process).
fn transferred_pages(log: &Path) -> Option<(u64, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    // The summaries are the last lines; the log can be megabytes.
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)))
        .ok()?;
    let mut tail = Vec::new();
    f.take(256 * 1024).read_to_end(&mut tail).ok()?;
    parse_transferred(&String::from_utf8_lossy(&tail))
}

fn parse_transferred(text: &str) -> Option<(u64, u64)> {
    let mut sum: Option<(u64, u64)> = None;
    for l in text.lines() {
        let Some(rest) = l.split("UFFD transferred pages: (").nth(1) else {
            continue;
        };
        let Some((a, b)) = rest.trim_end_matches(')').split_once('/') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
            let s = sum.get_or_insert((0, 0));
            s.0 += a;
            s.1 += b;
        }
    }
    sum
}

/// Takes duplicates of the daemon's userfaultfds as it receives them, while `criu restore`
/// runs (it scans the daemon's descriptors every millisecond), and once more at the end.
#[derive(Debug)]
struct Holder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<OwnedFd>>,
}

impl Holder {
    fn start(pid: i32, pidfd: Arc<OwnedFd>) -> Holder {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut taken = Vec::new();
            let mut held = Vec::new();
            loop {
                let last = s.load(Ordering::SeqCst);
                if let Err(e) = grab_uffds(pid, &pidfd, &mut taken, &mut held) {
                    tracing::warn!(
                        "lazy restore: cannot hold the daemon's userfaultfds ({e}); a daemon that \
                         dies is still noticed and the process ended, a moment later"
                    );
                    return held;
                }
                if last {
                    return held;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Holder { stop, thread }
    }

    /// Stops scanning (after a last scan) and returns what it holds.
    fn finish(self) -> Vec<OwnedFd> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// Duplicates every userfaultfd of process `pid` not taken yet (by descriptor number).
fn grab_uffds(
    pid: i32,
    pidfd: &OwnedFd,
    taken: &mut Vec<i32>,
    held: &mut Vec<OwnedFd>,
) -> std::io::Result<()> {
    let dir = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(d) => d,
        // The daemon is gone: nothing more to take (its watcher will say why).
        Err(_) => return Ok(()),
    };
    for e in dir.flatten() {
        let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if taken.contains(&n) {
            continue;
        }
        let is_uffd =
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[userfaultfd]");
        if !is_uffd {
            continue;
        }
        match sys::pidfd_getfd(pidfd, n) {
            Ok(fd) => {
                held.push(fd);
                taken.push(n);
            }
            // Closed meanwhile, or the daemon ended.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF) | Some(libc::ESRCH)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transferred_pages_are_summed_over_processes() {
        let log = "\
(00.750057) uffd: 6005-12: uffd_copy: 0x7ffd25cc7000/4096
(00.750063) uffd: 6005-12: UFFD transferred pages: (51239/51239)
(00.750070) uffd: 6010-14: UFFD transferred pages: (10/12)
";
        assert_eq!(parse_transferred(log), Some((51249, 51251)));
        assert_eq!(parse_transferred("nothing here"), None);
        assert_eq!(parse_transferred("UFFD transferred pages: (x/1)"), None);
    }

    #[test]
    fn a_status_reaped_elsewhere_is_handed_over_and_waits_are_bounded() {
        let r = Arc::new(Reaped::default());
        let r2 = r.clone();
        let t = std::thread::spawn(move || r2.take(42, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        r.put(41, 1);
        r.put(42, 7);
        assert_eq!(t.join().unwrap(), Some(7));
        assert_eq!(r.take(41, Duration::ZERO), Some(1));
        assert_eq!(r.take(43, Duration::from_millis(10)), None);
    }

    #[test]
    fn load_timeout_grows_with_the_image() {
        assert_eq!(default_load_timeout(0), Duration::from_secs(30));
        assert_eq!(default_load_timeout(4 << 30), Duration::from_secs(90));
    }
}
