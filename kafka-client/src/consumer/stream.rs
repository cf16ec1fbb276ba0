//! The consumer as a [`futures_core::Stream`] of records, for async code.
//!
//! Records already fetched are taken on the task's own thread, as `poll()` takes them, without
//! waiting ([`Consumer::poll_now`]). When there are none, or when `poll()` has other work first
//! (a rebalance and its listener, an auto-commit, a checkpoint), a thread of the stream's own
//! runs `poll()` and hands its batch over through a slot, so no runtime thread ever waits on
//! the network, a rebalance or a commit: the consumer's rebalance listener and commit
//! callbacks run on that thread (keep them short; hand async work to a channel). The stream
//! yields record by record and knows, per partition, the position after the records it
//! yielded: [`RecordStream::commit`] commits exactly those (never a record fetched but not
//! yet yielded).
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

use super::shared::Run;
use super::{Consumer, ConsumerError, ConsumerRecord, OffsetAndMetadata, PollNow, TopicPartition};
use crate::completion::{Completion, completion, set_waker};

/// How long the polling thread's `poll()` waits before it looks at the stream again.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// How often an idle polling thread runs the commit callbacks while some are pending (without:
/// it sleeps until the stream wants it, or `POLL_SLICE`, for a commit made through
/// [`RecordStream::consumer`]).
const CALLBACK_SLICE: Duration = Duration::from_millis(5);

/// What the polling thread and the stream share.
struct Shared {
    consumer: Consumer,
    slot: Mutex<Slot>,
    room: Condvar,
}

#[derive(Default)]
struct Slot {
    /// Polled by the thread, not taken by the stream yet (a batch, or an error).
    ready: VecDeque<Result<Taken, ConsumerError>>,
    waker: Option<Waker>,
    /// The stream has nothing and waits: the thread polls for it.
    wanted: bool,
    /// The thread is in `poll()`: the stream does not take records itself meanwhile (what it
    /// took would overtake the thread's batch).
    busy: bool,
    /// The stream is gone: give `returned` back and stop.
    stop: bool,
    /// Records the stream had and did not yield (given back at its drop or at a restore).
    returned: Vec<ConsumerRecord>,
}

impl Slot {
    /// The records of the batches polled and not taken (errors among them dropped).
    fn take_ready_records(&mut self) -> Vec<ConsumerRecord> {
        self.ready
            .drain(..)
            .filter_map(Result::ok)
            .flat_map(|t| t.records)
            .collect()
    }

    /// Whether the polling thread has something to do.
    fn work(&self) -> bool {
        self.stop || !self.returned.is_empty() || (self.wanted && self.ready.is_empty())
    }
}

/// A stream of the consumer's records (see the module documentation).
pub struct RecordStream {
    shared: Arc<Shared>,
    /// The batch being yielded.
    buf: Taken,
    /// The position after what was yielded, per partition, from the batches before `buf`.
    yielded: BTreeMap<TopicPartition, i64>,
    epoch: u64,
    /// The consumer was closed: the stream has ended.
    ended: bool,
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
            let mut slot = shared.slot.lock();
            slot.busy = true; // no thread will poll: the stream ends with this error
            slot.ready.push_back(Err(ConsumerError::illegal(format!(
                "cannot start the stream's polling thread: {e}"
            ))));
        }
        RecordStream {
            shared,
            buf: Taken::default(),
            yielded: BTreeMap::new(),
            epoch: crac_api::restore_epoch(),
            ended: false,
        }
    }
}

