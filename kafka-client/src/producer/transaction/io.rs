//! The sender thread's side of transactions: finds the transaction and group coordinators,
//! sends InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, one
//! at a time as Java's sender does, and turns their answers into state transitions.
//!
//! Produce requests go on meanwhile for the partitions already in the transaction; a
//! partition `send()` wrote to first is added before its batches may leave (the accumulator
//! holds them back until [`Effects::added`] names it). EndTxn goes once every record of the
//! transaction has its answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Locked, OpKind, SendOffsets, TransactionError, TransactionManager, TransactionState};
use crate::network::{Net, NetworkError};
use crate::producer::accumulator::RecordAccumulator;
use crate::producer::error::ProduceError;
use crate::producer::producer_id::ProducerIdAndEpoch;
use crate::producer::request::{Partition, RequestContext, TxnCall};
use crate::protocol::messages::InitProducerIdRequest;
use crate::protocol::messages::add_offsets_to_txn::AddOffsetsToTxnRequest;
use crate::protocol::messages::add_partitions_to_txn::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use crate::protocol::messages::end_txn::EndTxnRequest;
use crate::protocol::messages::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse,
};
use crate::protocol::messages::txn_offset_commit::{
    TxnOffsetCommitPartition, TxnOffsetCommitRequest, TxnOffsetCommitTopic,
};
use crate::protocol::{DecodeError, ErrorCode, Request};

/// What the sender does after a turn.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// A producer id and epoch from InitProducerId: every sequence starts over.
    pub producer: Option<ProducerIdAndEpoch>,
    /// Fail the queued batches that were never sent (the transaction is aborted).
    pub fail_unsent: Option<ProduceError>,
    /// Fail every queued batch (the producer failed fatally).
    pub fail_queued: Option<ProduceError>,
    /// These partitions joined the transaction: their batches may leave.
    pub added: Vec<Partition>,
    /// The transaction ended: no partition is in one any more.
    pub ended: bool,
    /// A malformed answer from this node: disconnect it.
    pub disconnect: Option<(i32, String)>,
    /// Requests lost because a coordinator's address changed: retried or failed as any lost
    /// request.
    pub lost: Vec<RequestContext>,
}

/// Progress of the operation under way.
#[derive(Debug, Default)]
struct Progress {
    op: u64,
    offsets_added: bool,
    unsent_aborted: bool,
    ended: bool,
}

/// How to go on after an error code.
enum Verdict {
    /// Try again after the backoff (`quick`: after [`CONCURRENT_BACKOFF`]); with `refind`,
    /// look the coordinator up first.
    Retry { refind: bool, quick: bool },
    /// The transaction must be aborted (with a new epoch after it: `bump`; without an
    /// EndTxn, which the coordinator would refuse: `skip_end_txn`).
    Abortable {
        reason: String,
        bump: bool,
        skip_end_txn: bool,
    },
    /// Another producer took the id over.
    Fenced(ErrorCode),
    /// Nothing more can be done.
    Fatal(String),
}

impl Verdict {
    fn abortable(reason: impl Into<String>) -> Self {
        Verdict::Abortable {
            reason: reason.into(),
            bump: false,
            skip_end_txn: false,
        }
    }

    fn retry(refind: bool) -> Self {
        Verdict::Retry {
            refind,
            quick: false,
        }
    }
}

/// How long to wait after `CONCURRENT_TRANSACTIONS` (the previous transaction's markers are
/// being written; Java waits 20 ms there rather than the whole retry backoff).
const CONCURRENT_BACKOFF: Duration = Duration::from_millis(20);

/// The sender thread's transaction I/O.
#[derive(Debug)]
pub(crate) struct TxnIo {
    pub mgr: Arc<TransactionManager>,
    timeout_ms: i32,
    backoff: Duration,
    coordinator: Option<i32>,
    group_coordinator: Option<(String, i32)>,
    in_flight: bool,
    retry_at: Option<Instant>,
    /// Partitions `send()` wrote to that the coordinator does not know yet.
    pending: Vec<Partition>,
    producer: Option<ProducerIdAndEpoch>,
    progress: Progress,
    fatal_reported: bool,
}

