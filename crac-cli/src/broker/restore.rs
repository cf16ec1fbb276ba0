//! A restore request: the caller's own image of that name, its seal, the credentials it
//! records and the checks of any restore; criu restores it, as the caller, with the caller's
//! standard descriptors, under an init of its own (`crac __pidns-init`, in a fresh PID
//! namespace with `pidns=1`). The caller hears `restored pid=N` and the broker is done: the
//! init holds the restored service and sends the caller `exit code=C` when it ends, so a
//! running service is never one of the broker's requests.
//!
//! The restore's work files (criu's pidfile, log and statistics) are in a directory of the
//! caller's inside `STORE/.work`, root's and `0700`: criu (as the caller) reaches it through
//! a descriptor, the caller by no path.
//!
//! A lazy restore (`lazy=1`, or by default where the host can) runs `criu lazy-pages` as the
//! caller too, started and watched by the init (which holds the daemon's userfaultfds and
//! ends the copy if the daemon fails, as `crac restore --lazy` does). Its work directory
//! lives as long as the init: the init holds a lock on it, and a later request removes work
//! directories nobody holds ([`sweep_work`]). Its page files are not read before the copy
//! runs when the seal's record of their identity on this host still holds ([`seal::verify`]);
//! they are read against the seal while it runs, and a mismatch ends it.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crac_criu::broker::{header, headers, valid_name};
use crac_criu::criu::invocation::{Invocation, Launch};
use crac_criu::image::metadata::Metadata;
use crac_criu::safe_dir::Dir;

use super::peer::{self, Peer};
use super::server::{Broker, log};
use super::tree::{self, Caller};
use super::{as_caller, creds, seal};
use crate::restore::pidns::{self, INIT_COMMAND, InitReport};
use crate::sys;

/// How a restore loads the image's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Lazily where this host can, else eagerly (as a plain `crac restore`).
    Auto,
    Lazy,
    Eager,
}

/// What a restore request asks for.
struct Request {
    name: String,
    /// Into a fresh PID namespace (several copies of one image at once).
    pidns: bool,
    mode: Mode,
    /// Every page file read against the seal before the copy runs, even a lazy one's.
    verify_full: bool,
}

fn parse(rest: &str) -> Result<Request, String> {
    let (h, _) = headers(rest);
    let name = valid_name(header(&h, "name").unwrap_or(""))?.to_owned();
    let pidns = match header(&h, "pidns") {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(format!("pidns={v}: expected 0 or 1")),
    };
    let mode = match header(&h, "lazy") {
        None => Mode::Auto,
        Some("1") => Mode::Lazy,
        Some("0") => Mode::Eager,
        Some(v) => return Err(format!("lazy={v}: expected 0 or 1")),
    };
    let verify_full = match header(&h, "verify") {
        None | Some("metadata") => false,
        Some("full") => true,
        Some(v) => return Err(format!("verify={v}: expected full or metadata")),
    };
    Ok(Request {
        name,
        pidns,
        mode,
        verify_full,
    })
}