/// The polling thread: polls while the stream waits for records, gives back what the stream
/// returned, runs commit callbacks meanwhile, until the stream is gone.
fn poll_loop(s: &Shared) {
    loop {
        let mut slot = s.slot.lock();
        loop {
            if slot.stop {
                let returned = std::mem::take(&mut slot.returned);
                let pending = slot.take_ready_records();
                drop(slot);
                give_back(&s.consumer, returned.into_iter().chain(pending));
                return;
            }
            if !slot.returned.is_empty() {
                // Records a restored stream dropped: their partitions are read again before
                // anything more is taken from them.
                let returned = std::mem::take(&mut slot.returned);
                drop(slot);
                give_back(&s.consumer, returned.into_iter());
                slot = s.slot.lock();
                continue;
            }
            if slot.work() {
                break;
            }
            // Commit callbacks run on the thread that polls: they run here while the stream
            // takes its records itself, so commits complete.
            drop(slot);
            s.consumer.run_commit_callbacks();
            slot = s.slot.lock();
            if !slot.work() {
                // Looked at under the slot's lock, which `commit()` takes to notify.
                let slice = if s.consumer.commit_callbacks_pending() {
                    CALLBACK_SLICE
                } else {
                    POLL_SLICE
                };
                s.room.wait_for(&mut slot, slice);
            }
        }
        slot.busy = true;
        drop(slot);
        let mut runs = Vec::new();
        let r = s.consumer.poll_noting(POLL_SLICE, Some(&mut runs));
        let mut slot = s.slot.lock();
        slot.busy = false;
        let r = match r {
            Ok(records) if records.is_empty() => continue,
            Ok(records) => Ok(Taken::new(records.into_vec(), runs)),
            Err(e) => Err(e),
        };
        let closed = matches!(r, Err(ConsumerError::Closed));
        slot.wanted = false;
        slot.ready.push_back(r);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        if closed {
            slot.busy = true; // nobody polls any more
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
        yielded.extend(self.buf.positions());
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
            Ok(()) => {
                // An idle polling thread sleeps long while no callback is pending: it runs
                // this one within CALLBACK_SLICE. Under the slot's lock: the thread saw this
                // callback registered, or is waiting now.
                let _slot = self.shared.slot.lock();
                self.shared.room.notify_all();
                future
            }
            Err(e) => Completion::ready(Err(e)),
        }
    }

    /// Takes `batch` to yield from, the positions of what the last one yielded noted first.
    fn take(&mut self, batch: Taken) -> Taken {
        self.yielded.extend(self.buf.positions());
        std::mem::replace(&mut self.buf, batch)
    }

    /// A restored copy does not yield what the image held fetched: given back (module
    /// documentation).
    fn drop_if_restored(&mut self) {
        let now = crac_api::restore_epoch();
        if now == self.epoch {
            return;
        }
        self.epoch = now;
        let kept = self.take(Taken::default());
        let mut slot = self.shared.slot.lock();
        let ready = slot.take_ready_records();
        slot.returned.extend(kept.records.chain(ready));
        self.shared.room.notify_all();
    }
}

impl RecordStream {
    /// The next batch: the thread's, or records taken here without waiting (when the thread
    /// is not polling and has nothing to give back first); `Pending` asks the thread to poll.
    fn next_batch(&mut self, cx: &mut Context<'_>) -> Poll<Result<Taken, ConsumerError>> {
        let mut slot = self.shared.slot.lock();
        if let Some(r) = slot.ready.pop_front() {
            return Poll::Ready(r);
        }
        if !slot.busy && slot.returned.is_empty() {
            let mut runs = Vec::new();
            match self.shared.consumer.poll_now(cx.waker(), &mut runs) {
                PollNow::Records(r) => {
                    return Poll::Ready(r.map(|r| Taken::new(r.into_vec(), runs)));
                }
                PollNow::Waiting => return Poll::Pending,
                PollNow::PollDue => {}
            }
        }
        set_waker(&mut slot.waker, cx.waker());
        if !slot.wanted {
            slot.wanted = true;
            self.shared.room.notify_all();
        }
        Poll::Pending
    }
}

impl futures_core::Stream for RecordStream {
    type Item = Result<ConsumerRecord, ConsumerError>;

    // Inlined into the caller's loop (records are yielded millions of times a second): the
    // record is then built where the caller takes it, not copied out of a call's frame.
    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.epoch == crac_api::restore_epoch()
            && let Some(r) = self.buf.records.next()
        {
            return Poll::Ready(Some(Ok(r)));
        }
        self.poll_next_batch(cx)
    }
}