impl TxnIo {
    pub fn new(mgr: Arc<TransactionManager>, timeout: Duration, backoff: Duration) -> Self {
        Self {
            mgr,
            timeout_ms: timeout.as_millis().min(i32::MAX as u128) as i32,
            backoff,
            coordinator: None,
            group_coordinator: None,
            in_flight: false,
            retry_at: None,
            pending: Vec::new(),
            producer: None,
            progress: Progress::default(),
            fatal_reported: false,
        }
    }

    /// After a restore (or at a re-bootstrap): coordinators are looked up again and the
    /// operation under way starts over.
    pub fn reset(&mut self) {
        self.coordinator = None;
        self.group_coordinator = None;
        self.in_flight = false;
        self.retry_at = None;
        self.pending.clear();
        self.producer = None;
        self.progress = Progress::default();
    }

    /// Partitions written to for the first time in the open transaction.
    pub fn add_partitions(&mut self, new: Vec<Partition>) {
        for p in new {
            if !self.pending.contains(&p) {
                self.pending.push(p);
            }
        }
    }

    /// When this needs a turn, if it waits for a time.
    pub fn next_due(&self) -> Option<Instant> {
        self.retry_at.filter(|_| !self.in_flight)
    }

    /// Whether work waits for a request to be sent (a coordinator's connection, a node's
    /// free slot): the sender should not sleep long.
    pub fn busy(&self) -> bool {
        !self.in_flight && (!self.pending.is_empty() || self.mgr.lock().pending_op().is_some())
    }

    /// A record of the transaction failed: the transaction must be aborted (with a new epoch
    /// if it had been sent: its partition's sequence is no longer known), or the producer is
    /// done for (fenced, not authorized).
    pub fn batch_failed(&self, e: &ProduceError, had_sequence: bool) {
        let mut core = self.mgr.lock();
        match e {
            ProduceError::Transaction(_) | ProduceError::Closed { .. } | ProduceError::Fatal(_) => {
            }
            ProduceError::Broker {
                code: code @ (ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch),
                ..
            } => {
                let f = core.fenced(*code);
                core.fatal(f);
            }
            ProduceError::Broker {
                code:
                    ErrorCode::TransactionalIdAuthorizationFailed
                    | ErrorCode::ClusterAuthorizationFailed
                    | ErrorCode::UnsupportedVersion,
                ..
            } => {
                let f = core.fatal_error("Produce", e.to_string());
                core.fatal(f);
            }
            _ => {
                let code = match e {
                    ProduceError::Broker { code, .. } => Some(*code),
                    _ => None,
                };
                core.abortable(format!("a record failed: {e}"), code, had_sequence);
            }
        }
    }

    /// One turn: sends the next transactional request if one is due. `produce_in_flight`:
    /// produce requests not answered yet.
    ///
    /// The operation is read before the accumulator: the application appends its records
    /// before it asks for the commit, so a commit seen here comes with every record it covers
    /// visible in `acc` (read after, under its own lock), never with one the turn missed.
    pub fn poll(
        &mut self,
        net: &mut Net<RequestContext>,
        acc: &RecordAccumulator,
        produce_in_flight: usize,
        now: Instant,
    ) -> Effects {
        let mut fx = Effects::default();
        if self.in_flight
            || self.retry_at.is_some_and(|t| now < t)
            || !net.metadata.is_bootstrapped()
        {
            return fx;
        }
        let mgr = self.mgr.clone();
        let mut core = mgr.lock();
        if core.state() == TransactionState::FatalError {
            if !self.fatal_reported {
                self.fatal_reported = true;
                fx.fail_queued = core.error.clone().map(ProduceError::Transaction);
            }
            return fx;
        }
        let op = core.pending_op().map(|(id, k)| (id, k.clone()));
        self.add_partitions(acc.take_new_txn_partitions());
        let idle = produce_in_flight == 0 && acc.all_complete();
        if let Some((id, _)) = &op
            && *id != self.progress.op
        {
            self.progress = Progress {
                op: *id,
                ..Progress::default()
            };
        }
        let open = matches!(
            core.state(),
            TransactionState::InTransaction | TransactionState::Committing
        );
        if open && !self.pending.is_empty() {
            self.send_add_partitions(&mut core, net, now);
            return fx;
        }
        let Some((_, kind)) = op else {
            return fx;
        };
        match kind {
            OpKind::Init => self.send_init(&mut core, net, now),
            OpKind::SendOffsets(w) => self.send_offsets(&mut core, net, &w, now),
            OpKind::Commit => self.commit(&mut core, net, idle, now, &mut fx),
            OpKind::Abort => self.abort(&mut core, net, idle, now, &mut fx),
        }
        fx
    }

