//! The `ConsumerCoordinator`: everything the consumer says to its group coordinator, driven
//! by the network thread. FindCoordinator (here); group membership with the classic protocol
//! (`classic_protocol`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, eager or cooperative) or
//! with the consumer group protocol of KIP-848 (`kip848_protocol`: ConsumerGroupHeartbeat, the
//! broker assigning); leaving when the application stops calling `poll()` for `max.poll.interval.ms`,
//! on close and before a checkpoint; OffsetCommit (`commits`: a FIFO queue, commits stay in
//! order) and OffsetFetch (`offsets`: initial positions, `committed()`).
//!
//! Rebalance steps that belong to the application (its callbacks, its commits) are handed to
//! `poll()` through [`RebalanceStep`]: the coordinator never runs application code.

mod classic_protocol;
mod commits;
mod kip848_protocol;
mod offsets;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::assignor::{LastAssignment, RebalanceProtocol};
use super::config::{AutoOffsetReset, ConsumerConfig, GroupProtocol};
use super::error::ConsumerError;
use super::net::{COORDINATOR_BASE, Net, RequestContext};
use super::record::{OffsetAndMetadata, TopicPartition};
use super::shared::{Membership, RebalanceStep, Shared, Subscription};
use crate::protocol::ErrorCode;
use crate::protocol::messages::fetch::IsolationLevel;
use crate::protocol::messages::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse,
};
use crate::protocol::messages::join_group::JoinGroupResponse;
use crate::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    OffsetCommitResponse,
};
use crate::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopics, OffsetFetchResponse,
};

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

#[derive(Debug)]
enum JoinPhase {
    Idle,
    Joining,
    /// The leader waits for metadata of every member's topics to assign.
    Assigning(Box<JoinGroupResponse>),
    Syncing,
}

