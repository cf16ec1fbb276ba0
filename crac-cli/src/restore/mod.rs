//! The `crac` command's side: restoring an image with `criu restore`, what `crac restore`
//! does, with the lazy-pages daemon (`lazy`), the watch over the restored process and the
//! daemon (`watch`), the guard that ends them should `crac restore` die before its checks end
//! (`guard`), the restore's private work directories (`work`), and the init of a fresh PID
//! namespace (`pidns`).

mod caps;
pub(crate) mod guard;
pub(crate) mod lazy;
pub(crate) mod pidns;
pub(crate) mod trust;
pub(crate) mod watch;
mod work;

use std::ffi::OsString;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, ErrorKind};
use crate::restore::watch::Event;
use crate::sys;
use crac_criu::criu::invocation::{Invocation, Launch};
use crac_criu::criu::{self, kdat};
use crac_criu::image::manifest;
use crac_criu::image::manifest::Scope;
use crac_criu::image::metadata::Metadata;
use crac_criu::safe_dir::Dir;
use crac_criu::settings;
use pidns::InitReport;

/// How to restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// The image directory.
    pub image_dir: PathBuf,
    /// Restore into a fresh PID namespace (several copies of one image at once, and a taken
    /// PID does not matter).
    pub pidns: bool,
    /// New configuration for the restored process (`Management::restore_env`).
    pub env: Vec<(String, String)>,
    /// How long to wait for a PID of the image that a not-yet-reaped process still holds.
    pub pid_wait: Duration,
    /// The program that runs [`pidns::INIT_COMMAND`] (with `pidns`) and
    /// [`guard::GUARD_COMMAND`] (its `main` must hand its arguments to `cli::run`); default:
    /// this executable.
    pub init_exe: Option<PathBuf>,
    /// Lazy (memory served on demand) or eager.
    pub mode: Mode,
    /// What is checked before CRIU runs (default: [`Verify::Metadata`] for a lazy restore,
    /// [`Verify::Full`] for an eager one).
    pub verify: Option<Verify>,
}

/// How the memory of the restored process comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Lazy where this machine can (`crac check` says), else eager.
    #[default]
    Auto,
    /// Lazy: the process runs at once, its pages are served on demand and streamed in the
    /// background by `criu lazy-pages` ([`crate::restore::lazy`]). Refused where the kernel cannot.
    Lazy,
    /// Eager: every page is read before the process runs.
    Eager,
}

/// What a restore checks against the image's manifest before CRIU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Every file's digest, page files included: nothing runs on a byte that was not checked
    /// (costs reading the whole image first: about 0.5–1 s per GB here).
    Full,
    /// Every file's digest but the page files', whose sizes are checked before and whose
    /// digests while the process already runs: a mismatch then ends the process, which may
    /// have run on the damaged pages until that moment.
    Metadata,
}

impl Verify {
    /// Parses `full` or `metadata`.
    pub fn parse(v: &str) -> Option<Verify> {
        match v {
            "full" => Some(Verify::Full),
            "metadata" => Some(Verify::Metadata),
            _ => None,
        }
    }
}

/// A restore in progress: the restored process runs.
#[derive(Debug)]
pub struct Restore {
    /// The restored process's pid as seen from here (`None`: with `--pidns`, it had already
    /// ended when the restore was over).
    pub pid: Option<i32>,
    /// Its pid inside its own PID namespace (`--pidns`; the image's pid).
    pub ns_pid: Option<i32>,
    /// `unshare` (with `--pidns`), whose exit ends the restored copy and whose status is the
    /// restored process's.
    child: Option<Child>,
    /// Restore duration: from start to the restored process running.
    pub took: Duration,
    /// Whether the memory comes lazily (and why not, when eager).
    pub lazy: Result<(), String>,
    /// How long each phase took, in order.
    pub phases: Vec<(&'static str, Duration)>,
    /// What runs until the image is all in and checked.
    background: watch::Background,
}

fn pid_state(pid: i32) -> Option<(char, String, i32)> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut state = '?';
    let mut name = String::new();
    let mut ppid = 0;
    for l in s.lines() {
        if let Some(v) = l.strip_prefix("State:") {
            state = v.trim().chars().next().unwrap_or('?');
        } else if let Some(v) = l.strip_prefix("Name:") {
            name = v.trim().to_owned();
        } else if let Some(v) = l.strip_prefix("PPid:") {
            ppid = v.trim().parse().unwrap_or(0);
        }
    }
    Some((state, name, ppid))
}