    fn commit(
        &mut self,
        core: &mut Locked<'_>,
        net: &mut Net<RequestContext>,
        idle: bool,
        now: Instant,
        fx: &mut Effects,
    ) {
        if core.state() == TransactionState::AbortableError {
            let e = core.error.clone().expect("abortable state has its error");
            core.complete(Err(e));
            return;
        }
        if !idle || !self.pending.is_empty() {
            return; // records of the transaction still out
        }
        if !core.started {
            // Nothing reached the coordinator: nothing to end there.
            core.ended();
            fx.ended = true;
            return;
        }
        self.send_end(core, net, true, now);
    }

    fn abort(
        &mut self,
        core: &mut Locked<'_>,
        net: &mut Net<RequestContext>,
        idle: bool,
        now: Instant,
        fx: &mut Effects,
    ) {
        if !self.progress.unsent_aborted {
            // Records never sent are dropped (sent ones are answered first: their
            // sequences must be settled).
            self.progress.unsent_aborted = true;
            self.pending.clear();
            fx.fail_unsent = Some(ProduceError::Transaction(TransactionError::Aborted {
                transactional_id: core.id.clone(),
            }));
            return;
        }
        if !idle {
            return;
        }
        if !self.progress.ended && core.started && !core.skip_end_txn {
            self.send_end(core, net, false, now);
            return;
        }
        self.progress.ended = true;
        if core.bump_epoch {
            // KIP-360: the same id with the next epoch, so sequences start over.
            self.send_init(core, net, now);
            return;
        }
        core.ended();
        fx.ended = true;
    }

    // --- requests ------------------------------------------------------------------------

    /// The coordinator's node if it can take a request now; looks it up (or connects it)
    /// otherwise.
    fn coordinator_ready(
        &mut self,
        core: &Locked<'_>,
        net: &mut Net<RequestContext>,
        group: Option<&str>,
        now: Instant,
    ) -> Option<i32> {
        let node = match group {
            None => self.coordinator,
            Some(g) => self
                .group_coordinator
                .as_ref()
                .filter(|(id, _)| id == g)
                .map(|(_, n)| *n),
        };
        match node {
            Some(n) => net.ready(n, now).then_some(n),
            None => {
                let n = net.any_node(now)?;
                let req = match group {
                    None => FindCoordinatorRequest::transaction(core.id.to_string()),
                    Some(g) => FindCoordinatorRequest::group(g),
                };
                let call = TxnCall::FindCoordinator {
                    group: group.map(str::to_owned),
                };
                self.send(net, n, &req, call, now);
                None
            }
        }
    }

    fn send<R: Request>(
        &mut self,
        net: &mut Net<RequestContext>,
        node: i32,
        req: &R,
        call: TxnCall,
        now: Instant,
    ) {
        match net
            .client
            .send(node, req, RequestContext::Txn(call), true, now)
        {
            Ok(_) => self.in_flight = true,
            Err((e, ctx)) => {
                tracing::debug!(node, api = %R::API_KEY, error = %e, "transactional request not sent");
                if let RequestContext::Txn(TxnCall::AddPartitions(parts)) = ctx {
                    self.add_partitions(parts);
                }
                self.retry_at = Some(now + self.backoff);
                if let NetworkError::Version { .. } = e {
                    let mut core = self.mgr.lock();
                    let f = core.fatal_error("a transactional request", e.to_string());
                    core.fatal(f);
                }
            }
        }
    }

