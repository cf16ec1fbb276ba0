//! Delivery reports: a handle per record that can be waited on or awaited, and callbacks.
//!
//! All records of a batch share one `BatchResult` (like Java's `ProduceRequestResult`), so a
//! handle costs no allocation: it is the shared result plus the record's index and timestamp.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::ProduceError;
use super::record::RecordMetadata;
use crate::large_buffers::Chunked;

/// A callback invoked once per record with its outcome, on the producer's I/O thread: keep it
/// short (hand work to another thread).
pub type Callback = Box<dyn FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static>;

/// How a batch ended: base offset and log-append time, or an error.
pub(crate) type BatchOutcome = Result<(i64, i64), ProduceError>;

/// The shared outcome of one batch.
pub(crate) struct BatchResult {
    topic: Arc<str>,
    partition: i32,
    /// Set once, read without a lock: a report polled or waited on after its batch completed
    /// (the common case for a pipelining sender) takes no lock.
    outcome: OnceLock<BatchOutcome>,
    /// The tasks to wake when the outcome is set; the lock `done` waits with. The outcome is
    /// set before this is locked to take them, and a waiter looks at the outcome again under
    /// it, so no waiter registers after the wake-up it needed.
    wakers: Mutex<Vec<Waker>>,
    done: Condvar,
}

impl std::fmt::Debug for BatchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BatchResult({}-{})", self.topic, self.partition)
    }
}

impl BatchResult {
    pub(crate) fn new(topic: Arc<str>, partition: i32) -> Arc<Self> {
        Arc::new(Self {
            topic,
            partition,
            outcome: OnceLock::new(),
            wakers: Mutex::new(Vec::new()),
            done: Condvar::new(),
        })
    }