impl RecordStream {
    /// `poll_next` when the records taken are used up (or a restore is to be seen to).
    #[inline(never)]
    fn poll_next_batch(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ConsumerRecord, ConsumerError>>> {
        self.drop_if_restored();
        loop {
            if let Some(r) = self.buf.records.next() {
                return Poll::Ready(Some(Ok(r)));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            match self.next_batch(cx) {
                Poll::Ready(Ok(batch)) => {
                    self.take(batch);
                }
                Poll::Ready(Err(ConsumerError::Closed)) => {
                    self.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for RecordStream {
    fn drop(&mut self) {
        let mut slot = self.shared.slot.lock();
        slot.returned.extend(std::mem::take(&mut self.buf.records));
        slot.stop = true;
        self.shared.room.notify_all();
    }
}

/// A batch being yielded, and where each partition's run of records in it ends: what was
/// yielded is known from how far the batch was read, so yielding a record costs no bookkeeping.
#[derive(Default)]
struct Taken {
    records: std::vec::IntoIter<ConsumerRecord>,
    /// In batch order; the last one ends where the batch does.
    runs: Vec<Run>,
}

impl Taken {
    /// A batch and its runs, as they were noted while it was drained.
    fn new(batch: Vec<ConsumerRecord>, runs: Vec<Run>) -> Taken {
        debug_assert_eq!(runs.last().map_or(0, |r| r.end), batch.len());
        Taken {
            records: batch.into_iter(),
            runs,
        }
    }

    /// Per partition yielded from, the position after what was yielded: after a run's last
    /// record, or at the first record not yielded of a run read in part.
    fn positions(&self) -> impl Iterator<Item = (TopicPartition, i64)> + '_ {
        let len = self.runs.last().map_or(0, |run| run.end);
        let read = len - self.records.len();
        let next = self.records.as_slice().first().map(|r| r.offset);
        let mut start = 0;
        self.runs.iter().map_while(move |run| {
            if start >= read {
                return None;
            }
            start = run.end;
            let at = if run.end <= read {
                run.after_last
            } else {
                next?
            };
            Some((run.tp.clone(), at))
        })
    }
}

/// The future of [`RecordStream::commit`]: the commit's answer, once its callback has it.
pub type CommitFuture = Completion<Result<(), ConsumerError>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn record(topic: &Arc<str>, partition: i32, offset: i64) -> ConsumerRecord {
        ConsumerRecord::bare(topic.clone(), partition, offset)
    }

    /// A batch with its runs as `drain` notes them: (end, topic, partition, offset after).
    fn taken(batch: Vec<ConsumerRecord>, runs: &[(usize, &Arc<str>, i32, i64)]) -> Taken {
        let runs = runs
            .iter()
            .map(|&(end, topic, partition, after_last)| Run {
                end,
                tp: TopicPartition::new(topic.clone(), partition),
                after_last,
            })
            .collect();
        Taken::new(batch, runs)
    }

    fn positions(t: &Taken) -> Vec<(i32, i64)> {
        t.positions().map(|(tp, o)| (tp.partition, o)).collect()
    }

    #[test]
    fn positions_follow_how_far_a_batch_was_read() {
        let a: Arc<str> = "a".into();
        // Partition 0 with a gap (10, 11, 15), then partition 1, then partition 0 again.
        let batch = vec![
            record(&a, 0, 10),
            record(&a, 0, 11),
            record(&a, 0, 15),
            record(&a, 1, 3),
            record(&a, 1, 4),
            record(&a, 0, 16),
        ];
        let mut t = taken(batch, &[(3, &a, 0, 16), (5, &a, 1, 5), (6, &a, 0, 17)]);
        assert_eq!(positions(&t), vec![], "nothing read");
        t.records.next();
        assert_eq!(positions(&t), vec![(0, 11)]);
        t.records.next();
        assert_eq!(
            positions(&t),
            vec![(0, 15)],
            "at the first record not yielded"
        );
        t.records.next();
        assert_eq!(positions(&t), vec![(0, 16)], "after the run's last record");
        t.records.next();
        assert_eq!(positions(&t), vec![(0, 16), (1, 4)]);
        t.records.next();
        t.records.next();
        // A later run of a partition comes later: collected into a map, it wins.
        assert_eq!(positions(&t), vec![(0, 16), (1, 5), (0, 17)]);
        let map: BTreeMap<_, _> = t.positions().collect();
        assert_eq!(map[&TopicPartition::new(a.clone(), 0)], 17);
        assert_eq!(positions(&Taken::default()), vec![]);
    }

    #[test]
    fn same_partition_numbers_of_different_topics_are_different_runs() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut t = taken(
            vec![record(&a, 0, 1), record(&b, 0, 7)],
            &[(1, &a, 0, 2), (2, &b, 0, 8)],
        );
        t.records.next();
        t.records.next();
        let got: Vec<_> = t.positions().map(|(tp, o)| (tp.topic, o)).collect();
        assert_eq!(got, vec![(a, 2), (b, 8)]);
    }
}
