//! `RecordAccumulator`: per-partition queues of batches between `send()` and the sender.
//!
//! `send()` serializes the record straight into the last open batch of its partition (or a
//! new one), under one lock; the sender thread drains batches that are full, have lingered
//! `linger.ms`, or are wanted now (flush, close, checkpoint). `buffer.memory` bounds the bytes
//! held: `send()` blocks up to `max.block.ms` for room, for topic metadata, and while a
//! checkpoint holds the gate.
//!
//! The hot path of `send()` measures the record once, reads the wall clock once (only for a
//! record without a timestamp; the monotonic clock only when it has to wait), finds the topic
//! without hashing when it is the one the previous record went to, and allocates nothing per
//! record: callbacks of one closure type sit unboxed in their batch.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::task::Waker;

use super::delivery::{
    BatchCallbacks, BatchOutcome, BatchResult, DeliveryFuture, first_list_bytes,
};
use super::error::ProduceError;
use super::metrics::Counters;
use super::partitioner::{StickyPartition, partition_for_key};
use super::producer_id::ProducerIdAndEpoch;
use super::record::{ProducerRecord, RecordMetadata};
use crate::protocol::ErrorCode;
use crate::protocol::record::{BATCH_HEADER_SIZE, BatchWriter, Compression, RecordSize};

/// A batch with less room than this is full: the sender takes it at once, and the sticky
/// partitioner may leave its partition.
const FULL_MARGIN: usize = 64;

/// The type of "no callback" for [`RecordAccumulator::append`].
pub(crate) type NoCallback = fn(Result<RecordMetadata, ProduceError>);

/// A batch of records for one partition.
pub(crate) struct ProducerBatch {
    pub id: u64,
    pub topic: Arc<str>,
    pub partition: i32,
    pub writer: BatchWriter,
    /// Bytes of `buffer.memory` this batch's buffer holds (its allocation).
    pub reserved: usize,
    /// Bytes of `buffer.memory` its delivery callbacks hold (their list, boxed closures).
    pub callback_bytes: usize,
    pub created: Instant,
    pub result: Arc<BatchResult>,
    pub callbacks: BatchCallbacks,
    /// Times sent.
    pub attempts: u32,
    /// Not to be re-sent before this (retry backoff).
    pub retry_at: Option<Instant>,
    /// Base sequence, once assigned (idempotence); kept across retries.
    pub sequence: Option<i32>,
    /// The producer id and epoch sealed with `sequence`; kept across retries with it.
    pub producer: Option<ProducerIdAndEpoch>,
    /// An attempt went unanswered (connection lost, request timed out, response cut): the
    /// broker may have written it. Sent again only with the same id, epoch and sequence.
    pub unknown_outcome: bool,
    /// Completed (acknowledged, failed, or expired while in flight): its memory is released
    /// and a late answer only updates the sequence bookkeeping.
    pub done: bool,
    pub last_error: Option<Arc<str>>,
    /// No more appends (drained at least once).
    pub closed: bool,
}

impl std::fmt::Debug for ProducerBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "batch#{} {}-{} records={} seq={:?} attempts={}",
            self.id,
            self.topic,
            self.partition,
            self.writer.record_count(),
            self.sequence,
            self.attempts
        )
    }
}

impl ProducerBatch {
    pub fn record_count(&self) -> usize {
        self.writer.record_count() as usize
    }

    /// Whether the batch takes no more records, or has less than [`FULL_MARGIN`] bytes of
    /// room left: the sender sends it without waiting for `linger.ms`.
    pub fn is_full(&self, batch_size: usize) -> bool {
        self.closed || self.writer.size() + FULL_MARGIN > batch_size
    }

    /// Completes every record of the batch (handles and callbacks). Runs user callbacks: call
    /// it without holding the accumulator lock.
    pub fn complete(&mut self, outcome: BatchOutcome) {
        self.done = true;
        self.callbacks.complete(&self.result, &outcome);
        self.result.complete(outcome);
    }
}

impl Drop for ProducerBatch {
    /// A batch dropped without an outcome (only if the I/O thread died) still reports to
    /// every record: nobody waits forever.
    fn drop(&mut self) {
        if !self.result.is_complete() {
            self.complete(Err(ProduceError::Closed {
                reason: Some(Arc::from("the producer's I/O thread stopped")),
            }));
        }
    }
}

/// Settings the accumulator needs.
#[derive(Debug, Clone)]
pub(crate) struct AccumulatorConfig {
    pub batch_size: usize,
    /// How large the open batch of a held-back partition may grow (`batch.grow.max.bytes`
    /// within `max.request.size`); 0: never past `batch_size`.
    pub grow_max: usize,
    pub linger: Duration,
    pub buffer_memory: usize,
    pub max_block: Duration,
    pub max_request_size: usize,
    pub compression: Compression,
    pub ignore_keys: bool,
    /// Batches are transactional, and a partition's leave only once it is in the
    /// transaction ([`RecordAccumulator::mark_txn_added`]).
    pub transactional: bool,
}

/// Where a partition stands in the open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum TxnMark {
    /// Not written to in it.
    #[default]
    None,
    /// Written to; the sender is told ([`RecordAccumulator::take_new_txn_partitions`]).
    Reported,
    /// The coordinator knows it: its batches may leave.
    Added,
}

struct TopicQueues {
    name: Arc<str>,
    /// Partition count; 0 while unknown.
    partitions: usize,
    /// A topic error that makes sending pointless (authorization, invalid name).
    error: Option<ErrorCode>,
    /// Partitions with a leader, for the sticky partitioner.
    available: Vec<i32>,
    queues: Vec<VecDeque<ProducerBatch>>,
    sticky: StickyPartition,
    /// Per partition, for a transactional producer (grown on demand).
    txn: Vec<TxnMark>,
    /// Per partition: the last drain found a batch to send but had to leave it (the leader's
    /// in-flight window full, the partition held back, a retry's backoff, the request full).
    /// Its open batch may then grow past `batch.size`, as it may while another batch of the
    /// partition waits ahead of it (grown on demand).
    held: Vec<bool>,
}

impl TopicQueues {
    fn new(name: Arc<str>) -> Self {
        Self {
            name,
            partitions: 0,
            error: None,
            available: Vec::new(),
            queues: Vec::new(),
            sticky: StickyPartition::default(),
            txn: Vec::new(),
            held: Vec::new(),
        }
    }

    fn is_held(&self, p: usize) -> bool {
        self.held.get(p).copied().unwrap_or(false)
    }

    fn set_held(&mut self, p: usize, held: bool) {
        if self.held.len() <= p {
            if !held {
                return;
            }
            self.held.resize(p + 1, false);
        }
        self.held[p] = held;
    }

    fn txn_mark(&self, p: usize) -> TxnMark {
        self.txn.get(p).copied().unwrap_or_default()
    }

