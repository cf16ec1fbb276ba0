//! A value that another thread delivers, as a future: what the async API's futures that wait
//! for a thread of ours (a close, a commit's callback) are made of. Runtime-agnostic: the
//! delivering thread wakes the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// Makes `slot` wake `waker`'s task, cloning it only when the one there would wake another.
pub(crate) fn set_waker(slot: &mut Option<Waker>, waker: &Waker) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}

/// The value, once delivered, and the task waiting for it.
type Slot<T> = Arc<Mutex<(Option<T>, Option<Waker>)>>;

/// A future that resolves with the value the producer or consumer delivers from a thread of
/// its own (a close, a commit's callback).
#[must_use = "futures do nothing unless polled"]
pub struct Completion<T> {
    slot: Slot<T>,
}

/// Delivers the value of a [`Completion`], from any thread.
pub(crate) struct Completer<T> {
    slot: Slot<T>,
}

/// A completion and the handle that delivers it.
pub(crate) fn completion<T>() -> (Completer<T>, Completion<T>) {
    let slot: Slot<T> = Arc::new(Mutex::new((None, None)));
    (Completer { slot: slot.clone() }, Completion { slot })
}

impl<T> Completer<T> {
    /// Delivers the value and wakes the task waiting for it.
    pub(crate) fn complete(self, value: T) {
        let mut g = self.slot.lock();
        g.0 = Some(value);
        if let Some(w) = g.1.take() {
            w.wake();
        }
    }
}

impl<T> Completion<T> {
    /// A completion that is already resolved.
    pub(crate) fn ready(value: T) -> Self {
        Completion {
            slot: Arc::new(Mutex::new((Some(value), None))),
        }
    }
}

impl<T> Future for Completion<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut g = self.slot.lock();
        match g.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                set_waker(&mut g.1, cx.waker());
                Poll::Pending
            }
        }
    }
}

/// Runs `f` on a thread named `name`; the future resolves with its result. If no thread can
/// be started, `f` runs here, blocking the caller, rather than leave a future that never
/// resolves (and a producer never closed).
pub(crate) fn on_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Completion<T> {
    let (done, future) = completion();
    let job = Arc::new(Mutex::new(Some((f, done))));
    let on_thread = job.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let job = on_thread.lock().take();
            if let Some((f, done)) = job {
                done.complete(f());
            }
        });
    if let Err(e) = spawned {
        tracing::error!(%e, "cannot start a thread for {name}: running it on the caller's");
        let job = job.lock().take();
        if let Some((f, done)) = job {
            done.complete(f());
        }
    }
    future
}
