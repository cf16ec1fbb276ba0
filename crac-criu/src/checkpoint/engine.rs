//! The CRIU engine: self-checkpoint through `criu swrk` run by a helper that is not a
//! descendant of the process.

use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant, SystemTime};

use crac_api::spi::{Engine, EngineOutcome, RestoreData};
use crac_api::{CheckpointMode, CheckpointOptions};

use super::config::Config;
use super::preflight::{externals, preflight, write_metadata};
use super::{helper, memory};
use crate::criu::invocation::Invocation;
use crate::criu::stats::DumpStats;
use crate::criu::{self, rpc};
use crate::error::{Error, ErrorKind};
use crate::safe_dir::Dir;
use crate::settings;
use crate::sys;

/// The CRIU engine. Linked with `use crac_criu as _;`, it ranks above the noop engine.
#[derive(Debug)]
pub struct CriuEngine;

impl Engine for CriuEngine {
    fn name(&self) -> &'static str {
        "criu"
    }

    fn probe(&self) -> Result<(), Error> {
        // Through the broker, criu is its business.
        if super::via_broker::wanted()? {
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

/// Takes the image of this process as configured: the checks before CRIU may run, the image's
/// metadata, the dump, and what the answer means (restored, or the original going on).
pub fn checkpoint(cfg: &Config) -> Result<EngineOutcome, Error> {
    memory::release_free_heap();
    // A breakdown is of this checkpoint or none.
    take_breakdown();
    if super::via_broker::wanted()? {
        let _s = tracing::info_span!("checkpoint_through_broker").entered();
        return super::via_broker::checkpoint(cfg);
    }
    let started = Instant::now();
    let (criu, dir, scan) = preflight(cfg)?;
    let preflight_ms = ms(started.elapsed());
    // The pipe a restorer feeds new configuration through: only the read end goes into the
    // image. Restored by plain `criu restore` it has no writer and reads as empty.
    let (env_r, env_w) = sys::pipe().map_err(|e| io_err("pipe", e))?;
    drop(env_w);
    let leave_running = cfg.mode == CheckpointMode::LeaveRunning;
    let external = externals(&scan);
    write_metadata(&dir, leave_running, &external, &env_r)?;
    let timeout = criu::criu_timeout()?;
    let invocation = Invocation::dump_self(&dir)
        .log(crate::image::DUMP_LOG)
        .leave_running(leave_running)
        .externals(&external)
        .with_timeout(timeout);
    let shown = dir.path().to_owned();
    let dump_log = shown.join(crate::image::DUMP_LOG);
    let t = Instant::now();
    let (resp, status) = dump(&criu, &dir, &invocation, &dump_log)?;
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
    let breakdown = format!(
        "checkpoint {:.0} ms: checks {preflight_ms:.0} ms, criu {dump_ms:.0} ms ({}), {sealed}",
        ms(started.elapsed()),
        DumpStats::read(&dir).map_or_else(|| "no stats-dump".to_owned(), |s| s.summary())
    );
    tracing::info!(dir = %shown.display(), "image written; process continues: {breakdown}");
    *LAST_BREAKDOWN.lock().unwrap_or_else(|p| p.into_inner()) = Some(breakdown);
    Ok(EngineOutcome::Continued { image_dir: shown })
}

/// Where the time of this process's last leave-running checkpoint went (for the answer to
/// `crac checkpoint PID`).
static LAST_BREAKDOWN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Takes the breakdown of the last leave-running checkpoint, if there is one.
pub(crate) fn take_breakdown() -> Option<String> {
    LAST_BREAKDOWN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
}

/// Starts the dump helper, sends CRIU the dump request and waits for its answer (bounded):
/// the response, and the helper's status descriptor. In a restored copy this returns with the
/// answer the restoring CRIU left.
fn dump(
    criu: &criu::Criu,
    dir: &Dir,
    invocation: &Invocation,
    dump_log: &std::path::Path,
) -> Result<(rpc::Response, OwnedFd), Error> {
    let timeout = invocation.timeout();
    let (mine, theirs) = sys::seqpacket_pair().map_err(|e| io_err("socketpair", e))?;
    let status = {
        let _s = tracing::info_span!("spawn_criu").entered();
        helper::start(&criu.path, &theirs, dir, timeout)?
    };
    drop(theirs);
    let req = invocation.rpc_request();
    let _s = tracing::info_span!("criu_dump", dir = %dir.path().display()).entered();
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
                settings::CRIU_TIMEOUT
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