    /// Records the outcome once and wakes every waiter.
    pub(crate) fn complete(&self, outcome: BatchOutcome) {
        if self.outcome.set(outcome).is_err() {
            return;
        }
        let wakers = std::mem::take(&mut *self.wakers.lock());
        self.done.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// Whether the outcome is recorded.
    pub(crate) fn is_complete(&self) -> bool {
        self.outcome.get().is_some()
    }

    pub(crate) fn metadata(
        &self,
        outcome: &BatchOutcome,
        index: i32,
        timestamp: i64,
    ) -> Result<RecordMetadata, ProduceError> {
        match outcome {
            Ok((base, log_append_time)) => Ok(RecordMetadata {
                topic: self.topic.clone(),
                partition: self.partition,
                offset: if *base < 0 { -1 } else { base + index as i64 },
                timestamp: if *log_append_time >= 0 {
                    *log_append_time
                } else {
                    timestamp
                },
            }),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The delivery callbacks of one batch's records, run in record order when the batch
/// completes.
///
/// Callbacks of one closure type (the usual case: one call site of `send_with_callback`) are
/// kept unboxed side by side in a list whose first chunk is sized for the batch: no allocation
/// per record on the sending thread, and one free per batch (not one per record) on the I/O
/// thread; a batch that grows past its size adds chunks (see [`Chunked`]). A callback of
/// another type turns the batch's list into boxed callbacks, order kept.
#[derive(Default)]
pub(crate) struct BatchCallbacks {
    store: Store,
}

#[derive(Default)]
enum Store {
    #[default]
    Empty,
    Typed(Box<dyn TypedCallbacks>),
    Boxed(Chunked<(i32, i64, Callback)>),
}

/// `(index, timestamp, F)` for one closure type `F`, behind a trait object.
trait TypedCallbacks: Any + Send {
    fn complete(&mut self, result: &BatchResult, outcome: &BatchOutcome);
    fn into_boxed(self: Box<Self>) -> Chunked<(i32, i64, Callback)>;
    /// What the next push allocates, in bytes.
    fn growth_on_push(&self) -> usize;
}

struct Typed<F>(Chunked<(i32, i64, F)>);

fn run_callback<F>(f: F, result: &BatchResult, outcome: &BatchOutcome, index: i32, timestamp: i64)
where
    F: FnOnce(Result<RecordMetadata, ProduceError>),
{
    let md = result.metadata(outcome, index, timestamp);
    // A panicking callback must not take the I/O thread down.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(md))).is_err() {
        tracing::error!(topic = %result.topic, partition = result.partition, "delivery callback panicked");
    }
}

impl<F> TypedCallbacks for Typed<F>
where
    F: FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
{
    fn complete(&mut self, result: &BatchResult, outcome: &BatchOutcome) {
        self.0.drain_with(|(index, timestamp, f)| {
            run_callback(f, result, outcome, index, timestamp);
        });
    }

    fn into_boxed(mut self: Box<Self>) -> Chunked<(i32, i64, Callback)> {
        let mut out = Chunked::with_capacity(self.0.capacity());
        self.0.drain_with(|(index, timestamp, f)| {
            out.push((index, timestamp, Box::new(f) as Callback))
        });
        out
    }

    fn growth_on_push(&self) -> usize {
        growth(&self.0)
    }
}

/// What pushing onto `v` allocates, in bytes.
fn growth<T>(v: &Chunked<T>) -> usize {
    v.growth(1) * std::mem::size_of::<T>()
}

/// The room [`BatchCallbacks::push`] allocates for a batch's first callback of type `F`.
pub(crate) fn first_list_bytes<F>(expected: usize, max_bytes: usize) -> usize {
    let entry = std::mem::size_of::<(i32, i64, F)>().max(1);
    expected.min(max_bytes / entry).max(1) * entry
}

impl BatchCallbacks {
    /// Adds the callback of record `index`. The first one reserves room for `expected`
    /// callbacks (the records the batch can hold), but for no more than `max_bytes` of them.
    /// Returns the bytes this push allocated (charged to `buffer.memory` with the batch: the
    /// callbacks are memory the producer holds for unsent records, as their bytes are).
    pub(crate) fn push<F>(
        &mut self,
        index: i32,
        timestamp: i64,
        f: F,
        expected: usize,
        max_bytes: usize,
    ) -> usize
    where
        F: FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    {
        let boxed = std::mem::size_of::<F>();
        match &mut self.store {
            Store::Empty => {
                let bytes = first_list_bytes::<F>(expected, max_bytes);
                let mut v =
                    Chunked::with_capacity(bytes / std::mem::size_of::<(i32, i64, F)>().max(1));
                v.push((index, timestamp, f));
                self.store = Store::Typed(Box::new(Typed(v)));
                bytes
            }
            Store::Typed(list) => {
                let any: &mut dyn Any = &mut **list;
                if let Some(t) = any.downcast_mut::<Typed<F>>() {
                    let bytes = growth(&t.0);
                    t.0.push((index, timestamp, f));
                    return bytes;
                }
                let Store::Typed(list) = std::mem::take(&mut self.store) else {
                    unreachable!("matched above")
                };
                // The typed list's closures move into boxes (their bytes were charged); the
                // new list is what this push allocates.
                let mut v = list.into_boxed();
                let bytes = v.capacity() * std::mem::size_of::<(i32, i64, Callback)>() + boxed;
                v.push((index, timestamp, Box::new(f)));
                self.store = Store::Boxed(v);
                bytes
            }
            Store::Boxed(v) => {
                let bytes = growth(v) + boxed;
                v.push((index, timestamp, Box::new(f)));
                bytes
            }
        }
    }

    /// What the next push allocates for the list (0 when it has room), in bytes.
    pub(crate) fn growth_on_push(&self) -> usize {
        match &self.store {
            Store::Empty => 0,
            Store::Typed(list) => list.growth_on_push(),
            Store::Boxed(v) => growth(v),
        }
    }

    /// Runs every callback once, in record order, with the batch's outcome.
    pub(crate) fn complete(&mut self, result: &BatchResult, outcome: &BatchOutcome) {
        match std::mem::take(&mut self.store) {
            Store::Empty => {}
            Store::Typed(mut list) => list.complete(result, outcome),
            Store::Boxed(mut v) => v.drain_with(|(index, timestamp, f)| {
                run_callback(f, result, outcome, index, timestamp);
            }),
        }
    }
}

#[derive(Debug)]
enum Inner {
    Pending {
        result: Arc<BatchResult>,
        index: i32,
        timestamp: i64,
        /// The waker this future left with its batch: polled again by the same task before
        /// the outcome is known, it returns `Pending` without the batch's lock (a task that
        /// looks at the oldest of many reports after every send polls it thousands of times).
        registered: Option<Waker>,
    },
}

/// The delivery report of one record: [`wait`](Self::wait) for it, poll it with
/// [`wait_timeout`](Self::wait_timeout), or `.await` it (it is a `Future` and needs no
/// particular async runtime).
#[derive(Debug)]
#[must_use = "a delivery report tells whether the record was delivered"]
pub struct DeliveryFuture {
    inner: Inner,
}

impl DeliveryFuture {
    pub(crate) fn pending(result: Arc<BatchResult>, index: i32, timestamp: i64) -> Self {
        Self {
            inner: Inner::Pending {
                result,
                index,
                timestamp,
                registered: None,
            },
        }
    }

    /// Whether the outcome is known.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            Inner::Pending { result, .. } => result.is_complete(),
        }
    }

    /// Blocks until the record is acknowledged or has failed.
    pub fn wait(self) -> Result<RecordMetadata, ProduceError> {
        match self.wait_until(None) {
            Ok(r) => r,
            Err(_) => unreachable!("no deadline"),
        }
    }

    /// Blocks at most `timeout`; gives the handle back if the outcome is not known by then.
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> Result<Result<RecordMetadata, ProduceError>, Self> {
        self.wait_until(Instant::now().checked_add(timeout))
    }

    fn wait_until(
        self,
        deadline: Option<Instant>,
    ) -> Result<Result<RecordMetadata, ProduceError>, Self> {
        match self.inner {
            Inner::Pending {
                ref result,
                index,
                timestamp,
                ..
            } => {
                if let Some(o) = result.outcome.get() {
                    return Ok(result.metadata(o, index, timestamp));
                }
                let mut w = result.wakers.lock();
                loop {
                    if let Some(o) = result.outcome.get() {
                        return Ok(result.metadata(o, index, timestamp));
                    }
                    match deadline {
                        None => result.done.wait(&mut w),
                        Some(d) => {
                            if result.done.wait_until(&mut w, d).timed_out()
                                && !result.is_complete()
                            {
                                drop(w);
                                return Err(self);
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ProduceError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Pending {
                result,
                index,
                timestamp,
                registered,
            } => {
                if let Some(o) = result.outcome.get() {
                    return Poll::Ready(result.metadata(o, *index, *timestamp));
                }
                // Still with the batch: its wakers are only taken after the outcome is set,
                // and the outcome was not set above.
                if registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    return Poll::Pending;
                }
                let mut w = result.wakers.lock();
                if let Some(o) = result.outcome.get() {
                    return Poll::Ready(result.metadata(o, *index, *timestamp));
                }
                if !w.iter().any(|w| w.will_wake(cx.waker())) {
                    w.push(cx.waker().clone());
                }
                *registered = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn callbacks_of_one_type_and_of_mixed_types_run_once_in_order() {
        use parking_lot::Mutex as PMutex;
        let seen = Arc::new(PMutex::new(Vec::new()));
        let r = BatchResult::new(Arc::from("t"), 1);
        let mut cbs = BatchCallbacks::default();
        let log = |tag: &'static str| {
            let seen = seen.clone();
            move |md: Result<RecordMetadata, ProduceError>| {
                let md = md.unwrap();
                seen.lock().push((tag, md.offset, md.timestamp));
            }
        };
        cbs.push(0, 10, log("a"), 4, 1000);
        cbs.push(1, 11, log("a"), 4, 1000);
        // Another closure type: the list turns boxed, the order stays.
        cbs.push(
            2,
            12,
            move |_md: Result<RecordMetadata, ProduceError>| {},
            4,
            1000,
        );
        let boxed: Callback = Box::new(log("b"));
        cbs.push(3, 13, boxed, 4, 1000);
        cbs.push(4, 14, log("a"), 4, 1000);
        cbs.complete(&r, &Ok((100, -1)));
        cbs.complete(&r, &Ok((200, -1)));
        assert_eq!(
            *seen.lock(),
            [
                ("a", 100, 10),
                ("a", 101, 11),
                ("b", 103, 13),
                ("a", 104, 14)
            ]
        );
    }

    #[test]
    fn a_panicking_callback_does_not_stop_the_others() {
        let count = Arc::new(AtomicUsize::new(0));
        let r = BatchResult::new(Arc::from("t"), 0);
        let mut cbs = BatchCallbacks::default();
        for i in 0..3 {
            let count = count.clone();
            cbs.push(
                i,
                0,
                move |_md: Result<RecordMetadata, ProduceError>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    assert!(i != 1, "callback 1 panics");
                },
                3,
                1000,
            );
        }
        cbs.complete(&r, &Err(ProduceError::Closed { reason: None }));
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn wait_poll_and_timeout() {
        let r = BatchResult::new(Arc::from("t"), 3);
        let f = DeliveryFuture::pending(r.clone(), 2, 77);
        let f = f.wait_timeout(Duration::from_millis(10)).unwrap_err();
        let mut f = Box::pin(f);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        let r2 = r.clone();
        let t = std::thread::spawn(move || r2.complete(Ok((100, -1))));
        t.join().unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let Poll::Ready(Ok(md)) = f.as_mut().poll(&mut cx) else {
            panic!()
        };
        assert_eq!((md.partition, md.offset, md.timestamp), (3, 102, 77));
        let md = DeliveryFuture::pending(r, 0, 1).wait().unwrap();
        assert_eq!(md.offset, 100);
    }

    #[test]
    fn a_report_polled_again_by_its_task_takes_no_lock_and_another_task_is_woken_too() {
        let r = BatchResult::new(Arc::from("t"), 0);
        let mut f = Box::pin(DeliveryFuture::pending(r.clone(), 0, 1));
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        assert!(
            f.as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        );
        assert!(
            f.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(r.wakers.lock().len(), 2, "each task's waker is left once");
        // The same task again, while the batch's lock is held elsewhere: no wait for it.
        let held = r.wakers.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let pending = f
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending();
            tx.send(pending).unwrap();
            f
        });
        let polled = rx.recv_timeout(Duration::from_secs(5));
        drop(held);
        assert_eq!(polled, Ok(true), "polled again without the lock");
        let mut f = t.join().unwrap();
        assert_eq!(r.wakers.lock().len(), 2);
        r.complete(Ok((5, -1)));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let Poll::Ready(Ok(md)) = f.as_mut().poll(&mut Context::from_waker(Waker::noop())) else {
            panic!()
        };
        assert_eq!(md.offset, 5);
    }
}