/// Waits until every pid of the image is free; refuses pids held by live processes.
pub(crate) fn wait_pids_free(
    meta: &Metadata,
    wait: Duration,
    note: &mut dyn FnMut(&str),
) -> Result<(), Error> {
    let deadline = Instant::now() + wait;
    let mut said = false;
    let pids = image_pids(meta);
    loop {
        let mut zombie = None;
        for &p in &pids {
            if let Some((state, name, ppid)) = pid_state(p) {
                if state == 'Z' || state == 'X' {
                    zombie = Some((p, name, ppid));
                } else {
                    return Err(Error::new(
                        ErrorKind::Refused,
                        format!(
                            "PID {p} of the image is taken by a running process ({name}, state \
                             {state}): a plain restore needs the image's pids free; stop that \
                             process or restore into a fresh PID namespace (crac restore --pidns)"
                        ),
                    ));
                }
            }
        }
        let Some((p, name, ppid)) = zombie else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "PID {p} of the image is still held by an exited, unreaped process ({name}) \
                     whose parent {ppid} has not reaped it after {:.1}s; make the parent wait \
                     for its children, or restore with --pidns",
                    wait.as_secs_f64()
                ),
            ));
        }
        if !said {
            note(&format!(
                "waiting for PID {p} to be freed: it is held by an exited process ({name}) not yet \
                 reaped by its parent {ppid}"
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether to restore lazily: `Ok` to do so, `Err(why not)` for eager. Also makes sure
/// CRIU's kernel probe is cached ([`kdat`]), for every restore.
fn choose_mode(
    mode: Mode,
    criu: &criu::Criu,
    timeout: Duration,
) -> Result<Result<(), String>, Error> {
    let facts = kdat::facts(criu, timeout);
    match (mode, facts.lazy_pages) {
        (Mode::Eager, _) => Ok(Err("--eager".into())),
        (_, Ok(())) => Ok(Ok(())),
        (Mode::Lazy, Err(why)) => Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "--lazy: this machine cannot restore lazily ({why}); restore with --eager, or \
                 leave both out (lazy where the machine can)"
            ),
        )),
        (Mode::Auto, Err(why)) => Ok(Err(why)),
    }
}

/// Times the phases of a restore.
struct Phases {
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn new(start: Instant) -> Phases {
        Phases {
            last: start,
            done: Vec::new(),
        }
    }

    /// The phase `name` ends now.
    fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now - self.last));
        self.last = now;
    }
}

/// Bytes of the image's page files.
pub(crate) fn page_bytes(dir: &Dir) -> u64 {
    dir.entries()
        .unwrap_or_default()
        .iter()
        .filter(|n| manifest::is_page_file(n))
        .filter_map(|n| dir.stat(n).ok().flatten())
        .map(|m| m.len())
        .sum()
}

