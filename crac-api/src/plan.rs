//! One checkpoint cycle's hooks, flattened in call order, and their execution with a time
//! bound per hook.
//!
//! The cycle walks the contexts once and lists every live resource as a [`Step`], nested
//! contexts inlined at their place (their resources named by path). `before_checkpoint` runs
//! the steps in that order; `after_restore` runs the notified ones in the reverse order, which
//! is registration order within every context and levels from file descriptors to application.
//!
//! A hook that does not return within its timeout must not hold the checkpoint: the steps run
//! on a worker thread (`crac-hooks`) while the calling thread watches the running step's
//! deadline. When one overruns, it counts as failed ([`HookTimedOut`]), the worker is left to
//! it, and a fresh worker goes on with the next step. Rust cannot stop a thread, so the hook
//! keeps running: its resource does not get `after_restore` for this cycle (its
//! `before_checkpoint` never returned), and the next checkpoint calls it again. Watching costs
//! one uncontended lock per hook, not a thread switch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::context::{Live, call};
use crate::error::{HookTimedOut, Phase, ResourceFailure};
use crate::{Context, ResourceError};

/// The context a step's hook is given.
#[derive(Clone)]
pub(crate) enum Owner {
    /// The context the plan was built for (only in plans run inline).
    Root,
    /// A context that lives for the whole program (the global levels).
    Static(&'static Context),
    /// A nested context, kept alive for as long as its hooks may run.
    Shared(Arc<Context>),
}

/// One resource's hook call in a cycle.
pub(crate) struct Step {
    pub(crate) live: Live,
    pub(crate) owner: Owner,
    /// The registration's timeout; `None`: the global default.
    pub(crate) timeout: Option<Duration>,
    /// The names of the nested contexts it sits in, each followed by `/`.
    pub(crate) prefix: String,
}

/// Every step of a cycle, in `before_checkpoint` order.
#[derive(Default)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
}

/// What running some steps of a plan did.
#[derive(Default)]
pub(crate) struct Ran {
    /// Indexes of the steps whose hook returned (with or without an error), in call order.
    pub(crate) returned: Vec<usize>,
    /// Failures, timeouts included, in call order.
    pub(crate) failures: Vec<ResourceFailure>,
}

impl Ran {
    fn record(&mut self, plan: &Plan, i: usize, phase: Phase, r: Result<(), ResourceError>) {
        self.returned.push(i);
        if let Err(e) = r {
            crate::context::collect(&mut self.failures, &plan.steps[i], phase, e);
        }
    }

    fn timed_out(&mut self, plan: &Plan, i: usize, phase: Phase, after: Duration) {
        let step = &plan.steps[i];
        let name = format!("{}{}", step.prefix, step.live.get().name());
        tracing::error!(
            resource = %name,
            %phase,
            timeout_s = after.as_secs_f64(),
            "checkpoint hook did not return in time; it is left running and counts as failed"
        );
        self.failures.push(ResourceFailure {
            resource: name,
            phase,
            error: Box::new(HookTimedOut { phase, after }),
        });
    }
}

fn call_step(
    live: &Live,
    owner: &Owner,
    root: Option<&Context>,
    phase: Phase,
) -> Result<(), ResourceError> {
    let ctx = match (owner, root) {
        (Owner::Static(c), _) => *c,
        (Owner::Shared(c), _) => c.as_ref(),
        (Owner::Root, Some(r)) => r,
        (Owner::Root, None) => return Err("internal: a plan step without its context".into()),
    };
    call(live.get(), ctx, phase)
}

/// Runs the steps `order` of `plan` on the calling thread, without time bounds (a context
/// driven as a plain resource: its own caller bounds it).
pub(crate) fn run_inline(
    plan: &Plan,
    order: &[usize],
    root: Option<&Context>,
    phase: Phase,
) -> Ran {
    let mut ran = Ran::default();
    for &i in order {
        let step = &plan.steps[i];
        let r = call_step(&step.live, &step.owner, root, phase);
        ran.record(plan, i, phase, r);
    }
    ran
}

/// How often the watcher looks at the running step.
const WATCH: Duration = Duration::from_millis(50);

