//! A checkpoint request: the caller's tree is checked, the caller closes its side, criu dumps
//! it into a new directory of the store, the credentials CRIU recorded are checked, the image
//! is sealed and takes the name. The outcome goes to the caller through the pipe it passed.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crac_criu::broker::{header, headers, valid_name};
use crac_criu::criu::invocation::{Invocation, Launch};
use crac_criu::image::metadata::Metadata;
use crac_criu::safe_dir::Dir;

use super::peer::{self, Peer};
use super::server::{Broker, log};
use super::tree::{self, Caller};
use super::{as_caller, creds, seal};
use crate::sys;

/// Serves a checkpoint request of `peer` on `conn`.
pub(super) fn checkpoint(
    b: &Broker,
    conn: &OwnedFd,
    peer: &Peer,
    rest: &str,
    mut fds: Vec<OwnedFd>,
) -> Result<(), String> {
    let (h, body) = headers(rest);
    let name = valid_name(header(&h, "name").unwrap_or(""))?.to_owned();
    let leave_running = match header(&h, "mode") {
        Some("leave-running") => true,
        Some("stop") => false,
        m => return Err(format!("mode {m:?}: expected stop or leave-running")),
    };
    if fds.len() != 1 {
        return Err("a checkpoint request passes exactly one descriptor (its answer pipe)".into());
    }
    let answer = std::fs::File::from(fds.remove(0));
    let caller = tree::caller(peer)?;
    tree::check_tree(&caller)?;
    let meta = checked_metadata(body, &caller)?;
    peer::reply(conn, "accepted");
    // The caller's connection must not be in its image: it closes it, then waits on the pipe.
    peer::wait_closed(conn, super::server::CLIENT_WAIT)?;
    // Still the process that connected, with the identity it had.
    tree::caller(peer)?;
    let outcome = b.sealing(caller.uid, &name, || {
        dump_and_seal(b, &caller, &name, &meta, leave_running)
    });
    let line = match &outcome {
        Ok(path) => format!("crac-dumped ok {}\n", path.display()),
        Err(e) => format!("crac-dumped error {}\n", e.replace('\n', " ")),
    };
    log(&format!(
        "uid {} pid {} checkpoint {name}: {}",
        caller.uid,
        caller.pid,
        line.trim()
    ));
    // In stop mode the caller is gone with its dump (nobody reads the pipe): no news.
    if !peer::write_pipe(answer, &line, peer::ANSWER_WAIT) && leave_running {
        log(&format!(
            "uid {} pid {}: its answer pipe took no answer in time; dropped",
            caller.uid, caller.pid
        ));
    }
    Ok(())
}

/// The metadata the caller sent, checked: its own pid, and only the forms of keys the broker
/// hands to criu (`unix[INO]` externals, a `pipe:[INO]` answer pipe).
fn checked_metadata(text: &str, caller: &Caller) -> Result<Metadata, String> {
    let mut meta = Metadata::from_text(text)?;
    if meta.pid != caller.pid {
        return Err(format!(
            "the metadata is of pid {}, not the caller's",
            meta.pid
        ));
    }
    let ino = |s: &str, pre: &str, post: &str| {
        s.strip_prefix(pre)
            .and_then(|r| r.strip_suffix(post))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some(e) = meta.external.iter().find(|e| !ino(e, "unix[", "]")) {
        return Err(format!("external {e:?}: only unix[INO] is taken"));
    }
    match &meta.env_fd {
        Some((_, key)) if ino(key, "pipe:[", "]") => {}
        other => return Err(format!("answer pipe {other:?}: expected pipe:[INO]")),
    }
    meta.image_dir = None;
    Ok(meta)
}

/// Dumps the caller into a new directory of its store, checks and seals the image, and gives
/// it the name (replacing an older image of that name). Returns where it is.
fn dump_and_seal(
    b: &Broker,
    caller: &Caller,
    name: &str,
    meta: &Metadata,
    leave_running: bool,
) -> Result<PathBuf, String> {
    let store = b.user_store(caller.uid)?;
    let tmp = store
        .make_temp(".dump-")
        .map_err(|e| format!("the store: {e}"))?;
    let r = (|| {
        meta.write(&tmp).map_err(|e| e.to_string())?;
        // criu writes as the caller; nobody reaches the directory by path (STORE/UID is 0700).
        sys::fchown(tmp.fd(), caller.uid, caller.gid).map_err(|e| format!("fchown: {e}"))?;
        run_dump(b, caller, &tmp, meta, leave_running)?;
        for (file, c) in creds::read_all(&tmp)? {
            creds::check(&c, caller.uid, caller.gid, &caller.groups, caller.bnd)
                .map_err(|why| format!("the image's {file}: {why}; not kept"))?;
        }
        seal::seal(&tmp, &b.key, caller.uid, name)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_dir_all(tmp.path());
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(store.path().join(name));
    sys::renameat(store.fd(), tmp.name(), name).map_err(|e| format!("rename: {e}"))?;
    Ok(store.path().join(name))
}

/// `criu dump` of the caller's tree into `dir`, as the caller; bounded by the CRIU timeout.
fn run_dump(
    b: &Broker,
    caller: &Caller,
    dir: &Dir,
    meta: &Metadata,
    leave_running: bool,
) -> Result<(), String> {
    let inv = Invocation::dump(caller.pid, dir)
        .log(crac_criu::image::DUMP_LOG)
        .leave_running(leave_running)
        .externals(&meta.external);
    let no_plugins = b.no_plugins.proc_path();
    let mut cmd = as_caller::command(caller, &b.criu, inv, &no_plugins, &Launch::Direct);
    let child = as_caller::spawn(&b.children, &mut cmd, &[dir.fd(), b.no_plugins.fd()])?;
    let Some(st) = b.children.wait(&child, b.timeout) else {
        b.children.kill(&child);
        return Err(format!(
            "criu did not finish within {:.0} s ({}) and was stopped",
            b.timeout.as_secs_f64(),
            crac_criu::settings::CRIU_TIMEOUT
        ));
    };
    if st != 0 || dir.stat("inventory.img").ok().flatten().is_none() {
        return Err(format!(
            "criu dump failed (status {st}): {}",
            crac_criu::criu::log::log_errors_in(dir, crac_criu::image::DUMP_LOG)
        ));
    }
    Ok(())
}
