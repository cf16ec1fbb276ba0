//! What must hold before CRIU may dump this process, directly or through the broker: a
//! usable criu, this process's own pages all in (after a lazy restore), the image directory,
//! no descriptor CRIU cannot take, a dumpable session; and the image's metadata.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::SystemTime;

use super::config::Config;
use super::fdcheck;
use crate::criu;
use crate::error::{Error, ErrorKind};
use crate::image::metadata::{self, Metadata, StdFd};
use crate::safe_dir::Dir;
use crate::{settings, sys};

/// What must hold before CRIU runs: a usable criu, this process's own pages all in (after a
/// lazy restore), the image directory, no descriptor CRIU cannot take, a dumpable session.
pub(crate) fn preflight(cfg: &Config) -> Result<(criu::Criu, Dir, fdcheck::Scan), Error> {
    let criu = {
        let _s = tracing::info_span!("find_criu").entered();
        criu::check_privileges()?;
        settings::criu_log_level()?;
        let criu = criu::find()?;
        // So that CRIU loads its kernel probe instead of probing (see kdat.rs).
        crate::criu::kdat::facts(&criu, criu::criu_timeout()?);
        criu
    };
    {
        // A copy restored lazily may still be receiving its pages: they must all be in first.
        let _s = tracing::info_span!("lazy_pages_in").entered();
        super::memory::wait_own_memory_in(criu::criu_timeout()?)?;
    }
    let dir = {
        let _s = tracing::info_span!("prepare_image_dir").entered();
        metadata::prepare_dir(&cfg.image_dir)?
    };
    let scan = checked_fds()?;
    Ok((criu, dir, scan))
}

/// CRIU's `--external` names of the unix sockets the fd check found connected outside.
pub(crate) fn externals(scan: &fdcheck::Scan) -> Vec<String> {
    scan.external_unix
        .iter()
        .map(|ino| format!("unix[{ino}]"))
        .collect()
}

/// The checks of this process's descriptors and session that any dump needs (also one
/// through the broker): no descriptor CRIU cannot take, a dumpable session.
pub(crate) fn checked_fds() -> Result<fdcheck::Scan, Error> {
    let scan = {
        let _s = tracing::info_span!("fd_check").entered();
        let scan = fdcheck::scan();
        if !scan.refused.is_empty() {
            let list: Vec<String> = scan.refused.iter().map(|r| r.to_string()).collect();
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "checkpoint refused: {} file descriptor(s) cannot be checkpointed:\n  {}",
                    list.len(),
                    list.join("\n  ")
                ),
            ));
        }
        scan
    };
    {
        let _s = tracing::info_span!("session_check").entered();
        ensure_dumpable_session()?;
    }
    Ok(scan)
}

/// Writes the image's metadata (`crac-image.txt`): what a restore checks and needs.
pub(crate) fn write_metadata(
    dir: &Dir,
    leave_running: bool,
    external: &[String],
    env_r: &OwnedFd,
) -> Result<(), Error> {
    image_metadata(leave_running, external, env_r, Some(dir)).write(dir)
}

/// This process's image metadata: what a restore checks and needs. `dir`: the image
/// directory this process holds open during the dump, if it does.
pub(crate) fn image_metadata(
    leave_running: bool,
    external: &[String],
    env_r: &OwnedFd,
    dir: Option<&Dir>,
) -> Metadata {
    let stdio: Vec<StdFd> = (0..=2)
        .map(|fd| {
            let (target, flags) = fdcheck::describe_fd(fd);
            StdFd { fd, target, flags }
        })
        .collect();
    Metadata {
        build_id: crate::image::build_id::own_build_id().to_owned(),
        exe: fs::read_link("/proc/self/exe").unwrap_or_default(),
        pid: std::process::id() as i32,
        tids: fdcheck::numbered_entries("/proc/self/task"),
        generation: crac_api::Core::management().generation(),
        checkpoint_time: Some(SystemTime::now()),
        leave_running,
        stdio,
        env_fd: Some((env_r.as_raw_fd(), pipe_key(env_r))),
        external: external.to_vec(),
        image_dir: dir
            .map(|d| pipe_key(d.fd()).trim_start_matches('/').to_owned())
            .filter(|k| !k.is_empty()),
        cpu_features: crate::image::cpu::host_features()
            .into_iter()
            .map(str::to_owned)
            .collect(),
    }
}

fn pipe_key(fd: &impl AsRawFd) -> String {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// CRIU refuses a process whose session leader lives outside its PID namespace ("A session
/// leader of … is outside of its pid namespace"): that happens when a supervisor starts a PID
/// namespace without giving it a session of its own (`unshare --pid --fork` without `setsid`).
/// Leading a session of our own is then the only way a dump can work, so do it, once; the
/// restored copies are session leaders too. A process group leader cannot do it: say how to
/// start the program instead.
fn ensure_dumpable_session() -> Result<(), Error> {
    if std::process::id() == 1 {
        // CRIU's detached helper is handed to PID 1 as an orphan: to this very process.
        return Err(Error::new(
            ErrorKind::Refused,
            "checkpoint refused: this process is PID 1 of its PID namespace, so the CRIU helper \
             it starts becomes its child and would be inside the image (\"The criu itself is \
             within dumped tree\"); run it under an init process (`docker run --init`, tini) \
             or a shell",
        ));
    }
    match sys::own_session() {
        Ok(sid) if sid > 0 => return Ok(()),
        Ok(_) => {}
        // Unknown: let CRIU judge.
        Err(_) => return Ok(()),
    }
    // Children started before now keep the old session (setsid moves only this process), and
    // CRIU would refuse them with the same words: say what to do instead.
    let kids = sys::own_children();
    if !kids.is_empty() {
        let named: Vec<String> = kids.iter().take(5).map(|&k| describe_pid(k)).collect();
        return Err(Error::new(
            ErrorKind::Refused,
            format!(
                "checkpoint refused: this process's session leader is outside its PID namespace, \
                 which CRIU cannot dump; this process could lead a session of its own, but its \
                 children ({}) started in the old one and would still be refused; start the \
                 program with `setsid` (or from a process inside its PID namespace)",
                named.join(", ")
            ),
        ));
    }
    match sys::new_session() {
        Ok(()) => {
            tracing::info!(
                "this process's session leader was outside its PID namespace, which CRIU cannot \
                 dump; it now leads a session of its own"
            );
            Ok(())
        }
        Err(e) => Err(Error::new(
            ErrorKind::Refused,
            format!(
                "checkpoint refused: this process's session leader is outside its PID namespace, \
                 which CRIU cannot dump, and it cannot start a session of its own ({e}: it leads \
                 its process group); start the program with `setsid`, or from a process inside \
                 its PID namespace"
            ),
        )),
    }
}

/// `PID (name)` for a message (pid and name as this process's `/proc` shows them).
fn describe_pid(pid: i32) -> String {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm: String = comm
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(16)
        .collect();
    format!("{pid} ({comm})")
}
