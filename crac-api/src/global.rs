//! The global context: one [`Context`] per [`Priority`] level, plus `'static` resources
//! registered at compile time.

use std::sync::Arc;
use std::time::Duration;

use crate::context::{Owner, Plan};
use crate::{Context, Resource};

/// Where a resource sits in the global order.
///
/// `before_checkpoint` goes from [`Priority::Application`] to [`Priority::FileDescriptors`];
/// `after_restore` the other way round. So application code stops using a client before the
/// client drains and closes its sockets, and the sockets are back before the application
/// resumes (the JDK orders its internal contexts the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Application resources: checkpointed first, restored last. The default.
    #[default]
    Application,
    /// Clients that own network connections (database pools, Kafka producers and consumers).
    Network,
    /// Resources that own raw file descriptors: checkpointed last, restored first.
    FileDescriptors,
}

impl Priority {
    /// Every level, in `before_checkpoint` order.
    pub const ALL: [Priority; 3] = [
        Priority::Application,
        Priority::Network,
        Priority::FileDescriptors,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Priority::Application => "application",
            Priority::Network => "network",
            Priority::FileDescriptors => "file-descriptors",
        }
    }
}

/// A `'static` resource registered at compile time with
/// [`register_static!`](crate::register_static).
pub struct StaticResource {
    priority: Priority,
    resource: &'static dyn Resource,
}

impl StaticResource {
    /// Used by [`register_static!`](crate::register_static).
    pub const fn new(priority: Priority, resource: &'static dyn Resource) -> Self {
        Self { priority, resource }
    }
}

inventory::collect!(StaticResource);

/// Registers a `'static` resource in the global context at compile time.
///
/// ```
/// use crac_api::{Context, Priority, Resource, ResourceError};
/// struct Cache;
/// impl Resource for Cache {
///     fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> { Ok(()) }
///     fn after_restore(&self, _: &Context) -> Result<(), ResourceError> { Ok(()) }
/// }
/// static CACHE: Cache = Cache;
/// crac_api::register_static!(Priority::Application, CACHE);
/// ```
#[macro_export]
macro_rules! register_static {
    ($priority:expr, $resource:expr) => {
        $crate::__private::inventory::submit! {
            $crate::StaticResource::new($priority, &$resource)
        }
    };
}

/// The process-wide context, returned by [`Core::global_context`](crate::Core::global_context).
#[derive(Debug)]
pub struct GlobalContext {
    levels: [Context; 3],
}

impl GlobalContext {
    pub(crate) fn new() -> Self {
        let ctx = GlobalContext {
            levels: Priority::ALL.map(|p| Context::new(p.label())),
        };
        // Compile-time registrations count as registered first, before anything at run time.
        for s in inventory::iter::<StaticResource> {
            ctx.levels[s.priority.index()].register_static(s.resource);
        }
        ctx
    }

    /// Registers at [`Priority::Application`], held weakly.
    pub fn register<R: Resource + 'static>(&self, resource: &Arc<R>) {
        self.levels[Priority::Application.index()].register(resource);
    }

    /// Registers at the given level, held weakly, with its own hook timeout (see
    /// [`Context::register_with_timeout`]).
    pub fn register_with_timeout<R: Resource + 'static>(
        &self,
        resource: &Arc<R>,
        priority: Priority,
        timeout: Duration,
    ) {
        self.levels[priority.index()].register_with_timeout(resource, timeout);
    }

    /// Registers at the given level, held weakly.
    pub fn register_with_priority<R: Resource + 'static>(
        &self,
        resource: &Arc<R>,
        priority: Priority,
    ) {
        self.levels[priority.index()].register(resource);
    }

    /// Registers a resource with async hooks at the given level, held weakly; its hooks'
    /// futures are spawned with `spawner` (see [`Context::register_async`]).
    pub fn register_async<R: crate::AsyncResource>(
        &self,
        resource: &Arc<R>,
        priority: Priority,
        spawner: &crate::Spawner,
    ) {
        self.levels[priority.index()].register_async(resource, spawner);
    }

    /// The context of one level, e.g. to nest a context of your own under it.
    pub fn context(&self, priority: Priority) -> &Context {
        &self.levels[priority.index()]
    }

    /// Live resources over all levels.
    pub fn len(&self) -> usize {
        self.levels.iter().map(Context::len).sum()
    }

    /// Whether no live resource is registered at any level.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live resource of every level, in `before_checkpoint` order.
    pub(crate) fn plan(&'static self) -> Plan {
        let mut plan = Plan::default();
        for p in Priority::ALL {
            let ctx = &self.levels[p.index()];
            ctx.plan_into(&Owner::Static(ctx), "", &mut plan);
        }
        plan
    }
}