struct State {
    /// The plan, while the cycle runs. Workers clone only the step they call, so once the
    /// watcher takes it back, a hung worker keeps nothing alive but its own resource.
    plan: Option<Arc<Plan>>,
    /// Position in `order` of the running (or next) step.
    pos: usize,
    /// When the running step started; `None` between steps.
    started: Option<Instant>,
    /// The worker allowed to go on; an abandoned one finds another number here and stops.
    worker: u64,
    done: bool,
    ran: Ran,
}

struct Shared {
    order: Vec<usize>,
    phase: Phase,
    state: Mutex<State>,
    cv: Condvar,
}

/// Runs the steps `order` of `plan` on a worker thread, each bounded by its timeout (the
/// step's own, else `default`), and returns once every step returned or timed out.
pub(crate) fn run_bounded(
    plan: &Arc<Plan>,
    order: Vec<usize>,
    phase: Phase,
    default: Duration,
) -> Ran {
    let shared = Arc::new(Shared {
        order,
        phase,
        state: Mutex::new(State {
            plan: Some(plan.clone()),
            pos: 0,
            started: None,
            worker: 0,
            done: false,
            ran: Ran::default(),
        }),
        cv: Condvar::new(),
    });
    let span = tracing::Span::current();
    let mut s = shared.state.lock();
    if !start_worker(&shared, 0, &span) {
        drop(s);
        // No thread to be had: run here, unbounded, rather than not at all.
        return run_inline(plan, &shared.order, None, phase);
    }
    loop {
        if s.done {
            s.plan = None;
            return std::mem::take(&mut s.ran);
        }
        // The worker does not signal each step (that would cost a wake-up per hook): look
        // at least every WATCH, and exactly at the running step's deadline.
        let now = Instant::now();
        let Some(started) = s.started else {
            shared.cv.wait_until(&mut s, now + WATCH);
            continue;
        };
        let i = shared.order[s.pos];
        let limit = plan.steps[i].timeout.unwrap_or(default);
        let deadline = started.checked_add(limit);
        if deadline.is_none_or(|d| now < d) {
            let wake = deadline.map_or(now + WATCH, |d| d.min(now + WATCH));
            shared.cv.wait_until(&mut s, wake);
            continue;
        }
        // Overran: count it failed, leave its worker to it, go on with a fresh one.
        s.ran.timed_out(plan, i, phase, limit);
        s.pos += 1;
        s.started = None;
        s.worker += 1;
        if s.pos == shared.order.len() {
            s.done = true;
        } else if !start_worker(&shared, s.worker, &span) {
            let rest: Vec<usize> = shared.order[s.pos..].to_vec();
            let more = run_inline(plan, &rest, None, phase);
            s.ran.returned.extend(more.returned);
            s.ran.failures.extend(more.failures);
            s.done = true;
        }
    }
}

fn start_worker(shared: &Arc<Shared>, id: u64, span: &tracing::Span) -> bool {
    let (shared, span) = (shared.clone(), span.clone());
    std::thread::Builder::new()
        .name("crac-hooks".into())
        .spawn(move || {
            let _e = span.enter();
            crate::core::mark_hook_thread();
            work(&shared, id);
        })
        .is_ok()
}

fn work(shared: &Shared, id: u64) {
    // One lock per hook: the result of the last step is recorded as the next one starts.
    let mut last: Option<(usize, Result<(), ResourceError>)> = None;
    loop {
        let (i, live, owner) = {
            let mut guard = shared.state.lock();
            let s = &mut *guard;
            // Another number: this worker timed out and the watcher went on without it.
            let Some(plan) = s.plan.as_ref().filter(|_| s.worker == id) else {
                return;
            };
            if let Some((j, r)) = last.take() {
                s.ran.record(plan, j, shared.phase, r);
                s.started = None;
                s.pos += 1;
            }
            if s.pos >= shared.order.len() {
                s.done = true;
                shared.cv.notify_all();
                return;
            }
            s.started = Some(Instant::now());
            let i = shared.order[s.pos];
            (i, plan.steps[i].live.clone(), plan.steps[i].owner.clone())
        };
        let r = call_step(&live, &owner, None, shared.phase);
        last = Some((i, r));
    }
}
