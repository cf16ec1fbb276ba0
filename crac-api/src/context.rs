//! [`Context`]: an ordered registry of resources, and what one checkpoint cycle sees of it: a
//! [`Plan`], every live resource flattened in call order, nested contexts inlined at their place
//! (their resources named by path). `before_checkpoint` runs the steps in that order;
//! `after_restore` runs the notified ones in the reverse order, which is registration order
//! within every context and levels from file descriptors to application. Running a plan is
//! `hook` (on the calling thread) and `run` (bounded in time); a `Context` is itself a
//! [`Resource`] (implemented in `hook`), so contexts nest.

use std::any::Any;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use crate::Resource;

/// What a registration holds: a resource held weakly (its owner decides its lifetime), a
/// `'static` one, or a nested context (weakly), whose resources join the cycle by path.
#[derive(Clone)]
enum Kind {
    Weak(Weak<dyn Resource>),
    Static(&'static dyn Resource),
    Nested(Weak<Context>),
    /// An adapter the context owns (an async resource's), live while the resource it stands
    /// for is: the registration is as weak as any other.
    Owned {
        adapter: Arc<dyn Resource>,
        alive: Weak<dyn Any + Send + Sync>,
    },
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

/// A plan run as far as `before_checkpoint`, kept for `after_restore`: its steps and the
/// indexes of those whose hook returned.
pub(crate) type Driven = Option<(Plan, Vec<usize>)>;

impl Entry {
    fn is_live(&self) -> bool {
        match &self.kind {
            Kind::Weak(w) => w.strong_count() > 0,
            Kind::Static(_) => true,
            Kind::Nested(c) => c.strong_count() > 0,
            Kind::Owned { alive, .. } => alive.strong_count() > 0,
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
    driven: Mutex<Driven>,
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

    /// Registers a resource whose hooks are async, held weakly: at a checkpoint its hook's
    /// future is spawned with `spawner` on the runtime it stands for, and the cycle waits for
    /// it under the global hook timeout, in this context's order, like any other hook (see
    /// [`AsyncResource`](crate::AsyncResource)).
    pub fn register_async<R: crate::AsyncResource>(
        &self,
        resource: &Arc<R>,
        spawner: &crate::Spawner,
    ) {
        self.push(Self::async_entry(resource, spawner, None));
    }

    /// [`register_async`](Self::register_async) with a hook timeout of its own.
    pub fn register_async_with_timeout<R: crate::AsyncResource>(
        &self,
        resource: &Arc<R>,
        spawner: &crate::Spawner,
        timeout: Duration,
    ) {
        self.push(Self::async_entry(resource, spawner, Some(timeout)));
    }

    fn async_entry<R: crate::AsyncResource>(
        resource: &Arc<R>,
        spawner: &crate::Spawner,
        timeout: Option<Duration>,
    ) -> Entry {
        let any: Arc<dyn Any + Send + Sync> = resource.clone();
        Entry {
            kind: Kind::Owned {
                adapter: Arc::new(crate::async_resource::Adapter::new(resource, spawner)),
                alive: Arc::downgrade(&any),
            },
            timeout,
        }
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

    /// This context's cycle when it is driven as a plain resource (see `hook`).
    pub(crate) fn driven(&self) -> MutexGuard<'_, Driven> {
        self.driven.lock()
    }

    /// Adds this context's live resources to `plan` in `before_checkpoint` order (reverse
    /// registration order), nested contexts inlined with their name as a path prefix.
    pub(crate) fn plan_into(&self, owner: &Owner, prefix: &str, plan: &mut Plan) {
        for entry in self.snapshot().iter().rev() {
            let live = match &entry.kind {
                Kind::Weak(w) => w.upgrade().map(Live::Arc),
                Kind::Static(s) => Some(Live::Static(*s)),
                Kind::Owned { adapter, alive } => {
                    (alive.strong_count() > 0).then(|| Live::Arc(adapter.clone()))
                }
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