    fn set_txn_mark(&mut self, p: usize, m: TxnMark) {
        if self.txn.len() <= p {
            self.txn.resize(p + 1, TxnMark::None);
        }
        self.txn[p] = m;
    }
}

/// Whether every batch of a partition's queue is full (or there is none): only the last one
/// can have room.
fn all_batches_full(queue: &VecDeque<ProducerBatch>, batch_size: usize) -> bool {
    queue.back().is_none_or(|b| b.is_full(batch_size))
}

struct State {
    /// Topics in the order they became known; never removed, so an index stays valid.
    topics: Vec<TopicQueues>,
    index: HashMap<Arc<str>, usize>,
    /// The topic of the last lookup (most producers send to one topic): found again by
    /// comparing the name, without hashing it.
    last_topic: usize,
    used: usize,
    next_id: u64,
    incomplete: BTreeSet<u64>,
    incomplete_records: usize,
    flush_until: u64,
    drain_all: bool,
    closed: Option<Option<Arc<str>>>,
    /// Why no broker can be reached with the security settings (TLS, SASL), until a
    /// connection succeeds: `send()`s waiting for metadata fail with it at once.
    security_error: Option<Arc<str>>,
    wanted: Vec<Arc<str>>,
    rng: u64,
    drain_rotation: usize,
    /// Partitions written to for the first time in the open transaction, for the sender.
    new_txn_partitions: Vec<(Arc<str>, i32)>,
}

impl State {
    fn find_topic(&mut self, name: &str) -> Option<usize> {
        if let Some(t) = self.topics.get(self.last_topic)
            && *t.name == *name
        {
            return Some(self.last_topic);
        }
        let i = *self.index.get(name)?;
        self.last_topic = i;
        Some(i)
    }