/// Serves a restore request of `peer` on `conn`.
pub(super) fn restore(
    b: &Broker,
    conn: &OwnedFd,
    peer: &Peer,
    rest: &str,
    fds: Vec<OwnedFd>,
) -> Result<(), String> {
    let started = Instant::now();
    let req = parse(rest)?;
    let stdio: [OwnedFd; 4] = fds.try_into().map_err(|_| {
        "a restore request passes its descriptors 0, 1 and 2 and its payload pipe".to_owned()
    })?;
    let caller = tree::caller(peer)?;
    b.wait_sealed(caller.uid, &req.name)?;
    let kdat = lazy_kdat(b, req.mode)?;
    let defer_pages = kdat.is_some() && !req.verify_full;
    let (dir, meta, deferred) = checked_image(b, &caller, &req, defer_pages)?;
    sweep_work(&b.work, STALE_WORK);
    let work = b
        .work
        .make_temp("restore-")
        .and_then(|w| sys::fchown(w.fd(), caller.uid, caller.gid).map(|()| w))
        .map_err(|e| format!("work directory: {e}"))?;
    if kdat.is_some() {
        // Held by the init, which inherits this descriptor, for as long as it runs.
        sys::flock(work.fd(), libc::LOCK_EX).map_err(|e| format!("work directory: {e}"))?;
    }
    let restoring = Restoring {
        caller: &caller,
        dir: &dir,
        meta: &meta,
        work: &work,
        pidns: req.pidns,
        kdat,
    };
    let r = start(b, &restoring, &stdio, conn);
    let errors = match work.stat("restore.log") {
        Ok(Some(_)) => crac_criu::criu::log::log_errors_in(&work, "restore.log"),
        // criu ended before its log: what it said on stderr.
        _ => stderr_of(&work),
    };
    if r.is_err() || kdat.is_none() {
        let _ = std::fs::remove_dir_all(work.path());
    }
    let pid = r.map_err(|e| format!("{e}: {errors}"))?;
    // Taken before the answer: the copy to end should its pages not match.
    let victim = (!deferred.is_empty())
        .then(|| sys::pidfd_open(pid).ok())
        .flatten();
    peer::reply(
        conn,
        &format!(
            "restored pid={pid} ms={:.1} lazy={}",
            started.elapsed().as_secs_f64() * 1e3,
            u8::from(kdat.is_some())
        ),
    );
    log(&format!(
        "uid {} restore {}: pid {pid}{}{}",
        caller.uid,
        req.name,
        if req.pidns {
            " (own PID namespace)"
        } else {
            ""
        },
        if kdat.is_some() { " (lazy)" } else { "" }
    ));
    if !deferred.is_empty() {
        check_pages_running(conn, &dir, &deferred, victim, &caller, &req.name);
    }
    Ok(())
}

/// What the restore's init and criu wrote to stderr (`CRIU_STDERR`), its start.
fn stderr_of(work: &Dir) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Ok(f) = work.open_file(CRIU_STDERR) {
        let _ = f.take(4096).read_to_string(&mut text);
    }
    match text.trim() {
        "" => "(criu wrote no log and said nothing)".to_owned(),
        t => format!("criu said: {}", t.replace('\n', " | ")),
    }
}

/// The file in the work directory that takes the init's and criu's stderr.
const CRIU_STDERR: &str = "stderr";

/// Whether to restore lazily: the directory of root's CRIU kernel probe for the caller's
/// criu if so ([`Broker::lazy_kdat`]).
fn lazy_kdat(b: &Broker, mode: Mode) -> Result<Option<&Dir>, String> {
    match mode {
        Mode::Eager => Ok(None),
        Mode::Auto => Ok(b.lazy_kdat().ok()),
        Mode::Lazy => b.lazy_kdat().map(Some).map_err(|why| {
            format!(
                "lazy=1: the broker cannot restore lazily on this host ({why}); restore with \
                 --eager, or leave both out (lazy where the host can)"
            )
        }),
    }
}

/// Reads the page files the seal check deferred while the copy runs (at a low priority:
/// the copy's own start comes first); a file that does not match ends the copy and the
/// caller is told why.
fn check_pages_running(
    conn: &OwnedFd,
    dir: &Dir,
    deferred: &seal::Deferred,
    victim: Option<OwnedFd>,
    caller: &Caller,
    name: &str,
) {
    let _ = sys::set_thread_nice(10);
    let r = seal::check_deferred(dir, deferred);
    let _ = sys::set_thread_nice(0);
    let Err(why) = r else {
        return;
    };
    let ended = victim.is_some_and(|v| sys::pidfd_kill(&v, libc::SIGKILL).is_ok());
    let said = format!(
        "{why}; the restored copy {}",
        if ended {
            "was ended"
        } else {
            "had already ended"
        }
    );
    log(&format!("uid {} restore {name}: {said}", caller.uid));
    peer::reply(conn, &format!("error {said}"));
}

/// Work directories older than this that nobody holds are removed.
const STALE_WORK: Duration = Duration::from_secs(60);