    fn current_producer(&self) -> (i64, i16) {
        self.producer.map_or((-1, -1), |p| (p.id, p.epoch))
    }

    fn send_init(&mut self, core: &mut Locked<'_>, net: &mut Net<RequestContext>, now: Instant) {
        let Some(node) = self.coordinator_ready(core, net, None, now) else {
            return;
        };
        // After an abort that needs a new epoch: the current id and epoch (KIP-360);
        // otherwise none, which also fences any earlier producer with this id.
        let (producer_id, producer_epoch) = if core.state() == TransactionState::Aborting {
            self.current_producer()
        } else {
            (-1, -1)
        };
        let req = InitProducerIdRequest {
            transactional_id: Some(core.id.to_string()),
            transaction_timeout_ms: self.timeout_ms,
            producer_id,
            producer_epoch,
        };
        self.send(net, node, &req, TxnCall::InitProducerId, now);
    }

    fn send_add_partitions(
        &mut self,
        core: &mut Locked<'_>,
        net: &mut Net<RequestContext>,
        now: Instant,
    ) {
        let Some(node) = self.coordinator_ready(core, net, None, now) else {
            return;
        };
        let Some((producer_id, producer_epoch)) = self.producer.map(|p| (p.id, p.epoch)) else {
            return;
        };
        let parts = std::mem::take(&mut self.pending);
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (t, p) in &parts {
            match topics.iter_mut().find(|x| *x.name == **t) {
                Some(x) => x.partitions.push(*p),
                None => topics.push(AddPartitionsToTxnTopic {
                    name: t.to_string(),
                    partitions: vec![*p],
                }),
            }
        }
        let req = AddPartitionsToTxnRequest {
            transactional_id: core.id.to_string(),
            producer_id,
            producer_epoch,
            topics,
        };
        self.send(net, node, &req, TxnCall::AddPartitions(parts), now);
    }

    fn send_offsets(
        &mut self,
        core: &mut Locked<'_>,
        net: &mut Net<RequestContext>,
        work: &SendOffsets,
        now: Instant,
    ) {
        let Some((producer_id, producer_epoch)) = self.producer.map(|p| (p.id, p.epoch)) else {
            return;
        };
        if !self.progress.offsets_added {
            let Some(node) = self.coordinator_ready(core, net, None, now) else {
                return;
            };
            let req = AddOffsetsToTxnRequest {
                transactional_id: core.id.to_string(),
                producer_id,
                producer_epoch,
                group_id: work.group_id.clone(),
            };
            self.send(net, node, &req, TxnCall::AddOffsets, now);
            return;
        }
        let Some(node) = self.coordinator_ready(core, net, Some(&work.group_id), now) else {
            return;
        };
        let mut topics: Vec<TxnOffsetCommitTopic> = Vec::new();
        for (tp, o) in &work.offsets {
            let p = TxnOffsetCommitPartition {
                partition_index: tp.partition,
                committed_offset: o.offset,
                committed_leader_epoch: o.leader_epoch.unwrap_or(-1),
                committed_metadata: Some(o.metadata.clone()),
            };
            match topics.iter_mut().find(|t| *t.name == *tp.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(TxnOffsetCommitTopic {
                    name: tp.topic.to_string(),
                    partitions: vec![p],
                }),
            }
        }
        let req = TxnOffsetCommitRequest {
            transactional_id: core.id.to_string(),
            group_id: work.group_id.clone(),
            producer_id,
            producer_epoch,
            generation_id: work.generation_id,
            member_id: work.member_id.clone(),
            group_instance_id: work.group_instance_id.clone(),
            topics,
        };
        self.send(net, node, &req, TxnCall::TxnOffsetCommit, now);
    }

