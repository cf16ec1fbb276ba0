//! [`Core`]: the checkpoint protocol around the engine.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::engine::{SelectError, select_engine};
use crate::management::STATE;
use crate::outcome::Restored;
use crate::plan;
use crate::{
    CheckpointError, CheckpointOptions, EngineError, EngineErrorKind, EngineOutcome, GlobalContext,
    Management, Outcome, Phase,
};

static GLOBAL: Lazy<GlobalContext> = Lazy::new(GlobalContext::new);

/// Serialises checkpoints: a second thread waits for the running one to end.
static CHECKPOINT_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// Set while this thread runs a checkpoint, so a hook that calls back in gets an error
    /// instead of deadlocking on [`CHECKPOINT_LOCK`].
    static IN_CHECKPOINT: Cell<bool> = const { Cell::new(false) };
}

/// Marks a `crac-hooks` worker thread: a hook on it that calls back in gets
/// [`CheckpointError::Recursive`] as it would on the checkpointing thread.
pub(crate) fn mark_hook_thread() {
    IN_CHECKPOINT.with(|c| c.set(true));
}

/// The hook timeout set by [`Core::set_hook_timeout`], in nanoseconds (0: not set).
static HOOK_TIMEOUT_NS: AtomicU64 = AtomicU64::new(0);

/// The environment variable that sets the default hook timeout, in seconds.
pub const HOOK_TIMEOUT_ENV: &str = "CRAC_HOOK_TIMEOUT";
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

struct InCheckpoint;

impl InCheckpoint {
    fn enter() -> Self {
        IN_CHECKPOINT.with(|c| c.set(true));
        InCheckpoint
    }
}

impl Drop for InCheckpoint {
    fn drop(&mut self) {
        IN_CHECKPOINT.with(|c| c.set(false));
    }
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
        if IN_CHECKPOINT.with(Cell::get) {
            return Err(CheckpointError::Recursive);
        }
        let engine = select_engine().map_err(|e| CheckpointError::Unsupported(describe(e)))?;
        let _lock = CHECKPOINT_LOCK.lock();
        let _flag = InCheckpoint::enter();
        let span = tracing::info_span!("checkpoint", engine = engine.name());
        let _span = span.enter();
        let started = Instant::now();
        let timeout = Self::hook_timeout();
        let plan = Arc::new(Self::global_context().plan());
        let all: Vec<usize> = (0..plan.steps.len()).collect();

        let (mut failures, notified) = {
            let _s = tracing::info_span!("before_checkpoint").entered();
            let t = Instant::now();
            let ran = plan::run_bounded(&plan, all, Phase::BeforeCheckpoint, timeout);
            tracing::info!(
                elapsed_ms = ms(t.elapsed()),
                failed = ran.failures.len(),
                "before_checkpoint done"
            );
            (ran.failures, ran.returned)
        };
        // after_restore: every resource whose before_checkpoint returned, in reverse order.
        let run_after = || {
            let _s = tracing::info_span!("after_restore").entered();
            let t = Instant::now();
            let order: Vec<usize> = notified.iter().rev().copied().collect();
            let f = plan::run_bounded(&plan, order, Phase::AfterRestore, timeout).failures;
            tracing::info!(
                elapsed_ms = ms(t.elapsed()),
                failed = f.len(),
                "after_restore done"
            );
            f
        };
        if !failures.is_empty() {
            tracing::warn!(
                failed = failures.len(),
                "before_checkpoint failed; no image taken"
            );
            failures.extend(run_after());
            finish(started);
            return Err(CheckpointError::Resources {
                outcome: None,
                failures,
            });
        }

        let snapshot_wall = SystemTime::now();
        let generation = {
            let mut m = STATE.lock();
            m.generation += 1;
            m.generation
        };
        let result = {
            let _s = tracing::info_span!("snapshot", generation).entered();
            let t = Instant::now();
            // An engine that panics must not skip after_restore: it becomes an error.
            let r =
                catch_unwind(AssertUnwindSafe(|| engine.checkpoint(options))).unwrap_or_else(|p| {
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
        let outcome = match result {
            Err(error) => {
                STATE.lock().generation -= 1;
                tracing::warn!(%error, "engine did not take the image");
                let failures = run_after();
                finish(started);
                return Err(CheckpointError::Engine { error, failures });
            }
            Ok(EngineOutcome::NoImage) => {
                STATE.lock().generation -= 1;
                Outcome::NoImage
            }
            Ok(EngineOutcome::Continued { image_dir }) => Outcome::Continued {
                generation,
                image_dir,
            },
            Ok(EngineOutcome::Restored(data)) => {
                // First of all in the copy: its own nonce and a new epoch, so that every
                // after_restore (and every generator guarded by a ReseedGuard) draws afresh.
                crate::uniqueness::on_restore();
                let restore_time = SystemTime::now();
                let frozen = restore_time
                    .duration_since(snapshot_wall)
                    .unwrap_or(Duration::ZERO);
                let mut m = STATE.lock();
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
        };

        let failures = run_after();
        finish(started);
        if failures.is_empty() {
            Ok(outcome)
        } else {
            Err(CheckpointError::Resources {
                outcome: Some(outcome),
                failures,
            })
        }
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

/// The message of a panic payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

fn finish(started: Instant) {
    STATE.lock().last_checkpoint = Some(started.elapsed());
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn describe(e: SelectError) -> String {
    match e {
        SelectError::NoneLinked => "no checkpoint engine is linked into this program; add `crac-criu` (or \
             `crac-noop`) to the application's dependencies and write `use crac_criu as _;` in its main.rs"
            .to_owned(),
        SelectError::NotLinked { requested, linked } => format!(
            "CRAC_ENGINE={requested} names an engine that is not linked into this program (linked: {}); \
             link it or unset CRAC_ENGINE",
            if linked.is_empty() { "none".to_owned() } else { linked.join(", ") }
        ),
        SelectError::Unusable { name, error } => {
            format!("CRAC_ENGINE={name} cannot work here: {error}")
        }
        SelectError::NoneUsable(list) => {
            let parts: Vec<String> = list.iter().map(|(n, e)| format!("{n}: {e}")).collect();
            format!("no linked engine can work here ({})", parts.join("; "))
        }
    }
}