/// Removes the restores' work directories in `work` that no init holds any more (a lazy
/// restore's lives as long as its init) and that are older than `min_age` (a directory just
/// made is locked a moment later).
pub(super) fn sweep_work(work: &Dir, min_age: Duration) {
    for name in work.entries().unwrap_or_default() {
        if !name.starts_with("restore-") {
            continue;
        }
        let Ok(d) = work.open_subdir(&name) else {
            continue;
        };
        let old = d
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if old && sys::flock(d.fd(), libc::LOCK_EX | libc::LOCK_NB).unwrap_or(false) {
            let _ = std::fs::remove_dir_all(d.path());
        }
    }
}

/// The caller's image `req.name`, opened and checked: its seal (with `defer_pages`, its page
/// files deferred where their identity holds), the credentials it records, the CPU, and
/// (without a PID namespace of its own) its pids free.
fn checked_image(
    b: &Broker,
    caller: &Caller,
    req: &Request,
    defer_pages: bool,
) -> Result<(Dir, Metadata, seal::Deferred), String> {
    let uid = caller.uid;
    let dir = b.user_store(uid)?.open_subdir(&req.name).map_err(|e| {
        format!(
            "no image {:?} of uid {uid} in the broker's store ({e})",
            req.name
        )
    })?;
    let deferred = seal::verify(&dir, &b.key, uid, &req.name, defer_pages)?;
    for (file, c) in creds::read_all(&dir)? {
        creds::check(&c, uid, caller.gid, &caller.groups, caller.bnd)
            .map_err(|why| format!("the image's {file}: {why}"))?;
    }
    let meta = Metadata::read(&dir).map_err(|e| e.to_string())?;
    crate::restore::trust::check_cpu(&meta).map_err(|e| e.to_string())?;
    if !req.pidns {
        crate::restore::wait_pids_free(&meta, Duration::from_secs(10), &mut |_| {})
            .map_err(|e| e.to_string())?;
    }
    Ok((dir, meta, deferred))
}

/// One restore: for whom, of what, where its work files go, in which PID namespace, and
/// (lazy) the directory of CRIU's kernel probe for the caller's criu.
struct Restoring<'a> {
    caller: &'a Caller,
    dir: &'a Dir,
    meta: &'a Metadata,
    work: &'a Dir,
    pidns: bool,
    kdat: Option<&'a Dir>,
}

/// The lazy-pages daemon of a lazy restore, as the init is told to start it: its command
/// line (criu as the caller) after `--lazy-pages-arg`s, and the pipe it says it is ready on.
struct LazyDaemon {
    args: Vec<OsString>,
    ready: (OwnedFd, OwnedFd),
}

