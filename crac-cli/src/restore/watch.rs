//! What runs beside a restored process until its image is all in memory and checked.
//!
//! - A lazy restore's `criu lazy-pages` daemon, watched until every page is in ([`lazy`]).
//! - With `--verify metadata`, the digests of the page files, checked while the process
//!   already runs (the other image files were checked before CRIU started).
//!
//! Either failing ends the restored process (through a pidfd: of the process itself, or of
//! the `unshare` whose end ends its PID namespace) and is reported. `crac restore` waits for
//! both before it exits, also with `--detach`.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::restore::guard::Guard;
use crate::restore::lazy::{self, Reaped};
use crate::sys;
use crac_criu::image::manifest::Deferred;

/// What the background tasks and the process's waiter report.
#[derive(Debug)]
pub enum Event {
    /// A background task finished: what it did, or why it ended the process.
    Done(Result<String, Error>),
    /// The restored process ended with this exit code (or could not be waited for).
    Exited(Result<i32, Error>),
}

/// The process to end when the background fails.
pub type Victim = Option<Arc<OwnedFd>>;

fn end(victim: &Victim) {
    if let Some(v) = victim {
        let _ = sys::pidfd_kill(&**v, libc::SIGKILL);
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Releases the guard when every check passed; else drops it, which makes it end the whole
/// restored tree (the background ended only its root) and remove the work directories.
fn settle(guard: Option<Guard>, passed: bool) {
    match guard {
        Some(g) if passed => g.release(),
        g => drop(g),
    }
}

/// The background tasks of one restore, and the channel they report on.
#[derive(Debug)]
pub struct Background {
    tx: Sender<Event>,
    rx: Receiver<Event>,
    pending: usize,
    /// Statuses of the daemon when the process's waiter reaped it (see [`Reaped`]).
    pub(crate) reaped: Arc<Reaped>,
    /// The lazy-pages daemon's pid, if any.
    pub(crate) daemon_pid: Option<i32>,
    /// What ends the restore's processes should `crac restore` die before its checks end:
    /// released when they all passed, dropped (so it acts) when one failed.
    pub(crate) guard: Option<Guard>,
}

impl Default for Background {
    fn default() -> Self {
        let (tx, rx) = channel();
        Background {
            tx,
            rx,
            pending: 0,
            reaped: Arc::default(),
            daemon_pid: None,
            guard: None,
        }
    }
}

impl Background {
    /// A sender for the process's waiter.
    pub(crate) fn sender(&self) -> Sender<Event> {
        self.tx.clone()
    }

    /// Watches the lazy-pages daemon until every page is in (bounded by `bound`).
    pub fn watch_lazy(
        &mut self,
        daemon: lazy::Daemon,
        victim: Victim,
        started: Instant,
        bound: Duration,
    ) {
        self.pending += 1;
        self.daemon_pid = Some(daemon.pid());
        let tx = self.tx.clone();
        let reaped = self.reaped.clone();
        let deadline = Instant::now() + bound;
        std::thread::spawn(move || {
            let r = daemon.watch(victim.as_deref(), deadline, bound, &reaped);
            let r = r.map(|l| {
                let pages = l
                    .pages
                    .map(|(done, of)| format!("{done} of {of} pages served by the daemon"))
                    .unwrap_or_else(|| "the daemon's count not found".to_owned());
                format!(
                    "all pages in memory {:.1} ms after crac restore started ({pages}; {} \
                     userfaultfd(s) held meanwhile)",
                    ms_since(started),
                    l.held
                )
            });
            let _ = tx.send(Event::Done(r));
        });
    }

    /// Checks the page files' digests while the process runs; a mismatch ends it.
    pub fn check_pages(
        &mut self,
        files: Vec<Deferred>,
        shown: String,
        victim: Victim,
        started: Instant,
    ) {
        if files.is_empty() {
            return;
        }
        self.pending += 1;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            // Behind the restored process and the page daemon for the CPU: the first
            // request matters more than when the check ends.
            let _ = sys::set_thread_nice(10);
            let mut bytes = 0;
            let mut r = Ok(());
            for f in files {
                match f.check(&shown) {
                    Ok(n) => bytes += n,
                    Err(e) => {
                        end(&victim);
                        r = Err(Error::new(
                            ErrorKind::Refused,
                            format!(
                                "{e}; the restored process was ended ({:.0} ms after crac \
                                 restore started; it ran on the image's memory until then: \
                                 --verify full checks every page before the process runs)",
                                ms_since(started)
                            ),
                        ));
                        break;
                    }
                }
            }
            let r = r.map(|()| {
                format!(
                    "page files match the manifest: {:.1} MB checked while the process ran, done \
                     {:.1} ms after crac restore started",
                    bytes as f64 / 1e6,
                    ms_since(started)
                )
            });
            let _ = tx.send(Event::Done(r));
        });
    }

    /// Reports events until the process ended (when `wait_exit`) and every task is done.
    /// Returns the process's exit code (if waited for) and the first failure.
    pub fn run(
        self,
        wait_exit: bool,
        note: &mut dyn FnMut(&str),
    ) -> (Option<Result<i32, Error>>, Option<Error>) {
        let Background {
            tx,
            rx,
            mut pending,
            mut guard,
            ..
        } = self;
        drop(tx);
        let mut code = None;
        let mut failure = None;
        while pending > 0 || (wait_exit && code.is_none()) {
            match rx.recv() {
                Ok(Event::Exited(c)) => code = Some(c),
                Ok(Event::Done(Ok(msg))) => {
                    pending -= 1;
                    note(&msg);
                }
                Ok(Event::Done(Err(e))) => {
                    pending -= 1;
                    failure.get_or_insert(e);
                }
                // Every sender is gone: nothing more will come.
                Err(_) => break,
            }
            if pending == 0 {
                settle(guard.take(), failure.is_none());
            }
        }
        settle(guard, failure.is_none() && pending == 0);
        (code, failure)
    }
}
