//! [`Context`]: an ordered registry of resources, itself a resource, so contexts nest.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use crate::error::{ContextFailures, Phase, ResourceFailure};
use crate::{Resource, ResourceError};

/// A registered resource: held weakly (its owner decides its lifetime) or `'static`.
#[derive(Clone)]
enum Entry {
    Weak(Weak<dyn Resource>),
    Static(&'static dyn Resource),
}

/// A live resource for the length of one call.
enum Live {
    Arc(Arc<dyn Resource>),
    Static(&'static dyn Resource),
}

impl Live {
    fn get(&self) -> &dyn Resource {
        match self {
            Live::Arc(a) => a.as_ref(),
            Live::Static(s) => *s,
        }
    }
}

impl Entry {
    fn upgrade(&self) -> Option<Live> {
        match self {
            Entry::Weak(w) => w.upgrade().map(Live::Arc),
            Entry::Static(s) => Some(Live::Static(*s)),
        }
    }

    fn is_live(&self) -> bool {
        match self {
            Entry::Weak(w) => w.strong_count() > 0,
            Entry::Static(_) => true,
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
    /// Resources that got `before_checkpoint` in the running cycle, in call order; only they get
    /// `after_restore`.
    notified: Mutex<Vec<Entry>>,
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
            notified: Mutex::new(Vec::new()),
        }
    }

    /// The context's name.
    pub fn context_name(&self) -> &str {
        &self.name
    }

    /// Registers a resource, held weakly: dropping the last `Arc` unregisters it.
    pub fn register<R: Resource + 'static>(&self, resource: &Arc<R>) {
        let weak: Weak<R> = Arc::downgrade(resource);
        self.push(Entry::Weak(weak));
    }

    /// Registers a resource given as a trait object, held weakly.
    pub fn register_dyn(&self, resource: &Arc<dyn Resource>) {
        self.push(Entry::Weak(Arc::downgrade(resource)));
    }

    /// Registers a resource that lives for the whole program.
    pub fn register_static(&self, resource: &'static dyn Resource) {
        self.push(Entry::Static(resource));
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

    /// Runs `before_checkpoint` of every registered resource in reverse registration order.
    /// Everyone is called even when some fail; the failures come back as [`ContextFailures`].
    pub(crate) fn run_before(&self) -> Vec<ResourceFailure> {
        let snapshot = self.snapshot();
        let mut notified = Vec::with_capacity(snapshot.len());
        let mut failures = Vec::new();
        for entry in snapshot.iter().rev() {
            let Some(live) = entry.upgrade() else {
                continue;
            };
            notified.push(entry.clone());
            if let Err(e) = call(live.get(), self, Phase::BeforeCheckpoint) {
                collect(&mut failures, live.get(), Phase::BeforeCheckpoint, e);
            }
        }
        *self.notified.lock() = notified;
        failures
    }

    /// Runs `after_restore` of every resource that got `before_checkpoint`, in registration
    /// order.
    pub(crate) fn run_after(&self) -> Vec<ResourceFailure> {
        let notified = std::mem::take(&mut *self.notified.lock());
        let mut failures = Vec::new();
        for entry in notified.iter().rev() {
            let Some(live) = entry.upgrade() else {
                continue;
            };
            if let Err(e) = call(live.get(), self, Phase::AfterRestore) {
                collect(&mut failures, live.get(), Phase::AfterRestore, e);
            }
        }
        failures
    }
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
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        Err(format!("panicked: {msg}").into())
    });
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
fn collect(
    out: &mut Vec<ResourceFailure>,
    resource: &dyn Resource,
    phase: Phase,
    error: ResourceError,
) {
    let name = resource.name();
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
        into_result(self.run_before())
    }

    fn after_restore(&self, _parent: &Context) -> Result<(), ResourceError> {
        into_result(self.run_after())
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}
