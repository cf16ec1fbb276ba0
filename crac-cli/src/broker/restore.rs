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

/// What a restore request asks for.
struct Request {
    name: String,
    /// Into a fresh PID namespace (several copies of one image at once).
    pidns: bool,
}

fn parse(rest: &str) -> Result<Request, String> {
    let (h, _) = headers(rest);
    let name = valid_name(header(&h, "name").unwrap_or(""))?.to_owned();
    let pidns = match header(&h, "pidns") {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(format!("pidns={v}: expected 0 or 1")),
    };
    if let Some(v) = header(&h, "lazy").filter(|v| *v != "0") {
        return Err(format!(
            "lazy={v}: the broker restores eagerly, every page read and its seal checked first"
        ));
    }
    Ok(Request { name, pidns })
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
    let (dir, meta) = checked_image(b, &caller, &req)?;
    let work = b
        .work
        .make_temp("restore-")
        .and_then(|w| sys::fchown(w.fd(), caller.uid, caller.gid).map(|()| w))
        .map_err(|e| format!("work directory: {e}"))?;
    let restoring = Restoring {
        caller: &caller,
        dir: &dir,
        meta: &meta,
        work: &work,
        pidns: req.pidns,
    };
    let r = start(b, &restoring, &stdio, conn);
    let errors = crac_criu::criu::log::log_errors_in(&work, "restore.log");
    let _ = std::fs::remove_dir_all(work.path());
    let pid = r.map_err(|e| format!("{e}: {errors}"))?;
    peer::reply(
        conn,
        &format!(
            "restored pid={pid} ms={:.1}",
            started.elapsed().as_secs_f64() * 1e3
        ),
    );
    log(&format!(
        "uid {} restore {}: pid {pid}{}",
        caller.uid,
        req.name,
        if req.pidns {
            " (own PID namespace)"
        } else {
            ""
        }
    ));
    Ok(())
}

/// The caller's image `req.name`, opened and checked: its seal, the credentials it records,
/// the CPU, and (without a PID namespace of its own) its pids free.
fn checked_image(b: &Broker, caller: &Caller, req: &Request) -> Result<(Dir, Metadata), String> {
    let uid = caller.uid;
    let dir = b.user_store(uid)?.open_subdir(&req.name).map_err(|e| {
        format!(
            "no image {:?} of uid {uid} in the broker's store ({e})",
            req.name
        )
    })?;
    seal::verify(&dir, &b.key, uid, &req.name)?;
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
    Ok((dir, meta))
}

/// One restore: for whom, of what, where its work files go, in which PID namespace.
struct Restoring<'a> {
    caller: &'a Caller,
    dir: &'a Dir,
    meta: &'a Metadata,
    work: &'a Dir,
    pidns: bool,
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
    } = *r;
    let [stdin, stdout, stderr, payload] = stdio;
    let pidfile = work.proc_path().join("pid");
    // criu's log, pidfile and statistics go to the work directory: the sealed image must
    // not change, or the next restore of it would be refused.
    let mut inv = Invocation::restore(dir)
        .log(work.proc_path().join("restore.log"))
        .pidfile(&pidfile)
        .work_dir(&work.proc_path())
        .externals(&meta.external);
    inv.inherit_stdio(meta, [stdin, stdout, stderr].map(|fd| fd.as_raw_fd()));
    inv.inherit_payload_pipe(meta, payload.as_raw_fd());
    let (status_r, status_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let init: Vec<OsString> = vec![
        b.exe.clone().into(),
        INIT_COMMAND.into(),
        "--status-fd".into(),
        status_w.as_raw_fd().to_string().into(),
        "--pidfile".into(),
        pidfile.into(),
        "--answer-fd".into(),
        conn.as_raw_fd().to_string().into(),
    ];
    let launch = if pidns {
        Launch::PidNamespace { init }
    } else {
        Launch::Init { init }
    };
    let no_plugins = b.no_plugins.proc_path();
    let mut cmd = as_caller::command(caller, &b.criu, inv, &no_plugins, &launch);
    let keep = [
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
    let child = as_caller::spawn(&b.children, &mut cmd, &keep)?;
    drop(status_w);
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
