//! The `ConsumerCoordinator`: everything the consumer says to its group coordinator, driven
//! by the network thread. FindCoordinator (here); group membership through one
//! [`GroupMembership`](membership::GroupMembership) per group protocol (`membership`): the
//! classic protocol (`classic_protocol`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, eager or
//! cooperative) or the consumer group protocol of KIP-848 (`kip848_protocol`:
//! ConsumerGroupHeartbeat, the broker assigning), each a state machine (`member_state`);
//! leaving when the application stops calling `poll()` for `max.poll.interval.ms`, on close
//! and before a checkpoint; OffsetCommit (`commits`: a FIFO queue, commits stay in order) and
//! OffsetFetch (`offsets`: initial positions, `committed()`).
//!
//! Rebalance steps that belong to the application (its callbacks, its commits) are handed to
//! `poll()` through [`RebalanceStep`]: the coordinator never runs application code.

mod classic_protocol;
mod commits;
mod kip848_protocol;
mod member;
mod member_state;
mod membership;
mod offsets;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use self::member::Member;
use self::membership::{Cx, GroupLink};
use super::assignor::RebalanceProtocol;
use super::config::{AutoOffsetReset, ConsumerConfig};
use super::error::ConsumerError;
use super::net::{COORDINATOR_BASE, GroupHeartbeatKind, Net, RequestContext};
use super::record::{OffsetAndMetadata, TopicPartition};
use super::shared::{RebalanceStep, Shared, Subscription};
use crate::protocol::ErrorCode;
use crate::protocol::messages::consumer_group_heartbeat::ConsumerGroupHeartbeatResponse;
use crate::protocol::messages::fetch::IsolationLevel;
use crate::protocol::messages::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse,
};
use crate::protocol::messages::heartbeat::HeartbeatResponse;
use crate::protocol::messages::join_group::JoinGroupResponse;
use crate::protocol::messages::leave_group::LeaveGroupResponse;
use crate::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    OffsetCommitResponse,
};
use crate::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopics, OffsetFetchResponse,
};
use crate::protocol::messages::sync_group::SyncGroupResponse;

/// Where a commit's outcome goes.
#[derive(Debug)]
pub(crate) enum CommitReply {
    /// A caller waits (`commit_sync`, the checkpoint): retried until its deadline.
    Wait(mpsc::Sender<Result<(), ConsumerError>>),
    /// `commit_async`: sent once, like Java's; the outcome goes to the application's callback.
    Async(u64),
}

/// Offsets to commit.
pub(crate) type Offsets = Vec<(TopicPartition, OffsetAndMetadata)>;

/// What a commit stores.
#[derive(Debug)]
pub(crate) enum CommitOffsets {
    /// Offsets the application gave or snapshotted when it called, with the checkpoint epoch
    /// of that moment: if a checkpoint gave the assignment up since, the checkpoint's own
    /// commit (of positions at least as far) supersedes this one, which is not sent.
    App { offsets: Offsets, epoch: u64 },
    /// The positions of returned records when the request is sent (the checkpoint's commit,
    /// made while `poll()` is held).
    Current,
}

/// What `committed()` answers.
pub(crate) type CommittedReply =
    mpsc::Sender<Result<BTreeMap<TopicPartition, Option<OffsetAndMetadata>>, ConsumerError>>;

#[derive(Debug)]
struct PendingCommit {
    id: u64,
    offsets: CommitOffsets,
    timeout: Duration,
    deadline: Instant,
    reply: CommitReply,
    retry_at: Option<Instant>,
    last_error: Option<Arc<str>>,
    in_flight: bool,
}

#[derive(Debug)]
struct CommittedQuery {
    id: u64,
    partitions: Vec<TopicPartition>,
    timeout: Duration,
    deadline: Instant,
    reply: CommittedReply,
    retry_at: Option<Instant>,
    last_error: Option<Arc<str>>,
    in_flight: bool,
}

