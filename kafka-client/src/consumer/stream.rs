//! The consumer as a [`futures_core::Stream`] of records, for async code.
//!
//! A thread of the stream's own polls (`poll()` with a short timeout) and hands whole batches
//! to the stream through a one-batch slot, so no runtime thread ever waits on the network, a
//! rebalance or a commit: the consumer's rebalance listener and commit callbacks run on that
//! thread (keep them short; hand async work to a channel). The stream yields record by record
//! and keeps, per partition, the offset after the last record it yielded: [`RecordStream::commit`]
//! commits exactly those (never a record fetched but not yet yielded).
//!
//! Cancel-safe: dropping the stream, or a `next()` future, between items loses nothing. What
//! was fetched but not yielded is given back: the polling thread seeks every such partition
//! back to its first record not yielded, so the next poll or stream delivers it again.
//! Across a checkpoint, records fetched before it and not yet yielded are not yielded by a
//! restored copy (each copy would yield the same records): it seeks back, and goes on from the
//! copy's positions (the partition's new owner after the copy's rejoin reads them).

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::{Consumer, ConsumerError, ConsumerRecord, OffsetAndMetadata, TopicPartition};
use crate::completion::{Completion, completion};

/// How long the polling thread's `poll()` waits before it looks at the stream again.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// How often a polling thread waiting for the stream runs the commit callbacks.
const CALLBACK_SLICE: Duration = Duration::from_millis(5);

/// What the polling thread and the stream share.
struct Shared {
    consumer: Consumer,
    slot: Mutex<Slot>,
    room: Condvar,
}

#[derive(Default)]
struct Slot {
    /// Fetched, not taken by the stream yet (one batch, or an error).
    ready: VecDeque<Result<Vec<ConsumerRecord>, ConsumerError>>,
    waker: Option<Waker>,
    /// The stream is gone: give `returned` back and stop.
    stop: bool,
    /// Records the stream had and did not yield (given back at its drop or at a restore).
    returned: Vec<ConsumerRecord>,
}

/// A stream of the consumer's records (see the module documentation).
pub struct RecordStream {
    shared: Arc<Shared>,
    buf: VecDeque<ConsumerRecord>,
    /// The offset after the last record yielded, per partition, but for `last`'s.
    yielded: BTreeMap<TopicPartition, i64>,
    /// The partition of the last record yielded and the offset after it: records come in runs
    /// of one partition, so `yielded` is updated only when the partition changes, not per
    /// record.
    last: Option<(Arc<str>, i32, i64)>,
    epoch: u64,
}

impl Consumer {
    /// This consumer as a stream of records (it moves into the stream: reach it with
    /// [`RecordStream::consumer`]). Subscribe or assign first.
    pub fn stream(self) -> RecordStream {
        let shared = Arc::new(Shared {
            consumer: self,
            slot: Mutex::new(Slot::default()),
            room: Condvar::new(),
        });
        let s = shared.clone();
        let started = std::thread::Builder::new()
            .name("kafka-consumer-stream".into())
            .spawn(move || poll_loop(&s));
        if let Err(e) = started {
            shared
                .slot
                .lock()
                .ready
                .push_back(Err(ConsumerError::illegal(format!(
                    "cannot start the stream's polling thread: {e}"
                ))));
        }
        RecordStream {
            shared,
            buf: VecDeque::new(),
            yielded: BTreeMap::new(),
            last: None,
            epoch: crac_api::restore_epoch(),
        }
    }
}

/// The polling thread: fills the slot while there is room, until the stream is gone.
fn poll_loop(s: &Shared) {
    loop {
        {
            let mut slot = s.slot.lock();
            while !slot.ready.is_empty() && !slot.stop {
                // The stream has not taken the last batch: no poll(), but commit callbacks
                // (they run on the thread that polls) still run, so commits complete.
                drop(slot);
                s.consumer.run_commit_callbacks();
                slot = s.slot.lock();
                if !slot.ready.is_empty() && !slot.stop {
                    s.room.wait_for(&mut slot, CALLBACK_SLICE);
                }
            }
            if slot.stop {
                let returned = std::mem::take(&mut slot.returned);
                let pending: Vec<ConsumerRecord> = slot
                    .ready
                    .drain(..)
                    .filter_map(Result::ok)
                    .flatten()
                    .collect();
                drop(slot);
                give_back(&s.consumer, returned.into_iter().chain(pending));
                return;
            }
            // Records a restored stream dropped: their partitions are read again.
            let returned = std::mem::take(&mut slot.returned);
            drop(slot);
            give_back(&s.consumer, returned.into_iter());
        }
        let r = match s.consumer.poll(POLL_SLICE) {
            Ok(records) if records.is_empty() => continue,
            Ok(records) => Ok(records.into_vec()),
            Err(e) => Err(e),
        };
        let closed = matches!(r, Err(ConsumerError::Closed));
        let mut slot = s.slot.lock();
        slot.ready.push_back(r);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        if closed {
            return;
        }
    }
}

