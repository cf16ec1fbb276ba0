//! [`Context`]: an ordered registry of resources, itself a resource, so contexts nest.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{ContextFailures, Phase, ResourceFailure};
use crate::plan::{Owner, Plan, Step, run_inline};
use crate::{Resource, ResourceError};

/// What a registration holds: a resource held weakly (its owner decides its lifetime), a
/// `'static` one, or a nested context (weakly), whose resources join the cycle by path.
#[derive(Clone)]
enum Kind {
    Weak(Weak<dyn Resource>),
    Static(&'static dyn Resource),
    Nested(Weak<Context>),
}

/// A registration: what, and its hook timeout (`None`: the global default).
#[derive(Clone)]
struct Entry {
    kind: Kind,
    timeout: Option<Duration>,
}

/// A live resource for the length of one cycle.
#[derive(Clone)]
pub(crate) enum Live {
    Arc(Arc<dyn Resource>),
    Static(&'static dyn Resource),
}

impl Live {
    pub(crate) fn get(&self) -> &dyn Resource {
        match self {
            Live::Arc(a) => a.as_ref(),
            Live::Static(s) => *s,
        }
    }
}

impl Entry {
    fn is_live(&self) -> bool {
        match &self.kind {
            Kind::Weak(w) => w.strong_count() > 0,
            Kind::Static(_) => true,
            Kind::Nested(c) => c.strong_count() > 0,
        }
    }
}

struct Registry {
    entries: Vec<Entry>,
    /// Prune dropped entries when the list reaches this length: doubling keeps registration
    /// amortised O(1) while a churn of short-lived resources cannot grow the list unbounded.
    prune_at: usize,
}

const MIN_PRUNE: usize = 64;

impl Registry {
    fn prune(&mut self) {
        self.entries.retain(Entry::is_live);
        self.prune_at = (self.entries.len() * 2).max(MIN_PRUNE);
    }
}

/// An ordered registry of resources.
///
/// `before_checkpoint` reaches them in reverse registration order, `after_restore` in
/// registration order (the last one opened is the first one closed). Resources are held by
/// [`Weak`] reference: one its owner has dropped is never called and costs nothing. A context is
/// itself a [`Resource`], so contexts nest; register an `Arc<Context>` in another context.
///
/// Registration is lock-light and may happen from any thread at any time, also from inside a
/// hook or while a checkpoint runs: such a late resource is not called in the running cycle.
pub struct Context {
    name: String,
    registry: Mutex<Registry>,
    /// When the context is driven as a plain resource (registered with `register_dyn` or called
    /// by hand): its cycle's steps and those that returned, for `after_restore`.
    driven: Mutex<Option<(Plan, Vec<usize>)>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .field("registered", &self.registry.lock().entries.len())
            .finish()
    }
}

impl Context {
    /// An empty context with a name used in diagnostics.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            registry: Mutex::new(Registry {
                entries: Vec::new(),
                prune_at: MIN_PRUNE,
            }),
            driven: Mutex::new(None),
        }
    }

    /// The context's name.
    pub fn context_name(&self) -> &str {
        &self.name
    }

    /// Registers a resource, held weakly: dropping the last `Arc` unregisters it. Its hooks are
    /// bounded by the global hook timeout ([`Core::set_hook_timeout`](crate::Core::set_hook_timeout)).
    /// A nested `Context` registered here has no bound of its own: each of its resources has
    /// its own, and a failure is named by its path (`outer/inner/resource`).
    pub fn register<R: Resource + 'static>(&self, resource: &Arc<R>) {
        self.push(Self::entry(resource, None));
    }

    /// Registers a resource, held weakly, whose hooks may each take up to `timeout` (instead of
    /// the global hook timeout) before it counts as failed.
    pub fn register_with_timeout<R: Resource + 'static>(
        &self,
        resource: &Arc<R>,
        timeout: Duration,
    ) {
        self.push(Self::entry(resource, Some(timeout)));
    }

    fn entry<R: Resource + 'static>(resource: &Arc<R>, timeout: Option<Duration>) -> Entry {
        let any: Arc<dyn Any + Send + Sync> = resource.clone();
        let kind = match any.downcast::<Context>() {
            Ok(ctx) => Kind::Nested(Arc::downgrade(&ctx)),
            Err(_) => {
                let weak: Weak<R> = Arc::downgrade(resource);
                Kind::Weak(weak)
            }
        };
        Entry { kind, timeout }
    }

    /// Registers a resource given as a trait object, held weakly. (A `Context` registered this
    /// way is one resource: its resources are bounded together by its timeout.)
    pub fn register_dyn(&self, resource: &Arc<dyn Resource>) {
        self.push(Entry {
            kind: Kind::Weak(Arc::downgrade(resource)),
            timeout: None,
        });
    }

    /// Registers a resource that lives for the whole program.
    pub fn register_static(&self, resource: &'static dyn Resource) {
        self.push(Entry {
            kind: Kind::Static(resource),
            timeout: None,
        });
    }

    fn push(&self, entry: Entry) {
        let mut reg = self.registry.lock();
        if reg.entries.len() >= reg.prune_at {
            reg.prune();
        }
        reg.entries.push(entry);
    }

    /// How many registered resources are still alive.
    pub fn len(&self) -> usize {
        self.registry
            .lock()
            .entries
            .iter()
            .filter(|e| e.is_live())
            .count()
    }

    /// Whether no live resource is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The registration list as it is now, without dropped resources. The lock is held only for
    /// the copy, so hooks can register while the cycle runs.
    fn snapshot(&self) -> Vec<Entry> {
        let mut reg = self.registry.lock();
        reg.prune();
        reg.entries.clone()
    }

    /// Adds this context's live resources to `plan` in `before_checkpoint` order (reverse
    /// registration order), nested contexts inlined with their name as a path prefix.
    pub(crate) fn plan_into(&self, owner: &Owner, prefix: &str, plan: &mut Plan) {
        for entry in self.snapshot().iter().rev() {
            let live = match &entry.kind {
                Kind::Weak(w) => w.upgrade().map(Live::Arc),
                Kind::Static(s) => Some(Live::Static(*s)),
                Kind::Nested(c) => {
                    if let Some(c) = c.upgrade() {
                        let prefix = format!("{prefix}{}/", c.name);
                        c.plan_into(&Owner::Shared(c.clone()), &prefix, plan);
                    }
                    None
                }
            };
            if let Some(live) = live {
                plan.steps.push(Step {
                    live,
                    owner: owner.clone(),
                    timeout: entry.timeout,
                    prefix: prefix.to_owned(),
                });
            }
        }
    }
}