    fn send_end(
        &mut self,
        core: &mut Locked<'_>,
        net: &mut Net<RequestContext>,
        commit: bool,
        now: Instant,
    ) {
        let Some(node) = self.coordinator_ready(core, net, None, now) else {
            return;
        };
        let (producer_id, producer_epoch) = self.current_producer();
        let req = EndTxnRequest {
            transactional_id: core.id.to_string(),
            producer_id,
            producer_epoch,
            committed: commit,
        };
        self.send(net, node, &req, TxnCall::EndTxn { commit }, now);
    }

    // --- answers -------------------------------------------------------------------------

    /// A request was lost (connection closed, timed out): sent again after the backoff, to a
    /// coordinator looked up again.
    pub fn on_lost(&mut self, call: TxnCall) {
        self.in_flight = false;
        self.retry_at = Some(Instant::now() + self.backoff);
        match call {
            TxnCall::AddPartitions(parts) => {
                self.add_partitions(parts);
                self.coordinator = None;
            }
            TxnCall::TxnOffsetCommit => self.group_coordinator = None,
            TxnCall::FindCoordinator { .. } => {}
            _ => self.coordinator = None,
        }
    }

    /// An answer.
    pub fn on_response(
        &mut self,
        net: &mut Net<RequestContext>,
        call: TxnCall,
        node: i32,
        body: &[u8],
        version: i16,
        correlation_id: i32,
    ) -> Effects {
        self.in_flight = false;
        let mut fx = Effects::default();
        macro_rules! decode {
            ($t:ty) => {
                match net.client.decode::<$t>(node, body, version, correlation_id) {
                    Ok(r) => r,
                    Err(e) => {
                        self.malformed(call, node, e, &mut fx);
                        return fx;
                    }
                }
            };
        }
        match &call {
            TxnCall::FindCoordinator { group } => {
                let resp = decode!(FindCoordinatorRequest);
                self.on_find_coordinator(net, group.clone(), resp, &mut fx);
            }
            TxnCall::InitProducerId => {
                let resp = decode!(InitProducerIdRequest);
                let code = resp.error_code;
                if code.is_ok() {
                    self.on_producer_id(resp.producer_id, resp.producer_epoch, &mut fx);
                } else {
                    self.apply(init_verdict(code), "InitProducerId");
                }
            }
            TxnCall::AddPartitions(parts) => {
                let resp = decode!(AddPartitionsToTxnRequest);
                self.on_add_partitions(parts, resp.results(), &mut fx);
            }
            TxnCall::AddOffsets => {
                let resp = decode!(AddOffsetsToTxnRequest);
                match resp.error_code {
                    ErrorCode::None => {
                        self.mgr.lock().started = true;
                        self.progress.offsets_added = true;
                    }
                    ErrorCode::GroupAuthorizationFailed => self.apply(
                        Verdict::abortable(
                            "not authorized to commit offsets of the consumer group",
                        ),
                        "AddOffsetsToTxn",
                    ),
                    code => self.apply(coordinator_verdict(code), "AddOffsetsToTxn"),
                }
            }
            TxnCall::TxnOffsetCommit => {
                let resp = decode!(TxnOffsetCommitRequest);
                let worst = resp
                    .results()
                    .map(|(_, _, c)| c)
                    .find(|c| !c.is_ok())
                    .unwrap_or(ErrorCode::None);
                if worst.is_ok() {
                    self.mgr.lock().complete(Ok(()));
                } else {
                    self.apply(offset_commit_verdict(worst), "TxnOffsetCommit");
                }
            }
            TxnCall::EndTxn { commit } => {
                let resp = decode!(EndTxnRequest);
                match resp.error_code {
                    ErrorCode::None => self.on_ended(*commit, &mut fx),
                    code => self.apply(coordinator_verdict(code), "EndTxn"),
                }
            }
        }
        fx
    }

    fn malformed(&mut self, call: TxnCall, node: i32, e: DecodeError, fx: &mut Effects) {
        tracing::warn!(node, error = %e, "malformed transactional response");
        self.on_lost(call);
        fx.disconnect = Some((node, e.to_string()));
    }