/// Restores the image. The caller should be a child subreaper (so the restored process
/// becomes its child once criu exits) — `crac restore` is. Phases: find CRIU and choose the
/// mode, the trust check, criu's arguments and the restore payload, the lazy-pages daemon,
/// `criu restore`, then the watch over what goes on in the background.
pub fn restore(opts: &RestoreOptions, note: &mut dyn FnMut(&str)) -> Result<Restore, Error> {
    let started = Instant::now();
    let started_wall = SystemTime::now();
    let mut phases = Phases::new(started);
    let criu = kdat::find_criu()?;
    criu::check_privileges()?;
    let timeout = crac_criu::criu::criu_timeout()?;
    settings::criu_log_level()?;
    phases.mark("criu found");
    let lazy = choose_mode(opts.mode, &criu, timeout)?;
    phases.mark("kdat");
    let scope = match opts.verify {
        Some(Verify::Full) => Scope::All,
        Some(Verify::Metadata) => Scope::ExceptPages,
        None if lazy.is_ok() => Scope::ExceptPages,
        None => Scope::All,
    };
    let (dir, deferred) = trust::verified_image_scoped(&opts.image_dir, scope, note)?;
    phases.mark("manifest");
    let meta = Metadata::read(&dir)?;
    trust::check_build(&meta)?;
    trust::check_cpu(&meta)?;
    caps::check(&dir, &criu.path)?;
    let load_bound = lazy::load_timeout(page_bytes(&dir))?;
    if !opts.pidns {
        wait_pids_free(&meta, opts.pid_wait, note)?;
    }
    phases.mark("checks");

    let token = restore_token(started_wall);
    // Dropped on any failure from here on, ending what it was told of; released once every
    // check is done.
    let mut guard = match lazy.is_ok() || !deferred.is_empty() {
        true => Some(guard::Guard::start(&own_exe(opts)?)?),
        false => None,
    };
    let pid_dir = work::temp("restore-")?;
    guard.iter_mut().for_each(|g| g.remove(pid_dir.path()));
    let pidfile = pid_dir.path().join("criu.pid");
    // criu's log in the work directory too: the image may be on a read-only volume, shared by
    // every replica.
    let restore_log = pid_dir.path().join(RESTORE_LOG);
    let mut invocation = criu_restore(&dir, &meta, &restore_log, &pidfile).with_timeout(timeout);
    let env_r = hand_payload(opts, &meta, started_wall, &mut invocation)?;
    // Dropped (stopped) on any failure from here on.
    let daemon = match lazy {
        Ok(()) => Some(start_daemon(&criu.path, &dir, &token, timeout, &mut guard)?),
        Err(_) => None,
    };
    if let Some(d) = &daemon {
        invocation = invocation.through_lazy_pages(d.work_dir());
        phases.mark("lazy-pages daemon");
    }

    if !opts.pidns {
        // A plain restore gives the restored processes the image's pids.
        guard.iter_mut().for_each(|g| g.end_new(&image_pids(&meta)));
    }
    let spawned = spawn_criu(opts, &criu.path, &invocation, &pidfile);
    drop(env_r);
    let (child, status) = spawned?;
    // criu and what it restores (with --pidns: unshare, its init and the whole namespace).
    guard.iter_mut().for_each(|g| g.end_tree(child.id() as i32));
    let restored = wait_restored(child, status, &pidfile, &restore_log, timeout);
    if restored.is_ok() {
        let _ = fs::remove_dir_all(pid_dir.path());
    } else {
        // Kept for the log the error names.
        guard.iter_mut().for_each(|g| g.keep(pid_dir.path()));
    }
    let (pid, ns_pid, child) = restored?;
    if let (Some(g), Some(p)) = (&mut guard, pid) {
        g.end_tree(p);
    }
    let took = started.elapsed();
    phases.mark("criu restore");

    // What ends the copy if its memory fails to arrive or to match: the process itself, or
    // (--pidns) the unshare whose end ends its namespace.
    let victim = match (&child, pid) {
        (Some(c), _) => sys::pidfd_open(c.id() as i32).ok(),
        (None, Some(p)) => sys::pidfd_open(p).ok(),
        (None, None) => None,
    }
    .map(std::sync::Arc::new);
    let mut background = watch::Background::default();
    if let Some(d) = daemon {
        background.watch_lazy(d, victim.clone(), started, load_bound);
    }
    background.check_pages(deferred, dir.path().display().to_string(), victim, started);
    background.guard = guard;
    Ok(Restore {
        pid,
        ns_pid,
        child,
        took,
        lazy,
        phases: phases.done,
        background,
    })
}

/// criu's restore log, in the restore's work directory (kept there when the restore fails).
pub const RESTORE_LOG: &str = "restore.log";

/// What names this restore's logs: the restorer's pid and the start time.
fn restore_token(started_wall: SystemTime) -> String {
    let ns = started_wall
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{ns}", std::process::id())
}

/// Starts the lazy-pages daemon in a work directory of its own, both told to the guard.
fn start_daemon(
    criu: &Path,
    dir: &Dir,
    token: &str,
    timeout: Duration,
    guard: &mut Option<guard::Guard>,
) -> Result<lazy::Daemon, Error> {
    let work = work::temp("lazy-")?;
    guard.iter_mut().for_each(|g| g.remove(work.path()));
    let d = lazy::Daemon::start(criu, dir, work, token, timeout)?;
    guard.iter_mut().for_each(|g| g.end_tree(d.pid()));
    Ok(d)
}

/// The pids of the image's processes and threads (what a plain restore gives them).
fn image_pids(meta: &Metadata) -> Vec<i32> {
    let mut pids = meta.tids.clone();
    if !pids.contains(&meta.pid) {
        pids.push(meta.pid);
    }
    pids
}

/// The program that runs our hidden commands (the pidns init, the guard).
fn own_exe(opts: &RestoreOptions) -> Result<PathBuf, Error> {
    match &opts.init_exe {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().map_err(|e| io_err("current_exe", e)),
    }
}