/// Group membership and offset storage.
#[derive(Debug)]
pub(crate) struct Coordinator {
    /// What the membership reads or changes of the coordinator.
    link: GroupLink,
    /// The membership under `group.protocol`.
    member: Member,
    find_in_flight: bool,
    find_retry_at: Option<Instant>,
    /// Eager or cooperative: from the assignors configured (commits are held through a
    /// cooperative rebalance).
    rebalance_protocol: RebalanceProtocol,
    commits: VecDeque<PendingCommit>,
    queries: VecDeque<CommittedQuery>,
    next_id: u64,
    positions_in_flight: bool,
    positions_retry_at: Option<Instant>,
    /// After a restore under another `group.instance.id`: the image's static member (member
    /// id, instance id), which left only for now, to remove for good before joining.
    release: Option<(String, String)>,
}

fn coordinator_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotCoordinator
            | ErrorCode::CoordinatorNotAvailable
            | ErrorCode::CoordinatorLoadInProgress
    )
}

impl Coordinator {
    pub fn new(config: Arc<ConsumerConfig>) -> Self {
        Self {
            member: Member::new(&config),
            rebalance_protocol: RebalanceProtocol::of(&config.assignors),
            link: GroupLink::new(config),
            find_in_flight: false,
            find_retry_at: None,
            commits: VecDeque::new(),
            queries: VecDeque::new(),
            next_id: 0,
            positions_in_flight: false,
            positions_retry_at: None,
            release: None,
        }
    }

    /// Whether a JoinGroup or SyncGroup is under way.
    pub fn rebalancing(&self) -> bool {
        self.member.rebalancing()
    }

    /// `group.instance.id` in use.
    pub fn instance_id(&self) -> Option<&str> {
        self.link.instance_id.as_deref()
    }

    fn backoff(&self) -> Duration {
        self.link.backoff()
    }

    fn publish_membership(&self, shared: &Shared) {
        self.link
            .publish(shared, self.member.member_id(), self.member.generation());
    }

