//! The async way in: hooks that are `async fn`s, run on the runtime that registered them, and a
//! checkpoint that a task can `.await` without blocking its runtime.
//!
//! Runtime-agnostic on purpose: crac-api depends on no runtime. A registration carries a
//! [`Spawner`], a function that puts a future on the registering runtime (for tokio,
//! `Spawner::new(move |f| { handle.spawn(f); })` with the `Handle` of that runtime). At a
//! checkpoint the hook worker thread spawns the hook's future there and waits for it, so the
//! ordering, failure and timeout rules are those of every other hook: a hook whose future
//! never completes fails the checkpoint by name when its timeout passes. The runtime must keep
//! running meanwhile: [`Core::checkpoint_restore_async`](crate::Core::checkpoint_restore_async)
//! runs the cycle on a thread of its own, so a task on a current-thread runtime can await it;
//! the blocking `checkpoint_restore` called on that runtime's only thread would leave the
//! hooks' futures unpolled until they time out.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll, Waker};

use parking_lot::{Condvar, Mutex};

use crate::error::CheckpointError;
use crate::{CheckpointOptions, Context, Core, Outcome, Resource, ResourceError};

/// A boxed future that may move between threads.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A component whose hooks are asynchronous. The hooks take the resource by `Arc` because their
/// futures run on a runtime, apart from the checkpoint's thread: they own what they use.
pub trait AsyncResource: Send + Sync + 'static {
    /// Prepares for the image (close, flush, drain: await what must finish first).
    fn before_checkpoint(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>>;

    /// Recovers after a restore, an aborted checkpoint or a leave-running dump.
    fn after_restore(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>>;

    /// A name for diagnostics and error reports. Default: the type name.
    fn name(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

/// Puts a future on a runtime: the one whose tasks an [`AsyncResource`]'s hooks belong to.
#[derive(Clone)]
pub struct Spawner(Arc<dyn Fn(BoxFuture<()>) + Send + Sync>);

impl Spawner {
    /// A spawner from a function that runs the future to completion on a runtime, e.g.
    /// `Spawner::new(move |f| { handle.spawn(f); })` with a `tokio::runtime::Handle`.
    pub fn new(spawn: impl Fn(BoxFuture<()>) + Send + Sync + 'static) -> Self {
        Spawner(Arc::new(spawn))
    }
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spawner")
    }
}

/// Where a hook's future leaves its result for the hook thread waiting on it.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<Result<(), ResourceError>>>,
    ready: Condvar,
}

impl Slot {
    fn put(&self, r: Result<(), ResourceError>) {
        let mut g = self.result.lock();
        if g.is_none() {
            *g = Some(r);
            self.ready.notify_all();
        }
    }

    fn wait(&self) -> Result<(), ResourceError> {
        let mut g = self.result.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.ready.wait(&mut g);
        }
    }
}

/// Fills the slot with an error if the future is dropped before it completed (its runtime
/// shut down): the hook fails at once instead of waiting out its timeout.
struct DroppedGuard(Option<Arc<Slot>>);

impl Drop for DroppedGuard {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.put(Err(
                "its future was dropped before it completed (the runtime it was spawned on shut \
                 down?)"
                    .into(),
            ));
        }
    }
}

/// The blocking [`Resource`] a context calls for an [`AsyncResource`]: it spawns the hook's
/// future with the registration's spawner and waits for its result.
pub(crate) struct Adapter<R> {
    resource: Weak<R>,
    spawner: Spawner,
}

impl<R: AsyncResource> Adapter<R> {
    pub(crate) fn new(resource: &Arc<R>, spawner: &Spawner) -> Self {
        Adapter {
            resource: Arc::downgrade(resource),
            spawner: spawner.clone(),
        }
    }

    fn run(&self, hook: fn(Arc<R>) -> BoxFuture<Result<(), ResourceError>>) -> HookResult {
        let Some(r) = self.resource.upgrade() else {
            return Ok(()); // dropped since the plan was made: nothing to prepare
        };
        let slot = Arc::new(Slot::default());
        let fut = hook(r);
        let mut guard = DroppedGuard(Some(slot.clone()));
        (self.spawner.0)(Box::pin(async move {
            let r = fut.await;
            if let Some(slot) = guard.0.take() {
                slot.put(r);
            }
        }));
        slot.wait()
    }
}

type HookResult = Result<(), ResourceError>;

impl<R: AsyncResource> Resource for Adapter<R> {
    fn before_checkpoint(&self, _: &Context) -> HookResult {
        self.run(R::before_checkpoint)
    }

    fn after_restore(&self, _: &Context) -> HookResult {
        self.run(R::after_restore)
    }

    fn name(&self) -> String {
        self.resource
            .upgrade()
            .map_or_else(|| std::any::type_name::<R>().to_owned(), |r| r.name())
    }
}

/// The future of [`Core::checkpoint_restore_async`]: the cycle runs on a thread of its own,
/// started at the first poll; the future completes when it returns.
#[must_use = "a future does nothing unless polled"]
pub struct CheckpointFuture {
    options: Option<CheckpointOptions>,
    shared: Arc<Mutex<Shared>>,
}

#[derive(Default)]
struct Shared {
    result: Option<Result<Outcome, CheckpointError>>,
    waker: Option<Waker>,
}

impl CheckpointFuture {
    pub(crate) fn new(options: CheckpointOptions) -> Self {
        CheckpointFuture {
            options: Some(options),
            shared: Arc::default(),
        }
    }

    fn start(&mut self, options: CheckpointOptions) -> Result<(), CheckpointError> {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("crac-checkpoint".into())
            .spawn(move || {
                let r = Core::checkpoint_restore_with(&options);
                let mut s = shared.lock();
                s.result = Some(r);
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            })
            .map(drop)
            .map_err(|e| CheckpointError::Unsupported(format!("cannot start a thread: {e}")))
    }
}

impl Future for CheckpointFuture {
    type Output = Result<Outcome, CheckpointError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // The waker first, so that a cycle finishing right after the start wakes this task.
        {
            let mut s = self.shared.lock();
            if let Some(r) = s.result.take() {
                return Poll::Ready(r);
            }
            s.waker = Some(cx.waker().clone());
        }
        if let Some(options) = self.options.take()
            && let Err(e) = self.start(options)
        {
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }
}