/// `criu restore` of the image in `dir`: through our descriptor, its log `log` (in the work
/// directory), `pidfile`, and the descriptors it must hand in: our own 0–2 where the image's
/// were pipes, sockets or files (so output reaches us), and the image directory where the
/// dumped process held it open.
fn criu_restore(dir: &Dir, meta: &Metadata, log: &Path, pidfile: &Path) -> Invocation {
    let mut inv = Invocation::restore(dir)
        .log(log)
        .pidfile(pidfile)
        .externals(&meta.external);
    // criu's statistics beside the pidfile, not in the image (a lazy restore's go to the
    // daemon's work directory instead).
    if let Some(work) = pidfile.parent() {
        inv = inv.work_dir(work);
    }
    inv.inherit_stdio(meta, [0, 1, 2]);
    inv.inherit_image_dir(meta, dir);
    inv
}

/// Writes the restore payload (`--env` values, the start time) into a pipe the restored
/// process reads as the one its image recorded; returns the read end, to be kept open until
/// criu has inherited it.
fn hand_payload(
    opts: &RestoreOptions,
    meta: &Metadata,
    started_wall: SystemTime,
    invocation: &mut Invocation,
) -> Result<OwnedFd, Error> {
    let (env_r, env_w) = sys::pipe().map_err(|e| io_err("pipe", e))?;
    if let Some((_, key)) = &meta.env_fd {
        let payload = crac_criu::image::payload::encode_restore_payload(&opts.env, started_wall);
        if payload.len() > 60 * 1024 {
            return Err(Error::new(
                ErrorKind::Config,
                "the --env values exceed 60 KiB; pass a file path instead".to_owned(),
            ));
        }
        use std::io::Write;
        fs::File::from(env_w)
            .write_all(&payload)
            .map_err(|e| io_err("write the restore configuration", e))?;
        sys::set_cloexec(&env_r, false).map_err(|e| io_err("fcntl", e))?;
        invocation.inherit_fd(env_r.as_raw_fd(), key);
    } else {
        drop(env_w);
    }
    Ok(env_r)
}

/// The restored process: its pid, its pid in its own namespace, the unshare holding that
/// namespace (the last two with `--pidns`).
type Restored = (Option<i32>, Option<i32>, Option<Child>);

/// Waits (bounded) until `criu restore` is done: the restored process's pid, its pid in its
/// own namespace and the unshare that holds that namespace (`--pidns`), or why it failed.
fn wait_restored(
    mut child: Child,
    status: Option<OwnedFd>,
    pidfile: &Path,
    restore_log: &Path,
    timeout: Duration,
) -> Result<Restored, Error> {
    let fail = |what: String| {
        Error::new(
            ErrorKind::Snapshot,
            format!(
                "{what}; from {}:\n  {}",
                restore_log.display(),
                crac_criu::criu::log::log_errors(restore_log)
            ),
        )
    };
    let overran = || {
        fail(format!(
            "criu restore did not finish within {:.0} s ({}) and was stopped",
            timeout.as_secs_f64(),
            settings::CRIU_TIMEOUT
        ))
    };
    Ok(match status {
        None => {
            let st = wait_bounded(&mut child, timeout).map_err(|e| io_err("wait for criu", e))?;
            let ns = fs::read_to_string(pidfile).ok();
            fs::remove_file(pidfile).ok();
            let st = st.ok_or_else(overran)?;
            if !st.success() {
                return Err(fail(format!("criu restore failed ({st})")));
            }
            let pid = ns
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| fail("criu restore wrote no pid".into()))?;
            (Some(pid), None, None)
        }
        // --pidns: the init says when criu is done, and how it went.
        Some(status) => match pidns::read_report(status, timeout) {
            Some(InitReport::Restored(ns_pid)) => (
                host_pid(child.id() as i32, ns_pid),
                Some(ns_pid),
                Some(child),
            ),
            Some(InitReport::Failed(why)) => {
                let _ = child.wait();
                return Err(fail(format!("restore in a new PID namespace: {why}")));
            }
            None => {
                // Killing unshare kills the init (--kill-child), and with it the namespace.
                let _ = child.kill();
                let _ = child.wait();
                fs::remove_file(pidfile).ok();
                return Err(overran());
            }
        },
    })
}

