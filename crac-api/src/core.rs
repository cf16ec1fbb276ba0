//! [`Core`]: the checkpoint protocol around the engine.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::context::Plan;
use crate::discovery::{describe, select_engine};
use crate::hook::panic_text;
use crate::hook_thread::{InCheckpoint, in_checkpoint};
use crate::management::STATE;
use crate::run::run_bounded;
use crate::spi::{Engine, EngineError, EngineErrorKind, EngineOutcome, RestoreData};
use crate::{
    CheckpointError, CheckpointOptions, GlobalContext, Management, Outcome, Phase, Restored,
};

static GLOBAL: Lazy<GlobalContext> = Lazy::new(GlobalContext::new);

/// Serialises checkpoints: a second thread waits for the running one to end. A hook that
/// calls back in is refused first (`hook_thread`), so it cannot deadlock here.
static CHECKPOINT_LOCK: Mutex<()> = Mutex::new(());

/// The hook timeout set by [`Core::set_hook_timeout`], in nanoseconds (0: not set).
static HOOK_TIMEOUT_NS: AtomicU64 = AtomicU64::new(0);

/// The environment variable that sets the default hook timeout, in seconds.
const HOOK_TIMEOUT_ENV: &str = "CRAC_HOOK_TIMEOUT";
const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

fn env_hook_timeout() -> Duration {
    static FROM_ENV: Lazy<Duration> = Lazy::new(|| match std::env::var(HOOK_TIMEOUT_ENV) {
        Err(_) => DEFAULT_HOOK_TIMEOUT,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Duration::from_secs_f64(s),
            _ => {
                tracing::warn!(
                    value = %v,
                    "{HOOK_TIMEOUT_ENV} is not a number of seconds; using the default 60 s"
                );
                DEFAULT_HOOK_TIMEOUT
            }
        },
    });
    *FROM_ENV
}

/// Entry point of the API: the global context, the checkpoint call and management data.
#[derive(Debug)]
pub struct Core;

impl Core {
    /// Sets how long one hook may take (default 60 s, or `CRAC_HOOK_TIMEOUT` seconds) before
    /// its resource counts as failed: the checkpoint is then aborted and every other resource
    /// notified gets `after_restore`; the error names the resource ([`HookTimedOut`]).
    /// A registration can set its own ([`Context::register_with_timeout`]).
    ///
    /// [`HookTimedOut`]: crate::HookTimedOut
    /// [`Context::register_with_timeout`]: crate::Context::register_with_timeout
    pub fn set_hook_timeout(timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1);
        HOOK_TIMEOUT_NS.store(ns, Ordering::Relaxed);
    }

    /// The default hook timeout now in force.
    pub fn hook_timeout() -> Duration {
        match HOOK_TIMEOUT_NS.load(Ordering::Relaxed) {
            0 => env_hook_timeout(),
            ns => Duration::from_nanos(ns),
        }
    }

    /// The process-wide context, with one level per [`Priority`](crate::Priority).
    pub fn global_context() -> &'static GlobalContext {
        &GLOBAL
    }

    /// Checkpoints the process with the engine's configured defaults. See
    /// [`checkpoint_restore_with`](Self::checkpoint_restore_with).
    pub fn checkpoint_restore() -> Result<Outcome, CheckpointError> {
        Self::checkpoint_restore_with(&CheckpointOptions::default())
    }

    /// Runs one checkpoint cycle:
    ///
    /// 1. `before_checkpoint` on every live resource (application level first, in reverse
    ///    registration order within a level); every resource is called even when some fail;
    /// 2. if all succeeded, the engine takes the image;
    /// 3. `after_restore` on every resource that got `before_checkpoint`, in the opposite order,
    ///    whether the image was taken or not.
    ///
    /// Returns in the original process (leave-running, noop, or any failure) and in every
    /// process restored from the image. Calls from several threads run one after the other; a
    /// call from inside a hook fails with [`CheckpointError::Recursive`].
    pub fn checkpoint_restore_with(
        options: &CheckpointOptions,
    ) -> Result<Outcome, CheckpointError> {
        if in_checkpoint() {
            return Err(CheckpointError::Recursive);
        }
        let engine = select_engine().map_err(|e| CheckpointError::Unsupported(describe(e)))?;
        let _lock = CHECKPOINT_LOCK.lock();
        let _flag = InCheckpoint::enter();
        let span = tracing::info_span!("checkpoint", engine = engine.name());
        let _span = span.enter();
        let started = Instant::now();
        let plan = Arc::new(Self::global_context().plan());
        let result = cycle(engine, options, &plan, Self::hook_timeout());
        STATE.lock().last_checkpoint = Some(started.elapsed());
        result
    }

    /// [`checkpoint_restore`](Self::checkpoint_restore) as a future, for async code: the
    /// cycle runs on a thread of its own, so the awaiting task's runtime goes on (and runs the
    /// async hooks' futures, [`Context::register_async`](crate::Context::register_async)). It
    /// completes in the original and in every restored process, as the blocking call returns.
    /// Dropping it does not cancel a cycle that started.
    pub fn checkpoint_restore_async() -> crate::CheckpointFuture {
        crate::CheckpointFuture::new(CheckpointOptions::default())
    }

    /// [`checkpoint_restore_with`](Self::checkpoint_restore_with) as a future.
    pub fn checkpoint_restore_async_with(options: &CheckpointOptions) -> crate::CheckpointFuture {
        crate::CheckpointFuture::new(options.clone())
    }

    /// The checkpoint history of this process.
    pub fn management() -> Management {
        STATE.lock().clone()
    }

    /// The engine a checkpoint would use now, if any.
    pub fn engine_name() -> Option<&'static str> {
        select_engine().ok().map(|e| e.name())
    }
}

