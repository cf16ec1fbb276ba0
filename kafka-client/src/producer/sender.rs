//! The `Sender`: the producer's one I/O thread.
//!
//! It owns the `NetworkClient` (every connection and in-flight request), the `Metadata` and
//! the idempotence state, and loops: apply commands, refresh metadata, get a producer id,
//! expire old batches, drain the accumulator into Produce requests, wait for the next event
//! (a response, a disconnect, a wake-up from `send()`), handle it. Because everything that
//! touches the network happens here, a checkpoint is a command to this thread: drain, close
//! every connection, wait; and a restore is another: re-bootstrap, new producer id, go on.

use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender as ChannelSender};
use std::time::{Duration, Instant};

use super::accumulator::{ProducerBatch, RecordAccumulator};
use super::config::{Acks, ProducerConfig};
use super::error::ProduceError;
use super::idempotence::{
    Idempotence, ProducerIdAndEpoch, ProducerIdState, Restart, SequenceVerdict,
};
use super::metrics::Counters;
use super::request::RequestContext;
use super::transaction::TransactionManager;
use super::transaction::io::{Effects, TxnIo};
use crate::large_buffers::release_large;
use crate::network::{Completion, Event, Net, NetworkClient, NetworkError};
use crate::protocol::messages::{
    InitProducerIdRequest, MetadataRequest, ProduceRequest, ProduceResponse,
    produce::{PartitionProduceData, TopicProduceData},
};
use crate::protocol::{ApiKey, ErrorCode, encode_produce_frame};

/// What the producer's API asks of the sender thread.
#[derive(Debug)]
pub(crate) enum Command {
    /// Before a checkpoint: deliver everything, then close every connection.
    Drain {
        deadline: Instant,
        reply: ChannelSender<Result<(), String>>,
    },
    /// After a restore (or an aborted checkpoint): shift deadlines, and if the connections
    /// were closed for an image, re-bootstrap and take a new producer id.
    Restore {
        shift: Duration,
        reply: ChannelSender<()>,
    },
    /// Deliver what was accepted within the deadline, fail the rest, stop.
    Close { deadline: Option<Instant> },
}

#[derive(Debug)]
enum Phase {
    Running,
    Draining {
        deadline: Instant,
        reply: ChannelSender<Result<(), String>>,
    },
    /// Connections closed for a checkpoint: no network activity until `Restore`.
    Checkpointed,
    Closing {
        deadline: Option<Instant>,
    },
}

pub(crate) struct Sender {
    config: ProducerConfig,
    acc: Arc<RecordAccumulator>,
    net: Net<RequestContext>,
    events: Receiver<Event>,
    commands: Receiver<Command>,
    counters: Arc<Counters>,
    wake_pending: Arc<AtomicBool>,
    idem: Idempotence,
    pid_in_flight: bool,
    pid_retry_at: Option<Instant>,
    produce_in_flight: usize,
    phase: Phase,
    failed_at_close: usize,
    next_expire_check: Option<Instant>,
    /// The last connection failure on the security settings, until a connection succeeds.
    security_error: Option<Arc<str>>,
    /// The transactional producer's coordinator I/O.
    txn: Option<TxnIo>,
    /// The buffer Produce requests are encoded into, kept from one to the next: all of a
    /// request but its records, which are written from the batches' own chunks (one gathering
    /// write; the copy of every byte into a request buffer cost CPU and up to
    /// `max.request.size` of memory beside `buffer.memory`).
    frame: Vec<u8>,
    /// Where in `frame` each batch's records belong (one per batch, in the request's order).
    records_at: Vec<usize>,
}

/// Produce v12 means transactions v2 (partitions added by the Produce request itself); this
/// client's transactions are v1, whose Produce requests stop at v11.
const TXN_V1_MAX_PRODUCE_VERSION: i16 = 11;

/// How often batches are checked against `delivery.timeout.ms` (each check takes the
/// accumulator's lock and walks every queue and request in flight).
const EXPIRE_CHECK_INTERVAL: Duration = Duration::from_millis(10);