    fn on_find_coordinator(
        &mut self,
        net: &mut Net<RequestContext>,
        group: Option<String>,
        resp: FindCoordinatorResponse,
        fx: &mut Effects,
    ) {
        let now = Instant::now();
        let Some(c) = resp.coordinators.into_iter().next() else {
            self.retry_at = Some(now + self.backoff);
            return;
        };
        match c.error_code {
            ErrorCode::None if c.node_id >= 0 => {
                let Ok(port) = u16::try_from(c.port) else {
                    self.retry_at = Some(now + self.backoff);
                    return;
                };
                // The coordinator is a broker: its own node, shared with produce requests
                // (as in Java). A move of its address re-sends what was in flight.
                tracing::info!(broker = c.node_id, host = %c.host, port, group = ?group, "transaction coordinator found");
                fx.lost
                    .extend(net.client.set_node(c.node_id, &c.host, port));
                match group {
                    None => self.coordinator = Some(c.node_id),
                    Some(g) => self.group_coordinator = Some((g, c.node_id)),
                }
                let _ = net.client.connect(c.node_id, now);
            }
            ErrorCode::TransactionalIdAuthorizationFailed => self.apply(
                coordinator_verdict(ErrorCode::TransactionalIdAuthorizationFailed),
                "FindCoordinator",
            ),
            ErrorCode::GroupAuthorizationFailed => self.apply(
                Verdict::abortable("not authorized to commit offsets of the consumer group"),
                "FindCoordinator",
            ),
            code => {
                tracing::debug!(%code, "coordinator not available yet");
                self.retry_at = Some(now + self.backoff);
            }
        }
    }

    fn on_producer_id(&mut self, id: i64, epoch: i16, fx: &mut Effects) {
        let p = ProducerIdAndEpoch { id, epoch };
        tracing::info!(
            producer_id = id,
            epoch,
            "transactional producer id assigned"
        );
        self.producer = Some(p);
        fx.producer = Some(p);
        let mut core = self.mgr.lock();
        core.bump_epoch = false;
        if core.state() == TransactionState::Aborting {
            // The abort's new epoch: the transaction is over.
            core.ended();
            fx.ended = true;
        } else {
            core.set_state(TransactionState::Ready);
            core.complete(Ok(()));
        }
    }

    fn on_add_partitions<'a>(
        &mut self,
        parts: &[Partition],
        results: impl Iterator<Item = (&'a str, i32, ErrorCode)>,
        fx: &mut Effects,
    ) {
        let mut worst: Option<ErrorCode> = None;
        let mut unauthorized = Vec::new();
        for (t, p, code) in results {
            match code {
                ErrorCode::None | ErrorCode::OperationNotAttempted => {}
                ErrorCode::TopicAuthorizationFailed => unauthorized.push(format!("{t}-{p}")),
                c => worst = worst.or(Some(c)),
            }
        }
        if let Some(code) = worst {
            // Sent again (if the verdict says so) with what is pending by then.
            self.add_partitions(parts.to_vec());
            self.apply(coordinator_verdict(code), "AddPartitionsToTxn");
            return;
        }
        if !unauthorized.is_empty() {
            self.apply(
                Verdict::abortable(format!(
                    "not authorized to write to {} (TOPIC_AUTHORIZATION_FAILED)",
                    unauthorized.join(", ")
                )),
                "AddPartitionsToTxn",
            );
            return;
        }
        self.mgr.lock().started = true;
        fx.added = parts.to_vec();
    }

    fn on_ended(&mut self, commit: bool, fx: &mut Effects) {
        let mut core = self.mgr.lock();
        tracing::debug!(commit, "transaction ended");
        if core.state() == TransactionState::Aborting {
            self.progress.ended = true;
            if core.bump_epoch {
                return; // InitProducerId next turn
            }
        }
        core.ended();
        fx.ended = true;
    }

