//! A checkpoint cycle's hooks run with a time bound per hook.
//!
//! A hook that does not return within its timeout must not hold the checkpoint: the steps run
//! on a worker thread (`crac-hooks`) while the calling thread watches the running step's
//! deadline. When one overruns, it counts as failed ([`HookTimedOut`](crate::HookTimedOut)), the worker is left to
//! it, and a fresh worker goes on with the next step. Rust cannot stop a thread, so the hook
//! keeps running: its resource does not get `after_restore` for this cycle (its
//! `before_checkpoint` never returned), and the next checkpoint calls it again. Watching costs
//! one uncontended lock per hook, not a thread switch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::ResourceError;
use crate::context::Plan;
use crate::error::Phase;
use crate::hook::{Ran, call_step, run_inline};
use crate::hook_thread::mark_hook_thread;

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
            mark_hook_thread();
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