impl Sender {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: ProducerConfig,
        acc: Arc<RecordAccumulator>,
        client: NetworkClient<RequestContext>,
        events: Receiver<Event>,
        commands: Receiver<Command>,
        counters: Arc<Counters>,
        wake_pending: Arc<AtomicBool>,
        txn: Option<Arc<TransactionManager>>,
    ) -> Self {
        let net = Net::new(client, &config.common);
        let idem = match txn {
            Some(_) => Idempotence::transactional(),
            None => Idempotence::new(config.enable_idempotence),
        };
        let txn =
            txn.map(|mgr| TxnIo::new(mgr, config.transaction_timeout, config.common.retry_backoff));
        Self {
            config,
            acc,
            net,
            events,
            commands,
            counters,
            wake_pending,
            idem,
            pid_in_flight: false,
            pid_retry_at: None,
            produce_in_flight: 0,
            phase: Phase::Running,
            failed_at_close: 0,
            next_expire_check: None,
            security_error: None,
            txn,
            frame: Vec::new(),
            records_at: Vec::new(),
        }
    }

    /// The thread's body.
    /// Runs until closed; returns how many accepted records the close had to fail.
    pub fn run(mut self) -> usize {
        let _span = tracing::info_span!("kafka_sender", client_id = %self.config.common.client_id)
            .entered();
        tracing::debug!("sender started");
        loop {
            let now = Instant::now();
            self.apply_commands();
            self.poll_connects();
            if matches!(self.phase, Phase::Checkpointed) {
                self.wait(Duration::from_secs(3600));
                continue;
            }
            for t in self.acc.take_wanted_topics() {
                self.net.metadata.add_topic(&t);
            }
            self.ensure_bootstrap_nodes();
            self.maybe_update_metadata(now);
            if self.txn.is_some() {
                self.poll_txn(now);
            } else {
                self.maybe_init_producer_id(now);
            }
            self.resolve_sequences();
            if self.next_expire_check.is_none_or(|t| now >= t) {
                self.expire(now);
                self.next_expire_check = Some(now + EXPIRE_CHECK_INTERVAL);
            }
            let next_ready = self.send_produce(now);
            if self.check_phase(now) {
                break;
            }
            let timeout = self.poll_timeout(now, next_ready);
            self.wait(timeout);
            for c in self.net.client.expire(Instant::now()) {
                self.on_completion(c);
            }
            self.counters
                .in_flight
                .store(self.net.client.total_in_flight() as u64, Ordering::Relaxed);
        }
        let lost = self.net.close_all("producer closed");
        let reason: Arc<str> = Arc::from("closed before the broker answered");
        for ctx in lost {
            if let RequestContext::Produce(batches) = ctx {
                for b in batches {
                    self.fail_at_close(b, &reason);
                }
            }
        }
        tracing::debug!(failed = self.failed_at_close, "sender stopped");
        self.failed_at_close
    }

    fn wait(&mut self, timeout: Duration) {
        let first = match self.events.recv_timeout(timeout) {
            Ok(e) => Some(e),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        };
        let mut next = first;
        while let Some(ev) = next {
            if matches!(ev, Event::Wakeup) {
                self.wake_pending.store(false, Ordering::Release);
            } else if let Some(c) = self.net.client.handle_event(ev) {
                self.on_completion(c);
            }
            next = self.events.try_recv().ok();
        }
    }

    fn apply_commands(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Drain { deadline, reply } => {
                    if Instant::now() >= deadline || !matches!(self.phase, Phase::Running) {
                        // The sender was held up (a slow delivery callback) past the drain's
                        // deadline: the checkpoint has given up on it, or will.
                        tracing::warn!("checkpoint: drain request came after its deadline");
                        let _ = reply.send(Err(
                            "the sender thread took the drain request after checkpoint.drain.timeout.ms".into(),
                        ));
                        continue;
                    }
                    tracing::info!(
                        records = self.acc.incomplete_records(),
                        "checkpoint: draining"
                    );
                    self.acc.set_drain_all(true);
                    self.phase = Phase::Draining { deadline, reply };
                }
                Command::Restore { shift, reply } => {
                    self.abandon_drain();
                    self.restore(shift);
                    let _ = reply.send(());
                }
                Command::Close { deadline } => {
                    self.acc.set_drain_all(true);
                    if let Phase::Draining { reply, .. } =
                        std::mem::replace(&mut self.phase, Phase::Closing { deadline })
                    {
                        let _ = reply.send(Err("producer closed during the drain".into()));
                    }
                }
            }
        }
    }

    /// A restore (the checkpoint is over, failed or not) while still draining: the caller
    /// gave up waiting for the drain; the producer runs on as before.
    fn abandon_drain(&mut self) {
        if !matches!(self.phase, Phase::Draining { .. }) {
            return; // drained (Checkpointed: the restore takes over) or never asked to
        }
        if let Phase::Draining { reply, .. } = std::mem::replace(&mut self.phase, Phase::Running) {
            tracing::warn!("checkpoint: over before the drain finished; the producer goes on");
            self.acc.set_drain_all(false);
            let _ = reply.send(Err("the checkpoint ended before the drain finished".into()));
        }
    }

    fn restore(&mut self, shift: Duration) {
        if !shift.is_zero() {
            tracing::info!(
                shift_ms = shift.as_millis() as u64,
                "rebasing deadlines by the frozen time"
            );
            self.acc.rebase(shift);
            self.net.rebase(shift);
        }
        if matches!(self.phase, Phase::Checkpointed) {
            // The cluster may have changed while we were an image, and clones of one image
            // must not share a producer id.
            let lost = self.net.rebootstrap();
            self.requeue_lost(lost);
            if self.idem.enabled() {
                self.idem.clear();
                self.pid_in_flight = false;
                self.pid_retry_at = None;
                self.acc.clear_sequences();
            }
            if let Some(t) = self.txn.as_mut() {
                t.reset();
                self.acc.reset_txn();
            }
            tracing::info!("restored: re-bootstrapping metadata and taking a new producer id");
            self.phase = Phase::Running;
        }
    }

    fn ensure_bootstrap_nodes(&mut self) {
        let lost = self.net.ensure_bootstrap_nodes();
        self.requeue_lost(lost);
    }

    fn poll_connects(&mut self) {
        for (_, r) in self.net.client.poll_connects() {
            match r {
                Ok(()) => {
                    Counters::add(&self.counters.connects, 1);
                    self.acc.set_security_error(None);
                    self.security_error = None;
                }
                Err(e) if e.is_security() => self.on_security_error(&e),
                Err(_) => {}
            }
        }
    }

    /// A connection failed on the security settings: retrying with the same settings fails
    /// the same way, unless they change (a secret rotated in its file, a broker's credential
    /// updated). `send()`s waiting for metadata fail with the error at once (naming the broker
    /// and the key to fix) instead of waiting out `max.block.ms`; records already accepted
    /// stay queued and are retried (the node backs off at `reconnect.backoff.max.ms`) until
    /// `delivery.timeout.ms`, whose error then carries this one.
    fn on_security_error(&mut self, e: &NetworkError) {
        let msg: Arc<str> = Arc::from(e.to_string());
        tracing::error!(error = %msg, "cannot connect with the security settings");
        self.acc.set_security_error(Some(msg.clone()));
        self.security_error = Some(msg);
    }

    fn maybe_update_metadata(&mut self, now: Instant) {
        if let Err((node, e)) = self.net.maybe_update_metadata(now) {
            self.disconnect(node, &e.to_string());
        }
    }

    fn maybe_init_producer_id(&mut self, now: Instant) {
        if self.idem.pid != ProducerIdState::Needed
            || self.pid_in_flight
            || !self.net.metadata.is_bootstrapped()
            || self.pid_retry_at.is_some_and(|t| now < t)
        {
            return;
        }
        let Some(node) = self.net.any_node(now) else {
            return;
        };
        let req = InitProducerIdRequest::default();
        match self
            .net
            .client
            .send(node, &req, RequestContext::InitProducerId, true, now)
        {
            Ok(_) => self.pid_in_flight = true,
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "InitProducerId request failed");
                self.pid_retry_at = Some(now + self.config.common.retry_backoff);
                if let NetworkError::Version { .. } = e {
                    self.set_fatal(e.to_string());
                } else {
                    self.disconnect(node, &e.to_string());
                }
            }
        }
    }

    /// A turn of the transaction's I/O: partitions written to for the first time are added,
    /// the operation under way (init, offsets, commit, abort) moves on.
    fn poll_txn(&mut self, now: Instant) {
        let Some(t) = self.txn.as_mut() else { return };
        let fx = t.poll(&mut self.net, &self.acc, self.produce_in_flight, now);
        self.apply_txn(fx);
    }

    fn apply_txn(&mut self, fx: Effects) {
        if let Some(p) = fx.producer {
            // A new producer id or epoch from the coordinator: every sequence starts over.
            self.idem.clear();
            self.acc.clear_sequences();
            self.idem.pid = ProducerIdState::Ready(p);
            let previous = self.counters.producer_id.swap(p.id, Ordering::Relaxed);
            if previous == p.id {
                Counters::add(&self.counters.producer_epoch_bumps, 1);
            } else if previous >= 0 {
                Counters::add(&self.counters.producer_id_resets, 1);
            }
        }
        if !fx.added.is_empty() {
            self.acc.mark_txn_added(&fx.added);
        }
        if let Some(e) = fx.fail_unsent {
            for b in self.acc.take_unsent() {
                self.fail(b, e.clone());
            }
        }
        if let Some(e) = fx.fail_queued {
            for b in self.acc.take_all() {
                self.fail(b, e.clone());
            }
        }
        if fx.ended {
            self.acc.reset_txn();
        }
        if let Some((node, why)) = fx.disconnect {
            self.disconnect(node, &why);
        }
        self.requeue_lost(fx.lost);
    }

    fn set_fatal(&mut self, why: String) {
        tracing::error!(error = %why, "producer failed fatally");
        let why: Arc<str> = Arc::from(why);
        if let Some(t) = &self.txn {
            let mut core = t.mgr.lock();
            let f = core.fatal_error("Produce", why.clone());
            core.fatal(f);
        }
        self.idem.pid = ProducerIdState::Fatal(why.clone());
        self.acc.close(Some(why.clone()));
        for b in self.acc.take_all() {
            self.fail(b, ProduceError::Fatal(why.clone()));
        }
    }

    /// Applies a requested epoch bump, then restarts the sequences of partitions whose turn
    /// it is (see [`Idempotence`]); batches that cannot be sent again safely fail here.
    fn resolve_sequences(&mut self) {
        if let Some(state) = self.idem.maybe_bump() {
            Counters::add(&self.counters.producer_epoch_bumps, 1);
            match state {
                ProducerIdState::Ready(p) => {
                    tracing::info!(producer_id = p.id, epoch = p.epoch, "producer epoch bumped")
                }
                _ => tracing::info!("producer epoch at its maximum: taking a new producer id"),
            }
        }
        let acc = &self.acc;
        let restarts = self
            .idem
            .due_restarts(|t, p| acc.has_queued_sequences(t, p));
        for (topic, partition, why) in restarts {
            let unsafe_to_resend =
                self.acc
                    .restart_sequences(&topic, partition, why == Restart::StateLost);
            for b in unsafe_to_resend {
                tracing::warn!(%topic, partition, "batch not sent again under the new epoch: an earlier attempt went unanswered and the broker lost the producer's state");
                let e = ProduceError::Broker {
                    topic: b.topic.clone(),
                    partition: b.partition,
                    code: ErrorCode::UnknownProducerId,
                    message: Some(Arc::from(
                        "an earlier attempt of this batch went unanswered and the broker then lost the producer's state: it may have been written, so it is not sent again",
                    )),
                };
                self.fail(b, e);
            }
        }
    }

    /// Fails batches older than `delivery.timeout.ms`: queued ones, and those in flight (as
    /// Java's `Sender` does; a late answer only settles their sequence).
    fn expire(&mut self, now: Instant) {
        let timeout = self.config.delivery_timeout;
        for b in self.acc.expire(now, timeout) {
            // The broker saw this sequence or expects it: the partition waits until it is
            // known whether the broker has it.
            self.idem.left_unacked(&b);
            let e = self.delivery_timeout(&b);
            self.fail(b, e);
        }
        let mut expired = Vec::new();
        for ctx in self.net.client.in_flight_contexts_mut() {
            let RequestContext::Produce(batches) = ctx else {
                continue;
            };
            for b in batches.iter_mut() {
                if !b.done && now >= b.created + timeout {
                    expired.push(b.id);
                    let n = b.record_count() as u64;
                    let e = ProduceError::DeliveryTimeout {
                        topic: b.topic.clone(),
                        partition: b.partition,
                        after: timeout,
                        last_error: Some(Arc::from(
                            "expired while its produce request was in flight",
                        )),
                    };
                    b.complete(Err(e));
                    Counters::add(&self.counters.records_failed, n);
                    self.acc.deallocate(b);
                }
            }
        }
        if !expired.is_empty() {
            tracing::warn!(
                batches = expired.len(),
                "batches in flight expired at delivery.timeout.ms"
            );
            if let Some(t) = &self.txn {
                // Their outcome is unknown: the transaction must abort, with a new epoch.
                let e = ProduceError::DeliveryTimeout {
                    topic: Arc::from("(in flight)"),
                    partition: -1,
                    after: timeout,
                    last_error: None,
                };
                t.batch_failed(&e, true);
            }
        }
    }

    fn delivery_timeout(&self, b: &ProducerBatch) -> ProduceError {
        ProduceError::DeliveryTimeout {
            topic: b.topic.clone(),
            partition: b.partition,
            after: self.config.delivery_timeout,
            last_error: b.last_error.clone().or_else(|| self.security_error.clone()),
        }
    }

    /// Drains and sends. Returns when the next batch becomes sendable, if known.
    fn send_produce(&mut self, now: Instant) -> Option<Instant> {
        if self.idem.enabled() && self.idem.current().is_none() {
            return None;
        }
        if !self.net.metadata.is_bootstrapped() {
            return None;
        }
        let drained = {
            let cluster = self.net.metadata.cluster();
            let client = &self.net.client;
            let idem = &mut self.idem;
            self.acc.drain(
                now,
                |t, p| cluster.leader(t, p),
                |n| client.is_ready(n),
                |b, n| idem.can_send(b, n),
            )
        };
        if drained.unknown_leader {
            self.net.metadata.request_update();
        }
        for node in drained.nodes_not_ready {
            self.net.ready(node, now);
        }
        for (node, mut batches) in drained.batches {
            for b in &mut batches {
                let (producer, seq) = if self.idem.enabled() {
                    self.idem.assign(b, node)
                } else {
                    (ProducerIdAndEpoch { id: -1, epoch: -1 }, -1)
                };
                b.writer.seal(producer.id, producer.epoch, seq);
                b.attempts += 1;
            }
            self.send_batches(node, batches, now);
        }
        drained.next_ready
    }

    fn send_batches(&mut self, node: i32, mut batches: Vec<ProducerBatch>, now: Instant) {
        let transactional_id = self.txn.as_ref().map(|t| t.mgr.transactional_id());
        let max_version = match transactional_id {
            Some(_) => TXN_V1_MAX_PRODUCE_VERSION,
            None => i16::MAX,
        };
        let (version, corr) = match self
            .net
            .client
            .begin_up_to::<ProduceRequest<'_>>(node, max_version)
        {
            Ok(x) => x,
            Err(e) => return self.unsent(node, batches, e),
        };
        let records: usize = batches.iter().map(ProducerBatch::record_count).sum();
        let bytes: usize = batches.iter().map(|b| b.writer.bytes().len()).sum();
        let count = batches.len() as u64;
        let expect_response = self.config.acks != Acks::None;
        let written = self.write_produce(node, version, corr, &mut batches, transactional_id);
        if let Err(e) = written {
            return self.unsent(node, batches, e);
        }
        let head = (ApiKey::Produce, version, corr);
        let context = RequestContext::Produce(batches);
        let result = self
            .net
            .client
            .sent(node, head, context, expect_response, now);
        match result {
            Ok((_, None)) => {
                self.produce_in_flight += 1;
                Counters::add(&self.counters.requests_sent, 1);
                Counters::add(&self.counters.batches_sent, count);
                Counters::add(&self.counters.bytes_sent, bytes as u64);
                tracing::trace!(node, records, bytes, "produce request sent");
            }
            Ok((_, Some(RequestContext::Produce(batches)))) => {
                // acks=0: written is delivered; the broker will not answer.
                Counters::add(&self.counters.requests_sent, 1);
                Counters::add(&self.counters.batches_sent, count);
                Counters::add(&self.counters.bytes_sent, bytes as u64);
                let mut done = Vec::with_capacity(batches.len());
                for b in batches {
                    self.idem.release(&b);
                    self.succeed(b, -1, -1, &mut done);
                }
                self.acc.deallocate_all(&mut done);
            }
            Ok((_, Some(_))) => {}
            Err((e, RequestContext::Produce(batches))) => self.unsent(node, batches, e),
            Err((e, _)) => self.disconnect(node, &e.to_string()),
        }
    }

    /// Encodes the Produce request of `batches` (all but their records) and writes it with
    /// their records from their own chunks.
    fn write_produce(
        &mut self,
        node: i32,
        version: i16,
        corr: i32,
        batches: &mut [ProducerBatch],
        transactional_id: Option<Arc<str>>,
    ) -> Result<(), NetworkError> {
        // Batches of one topic side by side, as the request lists them: the records' places
        // in the frame then follow the batches' order.
        batches.sort_by(|a, b| a.topic.cmp(&b.topic));
        {
            let mut topics: Vec<TopicProduceData<'_>> = Vec::new();
            for b in batches.iter() {
                let data = PartitionProduceData {
                    index: b.partition,
                    records: b.writer.bytes(),
                };
                match topics.iter_mut().find(|t| t.name == &*b.topic) {
                    Some(t) => t.partitions.push(data),
                    None => topics.push(TopicProduceData {
                        name: &b.topic,
                        partitions: vec![data],
                    }),
                }
            }
            let req = ProduceRequest {
                transactional_id: transactional_id.as_deref(),
                acks: self.config.acks.as_i16(),
                timeout_ms: self
                    .config
                    .common
                    .request_timeout
                    .as_millis()
                    .min(i32::MAX as u128) as i32,
                topics,
            };
            let client_id = Some(&*self.config.common.client_id);
            let (frame, at) = (&mut self.frame, &mut self.records_at);
            encode_produce_frame(&req, version, corr, client_id, frame, at);
        }
        let mut parts = Vec::with_capacity(2 * batches.len() + 1);
        let mut from = 0;
        for (&at, b) in self.records_at.iter().zip(batches.iter()) {
            parts.push(IoSlice::new(&self.frame[from..at]));
            parts.extend(b.writer.bytes().chunks().map(IoSlice::new));
            from = at;
        }
        parts.push(IoSlice::new(&self.frame[from..]));
        self.net.client.write_parts(node, &mut parts)
    }

    /// Batches drained for a request that could not be written: back to their queues.
    fn unsent(&mut self, node: i32, batches: Vec<ProducerBatch>, e: NetworkError) {
        tracing::warn!(node, error = %e, "produce request could not be sent");
        if let NetworkError::Version { .. } = e {
            self.set_fatal(e.to_string());
        }
        self.requeue_batches(batches, false);
        self.disconnect(node, &e.to_string());
    }

    /// Batches of a request that got no answer: retried (or failed, if their time is up).
    /// With `maybe_written`, the request reached the broker, which may have written them.
    fn requeue_batches(&mut self, batches: Vec<ProducerBatch>, maybe_written: bool) {
        for mut b in batches {
            self.idem.release(&b);
            b.unknown_outcome |= maybe_written;
            self.retry_or_fail(b, ErrorCode::NetworkException, None, Instant::now());
        }
    }

    fn disconnect(&mut self, node: i32, reason: &str) {
        let was = self.net.client.is_connected(node);
        let lost = self.net.client.disconnect(node, reason);
        if was {
            Counters::add(&self.counters.disconnects, 1);
        }
        self.requeue_lost(lost);
        self.net.metadata.request_update();
    }

    /// Contexts of requests that will not be answered: batches are retried, control requests
    /// re-issued.
    fn requeue_lost(&mut self, lost: Vec<RequestContext>) {
        for ctx in lost {
            match ctx {
                RequestContext::Produce(batches) => {
                    self.produce_in_flight = self.produce_in_flight.saturating_sub(1);
                    self.requeue_batches(batches, true);
                }
                RequestContext::Metadata => self.net.metadata_lost(Instant::now()),
                RequestContext::InitProducerId => {
                    self.pid_in_flight = false;
                }
                RequestContext::Txn(call) => {
                    if let Some(t) = self.txn.as_mut() {
                        t.on_lost(call);
                    }
                }
            }
        }
    }

    fn on_completion(&mut self, c: Completion<RequestContext>) {
        match c {
            Completion::Disconnected {
                node_id,
                contexts,
                reason,
            } => {
                tracing::info!(node = node_id, reason = %reason, lost = contexts.len(), "connection lost");
                Counters::add(&self.counters.disconnects, 1);
                self.requeue_lost(contexts);
                self.net.metadata.request_update();
            }
            Completion::Response {
                node_id,
                context,
                version,
                correlation_id,
                body,
                ..
            } => match context {
                RequestContext::Metadata => {
                    self.net.metadata_in_flight = false;
                    match self.net.client.decode::<MetadataRequest>(
                        node_id,
                        &body,
                        version,
                        correlation_id,
                    ) {
                        Ok(resp) => self.apply_metadata(&resp),
                        Err(e) => {
                            tracing::warn!(node = node_id, error = %e, "malformed metadata response");
                            self.net.metadata.failed_attempt(Instant::now());
                            self.disconnect(node_id, &e.to_string());
                        }
                    }
                }
                RequestContext::InitProducerId => {
                    self.pid_in_flight = false;
                    match self.net.client.decode::<InitProducerIdRequest>(
                        node_id,
                        &body,
                        version,
                        correlation_id,
                    ) {
                        Ok(r) if r.error_code.is_ok() => {
                            tracing::info!(
                                producer_id = r.producer_id,
                                epoch = r.producer_epoch,
                                "producer id assigned"
                            );
                            self.idem.pid = ProducerIdState::Ready(ProducerIdAndEpoch {
                                id: r.producer_id,
                                epoch: r.producer_epoch,
                            });
                            let previous = self
                                .counters
                                .producer_id
                                .swap(r.producer_id, Ordering::Relaxed);
                            if previous >= 0 {
                                Counters::add(&self.counters.producer_id_resets, 1);
                            }
                        }
                        Ok(r) if r.error_code.is_retriable() => {
                            tracing::info!(code = %r.error_code, "InitProducerId: retrying");
                            self.pid_retry_at =
                                Some(Instant::now() + self.config.common.retry_backoff);
                        }
                        Ok(r) => self.set_fatal(format!("InitProducerId failed: {}", r.error_code)),
                        Err(e) => {
                            tracing::warn!(node = node_id, error = %e, "malformed InitProducerId response");
                            self.disconnect(node_id, &e.to_string());
                        }
                    }
                }
                RequestContext::Txn(call) => {
                    let Some(t) = self.txn.as_mut() else { return };
                    let fx =
                        t.on_response(&mut self.net, call, node_id, &body, version, correlation_id);
                    self.apply_txn(fx);
                }
                RequestContext::Produce(batches) => {
                    self.produce_in_flight = self.produce_in_flight.saturating_sub(1);
                    match self.net.client.decode::<ProduceRequest<'_>>(
                        node_id,
                        &body,
                        version,
                        correlation_id,
                    ) {
                        Ok(resp) => self.apply_produce(batches, &resp),
                        Err(e) => {
                            tracing::warn!(node = node_id, error = %e, "malformed produce response");
                            self.requeue_batches(batches, true);
                            self.disconnect(node_id, &e.to_string());
                        }
                    }
                }
            },
        }
    }

    fn apply_metadata(&mut self, resp: &crate::protocol::messages::MetadataResponse) {
        let lost = self.net.apply_metadata(resp, Instant::now());
        Counters::add(&self.counters.metadata_refreshes, 1);
        self.requeue_lost(lost);
        let topics: Vec<_> = self
            .net
            .metadata
            .cluster()
            .topics
            .iter()
            .map(|(name, t)| {
                let available: Vec<i32> = t
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.leader.is_some())
                    .map(|(i, _)| i as i32)
                    .collect();
                // Errors that waiting will not fix fail the waiting send()s at once.
                let fatal = match t.error {
                    ErrorCode::TopicAuthorizationFailed | ErrorCode::InvalidTopic => Some(t.error),
                    _ => None,
                };
                (name.clone(), t.partitions.len(), available, fatal)
            })
            .collect();
        for (name, n, available, fatal) in topics {
            self.acc.update_topic(&name, n, available, fatal);
        }
    }

    fn apply_produce(&mut self, batches: Vec<ProducerBatch>, resp: &ProduceResponse) {
        let now = Instant::now();
        // The acknowledged batches give their memory back together, under one lock.
        let mut done = Vec::with_capacity(batches.len());
        for b in batches {
            self.idem.release(&b);
            let part = resp
                .topics
                .iter()
                .filter(|t| *t.name == *b.topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.index == b.partition);
            let Some(p) = part else {
                self.retry_or_fail(
                    b,
                    ErrorCode::NetworkException,
                    Some("partition missing from the produce response"),
                    now,
                );
                continue;
            };
            match p.error_code {
                ErrorCode::None | ErrorCode::DuplicateSequenceNumber => {
                    self.idem.acked(&b);
                    if b.done {
                        // Expired while in flight: its sequence is settled, nothing else.
                        tracing::debug!(topic = %b.topic, partition = b.partition, "acknowledged after it expired");
                        continue;
                    }
                    self.succeed(b, p.base_offset, p.log_append_time_ms, &mut done);
                }
                code => {
                    if let Some((leader, epoch)) = p.current_leader {
                        self.net
                            .metadata
                            .apply_leader_hint(&b.topic, b.partition, leader, epoch);
                    }
                    let msg = p.error_message.clone();
                    self.retry_or_fail(b, code, msg.as_deref(), now);
                }
            }
        }
        self.acc.deallocate_all(&mut done);
    }

    fn retry_or_fail(
        &mut self,
        mut b: ProducerBatch,
        code: ErrorCode,
        message: Option<&str>,
        now: Instant,
    ) {
        if b.done {
            // Expired while in flight and already reported: not sent again.
            self.idem.left_unacked(&b);
            return;
        }
        // A transactional producer does not restart sequences itself: the batch fails, the
        // transaction must be aborted, and the coordinator gives the next epoch.
        let idempotent = b.sequence.is_some() && self.txn.is_none();
        let sequence_error = matches!(
            code,
            ErrorCode::OutOfOrderSequenceNumber | ErrorCode::UnknownProducerId
        );
        // Retried (whether the epoch moves on first is the bookkeeping's call), unless the
        // broker's log has moved past the batch's sequence: then it can never be written in
        // order, and it fails now rather than at `delivery.timeout.ms`.
        let unwritable = if sequence_error && idempotent {
            match self.idem.on_sequence_error(&b, code) {
                SequenceVerdict::Unwritable { acked_next } => Some(format!(
                    "sequence {} is behind sequence {acked_next}, which the broker already \
                     wrote: this batch can no longer be written in order and was not written",
                    b.sequence.unwrap_or(-1)
                )),
                SequenceVerdict::Retry => None,
            }
        } else {
            None
        };
        let message = unwritable.as_deref().or(message);
        let retriable = unwritable.is_none()
            && (code.is_retriable()
                || code.invalidates_metadata()
                || (sequence_error && idempotent));
        let expired = now >= b.created + self.config.delivery_timeout;
        if code.invalidates_metadata() || code == ErrorCode::NetworkException {
            self.net.metadata.request_update();
        }
        let detail: Arc<str> = match message {
            Some(m) => Arc::from(format!("{code}: {m}")),
            None => Arc::from(code.to_string()),
        };
        b.last_error = Some(detail);
        if retriable && !expired && b.attempts <= self.config.retries {
            let shift = b.attempts.saturating_sub(1).min(16);
            let backoff = (self
                .config
                .common
                .retry_backoff
                .saturating_mul(2u32.pow(shift)))
            .min(
                self.config
                    .common
                    .retry_backoff_max
                    .max(self.config.common.retry_backoff),
            );
            b.retry_at = now.checked_add(backoff);
            Counters::add(&self.counters.retries, 1);
            tracing::info!(topic = %b.topic, partition = b.partition, %code, attempt = b.attempts, backoff_ms = backoff.as_millis() as u64, "retrying batch");
            self.acc.reenqueue(b);
            return;
        }
        self.idem.left_unacked(&b);
        let e = if expired {
            self.delivery_timeout(&b)
        } else {
            ProduceError::Broker {
                topic: b.topic.clone(),
                partition: b.partition,
                code,
                message: message.map(Arc::from),
            }
        };
        tracing::warn!(topic = %b.topic, partition = b.partition, error = %e, "batch failed");
        self.fail(b, e);
    }

    /// Completes an acknowledged batch and adds it to `done`, whose memory the caller gives
    /// back with [`RecordAccumulator::deallocate_all`].
    fn succeed(
        &mut self,
        mut b: ProducerBatch,
        base_offset: i64,
        log_append_time: i64,
        done: &mut Vec<ProducerBatch>,
    ) {
        let n = b.record_count() as u64;
        b.complete(Ok((base_offset, log_append_time)));
        Counters::add(&self.counters.records_sent, n);
        done.push(b);
    }

    fn fail_at_close(&mut self, b: ProducerBatch, reason: &Arc<str>) {
        if b.done {
            return; // expired in flight: reported already
        }
        self.failed_at_close += b.record_count();
        let e = ProduceError::Closed {
            reason: Some(reason.clone()),
        };
        self.fail(b, e);
    }

    /// Completes a batch with an error and releases its memory (once: a batch that expired in
    /// flight is done already).
    fn fail(&mut self, mut b: ProducerBatch, e: ProduceError) {
        if b.done {
            return;
        }
        if let Some(t) = &self.txn {
            t.batch_failed(&e, b.sequence.is_some());
        }
        let n = b.record_count() as u64;
        b.complete(Err(e));
        Counters::add(&self.counters.records_failed, n);
        self.acc.deallocate(&b);
    }

    /// Ends a drain or a close when its work is done or its time is up. Returns true when the
    /// thread should stop.
    fn check_phase(&mut self, now: Instant) -> bool {
        if matches!(self.phase, Phase::Running | Phase::Checkpointed) {
            return false;
        }
        let done = self.produce_in_flight == 0 && self.acc.all_complete();
        match &self.phase {
            Phase::Running | Phase::Checkpointed => false,
            Phase::Draining { deadline, .. } => {
                let deadline = *deadline;
                if done {
                    let lost = self.net.close_all("checkpoint");
                    Counters::add(&self.counters.disconnects, lost.len() as u64);
                    self.requeue_lost(lost);
                    self.pid_in_flight = false;
                    self.acc.set_drain_all(false);
                    release_large(&mut self.frame); // not carried in the image
                    if let Phase::Draining { reply, .. } =
                        std::mem::replace(&mut self.phase, Phase::Checkpointed)
                    {
                        tracing::info!("checkpoint: every record acknowledged, connections closed");
                        if reply.send(Ok(())).is_err() {
                            // before_checkpoint stopped waiting: no image is taken and the
                            // producer must not stay disconnected until a Restore.
                            tracing::warn!(
                                "checkpoint: drained after the checkpoint gave up; reconnecting"
                            );
                            self.restore(Duration::ZERO);
                        }
                    }
                } else if now >= deadline {
                    let pending = self.acc.incomplete_records();
                    self.acc.set_drain_all(false);
                    if let Phase::Draining { reply, .. } =
                        std::mem::replace(&mut self.phase, Phase::Running)
                    {
                        let msg = format!(
                            "{pending} record(s) not acknowledged within checkpoint.drain.timeout.ms={} ({} request(s) in flight, {} connection(s) open); the producer goes on",
                            self.config.checkpoint_drain_timeout.as_millis(),
                            self.produce_in_flight,
                            self.net.client.connection_count()
                        );
                        tracing::warn!(%msg, "checkpoint: drain failed");
                        let _ = reply.send(Err(msg));
                    }
                }
                false
            }
            Phase::Closing { deadline } => {
                // A transaction still open is aborted first, as Java's sender does.
                let txn_pending = self.txn.as_ref().is_some_and(|t| t.mgr.close_pending());
                if done && !txn_pending {
                    return true;
                }
                if deadline.is_some_and(|d| now >= d) {
                    let reason: Arc<str> = Arc::from("close() timed out before delivery");
                    for b in self.acc.take_all() {
                        self.fail_at_close(b, &reason);
                    }
                    for ctx in self.net.close_all("close timeout") {
                        if let RequestContext::Produce(batches) = ctx {
                            for b in batches {
                                self.fail_at_close(b, &reason);
                            }
                        }
                    }
                    self.produce_in_flight = 0;
                    return true;
                }
                false
            }
        }
    }

    fn poll_timeout(&self, now: Instant, next_ready: Option<Instant>) -> Duration {
        // The counter, not the accumulator's lock: records accepted and not completed.
        let busy = self.counters.records_queued.load(Ordering::Relaxed) > 0
            || self.net.client.total_in_flight() > 0;
        let mut t = if busy {
            Duration::from_millis(100)
        } else {
            self.net
                .metadata
                .time_to_update(now)
                .clamp(Duration::from_millis(1), Duration::from_secs(1))
        };
        if let Some(r) = next_ready {
            t = t.min(r.saturating_duration_since(now));
        }
        if let Some(d) = self.net.client.next_deadline() {
            t = t.min(d.saturating_duration_since(now));
        }
        if let Some(due) = self.txn.as_ref().and_then(TxnIo::next_due) {
            t = t.min(due.saturating_duration_since(now));
        }
        let txn_busy = self.txn.as_ref().is_some_and(TxnIo::busy);
        if self.net.metadata.update_due(now)
            || (self.txn.is_none() && self.idem.pid == ProducerIdState::Needed)
            || txn_busy
        {
            t = t.min(
                self.config
                    .common
                    .reconnect_backoff
                    .max(Duration::from_millis(10)),
            );
        }
        t.max(Duration::from_millis(1)).min(Duration::from_secs(1))
    }
}