    fn topic_mut(&mut self, name: &Arc<str>) -> &mut TopicQueues {
        let i = match self.find_topic(name) {
            Some(i) => i,
            None => {
                self.topics.push(TopicQueues::new(name.clone()));
                self.index.insert(name.clone(), self.topics.len() - 1);
                self.topics.len() - 1
            }
        };
        &mut self.topics[i]
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// What the sender got from [`RecordAccumulator::drain`].
#[derive(Debug, Default)]
pub(crate) struct Drained {
    /// Batches per leader node.
    pub batches: HashMap<i32, Vec<ProducerBatch>>,
    /// Leaders that have sendable data but cannot take a request now.
    pub nodes_not_ready: Vec<i32>,
    /// Some sendable partition has no known leader.
    pub unknown_leader: bool,
    /// When the earliest not-yet-sendable batch becomes sendable.
    pub next_ready: Option<Instant>,
}

/// How an append that cannot go on now waits.
pub(crate) enum Wait<'a> {
    /// Blocks the calling thread, up to `max.block.ms`.
    Block,
    /// Returns [`Append::Pending`]; the task of `waker` (if any yet) is woken when it may go
    /// on. `epoch`: the restore epoch of the send's first attempt.
    Task {
        waker: Option<&'a Waker>,
        epoch: u64,
    },
}

/// What an append did.
pub(crate) enum Append {
    /// Accepted: the report, unless a callback has it.
    Done(Option<DeliveryFuture>),
    /// Not accepted yet (async only): nothing was written.
    Pending,
}

/// What [`RecordAccumulator::hold`] did.
enum Held {
    /// Waited: look again.
    Again,
    /// `max.block.ms` passed.
    TimedOut,
    /// The task is registered (async): return.
    Pending,
}

/// The accumulator shared by `send()` callers and the sender thread.
pub(crate) struct RecordAccumulator {
    config: AccumulatorConfig,
    state: Mutex<State>,
    /// Signalled when memory is freed, metadata arrives, the gate opens or the producer closes.
    changed: Condvar,
    /// Signalled when batches complete (flush, drain).
    completed: Condvar,
    /// The tasks of async `send`s and flushes waiting for what `changed` or `completed` signal
    /// (woken with them; a stale one costs a spurious poll).
    wakers: Mutex<Vec<Waker>>,
    /// The checkpoint gate: while set, `send()` waits.
    paused: AtomicBool,
    /// `send()` waits for the metadata of a topic in `wanted`.
    wanted_pending: AtomicBool,
    /// Total shift of deadlines by restores (ns), so blocked `send()`s rebase too.
    rebased_ns: AtomicU64,
    /// Draws the sticky partitioner's generator afresh at first use and after every restore.
    reseed: crac_api::ReseedGuard,
    counters: Arc<Counters>,
    wake: Box<dyn Fn() + Send + Sync>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl RecordAccumulator {
    pub fn new(
        config: AccumulatorConfig,
        counters: Arc<Counters>,
        wake: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        Self {
            config,
            state: Mutex::new(State {
                topics: Vec::new(),
                index: HashMap::new(),
                last_topic: 0,
                used: 0,
                next_id: 1,
                incomplete: BTreeSet::new(),
                incomplete_records: 0,
                flush_until: 0,
                drain_all: false,
                closed: None,
                security_error: None,
                wanted: Vec::new(),
                rng: 1,
                drain_rotation: 0,
                new_txn_partitions: Vec::new(),
            }),
            changed: Condvar::new(),
            completed: Condvar::new(),
            wakers: Mutex::new(Vec::new()),
            paused: AtomicBool::new(false),
            wanted_pending: AtomicBool::new(false),
            rebased_ns: AtomicU64::new(0),
            reseed: crac_api::ReseedGuard::new(),
            counters,
            wake,
        }
    }

    fn rebased(&self) -> Duration {
        Duration::from_nanos(self.rebased_ns.load(Ordering::Acquire))
    }

    /// Wakes the threads and the tasks waiting for a change.
    fn notify_changed(&self) {
        self.changed.notify_all();
        self.wake_tasks();
    }

    /// Wakes every async waiter (they check again what they wait for).
    fn wake_tasks(&self) {
        let wakers = std::mem::take(&mut *self.wakers.lock());
        for w in wakers {
            w.wake();
        }
    }

    /// Registers a task to wake at the next change, once.
    fn register(&self, waker: &Waker) {
        let mut ws = self.wakers.lock();
        if !ws.iter().any(|w| w.will_wake(waker)) {
            ws.push(waker.clone());
        }
    }

    /// Waits on `changed` until `deadline` (shifted by restores that happened meanwhile).
    /// Returns false on timeout.
    fn wait(
        &self,
        st: &mut MutexGuard<'_, State>,
        deadline: Instant,
        rebase_at_start: Duration,
    ) -> bool {
        let shift = self.rebased().saturating_sub(rebase_at_start);
        let deadline = deadline + shift;
        if Instant::now() >= deadline {
            return false;
        }
        self.changed.wait_until(st, deadline);
        true
    }

    /// Waits on `changed` until `max.block.ms` after the first wait of this `send()`; the
    /// monotonic clock is read here, not on the path that does not wait. Returns false on
    /// timeout.
    fn block(
        &self,
        st: &mut MutexGuard<'_, State>,
        since: &mut Option<(Instant, Duration)>,
    ) -> bool {
        let (start, rebased) = *since.get_or_insert_with(|| (Instant::now(), self.rebased()));
        self.wait(st, start + self.config.max_block, rebased)
    }

    /// What a `send` that cannot go on now does: block the thread (`max.block.ms`), or, async,
    /// register its task (if it has one yet) and return.
    fn hold(
        &self,
        st: &mut MutexGuard<'_, State>,
        wait: &mut Wait<'_>,
        since: &mut Option<(Instant, Duration)>,
    ) -> Held {
        match wait {
            Wait::Block => {
                if self.block(st, since) {
                    Held::Again
                } else {
                    Held::TimedOut
                }
            }
            Wait::Task { waker, .. } => {
                if let Some(w) = waker {
                    self.register(w);
                }
                Held::Pending
            }
        }
    }

    /// The most bytes the open batch may hold with the next record: `batch.size` (`limit`),
    /// or, while its partition is held back, up to `grow_max` if `buffer.memory` (`used` of
    /// it) has room for what the batch's buffer would take past its reservation (its
    /// allocation after the record, `capacity_after`, not only the bytes it holds).
    fn grow_limit(
        &self,
        held: bool,
        capacity_after: usize,
        reserved: usize,
        used: usize,
        limit: usize,
    ) -> usize {
        let grow_max = self.config.grow_max;
        if !held || grow_max <= limit {
            return limit;
        }
        let extra = capacity_after.saturating_sub(reserved);
        if used + extra > self.config.buffer_memory {
            return limit;
        }
        grow_max
    }

    /// Appends a record: the hot path of `send()`. With a callback, the callback gets the
    /// outcome and no report is returned; without one, the report is returned.
    pub fn append<F>(
        &self,
        rec: &ProducerRecord<'_>,
        callback: Option<F>,
    ) -> Result<Option<DeliveryFuture>, ProduceError>
    where
        F: FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    {
        match self.append_with(rec, callback, &mut Wait::Block)? {
            Append::Done(report) => Ok(report),
            Append::Pending => unreachable!("a blocking append never returns pending"),
        }
    }

    /// [`append`](Self::append) that waits as `wait` says: blocking, or (async) returning
    /// [`Append::Pending`] with the task registered to be woken when it may go on.
    pub fn append_with<F>(
        &self,
        rec: &ProducerRecord<'_>,
        mut callback: Option<F>,
        wait: &mut Wait<'_>,
    ) -> Result<Append, ProduceError>
    where
        F: FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    {
        // The record is measured once; the limits check an upper bound of its size in a batch.
        let size = RecordSize::new(rec.key, rec.value, rec.headers);
        let estimate = size.encoded(0, 0) + 12;
        let needed = estimate + BATCH_HEADER_SIZE;
        if needed > self.config.max_request_size {
            return Err(ProduceError::RecordTooLarge {
                size: needed,
                limit: self.config.max_request_size,
                limit_name: "max.request.size",
            });
        }
        if needed > self.config.buffer_memory {
            return Err(ProduceError::RecordTooLarge {
                size: needed,
                limit: self.config.buffer_memory,
                limit_name: "buffer.memory",
            });
        }
        let timestamp = rec.timestamp.unwrap_or_else(now_ms);
        let batch_size = self.config.batch_size;
        let limit = batch_size.max(BATCH_HEADER_SIZE);
        // How many records like this one a batch holds, at most: room for their callbacks is
        // reserved at the first one.
        let expected_records = (limit - BATCH_HEADER_SIZE) / size.encoded(0, 0) + 1;
        // When send() first had to wait (and the restore shift then), for max.block.ms.
        let mut since: Option<(Instant, Duration)> = None;
        let blocked =
            |what: String, since: Option<(Instant, Duration)>| ProduceError::MaxBlockExceeded {
                waited: since.map_or(Duration::ZERO, |(start, _)| start.elapsed()),
                waiting_for: Arc::from(what),
            };
        // A send() that waits across a checkpoint must not complete in every restored copy of
        // the image (each would send the same record): there it fails, typed. (An async send
        // keeps the epoch of its first attempt across its polls.)
        let epoch = match wait {
            Wait::Task { epoch, .. } => *epoch,
            Wait::Block => crac_api::restore_epoch(),
        };
        let mut st = self.state.lock();
        loop {
            if let Some(reason) = &st.closed {
                return Err(ProduceError::Closed {
                    reason: reason.clone(),
                });
            }
            if crac_api::restore_epoch() != epoch {
                return Err(ProduceError::RestoredWhileWaiting {
                    waited: since.map_or(Duration::ZERO, |(start, _)| start.elapsed()),
                });
            }
            if self.paused.load(Ordering::Acquire) {
                match self.hold(&mut st, wait, &mut since) {
                    Held::Again => continue,
                    Held::Pending => return Ok(Append::Pending),
                    Held::TimedOut => {
                        return Err(blocked(
                            "the checkpoint in progress to finish".into(),
                            since,
                        ));
                    }
                }
            }
            let ti = match st.find_topic(rec.topic) {
                Some(i) if st.topics[i].error.is_some() => {
                    return Err(ProduceError::Topic {
                        topic: Arc::from(rec.topic),
                        code: st.topics[i].error.expect("checked"),
                    });
                }
                Some(i) if st.topics[i].partitions > 0 => i,
                _ => {
                    if let Some(e) = &st.security_error {
                        return Err(ProduceError::Security(e.clone()));
                    }
                    if !st.wanted.iter().any(|w| &**w == rec.topic) {
                        st.wanted.push(Arc::from(rec.topic));
                    }
                    self.wanted_pending.store(true, Ordering::Release);
                    (self.wake)();
                    match self.hold(&mut st, wait, &mut since) {
                        Held::Again => continue,
                        Held::Pending => return Ok(Append::Pending),
                        Held::TimedOut => {
                            return Err(blocked(format!("metadata of topic {}", rec.topic), since));
                        }
                    }
                }
            };
            let partitions = st.topics[ti].partitions;
            let explicit = match (rec.partition, rec.key) {
                (Some(p), _) => {
                    if p < 0 || p as usize >= partitions {
                        return Err(ProduceError::UnknownPartition {
                            topic: Arc::from(rec.topic),
                            partition: p,
                            partitions,
                        });
                    }
                    Some(p)
                }
                (None, Some(key)) if !self.config.ignore_keys => {
                    Some(partition_for_key(key, partitions))
                }
                _ => None,
            };
            let sticky = explicit.is_none();
            let partition = match explicit {
                Some(p) => p,
                None => {
                    // The sticky partitioner's generator: each clone of an image draws its own.
                    if self.reseed.needs_reseed() {
                        st.rng = crac_api::os_random_u64() | 1;
                    }
                    let State { topics, rng, .. } = &mut *st;
                    let mut rand = || xorshift(rng);
                    let tq = &mut topics[ti];
                    let mut p = tq.sticky.partition(partitions, &tq.available, &mut rand);
                    // Java's check before appending: a partition whose batches are all full
                    // is left once it took batch.size bytes.
                    if all_batches_full(&tq.queues[p as usize], batch_size)
                        && tq.sticky.switch_if_due(batch_size)
                    {
                        p = tq.sticky.partition(partitions, &tq.available, &mut rand);
                    }
                    p
                }
            };
            let used = st.used;
            let tq = &mut st.topics[ti];
            let queue = &tq.queues[partition as usize];
            // The open batch cannot leave now: the last drain had to leave this partition's
            // batch behind, or another batch of it already waits ahead of this one.
            let held = tq.is_held(partition as usize) || queue.len() >= 2;
            let queue = &mut tq.queues[partition as usize];
            // Into the open batch if it has room.
            // A callback list that must grow to take this record's callback grows only if
            // buffer.memory has room (else the batch closes and a new one waits for room).
            let callback_room = |b: &ProducerBatch| {
                callback.is_none()
                    || used + b.callbacks.growth_on_push() <= self.config.buffer_memory
            };
            if let Some(b) = queue.back_mut()
                && !b.closed
                && callback_room(b)
            {
                let before = b.writer.size();
                let cap_after = b.writer.capacity_after(estimate);
                let lim = self.grow_limit(held, cap_after, b.reserved, used, limit);
                let appended =
                    b.writer
                        .try_append(timestamp, rec.key, rec.value, rec.headers, size, lim);
                if let Some(index) = appended {
                    // A batch whose buffer grew past its reservation takes the rest from
                    // buffer.memory: what it allocated, not only what it holds.
                    let mut grown = b.writer.capacity().saturating_sub(b.reserved);
                    b.reserved += grown;
                    let was_full = before + FULL_MARGIN > batch_size;
                    let full = b.is_full(batch_size);
                    let report = match callback.take() {
                        Some(cb) => {
                            let bytes = b.callbacks.push(
                                index,
                                timestamp,
                                cb,
                                expected_records,
                                batch_size,
                            );
                            b.callback_bytes += bytes;
                            grown += bytes;
                            None
                        }
                        None => Some(DeliveryFuture::pending(b.result.clone(), index, timestamp)),
                    };
                    if sticky {
                        let bytes = b.writer.size() - before;
                        tq.sticky.appended(bytes, full, batch_size);
                    }
                    st.incomplete_records += 1;
                    if grown > 0 {
                        st.used += grown;
                        Counters::set(&self.counters.buffer_used, st.used as u64);
                    }
                    drop(st);
                    Counters::add(&self.counters.records_queued, 1);
                    // Once, when it fills: a growing batch does not wake the sender per record.
                    if full && !was_full {
                        (self.wake)();
                    }
                    return Ok(Append::Done(report));
                }
                b.closed = true;
                // Every batch of the partition is full now: Java's check before a new batch.
                if sticky && tq.sticky.switch_if_due(batch_size) {
                    continue;
                }
            }
            // A new batch, if buffer.memory has room.
            let alloc = batch_size.max(needed);
            let first_callbacks = if callback.is_some() {
                first_list_bytes::<F>(expected_records, batch_size)
            } else {
                0
            };
            if st.used + alloc + first_callbacks > self.config.buffer_memory {
                (self.wake)();
                match self.hold(&mut st, wait, &mut since) {
                    Held::Again => continue,
                    Held::Pending => return Ok(Append::Pending),
                    Held::TimedOut => {
                        return Err(blocked(
                            format!(
                                "buffer memory (buffer.memory={} bytes in use by unsent records)",
                                self.config.buffer_memory
                            ),
                            since,
                        ));
                    }
                }
            }
            st.used += alloc;
            Counters::set(&self.counters.buffer_used, st.used as u64);
            let id = st.next_id;
            st.next_id += 1;
            st.incomplete.insert(id);
            st.incomplete_records += 1;
            let State {
                topics,
                new_txn_partitions,
                ..
            } = &mut *st;
            let tq = &mut topics[ti];
            if self.config.transactional && tq.txn_mark(partition as usize) == TxnMark::None {
                tq.set_txn_mark(partition as usize, TxnMark::Reported);
                new_txn_partitions.push((tq.name.clone(), partition));
            }
            let mut writer = BatchWriter::new(alloc, self.config.compression);
            writer.set_transactional(self.config.transactional);
            let index = writer
                .try_append(timestamp, rec.key, rec.value, rec.headers, size, usize::MAX)
                .expect("an empty batch takes any record");
            let result = BatchResult::new(tq.name.clone(), partition);
            let mut batch = ProducerBatch {
                id,
                topic: tq.name.clone(),
                partition,
                writer,
                reserved: alloc,
                callback_bytes: 0,
                created: Instant::now(),
                result,
                callbacks: BatchCallbacks::default(),
                attempts: 0,
                retry_at: None,
                sequence: None,
                producer: None,
                unknown_outcome: false,
                done: false,
                last_error: None,
                closed: false,
            };
            let report = match callback.take() {
                Some(cb) => {
                    let bytes =
                        batch
                            .callbacks
                            .push(index, timestamp, cb, expected_records, batch_size);
                    batch.callback_bytes = bytes;
                    None
                }
                None => Some(DeliveryFuture::pending(
                    batch.result.clone(),
                    index,
                    timestamp,
                )),
            };
            if sticky {
                tq.sticky
                    .appended(batch.writer.size(), batch.is_full(batch_size), batch_size);
            }
            let callback_bytes = batch.callback_bytes;
            tq.queues[partition as usize].push_back(batch);
            if callback_bytes > 0 {
                st.used += callback_bytes;
                Counters::set(&self.counters.buffer_used, st.used as u64);
            }
            drop(st);
            Counters::add(&self.counters.records_queued, 1);
            (self.wake)();
            return Ok(Append::Done(report));
        }
    }

    /// Topics `send()` is waiting for (taken by the sender, which asks the brokers).
    pub fn take_wanted_topics(&self) -> Vec<Arc<str>> {
        if !self.wanted_pending.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut self.state.lock().wanted)
    }

