//! `RecordAccumulator`: per-partition queues of batches between `send()` and the sender.
//!
//! `send()` serializes the record straight into the last open batch of its partition (or a
//! new one), under one lock; the sender thread drains batches that are full, have lingered
//! `linger.ms`, or are wanted now (flush, close, checkpoint). `buffer.memory` bounds the bytes
//! held: `send()` blocks up to `max.block.ms` for room, for topic metadata, and while a
//! checkpoint holds the gate.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::delivery::{BatchOutcome, BatchResult, Callback, DeliveryFuture};
use super::metrics::Counters;
use super::partitioner::{StickyPartition, partition_for_key};
use super::record::ProducerRecord;
use crate::error::ProduceError;
use crate::protocol::ErrorCode;
use crate::protocol::record::{BATCH_HEADER_SIZE, BatchWriter, Compression, record_size};

/// A batch of records for one partition.
pub(crate) struct ProducerBatch {
    pub id: u64,
    pub topic: Arc<str>,
    pub partition: i32,
    pub writer: BatchWriter,
    /// Bytes of `buffer.memory` this batch holds.
    pub reserved: usize,
    pub created: Instant,
    pub result: Arc<BatchResult>,
    pub callbacks: Vec<(i32, i64, Callback)>,
    /// Times sent.
    pub attempts: u32,
    /// Not to be re-sent before this (retry backoff).
    pub retry_at: Option<Instant>,
    /// Base sequence, once assigned (idempotence); kept across retries.
    pub sequence: Option<i32>,
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

    /// Completes every record of the batch (handles and callbacks). Runs user callbacks: call
    /// it without holding the accumulator lock.
    pub fn complete(&mut self, outcome: BatchOutcome) {
        for (index, ts, cb) in self.callbacks.drain(..) {
            let md = self.result.metadata(&outcome, index, ts);
            // A panicking callback must not take the I/O thread down.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(md))).is_err() {
                tracing::error!(topic = %self.topic, partition = self.partition, "delivery callback panicked");
            }
        }
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
    pub linger: Duration,
    pub buffer_memory: usize,
    pub max_block: Duration,
    pub max_request_size: usize,
    pub compression: Compression,
    pub ignore_keys: bool,
}

#[derive(Default)]
struct TopicQueues {
    /// Partition count; 0 while unknown.
    partitions: usize,
    /// A topic error that makes sending pointless (authorization, invalid name).
    error: Option<ErrorCode>,
    /// Partitions with a leader, for the sticky partitioner.
    available: Vec<i32>,
    queues: Vec<VecDeque<ProducerBatch>>,
    sticky: StickyPartition,
}

struct State {
    topics: HashMap<Arc<str>, TopicQueues>,
    used: usize,
    next_id: u64,
    incomplete: BTreeSet<u64>,
    incomplete_records: usize,
    flush_until: u64,
    drain_all: bool,
    closed: Option<Option<Arc<str>>>,
    wanted: Vec<Arc<str>>,
    rng: u64,
    drain_rotation: usize,
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

/// The accumulator shared by `send()` callers and the sender thread.
pub(crate) struct RecordAccumulator {
    config: AccumulatorConfig,
    state: Mutex<State>,
    /// Signalled when memory is freed, metadata arrives, the gate opens or the producer closes.
    changed: Condvar,
    /// Signalled when batches complete (flush, drain).
    completed: Condvar,
    /// The checkpoint gate: while set, `send()` waits.
    paused: AtomicBool,
    /// Total shift of deadlines by restores (ns), so blocked `send()`s rebase too.
    rebased_ns: AtomicU64,
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
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Self {
            config,
            state: Mutex::new(State {
                topics: HashMap::new(),
                used: 0,
                next_id: 1,
                incomplete: BTreeSet::new(),
                incomplete_records: 0,
                flush_until: 0,
                drain_all: false,
                closed: None,
                wanted: Vec::new(),
                rng: seed,
                drain_rotation: 0,
            }),
            changed: Condvar::new(),
            completed: Condvar::new(),
            paused: AtomicBool::new(false),
            rebased_ns: AtomicU64::new(0),
            counters,
            wake,
        }
    }