/// Group membership and offset storage.
#[derive(Debug)]
pub(crate) struct Coordinator {
    config: Arc<ConsumerConfig>,
    group_id: Option<String>,
    instance_id: Option<String>,
    /// `group.protocol`.
    group_protocol: GroupProtocol,
    /// The coordinator's node in the `NetworkClient`, once found.
    node: Option<i32>,
    find_in_flight: bool,
    find_retry_at: Option<Instant>,
    member_id: String,
    /// The classic generation, or the member epoch of the consumer group protocol.
    generation: i32,
    /// The assignor the coordinator chose (classic).
    protocol: Option<String>,
    /// Eager or cooperative (classic): from the assignors configured.
    rebalance_protocol: RebalanceProtocol,
    /// The last assignment received, for the sticky assignors' user data (classic).
    last_assignment: LastAssignment,
    /// Partitions were revoked by a cooperative rebalance: rejoin once `poll()` gave them up.
    followup_rejoin: bool,
    /// The consumer group protocol's state.
    group: kip848_protocol::GroupState,
    join: JoinPhase,
    join_retry_at: Option<Instant>,
    /// The subscription the current (or pending) membership joined with.
    joined_subscription: u64,
    join_sent_subscription: u64,
    /// A rejoin is wanted (`Some(lost)`), to hand to `poll()` when it is free.
    rejoin: Option<bool>,
    /// Leader only: partition counts the assignment was computed with.
    leader_snapshot: Option<HashMap<String, i32>>,
    /// A non-retriable group error was reported; no rejoin until the next `subscribe()`.
    failed_subscription: Option<u64>,
    heartbeat_in_flight: bool,
    next_heartbeat: Instant,
    /// When the coordinator last showed it holds this member's session (a heartbeat answered,
    /// a join or sync completed): past `session.timeout.ms` the member counts itself evicted.
    session_alive_at: Instant,
    commits: VecDeque<PendingCommit>,
    queries: VecDeque<CommittedQuery>,
    next_id: u64,
    positions_in_flight: bool,
    positions_retry_at: Option<Instant>,
    /// A LeaveGroup is wanted (checkpoint, close, unsubscribe), with its reason.
    leave_wanted: Option<String>,
    leave_in_flight: bool,
    /// After a restore under another `group.instance.id`: the image's static member (member
    /// id, instance id), which left only for now, to remove for good before joining.
    release: Option<(String, String)>,
    release_in_flight: bool,
    /// Checkpoint or close in progress: no joins, no position lookups, no poll-timeout check.
    suspended: bool,
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
        let group_protocol = config.group_protocol;
        Self {
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            rebalance_protocol: RebalanceProtocol::of(&config.assignors),
            config,
            group_protocol,
            node: None,
            find_in_flight: false,
            find_retry_at: None,
            member_id: match group_protocol {
                GroupProtocol::Classic => String::new(),
                // KIP-1082: the member chooses its id, once per life (and once per restore).
                GroupProtocol::Consumer => kip848_protocol::new_member_id(),
            },
            generation: -1,
            protocol: None,
            last_assignment: LastAssignment::default(),
            followup_rejoin: false,
            group: kip848_protocol::GroupState::default(),
            join: JoinPhase::Idle,
            join_retry_at: None,
            joined_subscription: 0,
            join_sent_subscription: 0,
            rejoin: None,
            leader_snapshot: None,
            failed_subscription: None,
            heartbeat_in_flight: false,
            next_heartbeat: Instant::now(),
            session_alive_at: Instant::now(),
            commits: VecDeque::new(),
            queries: VecDeque::new(),
            next_id: 0,
            positions_in_flight: false,
            positions_retry_at: None,
            leave_wanted: None,
            leave_in_flight: false,
            release: None,
            release_in_flight: false,
            suspended: false,
        }
    }

    fn is_member(&self) -> bool {
        match self.group_protocol {
            GroupProtocol::Classic => !self.member_id.is_empty() && self.generation >= 0,
            GroupProtocol::Consumer => self.generation > 0,
        }
    }

    /// Whether there is a membership to keep up or end (joined, or joining).
    fn in_group(&self) -> bool {
        match self.group_protocol {
            GroupProtocol::Classic => !self.member_id.is_empty(),
            GroupProtocol::Consumer => self.generation >= 0 || self.heartbeat_in_flight,
        }
    }

    /// Whether a JoinGroup or SyncGroup is under way.
    pub fn rebalancing(&self) -> bool {
        !matches!(self.join, JoinPhase::Idle)
    }

    /// `group.instance.id` in use.
    pub fn instance_id(&self) -> Option<&str> {
        self.instance_id.as_deref()
    }

    fn backoff(&self) -> Duration {
        self.config.common.retry_backoff
    }

    /// Who this member is now: what an assignment it installs is recorded with, for
    /// `group_metadata()` (KIP-447).
    fn membership(&self) -> Membership {
        Membership {
            member_id: self.member_id.clone(),
            generation_id: self.generation,
            group_instance_id: self.instance_id.clone(),
        }
    }

    fn publish_membership(&self, shared: &Shared) {
        let mut st = shared.state.lock();
        st.member_id = self.member_id.clone();
        st.generation_id = self.generation;
        st.group_instance_id = self.instance_id.clone();
    }

    /// One turn: discover the coordinator, join when `poll()` allows, heartbeat, commit,
    /// fetch committed offsets, leave when asked.
    pub fn poll(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        self.expire(now);
        if self.group_id.is_none() {
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
        if self.group_protocol == GroupProtocol::Classic {
            self.check_session_timeout(net, shared, now);
            self.request_rejoin_if_needed(net, shared);
        } else {
            self.maybe_reconcile(net, shared);
        }
        let Some(node) = self.ready_node(net, now) else {
            return;
        };
        self.maybe_leave(net, shared, node, now);
        if !self.maybe_release(net, shared, node, now) {
            match self.group_protocol {
                GroupProtocol::Classic => {
                    self.maybe_join(net, shared, node, now);
                    self.maybe_assign(net, shared, node, now);
                    self.maybe_heartbeat(net, node, now);
                }
                GroupProtocol::Consumer => self.maybe_group_heartbeat(net, shared, node, now),
            }
        }
        self.maybe_commit(net, shared, node, now);
        self.maybe_fetch_positions(net, shared, node, now);
        self.maybe_answer_query(net, node, now);
    }

    /// Whether anything needs the coordinator: a subscription or assignment, a membership to
    /// end, a commit or a `committed()` query.
    pub fn has_work(&self, shared: &Shared) -> bool {
        self.in_group()
            || self.leave_wanted.is_some()
            || self.leave_in_flight
            || !self.commits.is_empty()
            || !self.queries.is_empty()
            || shared.state.lock().subscription != Subscription::None
    }

    /// The coordinator's node if it can take a request now; finds or connects it otherwise.
    fn ready_node(&mut self, net: &mut Net, now: Instant) -> Option<i32> {
        match self.node {
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
        let group = self.group_id.clone().unwrap_or_default();
        match net.client.send(
            node,
            &FindCoordinatorRequest::group(group),
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
                tracing::info!(group = ?self.group_id, broker = c.node_id, host = %c.host, port, "group coordinator found");
                if let Some(old) = self.node.filter(|&o| o != node) {
                    self.forget_node(net, old, shared);
                }
                let lost = net.client.set_node(node, &c.host, port);
                self.node = Some(node);
                net.coordinator_node = Some(node);
                for ctx in lost {
                    self.on_request_lost(ctx, shared);
                }
                let _ = net.client.connect(node, now);
            }
            ErrorCode::GroupAuthorizationFailed => {
                self.report_fatal(
                    shared,
                    ConsumerError::Broker {
                        operation: "FindCoordinator",
                        code: c.error_code,
                        message: c.error_message.map(Arc::from),
                    },
                );
                self.find_retry_at = Some(now + self.config.common.retry_backoff_max);
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
        if let Some(node) = self.node.take() {
            tracing::info!(
                reason = why,
                "group coordinator unknown; looking it up again"
            );
            net.coordinator_node = None;
            self.forget_node(net, node, shared);
        }
        self.find_retry_at = Some(Instant::now() + self.backoff());
    }

    fn report_fatal(&mut self, shared: &Shared, e: ConsumerError) {
        tracing::error!(error = %e, "consumer group error");
        let mut st = shared.state.lock();
        self.failed_subscription = Some(st.subscription_version);
        st.errors.push_back(e);
        drop(st);
        shared.notify();
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
        if self.release_in_flight {
            return true;
        }
        tracing::info!(member_id = %member, instance = %instance, "restored under another group.instance.id: removing the image's static member for good");
        match self.group_protocol {
            GroupProtocol::Consumer => {
                self.send_group_release(net, shared, node, now, member, instance)
            }
            GroupProtocol::Classic => self.send_classic_release(net, node, now, member, instance),
        }
        true
    }

    /// The answer to the release of the image's static member: done, whatever it says.
    pub fn on_release(&mut self, code: ErrorCode) {
        self.release_in_flight = false;
        if self.release.take().is_some() {
            tracing::info!(%code, "the image's static member is released");
        }
    }

    // --- connection loss, checkpoint, restore ----------------------------------------------

    /// A group request will not be answered (its connection closed).
    pub fn on_request_lost(&mut self, ctx: RequestContext, shared: &Shared) {
        let now = Instant::now();
        match ctx {
            RequestContext::FindCoordinator => {
                self.find_in_flight = false;
                self.find_retry_at = Some(now + self.backoff());
            }
            RequestContext::JoinGroup | RequestContext::SyncGroup => {
                self.join = JoinPhase::Idle;
                self.join_retry_at = Some(now + self.backoff());
                self.node = None;
            }
            RequestContext::Heartbeat => {
                self.heartbeat_in_flight = false;
                self.node = None;
            }
            RequestContext::LeaveGroup => self.leave_in_flight = false,
            RequestContext::Release => self.release_in_flight = false,
            RequestContext::GroupHeartbeat(kind) => self.group_heartbeat_lost(kind),
            RequestContext::OffsetCommit(id) => {
                let msg: Arc<str> = Arc::from("connection to the coordinator lost");
                self.commit_failed(id, ErrorCode::NetworkException, Some(msg), shared, now);
                self.node = None;
            }
            RequestContext::OffsetFetch(None) => self.positions_failed(shared, now),
            RequestContext::OffsetFetch(Some(id)) => {
                self.query_failed(id, ErrorCode::NetworkException, now)
            }
            _ => {}
        }
    }

    /// A response that did not decode: the coordinator connection is dropped.
    pub fn on_malformed(&mut self, net: &mut Net, ctx: RequestContext, shared: &Shared, why: &str) {
        self.on_request_lost(ctx, shared);
        self.coordinator_unknown(net, shared, why);
    }

    /// Before a checkpoint or close: no more joins or position lookups.
    pub fn suspend(&mut self, on: bool) {
        self.suspended = on;
    }

    /// After the connections were closed for an image: the process wakes up (possibly many
    /// times over, as clones) as a new member with a new `group.instance.id` (if static).
    pub fn reset_after_restore(&mut self, instance_id: Option<String>, shared: &Shared) {
        self.node = None;
        self.find_in_flight = false;
        self.find_retry_at = None;
        self.group = kip848_protocol::GroupState::default();
        self.release = match (&self.instance_id, &instance_id) {
            (Some(old), new) if new.as_ref() != Some(old) && !self.member_id.is_empty() => {
                Some((self.member_id.clone(), old.clone()))
            }
            _ => None,
        };
        self.release_in_flight = false;
        self.member_id = match self.group_protocol {
            GroupProtocol::Classic => String::new(),
            GroupProtocol::Consumer => kip848_protocol::new_member_id(),
        };
        self.generation = -1;
        self.protocol = None;
        self.last_assignment = LastAssignment::default();
        self.followup_rejoin = false;
        self.join = JoinPhase::Idle;
        self.join_retry_at = None;
        self.rejoin = None;
        self.leader_snapshot = None;
        self.heartbeat_in_flight = false;
        self.session_alive_at = Instant::now();
        self.positions_in_flight = false;
        self.positions_retry_at = None;
        self.leave_wanted = None;
        self.leave_in_flight = false;
        for c in &mut self.commits {
            c.in_flight = false;
        }
        for q in &mut self.queries {
            q.in_flight = false;
        }
        self.instance_id = instance_id;
        self.suspended = false;
        self.publish_membership(shared);
    }

    /// Forgets the member after a leave without waiting (the coordinator was unreachable).
    pub fn forget_member(&mut self, shared: &Shared) {
        if self.group_protocol == GroupProtocol::Classic {
            self.member_id.clear();
        }
        self.generation = -1;
        self.leave_wanted = None;
        self.publish_membership(shared);
    }

    /// The earliest instant this needs a turn.
    pub fn next_due(&self, now: Instant) -> Duration {
        let mut t = Duration::from_secs(1);
        if self.is_member() && !self.heartbeat_in_flight {
            t = t.min(self.next_heartbeat.saturating_duration_since(now));
        }
        if self.group_protocol == GroupProtocol::Consumer && self.group.due_now()
            || self.release.is_some() && !self.release_in_flight
        {
            t = Duration::ZERO;
        }
        if self.is_member() && self.group_protocol == GroupProtocol::Classic {
            let expiry = self.session_alive_at + self.config.session_timeout;
            t = t.min(expiry.saturating_duration_since(now) + Duration::from_millis(1));
        }
        for at in [
            self.find_retry_at,
            self.join_retry_at,
            self.positions_retry_at,
        ]
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
        self.next_heartbeat += by;
        self.session_alive_at += by;
        for c in &mut self.commits {
            c.deadline += by;
        }
        for q in &mut self.queries {
            q.deadline += by;
        }
    }
}