    /// Publishes the partition count and leader availability of a topic from metadata.
    /// Releases `send()`s waiting for it.
    pub fn update_topic(
        &self,
        topic: &Arc<str>,
        partitions: usize,
        available: Vec<i32>,
        error: Option<ErrorCode>,
    ) {
        let mut st = self.state.lock();
        let tq = st.topic_mut(topic);
        if partitions > tq.partitions {
            tq.queues.resize_with(partitions, VecDeque::new);
            tq.partitions = partitions;
        }
        tq.available = available;
        tq.error = error;
        drop(st);
        self.notify_changed();
    }

    /// Takes the batches that can be sent now, per leader, each node's request bounded by
    /// `max.request.size`. `can_send` lets the sender hold back a partition (idempotence
    /// ordering).
    pub fn drain(
        &self,
        now: Instant,
        leader: impl Fn(&str, i32) -> Option<i32>,
        node_ready: impl Fn(i32) -> bool,
        mut can_send: impl FnMut(&ProducerBatch, i32) -> bool,
    ) -> Drained {
        let mut out = Drained::default();
        let mut sizes: HashMap<i32, usize> = HashMap::new();
        let mut st = self.state.lock();
        let linger = self.config.linger;
        let flush_until = st.flush_until;
        let drain_all = st.drain_all || st.closed.is_some();
        st.drain_rotation = st.drain_rotation.wrapping_add(1);
        let rotation = st.drain_rotation;
        for tq in st.topics.iter_mut() {
            let topic = tq.name.clone();
            let n = tq.queues.len();
            for k in 0..n {
                let p = (k + rotation) % n;
                let in_txn = !self.config.transactional || tq.txn_mark(p) == TxnMark::Added;
                let queue = &mut tq.queues[p];
                // Some(true): a batch was due but had to stay (the partition is held);
                // Some(false): one left.
                let held: Option<bool> = 'partition: {
                    let Some(front) = queue.front() else {
                        break 'partition None;
                    };
                    if let Some(t) = front.retry_at.filter(|t| now < *t) {
                        out.next_ready = Some(out.next_ready.map_or(t, |x| x.min(t)));
                        break 'partition Some(true);
                    }
                    let sendable = drain_all
                        || queue.len() > 1
                        || front.is_full(self.config.batch_size)
                        || front.id <= flush_until
                        || now >= front.created + linger;
                    if !sendable {
                        let t = front.created + linger;
                        out.next_ready = Some(out.next_ready.map_or(t, |x| x.min(t)));
                        break 'partition None;
                    }
                    let Some(node) = leader(&topic, p as i32) else {
                        out.unknown_leader = true;
                        break 'partition None;
                    };
                    if !in_txn {
                        break 'partition None; // not in the transaction yet
                    }
                    if !node_ready(node) {
                        if !out.nodes_not_ready.contains(&node) {
                            out.nodes_not_ready.push(node);
                        }
                        break 'partition Some(true);
                    }
                    if !can_send(front, node) {
                        break 'partition Some(true);
                    }
                    let size = sizes.entry(node).or_insert(0);
                    let bsize = front.writer.size();
                    if *size > 0 && *size + bsize > self.config.max_request_size {
                        break 'partition Some(true);
                    }
                    *size += bsize;
                    let mut b = queue.pop_front().expect("front exists");
                    b.closed = true;
                    out.batches.entry(node).or_default().push(b);
                    Some(false)
                };
                if let Some(h) = held {
                    tq.set_held(p, h);
                }
            }
        }
        out
    }