/// Calls one hook inside its own span; a panic is turned into an error so that one broken
/// resource cannot leave the others unnotified.
pub(crate) fn call(
    resource: &dyn Resource,
    context: &Context,
    phase: Phase,
) -> Result<(), ResourceError> {
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
    .unwrap_or_else(|panic| Err(format!("panicked: {}", crate::core::panic_text(&*panic)).into()));
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
pub(crate) fn collect(
    out: &mut Vec<ResourceFailure>,
    step: &Step,
    phase: Phase,
    error: ResourceError,
) {
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

impl Resource for Context {
    fn before_checkpoint(&self, _parent: &Context) -> Result<(), ResourceError> {
        let mut plan = Plan::default();
        self.plan_into(&Owner::Root, "", &mut plan);
        let order: Vec<usize> = (0..plan.steps.len()).collect();
        let ran = run_inline(&plan, &order, Some(self), Phase::BeforeCheckpoint);
        *self.driven.lock() = Some((plan, ran.returned));
        into_result(ran.failures)
    }

    fn after_restore(&self, _parent: &Context) -> Result<(), ResourceError> {
        let Some((plan, returned)) = self.driven.lock().take() else {
            return Ok(());
        };
        let order: Vec<usize> = returned.into_iter().rev().collect();
        into_result(run_inline(&plan, &order, Some(self), Phase::AfterRestore).failures)
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}