/// One checkpoint cycle, under the checkpoint lock: every `before_checkpoint`, the engine if
/// all succeeded, then `after_restore` for every resource whose `before_checkpoint` returned.
fn cycle(
    engine: &dyn Engine,
    options: &CheckpointOptions,
    plan: &Arc<Plan>,
    timeout: Duration,
) -> Result<Outcome, CheckpointError> {
    let all: Vec<usize> = (0..plan.steps.len()).collect();
    let before = {
        let _s = tracing::info_span!("before_checkpoint").entered();
        let t = Instant::now();
        let ran = run_bounded(plan, all, Phase::BeforeCheckpoint, timeout);
        tracing::info!(
            elapsed_ms = ms(t.elapsed()),
            failed = ran.failures.len(),
            "before_checkpoint done"
        );
        ran
    };
    // after_restore: every resource whose before_checkpoint returned, in reverse order.
    let order: Vec<usize> = before.returned.iter().rev().copied().collect();
    let run_after = || {
        let _s = tracing::info_span!("after_restore").entered();
        let t = Instant::now();
        let f = run_bounded(plan, order, Phase::AfterRestore, timeout).failures;
        tracing::info!(
            elapsed_ms = ms(t.elapsed()),
            failed = f.len(),
            "after_restore done"
        );
        f
    };
    if !before.failures.is_empty() {
        let mut failures = before.failures;
        tracing::warn!(
            failed = failures.len(),
            "before_checkpoint failed; no image taken"
        );
        failures.extend(run_after());
        return Err(CheckpointError::Resources {
            outcome: None,
            failures,
        });
    }
    let outcome = match snapshot(engine, options) {
        Ok(outcome) => outcome,
        Err(error) => {
            tracing::warn!(%error, "engine did not take the image");
            let failures = run_after();
            return Err(CheckpointError::Engine { error, failures });
        }
    };
    let failures = run_after();
    if failures.is_empty() {
        Ok(outcome)
    } else {
        Err(CheckpointError::Resources {
            outcome: Some(outcome),
            failures,
        })
    }
}

/// The engine's step: the image's generation is counted only if an image was taken, and
/// published only once the engine is back (in the original, and in a restored copy after its
/// restore data is in), so a thread that polls `generation()` never sees a new generation
/// before the outcome it belongs to.
fn snapshot(engine: &dyn Engine, options: &CheckpointOptions) -> Result<Outcome, EngineError> {
    let snapshot_wall = SystemTime::now();
    let generation = STATE.lock().generation + 1;
    let result = {
        let _s = tracing::info_span!("snapshot", generation).entered();
        let t = Instant::now();
        // An engine that panics must not skip after_restore: it becomes an error.
        let r = catch_unwind(AssertUnwindSafe(|| engine.checkpoint(options))).unwrap_or_else(|p| {
            Err(EngineError::new(
                EngineErrorKind::Other,
                format!("the {} engine panicked: {}", engine.name(), panic_text(&*p)),
            ))
        });
        tracing::info!(
            elapsed_ms = ms(t.elapsed()),
            ok = r.is_ok(),
            "snapshot step done"
        );
        r
    };
    match result {
        Err(error) => Err(error),
        Ok(EngineOutcome::NoImage) => Ok(Outcome::NoImage),
        Ok(EngineOutcome::Continued { image_dir }) => {
            STATE.lock().generation = generation;
            Ok(Outcome::Continued {
                generation,
                image_dir,
            })
        }
        Ok(EngineOutcome::Restored(data)) => Ok(restored(data, generation, snapshot_wall)),
    }
}

/// In a restored copy: new uniqueness, the management facts, the outcome.
fn restored(data: RestoreData, generation: u64, snapshot_wall: SystemTime) -> Outcome {
    // First of all in the copy: its own nonce and a new epoch, so that every
    // after_restore (and every generator guarded by a ReseedGuard) draws afresh.
    crate::uniqueness::on_restore();
    let restore_time = SystemTime::now();
    let frozen = restore_time
        .duration_since(snapshot_wall)
        .unwrap_or(Duration::ZERO);
    let mut m = STATE.lock();
    m.generation = generation;
    m.restores += 1;
    m.restore_time = Some(restore_time);
    m.restored_at = Some(Instant::now());
    m.last_frozen = Some(frozen);
    m.total_frozen += frozen;
    m.new_env = data.new_env.clone();
    drop(m);
    tracing::info!(generation, frozen_ms = ms(frozen), "restored");
    Outcome::Restored(Restored {
        generation,
        restore_time,
        frozen,
        image_dir: data.image_dir,
        new_env: data.new_env,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
