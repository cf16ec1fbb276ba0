//! The CRIU engine: self-checkpoint through `criu swrk` run by a helper that is not a
//! descendant of the process.

use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crac_api::spi::{Engine, EngineOutcome, RestoreData};
use crac_api::{CheckpointMode, CheckpointOptions};

use super::{fdcheck, helper, memory};
use crate::criu::{self, rpc};
use crate::error::{Error, ErrorKind};
use crate::image::dir::Dir;
use crate::image::metadata::{self, Metadata, StdFd};
use crate::sys;

/// Where images go when the options name no directory.
pub const CHECKPOINT_TO_ENV: &str = "CRAC_CHECKPOINT_TO";
/// `stop` (default) or `leave-running`.
pub const CHECKPOINT_MODE_ENV: &str = "CRAC_CHECKPOINT_MODE";
/// CRIU's log level for the dump log (0–4, default 4).
pub const LOG_LEVEL_ENV: &str = "CRAC_CRIU_LOG_LEVEL";

/// The CRIU engine. Linked with `use crac_criu as _;`, it ranks above the noop engine.
#[derive(Debug)]
pub struct CriuEngine;

/// The image directory and mode for one checkpoint, from the options or the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the image goes.
    pub image_dir: PathBuf,
    /// Stop or leave running.
    pub mode: CheckpointMode,
}

impl Config {
    /// Fills what `options` leaves open from `CRAC_CHECKPOINT_TO` / `CRAC_CHECKPOINT_MODE`.
    pub fn resolve(options: &CheckpointOptions) -> Result<Self, Error> {
        let image_dir = match &options.image_dir {
            Some(d) => d.clone(),
            None => match std::env::var_os(CHECKPOINT_TO_ENV).filter(|v| !v.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => {
                    return Err(Error::new(
                        ErrorKind::Config,
                        format!(
                            "no image directory: set {CHECKPOINT_TO_ENV}=/path/to/dir or pass \
                             CheckpointOptions::image_dir"
                        ),
                    ));
                }
            },
        };
        let mode = match options.mode {
            Some(m) => m,
            None => parse_mode(std::env::var(CHECKPOINT_MODE_ENV).ok().as_deref())?,
        };
        Ok(Self { image_dir, mode })
    }
}

/// Parses a `CRAC_CHECKPOINT_MODE` value.
pub fn parse_mode(v: Option<&str>) -> Result<CheckpointMode, Error> {
    match v.map(str::trim) {
        None | Some("") | Some("stop") | Some("stop-after-dump") => {
            Ok(CheckpointMode::StopAfterDump)
        }
        Some("leave-running") | Some("leave_running") => Ok(CheckpointMode::LeaveRunning),
        Some(other) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "{CHECKPOINT_MODE_ENV}={other} is not a mode: use `stop` (the default) or \
                 `leave-running`"
            ),
        )),
    }
}