    fn apply(&mut self, v: Verdict, api: &'static str) {
        let mut core = self.mgr.lock();
        match v {
            Verdict::Retry { refind, quick } => {
                if refind {
                    self.coordinator = None;
                    self.group_coordinator = None;
                }
                let backoff = if quick {
                    CONCURRENT_BACKOFF
                } else {
                    self.backoff
                };
                self.retry_at = Some(Instant::now() + backoff);
            }
            Verdict::Abortable { reason, .. } if core.state() == TransactionState::Initializing => {
                // No transaction to abort: init_transactions() cannot succeed.
                let f = core.fatal_error(api, reason);
                core.fatal(f);
            }
            Verdict::Abortable {
                reason,
                bump,
                skip_end_txn,
            } => {
                core.skip_end_txn |= skip_end_txn;
                core.abortable(format!("{api}: {reason}"), None, bump);
                if core.state() == TransactionState::Aborting {
                    // The abort itself was refused this way: go on to the new epoch.
                    self.progress.ended = true;
                }
            }
            Verdict::Fenced(code) => {
                let f = core.fenced(code);
                core.fatal(f);
            }
            Verdict::Fatal(reason) => {
                let f = core.fatal_error(api, reason);
                core.fatal(f);
            }
        }
    }
}

/// Errors every request to the transaction coordinator may get (InitProducerId,
/// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), as Java's handlers sort them.
fn coordinator_verdict(code: ErrorCode) -> Verdict {
    match code {
        ErrorCode::CoordinatorNotAvailable | ErrorCode::NotCoordinator => Verdict::retry(true),
        ErrorCode::ConcurrentTransactions => Verdict::Retry {
            refind: false,
            quick: true,
        },
        ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch => Verdict::Fenced(code),
        ErrorCode::TransactionalIdAuthorizationFailed => Verdict::Fatal(format!(
            "not authorized to use this transactional.id ({code})"
        )),
        ErrorCode::InvalidTxnState => Verdict::Fatal(format!(
            "the coordinator does not accept this in the transaction's state ({code})"
        )),
        ErrorCode::UnknownProducerId | ErrorCode::InvalidProducerIdMapping => Verdict::Abortable {
            reason: format!("the coordinator lost this producer's id ({code})"),
            bump: true,
            skip_end_txn: code == ErrorCode::InvalidProducerIdMapping,
        },
        ErrorCode::TransactionAbortable => {
            Verdict::abortable(format!("the coordinator refused the transaction ({code})"))
        }
        c if c.is_retriable() => Verdict::retry(false),
        c => Verdict::Fatal(format!("unexpected error {c}")),
    }
}

fn init_verdict(code: ErrorCode) -> Verdict {
    match code {
        ErrorCode::ClusterAuthorizationFailed => {
            Verdict::Fatal(format!("not authorized for idempotent writes ({code})"))
        }
        ErrorCode::InvalidTransactionTimeout => Verdict::Fatal(format!(
            "transaction.timeout.ms is above the brokers' transaction.max.timeout.ms ({code})"
        )),
        // An abort's new epoch cannot be had: there is nothing left to abort with.
        ErrorCode::UnknownProducerId | ErrorCode::InvalidProducerIdMapping => {
            Verdict::Fatal(format!("the coordinator lost this producer's id ({code})"))
        }
        code => coordinator_verdict(code),
    }
}

fn offset_commit_verdict(code: ErrorCode) -> Verdict {
    match code {
        ErrorCode::CoordinatorNotAvailable
        | ErrorCode::NotCoordinator
        | ErrorCode::RequestTimedOut => Verdict::retry(true),
        ErrorCode::UnknownTopicOrPartition | ErrorCode::CoordinatorLoadInProgress => {
            Verdict::retry(false)
        }
        ErrorCode::GroupAuthorizationFailed => Verdict::abortable(format!(
            "not authorized to commit offsets of the consumer group ({code})"
        )),
        ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration | ErrorCode::FencedInstanceId => {
            Verdict::abortable(format!(
                "the consumer group moved on: the member whose offsets these are no longer owns its partitions (a rebalance, or a copy restored from a checkpoint image) ({code})"
            ))
        }
        ErrorCode::UnsupportedForMessageFormat => Verdict::Fatal(code.to_string()),
        code => coordinator_verdict(code),
    }
}
