//! Calling hooks: one hook with its span and its panic caught, a plan's steps in a row on the
//! calling thread, and a [`Context`] driven as a plain resource (that is how contexts nest:
//! their caller bounds them). The bounded run of a whole cycle is `run`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crate::context::{Live, Owner, Plan, Step};
use crate::error::{ContextFailures, HookTimedOut, Phase, ResourceFailure};
use crate::{Context, Resource, ResourceError};

/// The message of a panic payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Calls one hook inside its own span; a panic is turned into an error so that one broken
/// resource cannot leave the others unnotified.
fn call(resource: &dyn Resource, context: &Context, phase: Phase) -> Result<(), ResourceError> {
    let span = tracing::debug_span!("resource", name = tracing::field::Empty, %phase);
    let timed = !span.is_disabled();
    let start = timed.then(Instant::now);
    if timed {
        span.record("name", resource.name().as_str());
    }
    let _enter = span.enter();
    let result = catch_unwind(AssertUnwindSafe(|| match phase {
        Phase::BeforeCheckpoint => resource.before_checkpoint(context),
        Phase::AfterRestore => resource.after_restore(context),
    }))
    .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&*panic)).into()));
    if let Some(start) = start {
        tracing::debug!(
            elapsed_us = start.elapsed().as_micros() as u64,
            ok = result.is_ok(),
            "hook done"
        );
    }
    result
}

/// Adds a failure, flattening a nested context's failures under its name.
fn collect(out: &mut Vec<ResourceFailure>, step: &Step, phase: Phase, error: ResourceError) {
    let name = format!("{}{}", step.prefix, step.live.get().name());
    match error.downcast::<ContextFailures>() {
        Ok(nested) => out.extend(nested.failures.into_iter().map(|mut f| {
            f.resource = format!("{name}/{}", f.resource);
            f
        })),
        Err(error) => {
            tracing::warn!(resource = %name, %phase, %error, "checkpoint hook failed");
            out.push(ResourceFailure {
                resource: name,
                phase,
                error,
            });
        }
    }
}

fn into_result(failures: Vec<ResourceFailure>) -> Result<(), ResourceError> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Box::new(ContextFailures { failures }))
    }
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
    pub(crate) fn record(
        &mut self,
        plan: &Plan,
        i: usize,
        phase: Phase,
        r: Result<(), ResourceError>,
    ) {
        self.returned.push(i);
        if let Err(e) = r {
            collect(&mut self.failures, &plan.steps[i], phase, e);
        }
    }

    pub(crate) fn timed_out(&mut self, plan: &Plan, i: usize, phase: Phase, after: Duration) {
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

/// Calls one step's hook with the context it was registered in (`root` for the context a plan
/// run inline was built for).
pub(crate) fn call_step(
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

/// A context driven as a plain resource (registered with `register_dyn`, or called by hand):
/// its resources run inline, bounded together by its caller, and their failures come back as
/// one [`ContextFailures`].
impl Resource for Context {
    fn before_checkpoint(&self, _parent: &Context) -> Result<(), ResourceError> {
        let mut plan = Plan::default();
        self.plan_into(&Owner::Root, "", &mut plan);
        let order: Vec<usize> = (0..plan.steps.len()).collect();
        let ran = run_inline(&plan, &order, Some(self), Phase::BeforeCheckpoint);
        *self.driven() = Some((plan, ran.returned));
        into_result(ran.failures)
    }

    fn after_restore(&self, _parent: &Context) -> Result<(), ResourceError> {
        let Some((plan, returned)) = self.driven().take() else {
            return Ok(());
        };
        let order: Vec<usize> = returned.into_iter().rev().collect();
        into_result(run_inline(&plan, &order, Some(self), Phase::AfterRestore).failures)
    }

    fn name(&self) -> String {
        self.context_name().to_owned()
    }
}