/// Seeks every partition of `records` back to its first one (they were fetched and never
/// yielded). A partition no longer assigned is skipped: its new owner reads it from the
/// committed offset.
fn give_back(consumer: &Consumer, records: impl Iterator<Item = ConsumerRecord>) {
    let mut first: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for r in records {
        let e = first.entry(r.topic_partition()).or_insert(r.offset);
        *e = (*e).min(r.offset);
    }
    for (tp, offset) in first {
        if let Err(e) = consumer.seek(&tp, offset) {
            tracing::debug!(%e, partition = %tp, "fetched records not given back");
        }
    }
}

impl RecordStream {
    /// The consumer (to seek, pause, read metadata; its blocking calls block the caller).
    pub fn consumer(&self) -> &Consumer {
        &self.shared.consumer
    }

    /// Commits the offsets after the records this stream yielded (and nothing fetched but
    /// not yielded); resolves when the group coordinator answered.
    pub fn commit(&self) -> CommitFuture {
        let mut yielded = self.yielded.clone();
        if let Some((t, p, o)) = &self.last {
            yielded.insert(TopicPartition::new(t.clone(), *p), *o);
        }
        let offsets: Vec<(TopicPartition, OffsetAndMetadata)> = yielded
            .into_iter()
            .map(|(tp, o)| (tp, OffsetAndMetadata::new(o)))
            .collect();
        let (done, future) = completion();
        match self
            .shared
            .consumer
            .commit_async_offsets(&offsets, move |r| done.complete(r))
        {
            Ok(()) => future,
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Remembers that `r` was yielded (see `last`).
    fn note_yielded(&mut self, r: &ConsumerRecord) {
        match &mut self.last {
            Some((t, p, o)) if *p == r.partition && (Arc::ptr_eq(t, &r.topic) || *t == r.topic) => {
                *o = r.offset + 1;
            }
            _ => {
                if let Some((t, p, o)) = self.last.take() {
                    self.yielded.insert(TopicPartition::new(t, p), o);
                }
                self.last = Some((r.topic.clone(), r.partition, r.offset + 1));
            }
        }
    }

    /// A restored copy does not yield what the image held fetched: given back (module
    /// documentation).
    fn drop_if_restored(&mut self) {
        let now = crac_api::restore_epoch();
        if now == self.epoch {
            return;
        }
        self.epoch = now;
        let mut slot = self.shared.slot.lock();
        let ready: Vec<ConsumerRecord> = slot
            .ready
            .drain(..)
            .filter_map(Result::ok)
            .flatten()
            .collect();
        slot.returned.extend(self.buf.drain(..).chain(ready));
        self.shared.room.notify_all();
    }
}

impl futures_core::Stream for RecordStream {
    type Item = Result<ConsumerRecord, ConsumerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.drop_if_restored();
        loop {
            if let Some(r) = self.buf.pop_front() {
                self.note_yielded(&r);
                return Poll::Ready(Some(Ok(r)));
            }
            let mut slot = self.shared.slot.lock();
            match slot.ready.pop_front() {
                Some(Ok(batch)) => {
                    self.shared.room.notify_all();
                    drop(slot);
                    self.buf.extend(batch);
                }
                Some(Err(ConsumerError::Closed)) => return Poll::Ready(None),
                Some(Err(e)) => {
                    self.shared.room.notify_all();
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    slot.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for RecordStream {
    fn drop(&mut self) {
        let mut slot = self.shared.slot.lock();
        slot.returned.extend(self.buf.drain(..));
        slot.stop = true;
        self.shared.room.notify_all();
    }
}

/// The future of [`RecordStream::commit`]: the commit's answer, once its callback has it.
pub type CommitFuture = Completion<Result<(), ConsumerError>>;