    fn rebased(&self) -> Duration {
        Duration::from_nanos(self.rebased_ns.load(Ordering::Acquire))
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

    /// Appends a record: the hot path of `send()`.
    pub fn append(
        &self,
        rec: &ProducerRecord<'_>,
        callback: Option<Callback>,
    ) -> Result<DeliveryFuture, (ProduceError, Option<Callback>)> {
        let start = Instant::now();
        let deadline = start + self.config.max_block;
        let rebase_at_start = self.rebased();
        let timestamp = rec.timestamp.unwrap_or_else(now_ms);
        let size = record_size(0, 0, rec.key, rec.value, rec.headers) + 12;
        let needed = size + BATCH_HEADER_SIZE;
        if needed > self.config.max_request_size {
            return Err((
                ProduceError::RecordTooLarge {
                    size: needed,
                    limit: self.config.max_request_size,
                    limit_name: "max.request.size",
                },
                callback,
            ));
        }
        if needed > self.config.buffer_memory {
            return Err((
                ProduceError::RecordTooLarge {
                    size: needed,
                    limit: self.config.buffer_memory,
                    limit_name: "buffer.memory",
                },
                callback,
            ));
        }
        let blocked = |what: String| ProduceError::MaxBlockExceeded {
            waited: start.elapsed(),
            waiting_for: Arc::from(what),
        };
        let mut st = self.state.lock();
        loop {
            if let Some(reason) = &st.closed {
                return Err((
                    ProduceError::Closed {
                        reason: reason.clone(),
                    },
                    callback,
                ));
            }
            if self.paused.load(Ordering::Acquire) {
                if !self.wait(&mut st, deadline, rebase_at_start) {
                    return Err((
                        blocked("the checkpoint in progress to finish".into()),
                        callback,
                    ));
                }
                continue;
            }
            let State {
                topics,
                wanted,
                rng,
                ..
            } = &mut *st;
            let topic_known = topics.get(rec.topic).map(|t| (t.partitions, t.error));
            let partitions = match topic_known {
                Some((_, Some(code))) => {
                    return Err((
                        ProduceError::Topic {
                            topic: Arc::from(rec.topic),
                            code,
                        },
                        callback,
                    ));
                }
                Some((n, None)) if n > 0 => n,
                _ => {
                    if !wanted.iter().any(|w| &**w == rec.topic) {
                        wanted.push(Arc::from(rec.topic));
                    }
                    (self.wake)();
                    if !self.wait(&mut st, deadline, rebase_at_start) {
                        return Err((
                            blocked(format!("metadata of topic {}", rec.topic)),
                            callback,
                        ));
                    }
                    continue;
                }
            };
            let tq = topics.get_mut(rec.topic).expect("known topic");
            let partition = match (rec.partition, rec.key) {
                (Some(p), _) => {
                    if p < 0 || p as usize >= partitions {
                        return Err((
                            ProduceError::UnknownPartition {
                                topic: Arc::from(rec.topic),
                                partition: p,
                                partitions,
                            },
                            callback,
                        ));
                    }
                    p
                }
                (None, Some(key)) if !self.config.ignore_keys => partition_for_key(key, partitions),
                _ => {
                    let mut next = || {
                        *rng ^= *rng << 13;
                        *rng ^= *rng >> 7;
                        *rng ^= *rng << 17;
                        *rng
                    };
                    tq.sticky.next(
                        size,
                        partitions,
                        &tq.available,
                        self.config.batch_size,
                        &mut next,
                    )
                }
            };
            let queue = &mut tq.queues[partition as usize];
            // Into the open batch if it has room.
            if let Some(b) = queue.back_mut() {
                if !b.closed {
                    let add = b.writer.size_of(timestamp, rec.key, rec.value, rec.headers);
                    if b.writer.size() + add <= self.config.batch_size.max(BATCH_HEADER_SIZE) {
                        let index = b.writer.append(timestamp, rec.key, rec.value, rec.headers);
                        if let Some(cb) = callback {
                            b.callbacks.push((index, timestamp, cb));
                        }
                        let full = b.writer.size() + 64 > self.config.batch_size;
                        let handle = DeliveryFuture::pending(b.result.clone(), index, timestamp);
                        st.incomplete_records += 1;
                        drop(st);
                        Counters::add(&self.counters.records_queued, 1);
                        if full {
                            (self.wake)();
                        }
                        return Ok(handle);
                    }
                    b.closed = true;
                }
            }
            // A new batch, if buffer.memory has room.
            let alloc = self.config.batch_size.max(needed);
            if st.used + alloc > self.config.buffer_memory {
                (self.wake)();
                if !self.wait(&mut st, deadline, rebase_at_start) {
                    return Err((
                        blocked(format!(
                            "buffer memory (buffer.memory={} bytes in use by unsent records)",
                            self.config.buffer_memory
                        )),
                        callback,
                    ));
                }
                continue;
            }
            st.used += alloc;
            Counters::set(&self.counters.buffer_used, st.used as u64);
            let id = st.next_id;
            st.next_id += 1;
            st.incomplete.insert(id);
            st.incomplete_records += 1;
            let topic_arc = st
                .topics
                .get_key_value(rec.topic)
                .map(|(k, _)| k.clone())
                .expect("known topic");
            let mut writer = BatchWriter::new(alloc, self.config.compression);
            let index = writer.append(timestamp, rec.key, rec.value, rec.headers);
            let result = BatchResult::new(topic_arc.clone(), partition);
            let handle = DeliveryFuture::pending(result.clone(), index, timestamp);
            let mut batch = ProducerBatch {
                id,
                topic: topic_arc,
                partition,
                writer,
                reserved: alloc,
                created: Instant::now(),
                result,
                callbacks: Vec::new(),
                attempts: 0,
                retry_at: None,
                sequence: None,
                last_error: None,
                closed: false,
            };
            if let Some(cb) = callback {
                batch.callbacks.push((index, timestamp, cb));
            }
            st.topics.get_mut(rec.topic).expect("known topic").queues[partition as usize]
                .push_back(batch);
            drop(st);
            Counters::add(&self.counters.records_queued, 1);
            (self.wake)();
            return Ok(handle);
        }
    }

    /// Topics `send()` is waiting for (taken by the sender, which asks the brokers).
    pub fn take_wanted_topics(&self) -> Vec<Arc<str>> {
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
        let tq = st.topics.entry(topic.clone()).or_default();
        if partitions > tq.partitions {
            tq.queues.resize_with(partitions, VecDeque::new);
            tq.partitions = partitions;
        }
        tq.available = available;
        tq.error = error;
        drop(st);
        self.changed.notify_all();
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
        for (topic, tq) in st.topics.iter_mut() {
            let n = tq.queues.len();
            for k in 0..n {
                let p = (k + rotation) % n;
                let queue = &mut tq.queues[p];
                let Some(front) = queue.front() else { continue };
                if front.retry_at.is_some_and(|t| now < t) {
                    let t = front.retry_at.expect("checked");
                    out.next_ready = Some(out.next_ready.map_or(t, |x| x.min(t)));
                    continue;
                }
                let sendable = drain_all
                    || front.closed
                    || queue.len() > 1
                    || front.writer.size() + 64 > self.config.batch_size
                    || front.id <= flush_until
                    || now >= front.created + linger;
                if !sendable {
                    let t = front.created + linger;
                    out.next_ready = Some(out.next_ready.map_or(t, |x| x.min(t)));
                    continue;
                }
                let Some(node) = leader(topic, p as i32) else {
                    out.unknown_leader = true;
                    continue;
                };
                if !node_ready(node) {
                    if !out.nodes_not_ready.contains(&node) {
                        out.nodes_not_ready.push(node);
                    }
                    continue;
                }
                if !can_send(front, node) {
                    continue;
                }
                let size = sizes.entry(node).or_insert(0);
                let bsize = front.writer.size();
                if *size > 0 && *size + bsize > self.config.max_request_size {
                    continue;
                }
                *size += bsize;
                let mut b = queue.pop_front().expect("front exists");
                b.closed = true;
                out.batches.entry(node).or_default().push(b);
            }
        }
        out
    }

    /// Puts a batch back for a retry. Batches with sequence numbers go back in sequence order
    /// ahead of the new ones, so a partition's records keep their order.
    pub fn reenqueue(&self, batch: ProducerBatch) {
        let mut st = self.state.lock();
        let tq = st.topics.entry(batch.topic.clone()).or_default();
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
        for tq in st.topics.values_mut() {
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
        for tq in st.topics.values_mut() {
            for q in &mut tq.queues {
                out.extend(q.drain(..));
            }
        }
        out
    }

    /// Clears the sequence numbers of queued batches (a new producer id starts from 0).
    pub fn clear_sequences(&self) {
        let mut st = self.state.lock();
        for tq in st.topics.values_mut() {
            for q in &mut tq.queues {
                for b in q.iter_mut() {
                    b.sequence = None;
                }
            }
        }
    }

    /// Releases a completed batch's memory and wakes flushes and blocked senders.
    pub fn deallocate(&self, batch: &ProducerBatch) {
        let mut st = self.state.lock();
        st.used = st.used.saturating_sub(batch.reserved);
        st.incomplete.remove(&batch.id);
        st.incomplete_records = st.incomplete_records.saturating_sub(batch.record_count());
        Counters::set(&self.counters.buffer_used, st.used as u64);
        drop(st);
        self.counters
            .records_queued
            .fetch_sub(batch.record_count() as u64, Ordering::Relaxed);
        self.changed.notify_all();
        self.completed.notify_all();
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
        self.changed.notify_all();
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
        self.changed.notify_all();
    }

    /// Shifts the deadlines of queued batches and of blocked `send()`s by `by`.
    pub fn rebase(&self, by: Duration) {
        if by.is_zero() {
            return;
        }
        let mut st = self.state.lock();
        for tq in st.topics.values_mut() {
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
        self.changed.notify_all();
    }
}