impl Engine for CriuEngine {
    fn name(&self) -> &'static str {
        "criu"
    }

    fn probe(&self) -> Result<(), Error> {
        // Through the broker, criu is its business.
        if crate::broker::client::wanted() {
            return Ok(());
        }
        // Privileges first: without them criu may not even be readable (a root-only path).
        criu::check_privileges()?;
        criu::find().map(drop)
    }

    fn checkpoint(&self, options: &CheckpointOptions) -> Result<EngineOutcome, Error> {
        let cfg = Config::resolve(options)?;
        checkpoint(&cfg)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pipe_key(fd: &impl AsRawFd) -> String {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Takes the image of this process as configured: the checks before CRIU may run, the image's
/// metadata, the dump, and what the answer means (restored, or the original going on).
pub fn checkpoint(cfg: &Config) -> Result<EngineOutcome, Error> {
    memory::release_free_heap();
    if crate::broker::client::wanted() {
        let _s = tracing::info_span!("checkpoint_through_broker").entered();
        return crate::broker::client::checkpoint(cfg);
    }
    let started = Instant::now();
    let (criu, dir, scan) = preflight(cfg)?;
    // The pipe a restorer feeds new configuration through: only the read end goes into the
    // image. Restored by plain `criu restore` it has no writer and reads as empty.
    let (env_r, env_w) = sys::pipe().map_err(|e| io_err("pipe", e))?;
    drop(env_w);
    let leave_running = cfg.mode == CheckpointMode::LeaveRunning;
    let external = externals(&scan);
    write_metadata(&dir, leave_running, &external, &env_r)?;
    let log_level = std::env::var(LOG_LEVEL_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let opts = rpc::DumpOpts {
        images_dir_fd: dir.fd().as_raw_fd(),
        leave_running,
        shell_job: true,
        file_locks: false,
        log_level,
        log_file: crate::image::DUMP_LOG.to_owned(),
        external,
        unprivileged: criu::unprivileged(),
        ..rpc::DumpOpts::default()
    };
    let timeout = criu::criu_timeout()?;
    let shown = dir.path().to_owned();
    let dump_log = shown.join(crate::image::DUMP_LOG);
    let t = Instant::now();
    let (resp, status) = dump(&criu, &dir, &opts, timeout, &dump_log)?;
    if !resp.success {
        return Err(Error::new(
            ErrorKind::Snapshot,
            format!(
                "criu could not dump this process (errno {}); from {}:\n  {}",
                resp.cr_errno.unwrap_or(0),
                dump_log.display(),
                crate::criu::log::log_errors(&dump_log)
            ),
        ));
    }
    if resp.restored {
        let (new_env, restore_started) = read_restore_payload(env_r);
        tracing::info!(
            dir = %shown.display(),
            vars = new_env.len(),
            "restored from image"
        );
        return Ok(EngineOutcome::Restored(RestoreData {
            image_dir: Some(shown),
            new_env,
            restore_started,
        }));
    }
    let dump_ms = ms(t.elapsed());
    // CRIU ends once the socket closes; then the helper seals the image.
    let sealed = helper::read_status(&status, timeout);
    if !sealed.starts_with("sealed") {
        return Err(Error::new(
            ErrorKind::Snapshot,
            format!(
                "the image in {} was written but not sealed with its manifest ({sealed}), so \
                 it cannot be restored; the process goes on",
                shown.display()
            ),
        ));
    }
    tracing::info!(
        dump_ms,
        total_ms = ms(started.elapsed()),
        dir = %shown.display(),
        sealed = %sealed,
        "image written; process continues"
    );
    Ok(EngineOutcome::Continued { image_dir: shown })
}

/// What must hold before CRIU runs: a usable criu, this process's own pages all in (after a
/// lazy restore), the image directory, no descriptor CRIU cannot take, a dumpable session.
fn preflight(cfg: &Config) -> Result<(criu::Criu, Dir, fdcheck::Scan), Error> {
    let criu = {
        let _s = tracing::info_span!("find_criu").entered();
        criu::check_privileges()?;
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
fn write_metadata(
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

/// Starts the dump helper, sends CRIU the dump request and waits for its answer (bounded):
/// the response, and the helper's status descriptor. In a restored copy this returns with the
/// answer the restoring CRIU left.
fn dump(
    criu: &criu::Criu,
    dir: &Dir,
    opts: &rpc::DumpOpts,
    timeout: Duration,
    dump_log: &std::path::Path,
) -> Result<(rpc::Response, OwnedFd), Error> {
    let (mine, theirs) = sys::seqpacket_pair().map_err(|e| io_err("socketpair", e))?;
    let status = {
        let _s = tracing::info_span!("spawn_criu").entered();
        helper::start(&criu.path, &theirs, dir, timeout)?
    };
    drop(theirs);
    let req = rpc::encode_request(rpc::ReqType::Dump, Some(opts));
    let _s = tracing::info_span!("criu_dump", dir = %dir.path().display(), leave_running = opts.leave_running).entered();
    sys::send(&mine, &req).map_err(|e| io_err("send the dump request to criu", e))?;
    // Blocks while CRIU freezes and dumps this process. With stop-after-dump a successful
    // dump never returns here in the original: CRIU kills it. A restored copy wakes here
    // with the reply the restoring CRIU left on this socket. The helper stops a CRIU that
    // overruns its time; the margin covers a helper that died.
    let bound = (timeout + Duration::from_secs(30))
        .as_millis()
        .min(i32::MAX as u128);
    if !sys::poll_readable(&mine, bound as i32).map_err(|e| io_err("wait for criu", e))? {
        return Err(Error::new(
            ErrorKind::Snapshot,
            format!(
                "criu did not answer the dump request within {:.0} s and its helper did \
                 not stop it; {}",
                timeout.as_secs_f64(),
                crate::criu::log::log_errors(dump_log)
            ),
        ));
    }
    let mut buf = vec![0u8; 64 * 1024];
    // A CRIU that was stopped closes its end: 0 bytes, or ECONNRESET for a packet socket.
    let n = match sys::recv(&mine, &mut buf) {
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => 0,
        r => r.map_err(|e| io_err("read criu's reply", e))?,
    };
    if n == 0 {
        let why = helper::read_status(&status, Duration::from_secs(10));
        let what = match why.strip_prefix("timeout ") {
            Some(s) => format!(
                "criu did not finish the dump within {s} s ({}) and was stopped; the \
                 process goes on",
                criu::TIMEOUT_ENV
            ),
            None => format!("criu exited without answering the dump request ({why})"),
        };
        return Err(Error::new(
            ErrorKind::Snapshot,
            format!("{what}; {}", crate::criu::log::log_errors(dump_log)),
        ));
    }
    let resp = rpc::decode_response(&buf[..n])
        .map_err(|e| Error::new(ErrorKind::Snapshot, e.to_string()))?;
    Ok((resp, status))
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

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Other, format!("{what}: {e}")).with_source(e)
}

/// Reads what the restorer sent (`crac restore --env K=V`): NUL-separated records, the first
/// the magic, then `started_ns=…` and `KEY=VALUE` entries.
fn read_restore_payload(r: OwnedFd) -> (Vec<(String, String)>, Option<SystemTime>) {
    let mut f = fs::File::from(r);
    let mut data = Vec::new();
    if f.read_to_end(&mut data).is_err() {
        return (Vec::new(), None);
    }
    crate::image::payload::parse_restore_payload(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(parse_mode(None).unwrap(), CheckpointMode::StopAfterDump);
        assert_eq!(
            parse_mode(Some("leave-running")).unwrap(),
            CheckpointMode::LeaveRunning
        );
        assert_eq!(
            parse_mode(Some("bogus")).unwrap_err().kind(),
            ErrorKind::Config
        );
    }
}