fn lazy_daemon(b: &Broker, r: &Restoring<'_>) -> Result<LazyDaemon, String> {
    let work = r.work.proc_path();
    let (ready_r, ready_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let inv = Invocation::lazy_pages(r.dir, &work)
        .log(work.join("lazy-pages.log"))
        .status_fd(ready_w.as_raw_fd());
    let no_plugins = b.no_plugins.proc_path();
    let cmd = as_caller::command(r.caller, &b.criu, inv, &no_plugins, &Launch::Direct);
    let page_bytes = crate::restore::page_bytes(r.dir);
    let bound = crate::restore::lazy::load_timeout(page_bytes).map_err(|e| e.to_string())?;
    let mut args: Vec<OsString> = vec![
        "--lazy-ready-fd".into(),
        ready_r.as_raw_fd().to_string().into(),
        "--lazy-status-fd".into(),
        ready_w.as_raw_fd().to_string().into(),
        "--lazy-work".into(),
        work.into(),
        "--lazy-bound-ms".into(),
        bound.as_millis().to_string().into(),
    ];
    for a in std::iter::once(cmd.get_program()).chain(cmd.get_args()) {
        let mut arg = OsString::from("--lazy-pages-arg=");
        arg.push(a);
        args.push(arg);
    }
    Ok(LazyDaemon {
        args,
        ready: (ready_r, ready_w),
    })
}

/// Starts the restore under its init and waits (bounded) for the init's report: the
/// restored process's pid, as the broker sees it. The init keeps `conn` to answer with the
/// exit status; the broker lets it run on.
fn start(
    b: &Broker,
    r: &Restoring<'_>,
    stdio: &[OwnedFd; 4],
    conn: &OwnedFd,
) -> Result<i32, String> {
    let Restoring {
        caller,
        dir,
        meta,
        work,
        pidns,
        kdat,
    } = *r;
    let [stdin, stdout, stderr, payload] = stdio;
    let pidfile = work.proc_path().join("pid");
    // criu's log, pidfile and statistics go to the work directory: the sealed image must
    // not change, or the next restore of it would be refused.
    let inv = Invocation::restore(dir)
        .log(work.proc_path().join("restore.log"))
        .pidfile(&pidfile)
        .externals(&meta.external);
    let mut inv = match kdat {
        Some(_) => inv.through_lazy_pages(&work.proc_path()),
        None => inv.work_dir(&work.proc_path()),
    };
    inv.inherit_stdio(meta, [stdin, stdout, stderr].map(|fd| fd.as_raw_fd()));
    inv.inherit_payload_pipe(meta, payload.as_raw_fd());
    let (status_r, status_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut init: Vec<OsString> = vec![
        b.exe.clone().into(),
        INIT_COMMAND.into(),
        "--status-fd".into(),
        status_w.as_raw_fd().to_string().into(),
        "--pidfile".into(),
        pidfile.into(),
        "--answer-fd".into(),
        conn.as_raw_fd().to_string().into(),
        "--say-fd".into(),
        stderr.as_raw_fd().to_string().into(),
    ];
    let lazy = kdat.map(|_| lazy_daemon(b, r)).transpose()?;
    if let Some(l) = &lazy {
        init.extend(l.args.iter().cloned());
    }
    let launch = if pidns {
        Launch::PidNamespace { init }
    } else {
        Launch::Init { init }
    };
    let no_plugins = b.no_plugins.proc_path();
    let mut cmd = as_caller::command(caller, &b.criu, inv, &no_plugins, &launch);
    let mut keep = vec![
        dir.fd(),
        work.fd(),
        b.no_plugins.fd(),
        stdin,
        stdout,
        stderr,
        payload,
        &status_w,
        conn,
    ];
    if let (Some(kdat), Some(l)) = (kdat, &lazy) {
        // Read by criu as the caller (restore and daemon) in place of its own probe.
        cmd.env("XDG_RUNTIME_DIR", kdat.proc_path());
        keep.extend([kdat.fd(), &l.ready.0, &l.ready.1]);
    }
    let errors = work
        .open_rw(CRIU_STDERR)
        .map_err(|e| format!("work directory: {e}"))?;
    cmd.stderr(errors);
    let child = as_caller::spawn(&b.children, &mut cmd, &keep)?;
    drop(status_w);
    // The init's alone now: the daemon's readiness reaches it, its end is an EOF there.
    drop(lazy);
    match pidns::read_report(status_r, b.timeout) {
        Some(InitReport::Restored(pid)) => {
            let host = match pidns {
                true => crate::restore::host_pid(child.pid(), pid).unwrap_or(pid),
                false => pid,
            };
            b.children.release(child);
            Ok(host)
        }
        Some(InitReport::Failed(why)) => {
            // Nothing was restored: whatever the init started goes with it.
            let _ = sys::kill_group(child.pid(), libc::SIGKILL);
            b.children.kill(&child);
            Err(why)
        }
        None => {
            // The init, criu and whatever criu started are in the init's process group.
            let _ = sys::kill_group(child.pid(), libc::SIGKILL);
            b.children.kill(&child);
            Err(format!(
                "criu restore did not finish within {:.0} s ({}) and was stopped",
                b.timeout.as_secs_f64(),
                crac_criu::settings::CRIU_TIMEOUT
            ))
        }
    }
}