    /// Puts a batch back for a retry. Batches with sequence numbers go back in sequence order
    /// ahead of the new ones, so a partition's records keep their order.
    pub fn reenqueue(&self, batch: ProducerBatch) {
        let mut st = self.state.lock();
        let tq = st.topic_mut(&batch.topic);
        let p = batch.partition as usize;
        if tq.queues.len() <= p {
            tq.queues.resize_with(p + 1, VecDeque::new);
        }
        let q = &mut tq.queues[p];
        let pos = match batch.sequence {
            Some(seq) => q
                .iter()
                .position(|b| b.sequence.is_none_or(|s| s > seq))
                .unwrap_or(q.len()),
            None => q
                .iter()
                .position(|b| b.sequence.is_none())
                .unwrap_or(q.len()),
        };
        q.insert(pos, batch);
    }

    /// Removes and returns the queued batches older than `delivery.timeout.ms`.
    pub fn expire(&self, now: Instant, delivery_timeout: Duration) -> Vec<ProducerBatch> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for tq in st.topics.iter_mut() {
            for q in &mut tq.queues {
                while q
                    .front()
                    .is_some_and(|b| now >= b.created + delivery_timeout)
                {
                    out.extend(q.pop_front());
                }
            }
        }
        out
    }

    /// Removes and returns every queued batch (close without delivery).
    pub fn take_all(&self) -> Vec<ProducerBatch> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for tq in st.topics.iter_mut() {
            for q in &mut tq.queues {
                out.extend(q.drain(..));
            }
        }
        out
    }

    /// Removes and returns the queued batches that were never sent (an aborted transaction's;
    /// those sent before wait for their answer: their sequence numbers are taken).
    pub fn take_unsent(&self) -> Vec<ProducerBatch> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for tq in st.topics.iter_mut() {
            for q in &mut tq.queues {
                let (unsent, kept): (VecDeque<_>, VecDeque<_>) =
                    q.drain(..).partition(|b| b.sequence.is_none());
                *q = kept;
                out.extend(unsent);
            }
        }
        out
    }

    /// Partitions written to for the first time in the open transaction since the last call.
    pub fn take_new_txn_partitions(&self) -> Vec<(Arc<str>, i32)> {
        if !self.config.transactional {
            return Vec::new();
        }
        std::mem::take(&mut self.state.lock().new_txn_partitions)
    }

    /// The coordinator added these partitions to the transaction: their batches may leave.
    pub fn mark_txn_added(&self, partitions: &[(Arc<str>, i32)]) {
        let mut st = self.state.lock();
        for (t, p) in partitions {
            if let Some(i) = st.find_topic(t) {
                st.topics[i].set_txn_mark(*p as usize, TxnMark::Added);
            }
        }
    }

    /// The transaction ended: no partition is in one. Batches still queued (a `send()` that
    /// raced the end) belong to the next transaction and are reported again.
    pub fn reset_txn(&self) {
        let mut st = self.state.lock();
        let State {
            topics,
            new_txn_partitions,
            ..
        } = &mut *st;
        new_txn_partitions.clear();
        for tq in topics.iter_mut() {
            tq.txn.clear();
            for p in 0..tq.queues.len() {
                if !tq.queues[p].is_empty() {
                    tq.set_txn_mark(p, TxnMark::Reported);
                    new_txn_partitions.push((tq.name.clone(), p as i32));
                }
            }
        }
    }

    /// Clears the sequence numbers of queued batches (a new producer id starts from 0).
    pub fn clear_sequences(&self) {
        let mut st = self.state.lock();
        for tq in st.topics.iter_mut() {
            for q in &mut tq.queues {
                for b in q.iter_mut() {
                    b.sequence = None;
                    b.producer = None;
                }
            }
        }
    }

    /// Whether a queued batch of the partition has a sequence (a retry waiting).
    pub fn has_queued_sequences(&self, topic: &str, partition: i32) -> bool {
        let mut st = self.state.lock();
        let Some(i) = st.find_topic(topic) else {
            return false;
        };
        st.topics[i]
            .queues
            .get(usize::try_from(partition).unwrap_or(usize::MAX))
            .is_some_and(|q| q.front().is_some_and(|b| b.sequence.is_some()))
    }

    /// The partition's sequences start again under a new epoch: its queued batches lose
    /// theirs and get new ones when sent. With `fail_unknown`, those an earlier attempt of
    /// which went unanswered are taken out and returned instead (the broker may have written
    /// them before it lost the producer's state; sent under the new epoch they could be
    /// written twice).
    pub fn restart_sequences(
        &self,
        topic: &str,
        partition: i32,
        fail_unknown: bool,
    ) -> Vec<ProducerBatch> {
        let mut st = self.state.lock();
        let Some(i) = st.find_topic(topic) else {
            return Vec::new();
        };
        let Some(q) = st.topics[i]
            .queues
            .get_mut(usize::try_from(partition).unwrap_or(usize::MAX))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(q.len());
        for mut b in q.drain(..) {
            if b.sequence.is_some() && fail_unknown && b.unknown_outcome {
                out.push(b);
                continue;
            }
            b.sequence = None;
            b.producer = None;
            b.unknown_outcome = false;
            kept.push_back(b);
        }
        *q = kept;
        out
    }

    /// Releases a completed batch's memory and wakes flushes and blocked senders.
    pub fn deallocate(&self, batch: &ProducerBatch) {
        self.release(std::slice::from_ref(batch));
    }

    /// Releases the memory of completed batches (a whole produce response's) under one lock
    /// and wakes flushes and blocked senders once. Their buffers are freed first: what
    /// `buffer.memory` gets back is free when a waiting sender takes it (given back before,
    /// a response's batches, up to a megabyte each, were memory beside `buffer.memory` until
    /// dropped).
    pub fn deallocate_all(&self, batches: &mut [ProducerBatch]) {
        batches.iter_mut().for_each(|b| b.writer.free());
        self.release(batches);
    }

    fn release(&self, batches: &[ProducerBatch]) {
        if batches.is_empty() {
            return;
        }
        let mut records = 0;
        let mut st = self.state.lock();
        for batch in batches {
            st.used = st
                .used
                .saturating_sub(batch.reserved + batch.callback_bytes);
            st.incomplete.remove(&batch.id);
            records += batch.record_count();
        }
        st.incomplete_records = st.incomplete_records.saturating_sub(records);
        Counters::set(&self.counters.buffer_used, st.used as u64);
        drop(st);
        self.counters
            .records_queued
            .fetch_sub(records as u64, Ordering::Relaxed);
        self.changed.notify_all();
        self.completed.notify_all();
        self.wake_tasks();
    }

    /// Records accepted and not completed.
    pub fn incomplete_records(&self) -> usize {
        self.state.lock().incomplete_records
    }

    /// Whether every accepted batch has completed.
    pub fn all_complete(&self) -> bool {
        self.state.lock().incomplete.is_empty()
    }

    /// Makes every batch existing now sendable and returns the id to wait for.
    pub fn begin_flush(&self) -> u64 {
        let mut st = self.state.lock();
        st.flush_until = st.next_id - 1;
        st.flush_until
    }

    /// Whether every batch up to `id` completed; if not, the task of `waker` is woken when
    /// batches complete (an async flush).
    pub fn poll_flush(&self, id: u64, waker: &Waker) -> bool {
        let st = self.state.lock();
        if st.incomplete.first().is_none_or(|&first| first > id) {
            return true;
        }
        // Registered under the state lock: a completion after this check wakes it.
        self.register(waker);
        false
    }

    /// Waits until every batch up to `id` completed, or `deadline`.
    pub fn await_flush(&self, id: u64, deadline: Option<Instant>) -> Result<(), usize> {
        let mut st = self.state.lock();
        loop {
            if st.incomplete.first().is_none_or(|&first| first > id) {
                return Ok(());
            }
            match deadline {
                None => self.completed.wait(&mut st),
                Some(d) => {
                    if self.completed.wait_until(&mut st, d).timed_out() {
                        return Err(st.incomplete_records);
                    }
                }
            }
        }
    }

    /// Everything queued is sendable now (close, checkpoint drain) or not.
    pub fn set_drain_all(&self, on: bool) {
        self.state.lock().drain_all = on;
    }

    /// Refuses new records from now on.
    pub fn close(&self, reason: Option<Arc<str>>) {
        self.state.lock().closed = Some(reason);
        self.notify_changed();
    }

    /// Records (or clears) why the cluster cannot be reached with the security settings, and
    /// wakes the `send()`s waiting for metadata.
    pub fn set_security_error(&self, e: Option<Arc<str>>) {
        let mut st = self.state.lock();
        if st.security_error.is_some() || e.is_some() {
            st.security_error = e;
            drop(st);
            self.notify_changed();
        }
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed.is_some()
    }

    /// Closes the checkpoint gate: `send()` waits from now on. Taking the lock orders this
    /// with appends: once it returns, no append is in progress and none will start.
    pub fn pause(&self) {
        let _st = self.state.lock();
        self.paused.store(true, Ordering::Release);
    }

    /// Opens the gate and releases waiting `send()`s.
    pub fn resume(&self) {
        {
            let _st = self.state.lock();
            self.paused.store(false, Ordering::Release);
        }
        self.notify_changed();
    }

    /// Shifts the deadlines of queued batches and of blocked `send()`s by `by`.
    pub fn rebase(&self, by: Duration) {
        if by.is_zero() {
            return;
        }
        let mut st = self.state.lock();
        for tq in st.topics.iter_mut() {
            for q in &mut tq.queues {
                for b in q.iter_mut() {
                    b.created += by;
                    if let Some(t) = b.retry_at.as_mut() {
                        *t += by;
                    }
                }
            }
        }
        self.rebased_ns
            .fetch_add(by.as_nanos().min(u64::MAX as u128) as u64, Ordering::AcqRel);
        drop(st);
        self.notify_changed();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const TS: i64 = 1_700_000_000_000;

    /// A batch of `records` one-byte records, as the sender gets it from a drain.
    pub(crate) fn batch(topic: &str, partition: i32, records: usize) -> ProducerBatch {
        let mut writer = BatchWriter::new(1024, Compression::None);
        for _ in 0..records {
            writer.append(TS, None, Some(b"x"), &[]);
        }
        ProducerBatch {
            id: 0,
            topic: Arc::from(topic),
            partition,
            writer,
            reserved: 0,
            callback_bytes: 0,
            created: Instant::now(),
            result: BatchResult::new(Arc::from(topic), partition),
            callbacks: BatchCallbacks::default(),
            attempts: 0,
            retry_at: None,
            sequence: None,
            producer: None,
            unknown_outcome: false,
            done: true, // nobody waits for it
            last_error: None,
            closed: true,
        }
    }

    fn accumulator(batch_size: usize) -> RecordAccumulator {
        growing_accumulator(batch_size, 0, 64 << 20)
    }

    fn growing_accumulator(batch_size: usize, grow_max: usize, buffer: usize) -> RecordAccumulator {
        let acc = RecordAccumulator::new(
            AccumulatorConfig {
                batch_size,
                grow_max,
                linger: Duration::from_secs(3600),
                buffer_memory: buffer,
                max_block: Duration::from_millis(50),
                max_request_size: 1 << 20,
                compression: Compression::None,
                ignore_keys: false,
                transactional: false,
            },
            Arc::new(Counters::default()),
            Box::new(|| {}),
        );
        acc.update_topic(&Arc::from("t"), 6, (0..6).collect(), None);
        acc
    }

    /// A keyed record of `value` to partition `p` (so the sticky partitioner stays out).
    fn send_to(acc: &RecordAccumulator, p: i32, value: &[u8]) -> Result<(), ProduceError> {
        let mut rec = ProducerRecord::new("t").value(value).partition(p);
        rec.timestamp = Some(TS);
        acc.append::<NoCallback>(&rec, None).map(drop)
    }

    /// A drain that finds partition 0's leader's window full: every due batch stays, held.
    fn drain_window_full(acc: &RecordAccumulator) {
        let d = acc.drain(Instant::now(), |_, _| Some(1), |_| false, |_, _| true);
        assert!(d.batches.is_empty());
    }

    #[test]
    fn a_held_partition_s_batch_grows_past_batch_size_up_to_the_bound() {
        let value = [7u8; 1000];
        let acc = growing_accumulator(16_384, 100_000, 64 << 20);
        let per = per_batch(16_384, &value);
        for _ in 0..per + 1 {
            send_to(&acc, 0, &value).unwrap();
        }
        // Not held yet: closed at batch.size, as Java does.
        assert_eq!(batches(&acc).len(), 2);
        drain_window_full(&acc);
        for _ in 0..200 {
            send_to(&acc, 0, &value).unwrap();
        }
        let all = batches(&acc);
        let sizes: Vec<usize> = {
            let st = acc.state.lock();
            st.topics[st.index["t"]].queues[0]
                .iter()
                .map(|b| b.writer.size())
                .collect()
        };
        // The open batch grew to the bound, never past it, then a new one took the rest.
        assert_eq!(all.len(), 4, "{all:?} {sizes:?}");
        assert!(sizes[1] > 90_000 && sizes[1] <= 100_000, "{sizes:?}");
        assert!(sizes.iter().all(|s| *s <= 100_000), "{sizes:?}");
        // buffer.memory counts what the batches grew to.
        let st = acc.state.lock();
        let reserved: usize = st.topics[st.index["t"]].queues[0]
            .iter()
            .map(|b| b.reserved)
            .sum();
        assert_eq!(st.used, reserved);
        assert!(reserved >= sizes.iter().sum::<usize>());
    }

    #[test]
    fn delivery_callbacks_are_charged_to_buffer_memory_and_released_with_their_batch() {
        // Small records with a callback that holds 64 bytes: the callbacks take more memory
        // than the records, and buffer.memory bounds both.
        let buffer = 200_000;
        let acc = growing_accumulator(16_384, 0, buffer);
        let payload = [0u8; 64];
        let mut accepted = 0usize;
        let err = loop {
            let mut rec = ProducerRecord::new("t").value(b"x").partition(0);
            rec.timestamp = Some(TS);
            match acc.append(&rec, Some(move |_| assert_eq!(payload[0], 0))) {
                Ok(_) => accepted += 1,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err, ProduceError::MaxBlockExceeded { .. }),
            "{err:?}"
        );
        let (used, record_bytes, callback_bytes) = {
            let st = acc.state.lock();
            let q = &st.topics[st.index["t"]].queues[0];
            (
                st.used,
                q.iter().map(|b| b.reserved).sum::<usize>(),
                q.iter().map(|b| b.callback_bytes).sum::<usize>(),
            )
        };
        let entry = std::mem::size_of::<(i32, i64, [u8; 64])>();
        assert!(used <= buffer, "{used} > {buffer}");
        assert_eq!(used, record_bytes + callback_bytes);
        assert!(
            callback_bytes >= accepted * entry,
            "{accepted} callbacks of {entry} bytes, {callback_bytes} charged"
        );
        // Completed batches give back all of it.
        let d = acc.drain(Instant::now(), |_, _| Some(1), |_| true, |_, _| true);
        let mut taken: Vec<ProducerBatch> = d.batches.into_values().flatten().collect();
        for b in &mut taken {
            b.complete(Err(ProduceError::Closed { reason: None }));
        }
        acc.deallocate_all(&mut taken);
        let st = acc.state.lock();
        let left: usize = st.topics[st.index["t"]].queues[0]
            .iter()
            .map(|b| b.reserved + b.callback_bytes)
            .sum();
        assert_eq!(st.used, left);
    }

    #[test]
    fn without_growth_or_hold_batches_close_at_batch_size() {
        let value = [7u8; 1000];
        let per = per_batch(16_384, &value);
        // Growth off: a held partition's batches still close at batch.size.
        let acc = growing_accumulator(16_384, 0, 64 << 20);
        send_to(&acc, 0, &value).unwrap();
        drain_window_full(&acc);
        for _ in 0..3 * per - 1 {
            send_to(&acc, 0, &value).unwrap();
        }
        let all = batches(&acc);
        assert_eq!(all.len(), 3, "{all:?}");
        assert!(all.iter().all(|b| b.1 == per), "{all:?}");
        // Growth on, a broker that keeps up (each batch leaves before the next fills): the
        // batches are batch.size's, as at low load.
        let acc = growing_accumulator(16_384, 100_000, 64 << 20);
        let mut sent = Vec::new();
        for _ in 0..3 {
            for _ in 0..per {
                send_to(&acc, 0, &value).unwrap();
            }
            // Past linger.ms: whatever is open leaves.
            let later = Instant::now() + Duration::from_secs(7200);
            let d = acc.drain(later, |_, _| Some(1), |_| true, |_, _| true);
            sent.extend(d.batches.into_values().flatten().map(|b| b.record_count()));
        }
        assert_eq!(sent, vec![per; 3]);
    }

    #[test]
    fn a_batch_grows_only_as_far_as_buffer_memory_allows() {
        let value = [7u8; 1000];
        // Room for the first batch's 16 KiB and 20 KB more.
        let acc = growing_accumulator(16_384, 1 << 20, 16_384 + 20_000);
        send_to(&acc, 0, &value).unwrap();
        drain_window_full(&acc);
        let mut taken = 1;
        while send_to(&acc, 0, &value).is_ok() {
            taken += 1;
        }
        let st = acc.state.lock();
        assert!(st.used <= 16_384 + 20_000, "used {}", st.used);
        assert!(taken > per_batch(16_384, &value) + 15, "grew by {taken}");
    }

    fn send(acc: &RecordAccumulator, value: &[u8]) {
        let mut rec = ProducerRecord::new("t").value(value);
        rec.timestamp = Some(TS);
        let report = acc.append::<NoCallback>(&rec, None).unwrap();
        assert!(report.is_some());
    }

    /// (partition, records, closed) of every queued batch, oldest first per partition.
    fn batches(acc: &RecordAccumulator) -> Vec<(i32, usize, bool)> {
        let st = acc.state.lock();
        let tq = &st.topics[st.index["t"]];
        let mut out = Vec::new();
        for q in &tq.queues {
            for b in q {
                out.push((b.partition, b.record_count(), b.closed));
            }
        }
        out
    }

    /// How many records of `value` bytes one batch of `batch_size` holds.
    fn per_batch(batch_size: usize, value: &[u8]) -> usize {
        let mut w = BatchWriter::new(batch_size, Compression::None);
        let size = RecordSize::new(None, Some(value), &[]);
        let mut n = 0;
        while w
            .try_append(TS, None, Some(value), &[], size, batch_size)
            .is_some()
        {
            n += 1;
        }
        n
    }

    fn current_partition(acc: &RecordAccumulator) -> Option<i32> {
        let mut st = acc.state.lock();
        let i = st.index["t"];
        let tq = &mut st.topics[i];
        (tq.sticky.produced() > 0).then(|| tq.sticky.partition(6, &[], &mut || 0))
    }

    #[test]
    fn sticky_partition_leaves_only_full_batches_behind() {
        // 100-byte values, 16 KB batches: 148 records (109-110 bytes each) fill a batch. The
        // old rule counted record_size + 12 = 121 bytes per record and switched after 136,
        // leaving a batch with room that waited out linger.ms.
        let value = [7u8; 100];
        let fill = per_batch(16384, &value);
        assert_eq!(fill, 148);
        let acc = accumulator(16384);
        for _ in 0..10 * fill + 5 {
            send(&acc, &value);
        }
        let all = batches(&acc);
        let open: Vec<_> = all.iter().filter(|b| !b.2).collect();
        assert_eq!(
            open.len(),
            1,
            "one open batch, the current partition's: {all:?}"
        );
        assert_eq!(open[0].1, 5);
        assert_eq!(Some(open[0].0), current_partition(&acc));
        for b in all.iter().filter(|b| b.2) {
            assert_eq!(b.1, fill, "a batch left behind is full: {all:?}");
        }
        assert_eq!(all.len(), 11);
    }

    #[test]
    fn sticky_partition_stays_until_the_batch_is_full_even_past_batch_size() {
        // Records of 2,000 bytes and batch.size 5,000: two fill 4,000 bytes, a third does not
        // fit (6,000 > 5,000). Java counts the bytes appended and switches when the batch is
        // full, so every batch takes two records; it never switches after the first record.
        let value = [1u8; 2000];
        let acc = accumulator(5000);
        for _ in 0..20 {
            send(&acc, &value);
        }
        let all = batches(&acc);
        assert!(all.iter().all(|b| b.1 == 2), "{all:?}");
        assert_eq!(all.len(), 10);
    }

    #[test]
    fn a_drained_partition_is_left_only_after_batch_size_bytes() {
        let value = [3u8; 100];
        let acc = accumulator(16384);
        let drain = |acc: &RecordAccumulator| {
            let later = Instant::now() + Duration::from_secs(7200);
            let d = acc.drain(later, |_, _| Some(1), |_| true, |_, _| true);
            d.batches.into_values().flatten().collect::<Vec<_>>()
        };
        // 50 records, then the batch leaves on linger.ms: 5,000 bytes went to the partition,
        // less than batch.size, so the next records open a new batch in the same partition.
        for _ in 0..50 {
            send(&acc, &value);
        }
        let p = current_partition(&acc).unwrap();
        let mut sent = drain(&acc);
        assert_eq!(sent.len(), 1);
        send(&acc, &value);
        assert_eq!(current_partition(&acc), Some(p));
        {
            let st = acc.state.lock();
            assert!(
                st.topics[st.index["t"]].sticky.produced() > 50 * 109,
                "no switch"
            );
        }
        acc.deallocate_all(&mut sent);
        // Past batch.size with no batch open: the next record goes elsewhere (its first
        // batch there), as Java does when every batch of the partition is full.
        for _ in 0..120 {
            send(&acc, &value);
        }
        let mut sent = drain(&acc);
        assert_eq!(sent.iter().map(|b| b.record_count()).sum::<usize>(), 121);
        send(&acc, &value);
        let all = batches(&acc);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1, 1);
        let st = acc.state.lock();
        let i = st.index["t"];
        assert!(st.topics[i].sticky.produced() < 200, "a fresh partition");
        drop(st);
        acc.deallocate_all(&mut sent);
    }

    #[test]
    fn keyed_and_explicit_records_leave_the_sticky_count_alone() {
        let acc = accumulator(16384);
        let value = [0u8; 100];
        send(&acc, &value);
        let p = current_partition(&acc).unwrap();
        let produced = |acc: &RecordAccumulator| {
            let st = acc.state.lock();
            st.topics[st.index["t"]].sticky.produced()
        };
        let before = produced(&acc);
        for i in 0..500 {
            let key = format!("k{i}");
            acc.append::<NoCallback>(
                &ProducerRecord::new("t").key(key.as_bytes()).value(&value),
                None,
            )
            .unwrap();
            acc.append::<NoCallback>(&ProducerRecord::new("t").partition(p).value(&value), None)
                .unwrap();
        }
        assert_eq!(produced(&acc), before);
        assert_eq!(current_partition(&acc), Some(p));
    }

    #[test]
    fn the_last_topic_is_found_again_and_others_by_name() {
        let acc = accumulator(16384);
        acc.update_topic(&Arc::from("u"), 2, vec![0, 1], None);
        for topic in ["t", "u", "u", "t", "u"] {
            acc.append::<NoCallback>(&ProducerRecord::new(topic).value(b"x"), None)
                .unwrap();
        }
        let st = acc.state.lock();
        let count = |name: &str| -> usize {
            st.topics[st.index[name]]
                .queues
                .iter()
                .flatten()
                .map(|b| b.record_count())
                .sum()
        };
        assert_eq!((count("t"), count("u")), (2, 3));
        assert_eq!(st.topics[st.last_topic].name.as_ref(), "u");
    }
}