    /// Runs `f` on the membership, then looks the coordinator up again if the membership found
    /// it gone.
    fn with_member<R>(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        f: impl FnOnce(&mut Member, &mut Cx<'_>) -> R,
    ) -> R {
        let mut cx = Cx {
            net,
            shared,
            link: &mut self.link,
        };
        let r = f(&mut self.member, &mut cx);
        if let Some(why) = self.link.unknown.take() {
            self.coordinator_unknown(net, shared, why);
        }
        r
    }

    /// One turn: discover the coordinator, join when `poll()` allows, heartbeat, commit,
    /// fetch committed offsets, leave when asked.
    pub fn poll(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        self.expire(now);
        if self.link.group_id.is_none() {
            self.init_positions_without_group(shared);
            for c in std::mem::take(&mut self.commits) {
                Self::complete_commit(c.reply, Err(ConsumerError::NoGroupId("commit")), shared);
            }
            return;
        }
        if !self.has_work(shared) {
            return;
        }
        self.check_poll_timeout(net, shared, now);
        self.with_member(net, shared, |m, cx| m.prepare(cx, now));
        let Some(node) = self.ready_node(net, now) else {
            return;
        };
        self.maybe_leave(net, shared, node, now);
        if !self.maybe_release(net, shared, node, now) {
            self.with_member(net, shared, |m, cx| m.drive(cx, node, now));
        }
        self.maybe_commit(net, shared, node, now);
        self.maybe_fetch_positions(net, shared, node, now);
        self.maybe_answer_query(net, node, now);
    }

    /// Whether anything needs the coordinator: a subscription or assignment, a membership to
    /// end, a commit or a `committed()` query.
    pub fn has_work(&self, shared: &Shared) -> bool {
        self.member.in_group()
            || self.link.leave_wanted.is_some()
            || self.link.leave_in_flight
            || !self.commits.is_empty()
            || !self.queries.is_empty()
            || shared.state.lock().subscription != Subscription::None
    }

    /// The coordinator's node if it can take a request now; finds or connects it otherwise.
    fn ready_node(&mut self, net: &mut Net, now: Instant) -> Option<i32> {
        match self.link.node {
            Some(n) => net.ready(n, now).then_some(n),
            None => {
                self.find(net, now);
                None
            }
        }
    }

    fn find(&mut self, net: &mut Net, now: Instant) {
        if self.find_in_flight || self.find_retry_at.is_some_and(|t| now < t) {
            return;
        }
        let Some(node) = net.any_node(now) else {
            return;
        };
        match net.client.send(
            node,
            &FindCoordinatorRequest::group(self.link.group()),
            RequestContext::FindCoordinator,
            true,
            now,
        ) {
            Ok(_) => self.find_in_flight = true,
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "FindCoordinator request failed");
                self.find_retry_at = Some(now + self.backoff());
            }
        }
    }

    pub fn on_find_coordinator(
        &mut self,
        net: &mut Net,
        resp: FindCoordinatorResponse,
        shared: &Shared,
    ) {
        self.find_in_flight = false;
        let now = Instant::now();
        let Some(c) = resp.coordinators.into_iter().next() else {
            self.find_retry_at = Some(now + self.backoff());
            return;
        };
        match c.error_code {
            ErrorCode::None if c.node_id >= 0 => {
                let Ok(port) = u16::try_from(c.port) else {
                    self.find_retry_at = Some(now + self.backoff());
                    return;
                };
                let node = COORDINATOR_BASE - c.node_id;
                tracing::info!(group = ?self.link.group_id, broker = c.node_id, host = %c.host, port, "group coordinator found");
                if let Some(old) = self.link.node.filter(|&o| o != node) {
                    self.forget_node(net, old, shared);
                }
                let lost = net.client.set_node(node, &c.host, port);
                self.link.node = Some(node);
                net.coordinator_node = Some(node);
                for ctx in lost {
                    self.on_request_lost(ctx, shared);
                }
                let _ = net.client.connect(node, now);
            }
            ErrorCode::GroupAuthorizationFailed => {
                self.link.report_fatal(
                    shared,
                    ConsumerError::Broker {
                        operation: "FindCoordinator",
                        code: c.error_code,
                        message: c.error_message.map(Arc::from),
                    },
                );
                self.find_retry_at = Some(now + self.link.config.common.retry_backoff_max);
            }
            code => {
                tracing::debug!(%code, "coordinator not available yet");
                self.find_retry_at = Some(now + self.backoff());
            }
        }
    }

    fn forget_node(&mut self, net: &mut Net, node: i32, shared: &Shared) {
        let lost = net.client.retain_nodes(|id| id != node);
        for ctx in lost {
            self.on_request_lost(ctx, shared);
        }
    }

    /// Marks the coordinator unknown (it moved or failed): its connection is closed and it is
    /// looked up again.
    fn coordinator_unknown(&mut self, net: &mut Net, shared: &Shared, why: &str) {
        if let Some(node) = self.link.node.take() {
            tracing::info!(
                reason = why,
                "group coordinator unknown; looking it up again"
            );
            net.coordinator_node = None;
            self.forget_node(net, node, shared);
        }
        self.find_retry_at = Some(Instant::now() + self.backoff());
    }

    /// Java's poll timeout: a member whose application has not called `poll()` for
    /// `max.poll.interval.ms` leaves, so its partitions go to members that make progress.
    fn check_poll_timeout(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        if self.link.suspended || !self.member.is_member() || self.member.rebalancing() {
            return;
        }
        let expired = {
            let st = shared.state.lock();
            !st.in_poll
                && !st.checkpointing
                && now.saturating_duration_since(st.last_poll) > self.link.config.max_poll_interval
        };
        if !expired {
            return;
        }
        tracing::warn!(
            max_poll_interval_ms = self.link.config.max_poll_interval.as_millis() as u64,
            "consumer poll timeout expired: the application spent too long between poll() calls; leaving the group"
        );
        self.with_member(net, shared, |m, cx| m.poll_timeout(cx, now));
    }

    /// A restored copy under another `group.instance.id` first removes the image's static
    /// member for good (it left only for now, so that a copy under its own id could take its
    /// partitions back): else its partitions would wait for it until the session timeout, and
    /// a classic rebalance would wait for it to rejoin. Refused harmlessly (UNKNOWN_MEMBER_ID,
    /// FENCED_INSTANCE_ID) when another copy took the member back or released it already.
    /// Returns whether membership must wait for it.
    fn maybe_release(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) -> bool {
        let Some((member, instance)) = self.release.clone() else {
            return false;
        };
        if self.link.release_in_flight {
            return true;
        }
        tracing::info!(member_id = %member, instance = %instance, "restored under another group.instance.id: removing the image's static member for good");
        self.with_member(net, shared, |m, cx| {
            m.send_release(cx, node, now, member, instance)
        });
        true
    }

    /// The answer to the release of the image's static member: done, whatever it says.
    pub fn on_release(&mut self, code: ErrorCode) {
        self.link.release_in_flight = false;
        if self.release.take().is_some() {
            tracing::info!(%code, "the image's static member is released");
        }
    }

    // --- answers to the membership's requests ------------------------------------------------

    pub fn on_join_group(&mut self, net: &mut Net, resp: JoinGroupResponse, shared: &Shared) {
        self.with_member(net, shared, |m, cx| match m.classic() {
            Some(c) => c.on_join_group(cx, resp),
            None => unexpected("JoinGroup"),
        });
    }

    pub fn on_sync_group(&mut self, net: &mut Net, resp: SyncGroupResponse, shared: &Shared) {
        self.with_member(net, shared, |m, cx| match m.classic() {
            Some(c) => c.on_sync_group(cx, resp),
            None => unexpected("SyncGroup"),
        });
    }

    pub fn on_heartbeat(&mut self, net: &mut Net, resp: HeartbeatResponse, shared: &Shared) {
        self.with_member(net, shared, |m, cx| match m.classic() {
            Some(c) => c.on_heartbeat(cx, resp),
            None => unexpected("Heartbeat"),
        });
    }

    pub fn on_leave_group(&mut self, resp: LeaveGroupResponse, shared: &Shared) {
        match self.member.classic() {
            Some(c) => c.on_leave_group(&mut self.link, shared, resp),
            None => unexpected("LeaveGroup"),
        }
    }

    pub fn on_group_heartbeat(
        &mut self,
        net: &mut Net,
        kind: GroupHeartbeatKind,
        resp: ConsumerGroupHeartbeatResponse,
        shared: &Shared,
    ) {
        if kind == GroupHeartbeatKind::Release {
            self.on_release(resp.error_code);
            return;
        }
        self.with_member(net, shared, |m, cx| match m.kip848() {
            Some(k) => k.on_heartbeat(cx, kind, resp),
            None => unexpected("ConsumerGroupHeartbeat"),
        });
    }

    // --- connection loss, leaving, checkpoint, restore -------------------------------------

    /// A group request will not be answered (its connection closed).
    pub fn on_request_lost(&mut self, ctx: RequestContext, shared: &Shared) {
        let now = Instant::now();
        match ctx {
            RequestContext::FindCoordinator => {
                self.find_in_flight = false;
                self.find_retry_at = Some(now + self.backoff());
            }
            RequestContext::Release => self.link.release_in_flight = false,
            RequestContext::GroupHeartbeat(GroupHeartbeatKind::Release) => {
                self.link.release_in_flight = false;
                self.link.node = None;
            }
            RequestContext::OffsetCommit(id) => {
                let msg: Arc<str> = Arc::from("connection to the coordinator lost");
                self.commit_failed(id, ErrorCode::NetworkException, Some(msg), shared, now);
                self.link.node = None;
            }
            RequestContext::OffsetFetch(None) => self.positions_failed(shared, now),
            RequestContext::OffsetFetch(Some(id)) => {
                self.query_failed(id, ErrorCode::NetworkException, now)
            }
            ctx @ (RequestContext::JoinGroup
            | RequestContext::SyncGroup
            | RequestContext::Heartbeat
            | RequestContext::LeaveGroup
            | RequestContext::GroupHeartbeat(_)) => {
                self.member.request_lost(&mut self.link, ctx, now)
            }
            _ => {}
        }
    }

    /// A response that did not decode: the coordinator connection is dropped.
    pub fn on_malformed(&mut self, net: &mut Net, ctx: RequestContext, shared: &Shared, why: &str) {
        self.on_request_lost(ctx, shared);
        self.coordinator_unknown(net, shared, why);
    }

    /// Asks for a leave (checkpoint, close, unsubscribe); [`left`](Self::left) says when it is
    /// done. A JoinGroup or SyncGroup in flight is abandoned: the coordinator answers the
    /// requests of a connection in order, so the leave would wait behind it.
    pub fn begin_leave(&mut self, net: &mut Net, shared: &Shared, reason: &str) {
        if !self.member.in_group() {
            return;
        }
        if self.member.rebalancing()
            && let Some(node) = self.link.node
        {
            let lost = net
                .client
                .disconnect(node, "leaving the group during a rebalance");
            for ctx in lost {
                self.on_request_lost(ctx, shared);
            }
            self.member.abandon_rebalance();
        }
        self.link.leave_wanted = Some(reason.to_owned());
    }

    /// Whether the leave asked for is done (sent and answered, or nothing to leave).
    pub fn left(&self) -> bool {
        self.link.leave_wanted.is_none() && !self.link.leave_in_flight
    }

    fn maybe_leave(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.link.leave_in_flight {
            return;
        }
        if let Some(reason) = self.link.leave_wanted.take() {
            if !self.member.in_group() {
                return;
            }
            self.with_member(net, shared, |m, cx| m.leave(cx, node, now, &reason));
        }
    }

    /// Before a checkpoint or close: no more joins or position lookups.
    pub fn suspend(&mut self, on: bool) {
        self.link.suspended = on;
    }

    /// After the connections were closed for an image: the process wakes up (possibly many
    /// times over, as clones) as a new member with a new `group.instance.id` (if static).
    pub fn reset_after_restore(&mut self, instance_id: Option<String>, shared: &Shared) {
        self.link.node = None;
        self.find_in_flight = false;
        self.find_retry_at = None;
        let member_id = self.member.member_id();
        self.release = match (&self.link.instance_id, &instance_id) {
            (Some(old), new) if new.as_ref() != Some(old) && !member_id.is_empty() => {
                Some((member_id.to_owned(), old.clone()))
            }
            _ => None,
        };
        self.link.release_in_flight = false;
        self.member = self.member.renewed();
        self.positions_in_flight = false;
        self.positions_retry_at = None;
        self.link.leave_wanted = None;
        self.link.leave_in_flight = false;
        for c in &mut self.commits {
            c.in_flight = false;
        }
        for q in &mut self.queries {
            q.in_flight = false;
        }
        self.link.instance_id = instance_id;
        self.link.suspended = false;
        self.publish_membership(shared);
    }

    /// Forgets the member after a leave without waiting (the coordinator was unreachable).
    pub fn forget_member(&mut self, shared: &Shared) {
        self.member.forget();
        self.link.leave_wanted = None;
        self.publish_membership(shared);
    }

    /// The earliest instant this needs a turn.
    pub fn next_due(&self, now: Instant) -> Duration {
        let mut t = Duration::from_secs(1).min(self.member.next_due(now));
        if self.release.is_some() && !self.link.release_in_flight {
            t = Duration::ZERO;
        }
        for at in [self.find_retry_at, self.positions_retry_at]
            .into_iter()
            .flatten()
        {
            t = t.min(at.saturating_duration_since(now));
        }
        if let Some(c) = self.commits.front() {
            t = t.min(c.deadline.saturating_duration_since(now));
            if let Some(r) = c.retry_at {
                t = t.min(r.saturating_duration_since(now));
            }
        }
        t
    }

    /// Shifts deadlines by `by` (a restore whose monotonic clock jumped).
    pub fn rebase(&mut self, by: Duration) {
        self.member.rebase(by);
        for c in &mut self.commits {
            c.deadline += by;
        }
        for q in &mut self.queries {
            q.deadline += by;
        }
    }
}

/// An answer to a request of the other group protocol: none is ever sent.
fn unexpected(api: &str) {
    tracing::warn!(
        api,
        "answer to a request of the other group protocol; ignored"
    );
}