/// Starts `criu restore`: directly, or (`--pidns`) under our init in a fresh PID namespace,
/// which reports on the returned pipe.
fn spawn_criu(
    opts: &RestoreOptions,
    criu: &Path,
    invocation: &Invocation,
    pidfile: &Path,
) -> Result<(Child, Option<OwnedFd>), Error> {
    let mut status = None;
    let launch = if opts.pidns {
        let (r, w) = sys::pipe().map_err(|e| io_err("pipe", e))?;
        sys::set_cloexec(&w, false).map_err(|e| io_err("fcntl", e))?;
        let init: Vec<OsString> = vec![
            own_exe(opts)?.into(),
            pidns::INIT_COMMAND.into(),
            "--status-fd".into(),
            w.as_raw_fd().to_string().into(),
            "--pidfile".into(),
            pidfile.into(),
        ];
        status = Some((r, w));
        Launch::PidNamespace { init }
    } else {
        Launch::Direct
    };
    let mut cmd = invocation.command(criu, &launch);
    cmd.stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    tracing::debug!(?cmd, "starting criu restore");
    let child = cmd.spawn().map_err(|e| {
        Error::new(
            ErrorKind::Unavailable,
            if opts.pidns {
                format!("cannot run unshare (util-linux) for --pidns: {e}")
            } else {
                format!("cannot run {}: {e}", criu.display())
            },
        )
    })?;
    // Only the init holds the status pipe's write end now: its end is our EOF.
    Ok((child, status.map(|(r, _w)| r)))
}

/// Waits for `child` at most `timeout`; kills it when it overruns (`None`).
fn wait_bounded(
    child: &mut Child,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The host pid of the process that is `ns_pid` in the namespace whose init is the child of
/// `unshare_pid` (`None` if it has already ended and been reaped).
pub(crate) fn host_pid(unshare_pid: i32, ns_pid: i32) -> Option<i32> {
    sys::children(unshare_pid)
        .into_iter()
        .flat_map(sys::children)
        .find(|&p| ns_pids(p).last() == Some(&ns_pid))
}

/// The `NSpid:` line of `/proc/PID/status`: the pid in each nested namespace, outermost first.
fn ns_pids(pid: i32) -> Vec<i32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("NSpid:").map(|v| {
                    v.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
            })
        })
        .unwrap_or_default()
}

impl Restore {
    /// Waits for the restored process to end and returns its exit code (128+signal when
    /// killed), reporting to `note` what completes in the background (every page in, the page
    /// files checked). A background failure, which ended the process, is the error. Without
    /// `--pidns` this needs the caller to be a subreaper.
    pub fn wait(mut self, note: &mut dyn FnMut(&str)) -> Result<i32, Error> {
        let tx = self.background.sender();
        let child = self.child.take();
        let me = self.pid;
        let reaped = self.background.reaped.clone();
        let daemon = self.background.daemon_pid;
        std::thread::spawn(move || {
            let _ = tx.send(Event::Exited(wait_process(child, me, daemon, &reaped)));
        });
        match self.background.run(true, note) {
            (_, Some(e)) => Err(e),
            (Some(code), None) => code,
            (None, None) => Err(Error::new(
                ErrorKind::Other,
                "the restored process's waiter ended without its status".to_owned(),
            )),
        }
    }

    /// Waits only until the image is all in memory and checked (for `--detach`): the
    /// background's failure, which ended the process, is the error.
    pub fn wait_loaded(self, note: &mut dyn FnMut(&str)) -> Result<(), Error> {
        match self.background.run(false, note) {
            (_, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// Waits for the restored process: through `unshare` (`--pidns`) or as its reaper, handing
/// the lazy-pages daemon's status, should it be reaped here, to its watcher.
fn wait_process(
    child: Option<Child>,
    me: Option<i32>,
    daemon: Option<i32>,
    reaped: &lazy::Reaped,
) -> Result<i32, Error> {
    if let Some(mut child) = child {
        let st = child.wait().map_err(|e| io_err("wait for unshare", e))?;
        use std::os::unix::process::ExitStatusExt;
        return Ok(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)));
    }
    let Some(me) = me else { return Ok(0) };
    loop {
        match sys::wait_any().map_err(|e| io_err("waitpid", e))? {
            Some((pid, status)) if pid == me => return Ok(sys::exit_code(status)),
            Some((pid, status)) if Some(pid) == daemon => reaped.put(pid, status),
            Some(_) => continue,
            None => {
                // Not our child (we are not a subreaper): poll until it is gone.
                while Path::new(&format!("/proc/{me}")).exists()
                    && pid_state(me).is_some_and(|s| s.0 != 'Z')
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Ok(0);
            }
        }
    }
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Other, format!("{what}: {e}")).with_source(e)
}

/// Makes the calling process a child subreaper (see [`Restore::wait`]).
pub fn become_subreaper() -> Result<(), Error> {
    sys::set_child_subreaper().map_err(|e| io_err("prctl(PR_SET_CHILD_SUBREAPER)", e))
}
