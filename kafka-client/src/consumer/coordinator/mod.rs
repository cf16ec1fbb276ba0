//! The `ConsumerCoordinator`: everything the consumer says to its group coordinator, driven
//! by the network thread. FindCoordinator; JoinGroup (`MEMBER_ID_REQUIRED` answered by joining
//! again with the given id) and SyncGroup, the leader computing the assignment; Heartbeat every
//! `heartbeat.interval.ms`; leaving when the application stops calling `poll()` for
//! `max.poll.interval.ms`; LeaveGroup on close and before a checkpoint; OffsetCommit (a FIFO
//! queue: commits stay in order) and OffsetFetch (initial positions, `committed()`).
//!
//! The eager protocol, as Java's `range`/`roundrobin` use it: before rejoining, a member gives
//! up all its partitions. That step belongs to the application (its callbacks, its commits), so
//! the coordinator asks `poll()` for it through [`RebalanceStep`] and joins only once `poll()`
//! answers `JoinAllowed`, which is why a member that does not poll is not rejoined (and is
//! removed by the coordinator after the rebalance timeout, `max.poll.interval.ms`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::assignor::{AssignorKind, GroupMember};
use super::config::{AutoOffsetReset, ConsumerConfig};
use super::error::ConsumerError;
use super::net::{COORDINATOR_BASE, Net, RequestContext};
use super::record::{OffsetAndMetadata, TopicPartition};
use super::shared::{Membership, RebalanceStep, Shared, Subscription};
use crate::protocol::ErrorCode;
use crate::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, PROTOCOL_TYPE, TopicPartitions,
};
use crate::protocol::messages::fetch::IsolationLevel;
use crate::protocol::messages::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse,
};
use crate::protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse,
};
use crate::protocol::messages::leave_group::{
    LeaveGroupRequest, LeaveGroupResponse, MemberIdentity,
};
use crate::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    OffsetCommitResponse,
};
use crate::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopics, OffsetFetchResponse,
};
use crate::protocol::messages::sync_group::{
    SyncGroupRequest, SyncGroupRequestAssignment, SyncGroupResponse,
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
    /// The coordinator's node in the `NetworkClient`, once found.
    node: Option<i32>,
    find_in_flight: bool,
    find_retry_at: Option<Instant>,
    member_id: String,
    generation: i32,
    protocol: Option<String>,
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

fn group_topics(partitions: &[TopicPartition]) -> Vec<TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .map(|(t, p)| TopicPartitions {
            topic: t.to_owned(),
            partitions: p,
        })
        .collect()
}

impl Coordinator {
    pub fn new(config: Arc<ConsumerConfig>) -> Self {
        Self {
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            config,
            node: None,
            find_in_flight: false,
            find_retry_at: None,
            member_id: String::new(),
            generation: -1,
            protocol: None,
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
            suspended: false,
        }
    }

    fn is_member(&self) -> bool {
        !self.member_id.is_empty() && self.generation >= 0
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
        self.check_session_timeout(net, shared, now);
        self.request_rejoin_if_needed(net, shared);
        let Some(node) = self.ready_node(net, now) else {
            return;
        };
        self.maybe_leave(net, shared, node, now);
        self.maybe_join(net, shared, node, now);
        self.maybe_assign(net, shared, node, now);
        self.maybe_heartbeat(net, node, now);
        self.maybe_commit(net, shared, node, now);
        self.maybe_fetch_positions(net, shared, node, now);
        self.maybe_answer_query(net, node, now);
    }

    /// Whether anything needs the coordinator: a subscription or assignment, a membership to
    /// end, a commit or a `committed()` query.
    pub fn has_work(&self, shared: &Shared) -> bool {
        !self.member_id.is_empty()
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

    // --- membership ------------------------------------------------------------------------

    /// Forgets the generation (the coordinator no longer knows it); with `forget_member`, the
    /// member id too. The partitions are lost: `poll()` reports them as such and rejoins.
    fn reset_generation(&mut self, shared: &Shared, forget_member: bool, why: &str) {
        tracing::info!(member_id = %self.member_id, generation = self.generation, reason = why, "member reset; rejoining");
        self.generation = -1;
        self.protocol = None;
        self.leader_snapshot = None;
        if forget_member {
            self.member_id.clear();
        }
        self.rejoin = Some(true);
        self.publish_membership(shared);
    }

    fn request_rejoin_if_needed(&mut self, net: &Net, shared: &Shared) {
        if self.suspended || self.rebalancing() {
            return;
        }
        let mut st = shared.state.lock();
        let Subscription::Topics(_) = &st.subscription else {
            self.rejoin = None;
            return;
        };
        // After a fatal group error the member does not join again, but partitions it lost
        // (fenced) are still given up.
        if self.failed_subscription == Some(st.subscription_version) && self.rejoin != Some(true) {
            return;
        }
        if st.subscription_version != self.joined_subscription && self.rejoin.is_none() {
            self.rejoin = Some(false);
        }
        if self.rejoin.is_none()
            && let Some(snapshot) = &self.leader_snapshot
        {
            let changed = snapshot.iter().any(|(t, &n)| {
                net.metadata
                    .cluster()
                    .topics
                    .get(t.as_str())
                    .is_some_and(|ti| ti.error.is_ok() && ti.partitions.len() as i32 != n)
            });
            if changed {
                tracing::info!("partition count of a subscribed topic changed: rebalancing");
                self.rejoin = Some(false);
            }
        }
        match &st.rebalance {
            RebalanceStep::None => {
                if let Some(lost) = self.rejoin.take() {
                    let partitions: Vec<TopicPartition> = st.assignment.keys().cloned().collect();
                    st.rebalance = RebalanceStep::Revoke { partitions, lost };
                    drop(st);
                    shared.notify();
                }
            }
            RebalanceStep::Revoke { .. } | RebalanceStep::JoinAllowed => self.rejoin = None,
            RebalanceStep::Assigned(_) => {}
        }
    }

    fn maybe_join(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.suspended
            || self.rebalancing()
            || self.join_retry_at.is_some_and(|t| now < t)
            || self.leave_wanted.is_some()
        {
            return;
        }
        let (topics, version) = {
            let st = shared.state.lock();
            match (&st.rebalance, &st.subscription) {
                (RebalanceStep::JoinAllowed, Subscription::Topics(t)) => (
                    t.iter().cloned().collect::<Vec<_>>(),
                    st.subscription_version,
                ),
                _ => return,
            }
        };
        if self.failed_subscription == Some(version) {
            return;
        }
        let subscription = ConsumerProtocolSubscription {
            topics,
            user_data: None,
            owned_partitions: Vec::new(), // eager: everything was given up before joining
            generation_id: self.generation,
            rack_id: (!self.config.client_rack.is_empty()).then(|| self.config.client_rack.clone()),
        };
        let metadata = subscription.encode(ConsumerProtocolSubscription::VERSION);
        let req = JoinGroupRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            session_timeout_ms: self.config.session_timeout.as_millis() as i32,
            rebalance_timeout_ms: self.config.max_poll_interval.as_millis() as i32,
            member_id: self.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
            protocol_type: PROTOCOL_TYPE.into(),
            protocols: self
                .config
                .assignors
                .iter()
                .map(|a| JoinGroupRequestProtocol {
                    name: a.name().into(),
                    metadata: metadata.clone(),
                })
                .collect(),
            reason: Some("joining the group".into()),
        };
        // The coordinator holds a JoinGroup until every member rejoined (up to the rebalance
        // timeout), as Java allows for it.
        let timeout = self
            .config
            .common
            .request_timeout
            .max(self.config.max_poll_interval + Duration::from_secs(5));
        match net
            .client
            .send_with_timeout(node, &req, RequestContext::JoinGroup, timeout, now)
        {
            Ok(_) => {
                tracing::debug!(member_id = %self.member_id, "JoinGroup sent");
                self.join = JoinPhase::Joining;
                self.join_sent_subscription = version;
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, "JoinGroup request failed");
                self.join_retry_at = Some(now + self.backoff());
                if matches!(e, crate::network::NetworkError::Version { .. }) {
                    self.report_fatal(shared, ConsumerError::Fatal(Arc::from(e.to_string())));
                }
            }
        }
    }

    pub fn on_join_group(&mut self, net: &mut Net, resp: JoinGroupResponse, shared: &Shared) {
        let now = Instant::now();
        self.join = JoinPhase::Idle;
        match resp.error_code {
            ErrorCode::None => {
                self.member_id = resp.member_id.clone();
                self.generation = resp.generation_id;
                self.session_alive_at = now;
                self.protocol = resp.protocol_name.clone();
                self.publish_membership(shared);
                tracing::info!(member_id = %self.member_id, generation = self.generation, protocol = ?self.protocol, leader = resp.is_leader(), members = resp.members.len(), "joined group");
                if resp.is_leader() && !resp.skip_assignment {
                    self.join = JoinPhase::Assigning(Box::new(resp));
                } else {
                    self.send_sync(net, shared, Vec::new(), now);
                }
            }
            ErrorCode::MemberIdRequired => {
                // KIP-394: join again at once with the id the coordinator gave.
                self.member_id = resp.member_id;
                self.join_retry_at = None;
            }
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                self.generation = -1;
            }
            ErrorCode::IllegalGeneration => self.generation = -1,
            code if coordinator_error(code) => {
                self.coordinator_unknown(net, shared, code.name());
            }
            ErrorCode::RebalanceInProgress => self.join_retry_at = Some(now + self.backoff()),
            ErrorCode::FencedInstanceId => self.fenced(shared, "JoinGroup"),
            code @ (ErrorCode::InconsistentGroupProtocol
            | ErrorCode::GroupAuthorizationFailed
            | ErrorCode::InvalidSessionTimeout
            | ErrorCode::GroupMaxSizeReached
            | ErrorCode::InvalidGroupId
            | ErrorCode::UnsupportedVersion) => {
                self.report_fatal(
                    shared,
                    ConsumerError::Broker {
                        operation: "JoinGroup",
                        code,
                        message: None,
                    },
                );
            }
            code => {
                tracing::warn!(%code, "JoinGroup failed; retrying");
                self.join_retry_at = Some(now + self.backoff());
            }
        }
    }

    /// The leader assigns once the metadata covers every member's topics.
    fn maybe_assign(&mut self, net: &mut Net, shared: &Shared, _node: i32, now: Instant) {
        let JoinPhase::Assigning(resp) = &self.join else {
            return;
        };
        let mut members = Vec::with_capacity(resp.members.len());
        for m in &resp.members {
            let topics = match ConsumerProtocolSubscription::decode(&m.metadata) {
                Ok(s) => s.topics,
                Err(e) => {
                    tracing::warn!(member = %m.member_id, error = %e, "unreadable subscription; the member gets nothing");
                    Vec::new()
                }
            };
            members.push(GroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                topics,
            });
        }
        let mut missing = false;
        let mut counts = HashMap::new();
        for t in members.iter().flat_map(|m| m.topics.iter()) {
            match net.metadata.cluster().topics.get(t.as_str()) {
                Some(info) if info.error.is_ok() => {
                    counts.insert(t.clone(), info.partitions.len() as i32);
                }
                Some(_) => {}
                None => {
                    net.metadata.add_topic(t);
                    missing = true;
                }
            }
        }
        if missing {
            return; // the next metadata answer covers them
        }
        let Some(kind) = self
            .protocol
            .as_deref()
            .and_then(AssignorKind::from_protocol)
        else {
            let e = ConsumerError::Fatal(Arc::from(format!(
                "the coordinator chose assignor {:?}, which this client does not implement",
                self.protocol
            )));
            self.join = JoinPhase::Idle;
            self.report_fatal(shared, e);
            return;
        };
        let assignment = kind.assign(&members, &counts);
        tracing::info!(assignor = %kind, members = members.len(), partitions = counts.values().sum::<i32>(), "assigned partitions as group leader");
        self.leader_snapshot = Some(counts);
        let assignments = assignment
            .into_iter()
            .map(|(member_id, parts)| SyncGroupRequestAssignment {
                member_id,
                assignment: ConsumerProtocolAssignment {
                    assigned_partitions: group_topics(&parts),
                    user_data: None,
                }
                .encode(ConsumerProtocolAssignment::VERSION),
            })
            .collect();
        self.join = JoinPhase::Idle;
        self.send_sync(net, shared, assignments, now);
    }

    fn send_sync(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        assignments: Vec<SyncGroupRequestAssignment>,
        now: Instant,
    ) {
        let Some(node) = self.node else {
            return;
        };
        let req = SyncGroupRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
            protocol_type: Some(PROTOCOL_TYPE.into()),
            protocol_name: self.protocol.clone(),
            assignments,
        };
        let timeout = self
            .config
            .common
            .request_timeout
            .max(self.config.max_poll_interval + Duration::from_secs(5));
        match net
            .client
            .send_with_timeout(node, &req, RequestContext::SyncGroup, timeout, now)
        {
            Ok(_) => self.join = JoinPhase::Syncing,
            Err((e, _)) => {
                tracing::warn!(error = %e, "SyncGroup request failed; rejoining");
                self.coordinator_unknown(net, shared, "SyncGroup could not be sent");
            }
        }
    }

    pub fn on_sync_group(&mut self, net: &mut Net, resp: SyncGroupResponse, shared: &Shared) {
        let now = Instant::now();
        self.join = JoinPhase::Idle;
        match resp.error_code {
            ErrorCode::None => {
                let assignment = match ConsumerProtocolAssignment::decode(&resp.assignment) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable assignment; rejoining");
                        self.join_retry_at = Some(now + self.backoff());
                        return;
                    }
                };
                let partitions: Vec<TopicPartition> = assignment
                    .assigned_partitions
                    .iter()
                    .flat_map(|t| {
                        let topic: Arc<str> = Arc::from(t.topic.as_str());
                        t.partitions
                            .iter()
                            .map(move |&p| TopicPartition::new(topic.clone(), p))
                    })
                    .collect();
                tracing::info!(member_id = %self.member_id, generation = self.generation, partitions = partitions.len(), "assignment received");
                for tp in &partitions {
                    net.metadata.add_topic(&tp.topic);
                }
                self.joined_subscription = self.join_sent_subscription;
                self.next_heartbeat = now + self.config.heartbeat_interval;
                self.session_alive_at = now;
                let mut st = shared.state.lock();
                st.set_assignment(partitions.iter().cloned());
                st.rebalance = RebalanceStep::Assigned(partitions);
                st.assigned_membership = Membership {
                    member_id: self.member_id.clone(),
                    generation_id: self.generation,
                    group_instance_id: self.instance_id.clone(),
                };
                st.rebalances += 1;
                drop(st);
                shared.notify();
            }
            ErrorCode::RebalanceInProgress => {} // join again (the step is still JoinAllowed)
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                self.generation = -1;
            }
            ErrorCode::IllegalGeneration => self.generation = -1,
            code if coordinator_error(code) => self.coordinator_unknown(net, shared, code.name()),
            ErrorCode::FencedInstanceId => self.fenced(shared, "SyncGroup"),
            code => {
                tracing::warn!(%code, "SyncGroup failed; rejoining");
                self.join_retry_at = Some(now + self.backoff());
            }
        }
    }

    fn maybe_heartbeat(&mut self, net: &mut Net, node: i32, now: Instant) {
        if !self.is_member()
            || self.rebalancing()
            || self.heartbeat_in_flight
            || now < self.next_heartbeat
            || self.leave_wanted.is_some()
        {
            return;
        }
        let req = HeartbeatRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
        };
        self.next_heartbeat = now + self.config.heartbeat_interval;
        match net
            .client
            .send(node, &req, RequestContext::Heartbeat, true, now)
        {
            Ok(_) => self.heartbeat_in_flight = true,
            Err((e, _)) => tracing::debug!(error = %e, "heartbeat not sent"),
        }
    }

    pub fn on_heartbeat(&mut self, net: &mut Net, resp: HeartbeatResponse, shared: &Shared) {
        self.heartbeat_in_flight = false;
        match resp.error_code {
            ErrorCode::None => self.session_alive_at = Instant::now(),
            ErrorCode::RebalanceInProgress => {
                // The member is still in the group (for the rebalance timeout).
                self.session_alive_at = Instant::now();
                self.rebalance_in_progress(shared, "heartbeat");
            }
            ErrorCode::IllegalGeneration => {
                self.reset_generation(shared, false, "ILLEGAL_GENERATION")
            }
            ErrorCode::UnknownMemberId => self.reset_generation(shared, true, "UNKNOWN_MEMBER_ID"),
            ErrorCode::FencedInstanceId => self.fenced(shared, "Heartbeat"),
            code if coordinator_error(code) => self.coordinator_unknown(net, shared, code.name()),
            code => tracing::warn!(%code, "heartbeat failed"),
        }
    }

    /// The coordinator says the group is rebalancing (heartbeat, commit): the member gives its
    /// partitions up as in any rebalance (not lost) and joins again, at the next `poll()`.
    fn rebalance_in_progress(&mut self, shared: &Shared, from: &str) {
        if self.rejoin.is_none() && shared.state.lock().rebalance == RebalanceStep::None {
            tracing::info!(
                from,
                "the group is rebalancing: rejoining at the next poll()"
            );
            self.rejoin = Some(false);
        }
    }

    /// Another member with this `group.instance.id` took over: this one's partitions are
    /// lost and it does not join again (`poll()` reports [`ConsumerError::Fenced`]).
    fn fenced(&mut self, shared: &Shared, from: &str) {
        let id = self.instance_id.clone().unwrap_or_default();
        self.reset_generation(shared, true, from);
        self.report_fatal(shared, ConsumerError::Fenced(Arc::from(id)));
    }

    /// Java's client-side session timeout: no heartbeat answered for `session.timeout.ms`
    /// means the coordinator has removed this member and may have given its partitions to
    /// others. The member gives them up as lost, looks the coordinator up again and joins as
    /// a new member.
    fn check_session_timeout(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        if self.suspended || !self.is_member() || self.rebalancing() {
            return;
        }
        let silent = now.saturating_duration_since(self.session_alive_at);
        if silent <= self.config.session_timeout {
            return;
        }
        tracing::warn!(
            session_timeout_ms = self.config.session_timeout.as_millis() as u64,
            silent_ms = silent.as_millis() as u64,
            "no heartbeat answered within session.timeout.ms: the coordinator has removed this member; its partitions are lost"
        );
        self.coordinator_unknown(
            net,
            shared,
            "session timed out without a heartbeat answered",
        );
        self.reset_generation(shared, true, "session timeout");
    }

    /// Java's poll timeout: a member whose application has not called `poll()` for
    /// `max.poll.interval.ms` leaves, so its partitions go to members that make progress.
    fn check_poll_timeout(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        if self.suspended || !self.is_member() || self.rebalancing() {
            return;
        }
        let expired = {
            let st = shared.state.lock();
            !st.in_poll
                && !st.checkpointing
                && now.saturating_duration_since(st.last_poll) > self.config.max_poll_interval
        };
        if !expired {
            return;
        }
        tracing::warn!(
            max_poll_interval_ms = self.config.max_poll_interval.as_millis() as u64,
            "consumer poll timeout expired: the application spent too long between poll() calls; leaving the group"
        );
        if let Some(node) = self.node.filter(|&n| net.client.is_ready(n)) {
            self.send_leave(net, node, now, "consumer poll timeout has expired");
        }
        self.reset_generation(shared, true, "poll timeout");
    }

    // --- leaving -----------------------------------------------------------------------------

    /// Asks for a LeaveGroup (checkpoint, close, unsubscribe); [`left`](Self::left) says when
    /// it is done. A JoinGroup or SyncGroup in flight is abandoned: the coordinator answers
    /// the requests of a connection in order, so the leave would wait behind it.
    pub fn begin_leave(&mut self, net: &mut Net, shared: &Shared, reason: &str) {
        if self.member_id.is_empty() {
            return;
        }
        if self.rebalancing()
            && let Some(node) = self.node
        {
            let lost = net
                .client
                .disconnect(node, "leaving the group during a rebalance");
            for ctx in lost {
                self.on_request_lost(ctx, shared);
            }
            self.join = JoinPhase::Idle;
        }
        self.leave_wanted = Some(reason.to_owned());
    }

    /// Whether the leave asked for is done (sent and answered, or nothing to leave).
    pub fn left(&self) -> bool {
        self.leave_wanted.is_none() && !self.leave_in_flight
    }

    fn maybe_leave(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.leave_in_flight {
            return;
        }
        if let Some(reason) = self.leave_wanted.take() {
            if self.member_id.is_empty() {
                return;
            }
            self.send_leave(net, node, now, &reason);
            self.member_id.clear();
            self.generation = -1;
            self.leader_snapshot = None;
            self.publish_membership(shared);
        }
    }

    fn send_leave(&mut self, net: &mut Net, node: i32, now: Instant, reason: &str) {
        tracing::info!(member_id = %self.member_id, reason, "leaving group");
        let req = LeaveGroupRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            members: vec![MemberIdentity {
                member_id: self.member_id.clone(),
                group_instance_id: self.instance_id.clone(),
                reason: Some(reason.to_owned()),
            }],
        };
        match net
            .client
            .send(node, &req, RequestContext::LeaveGroup, true, now)
        {
            Ok(_) => self.leave_in_flight = true,
            Err((e, _)) => tracing::warn!(error = %e, "LeaveGroup not sent"),
        }
    }

    pub fn on_leave_group(&mut self, resp: LeaveGroupResponse, shared: &Shared) {
        self.leave_in_flight = false;
        let code = resp
            .members
            .iter()
            .map(|m| m.error_code)
            .find(|c| !c.is_ok())
            .unwrap_or(resp.error_code);
        if code.is_ok() || code == ErrorCode::UnknownMemberId {
            tracing::info!("left the group");
        } else {
            tracing::warn!(%code, "LeaveGroup answered with an error");
        }
        self.publish_membership(shared);
    }

    // --- commits -----------------------------------------------------------------------------

    /// Queues a commit; `None` commits the positions of records returned so far, read when the
    /// request is sent.
    pub fn enqueue_commit(
        &mut self,
        offsets: CommitOffsets,
        timeout: Duration,
        reply: CommitReply,
    ) {
        self.next_id += 1;
        let now = Instant::now();
        self.commits.push_back(PendingCommit {
            id: self.next_id,
            offsets,
            timeout,
            deadline: super::deadline_after(now, timeout),
            reply,
            retry_at: None,
            last_error: None,
            in_flight: false,
        });
    }

    /// Commits queued or in flight.
    pub fn pending_commits(&self) -> usize {
        self.commits.len()
    }

    fn complete_commit(reply: CommitReply, result: Result<(), ConsumerError>, shared: &Shared) {
        match reply {
            CommitReply::Wait(tx) => {
                let _ = tx.send(result);
            }
            CommitReply::Async(id) => {
                shared.state.lock().async_commits_done.push((id, result));
                shared.notify();
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.commits.len() {
            let c = &self.commits[i];
            if !c.in_flight && now >= c.deadline {
                let c = self.commits.remove(i).expect("index checked");
                let e = ConsumerError::Timeout {
                    operation: "commit",
                    after: c.timeout,
                    last_error: c.last_error.clone().or_else(|| self.unreachable()),
                };
                match c.reply {
                    CommitReply::Wait(tx) => {
                        let _ = tx.send(Err(e));
                    }
                    CommitReply::Async(_) => {
                        // Unreachable in practice (async commits are not retried); keep the
                        // callback's promise anyway.
                        tracing::warn!(error = %e, "async commit expired");
                    }
                }
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.queries.len() {
            let q = &self.queries[i];
            if !q.in_flight && now >= q.deadline {
                let q = self.queries.remove(i).expect("index checked");
                let _ = q.reply.send(Err(ConsumerError::Timeout {
                    operation: "committed",
                    after: q.timeout,
                    last_error: q.last_error.or_else(|| self.unreachable()),
                }));
            } else {
                i += 1;
            }
        }
    }

    /// Why a request never went out, for timeout errors.
    fn unreachable(&self) -> Option<Arc<str>> {
        Some(Arc::from(match self.node {
            None => "the group coordinator could not be found (no broker answered FindCoordinator)",
            Some(_) => "no connection to the group coordinator",
        }))
    }

    fn maybe_commit(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        loop {
            let (id, offsets, grouped, joining) = {
                let Some(c) = self.commits.front() else {
                    return;
                };
                if c.in_flight || c.retry_at.is_some_and(|t| now < t) {
                    return;
                }
                let st = shared.state.lock();
                let offsets = match &c.offsets {
                    CommitOffsets::App { epoch, .. } if *epoch != st.checkpoint_epoch => {
                        tracing::debug!(
                            "commit issued before a checkpoint: superseded by the checkpoint's commit"
                        );
                        Vec::new()
                    }
                    CommitOffsets::App { offsets, .. } => offsets.clone(),
                    CommitOffsets::Current => st.consumed_offsets(),
                };
                (
                    c.id,
                    offsets,
                    matches!(st.subscription, Subscription::Topics(_)),
                    matches!(st.rebalance, RebalanceStep::JoinAllowed),
                )
            };
            let refuse = if offsets.is_empty() {
                Some(Ok(()))
            } else if grouped && (joining || self.rebalancing()) {
                Some(Err(ConsumerError::RebalanceInProgress))
            } else if grouped && !self.is_member() {
                Some(Err(ConsumerError::CommitFailed(Arc::from(
                    "this consumer is not part of an active group generation (it left or its \
                     partitions were reassigned); poll() rejoins",
                ))))
            } else {
                None
            };
            if let Some(r) = refuse {
                let c = self.commits.pop_front().expect("front exists");
                Self::complete_commit(c.reply, r, shared);
                continue;
            }
            let (generation, member_id) = if grouped {
                (self.generation, self.member_id.clone())
            } else {
                (-1, String::new())
            };
            let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
            for (tp, om) in &offsets {
                by_topic
                    .entry(&tp.topic)
                    .or_default()
                    .push(OffsetCommitRequestPartition {
                        partition_index: tp.partition,
                        committed_offset: om.offset,
                        committed_leader_epoch: om.leader_epoch.unwrap_or(-1),
                        committed_metadata: Some(om.metadata.clone()),
                    });
            }
            let req = OffsetCommitRequest {
                group_id: self.group_id.clone().unwrap_or_default(),
                generation_id_or_member_epoch: generation,
                member_id,
                group_instance_id: self.instance_id.clone(),
                topics: by_topic
                    .into_iter()
                    .map(|(t, partitions)| OffsetCommitRequestTopic {
                        name: t.to_owned(),
                        partitions,
                    })
                    .collect(),
            };
            match net
                .client
                .send(node, &req, RequestContext::OffsetCommit(id), true, now)
            {
                Ok(_) => {
                    tracing::debug!(partitions = offsets.len(), generation, "offset commit sent");
                    if let Some(c) = self.commits.front_mut() {
                        c.in_flight = true;
                    }
                }
                Err((e, _)) => {
                    let msg: Arc<str> = Arc::from(e.to_string());
                    self.commit_failed(id, ErrorCode::NetworkException, Some(msg), shared, now);
                }
            }
            return;
        }
    }

    /// A commit attempt failed with a retriable cause: retried (sync) or reported (async).
    fn commit_failed(
        &mut self,
        id: u64,
        code: ErrorCode,
        detail: Option<Arc<str>>,
        shared: &Shared,
        now: Instant,
    ) {
        let Some(idx) = self.commits.iter().position(|c| c.id == id) else {
            return;
        };
        let c = &mut self.commits[idx];
        c.in_flight = false;
        c.last_error = Some(detail.unwrap_or_else(|| Arc::from(code.to_string())));
        match c.reply {
            CommitReply::Wait(_) => c.retry_at = Some(now + self.config.common.retry_backoff),
            CommitReply::Async(_) => {
                let c = self.commits.remove(idx).expect("index checked");
                Self::complete_commit(
                    c.reply,
                    Err(ConsumerError::Broker {
                        operation: "commit",
                        code,
                        message: c.last_error,
                    }),
                    shared,
                );
            }
        }
    }

    pub fn on_offset_commit(
        &mut self,
        net: &mut Net,
        id: u64,
        resp: OffsetCommitResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let code = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .find(|c| !c.is_ok())
            .unwrap_or(ErrorCode::None);
        let finish = |this: &mut Self, r: Result<(), ConsumerError>| {
            if let Some(i) = this.commits.iter().position(|c| c.id == id) {
                let c = this.commits.remove(i).expect("index checked");
                Self::complete_commit(c.reply, r, shared);
            }
        };
        match code {
            ErrorCode::None => {
                tracing::debug!(id, "offsets committed");
                finish(self, Ok(()));
            }
            ErrorCode::RebalanceInProgress => {
                // Java: the generation stays, the member rejoins; the caller may retry after.
                self.rebalance_in_progress(shared, "OffsetCommit");
                finish(self, Err(ConsumerError::RebalanceInProgress));
            }
            ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration => {
                self.reset_generation(shared, code == ErrorCode::UnknownMemberId, code.name());
                finish(
                    self,
                    Err(ConsumerError::CommitFailed(Arc::from(format!(
                        "{code}: the group rebalanced and this member's partitions may belong to another member now; poll() rejoins"
                    )))),
                );
            }
            ErrorCode::FencedInstanceId => {
                let iid = self.instance_id.clone().unwrap_or_default();
                self.fenced(shared, "OffsetCommit");
                finish(self, Err(ConsumerError::Fenced(Arc::from(iid))));
            }
            code if coordinator_error(code) || code == ErrorCode::RequestTimedOut => {
                if code != ErrorCode::CoordinatorLoadInProgress {
                    self.coordinator_unknown(net, shared, code.name());
                }
                self.commit_failed(id, code, None, shared, now);
            }
            code => finish(
                self,
                Err(ConsumerError::Broker {
                    operation: "commit",
                    code,
                    message: None,
                }),
            ),
        }
    }

    // --- committed offsets -----------------------------------------------------------------

    /// Without a group, positions come from `auto.offset.reset` alone.
    fn init_positions_without_group(&mut self, shared: &Shared) {
        let mut st = shared.state.lock();
        if st.checkpointing {
            return;
        }
        let policy = self.config.auto_offset_reset;
        let mut errors = Vec::new();
        for (tp, p) in st.assignment.iter_mut() {
            if p.position.is_none() && p.reset.is_none() && !p.blocked {
                if policy == AutoOffsetReset::None {
                    p.blocked = true;
                    errors.push(ConsumerError::NoOffset(tp.clone()));
                } else {
                    p.reset = Some(policy);
                }
            }
        }
        if !errors.is_empty() {
            st.errors.extend(errors);
            drop(st);
            shared.notify();
        }
    }

    fn maybe_fetch_positions(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.suspended
            || self.positions_in_flight
            || self.positions_retry_at.is_some_and(|t| now < t)
        {
            return;
        }
        let wanted: Vec<TopicPartition> = {
            let mut st = shared.state.lock();
            if st.checkpointing || matches!(st.rebalance, RebalanceStep::Assigned(_)) {
                return;
            }
            let mut v = Vec::new();
            for (tp, p) in st.assignment.iter_mut() {
                if p.position.is_none() && p.reset.is_none() && !p.blocked && !p.committed_requested
                {
                    p.committed_requested = true;
                    v.push(tp.clone());
                }
            }
            v
        };
        if wanted.is_empty() {
            return;
        }
        let req = OffsetFetchRequest::group(
            self.group_id.clone().unwrap_or_default(),
            Some(
                group_topics(&wanted)
                    .into_iter()
                    .map(|t| OffsetFetchRequestTopics {
                        name: t.topic,
                        partition_indexes: t.partitions,
                    })
                    .collect(),
            ),
            self.config.isolation_level == IsolationLevel::ReadCommitted,
        );
        match net
            .client
            .send(node, &req, RequestContext::OffsetFetch(None), true, now)
        {
            Ok(_) => self.positions_in_flight = true,
            Err((e, _)) => {
                tracing::warn!(error = %e, "OffsetFetch not sent");
                self.positions_failed(shared, now);
            }
        }
    }

    fn positions_failed(&mut self, shared: &Shared, now: Instant) {
        self.positions_in_flight = false;
        self.positions_retry_at = Some(now + self.backoff());
        let mut st = shared.state.lock();
        for p in st.assignment.values_mut() {
            if p.position.is_none() {
                p.committed_requested = false;
            }
        }
    }

    pub fn on_offset_fetch(
        &mut self,
        net: &mut Net,
        query: Option<u64>,
        resp: OffsetFetchResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let group = resp.groups.into_iter().next();
        let group_error = group
            .as_ref()
            .map_or(ErrorCode::CoordinatorNotAvailable, |g| g.error_code);
        if !group_error.is_ok() {
            if coordinator_error(group_error) && group_error != ErrorCode::CoordinatorLoadInProgress
            {
                self.coordinator_unknown(net, shared, group_error.name());
            }
            match query {
                None => self.positions_failed(shared, now),
                Some(id) => self.query_failed(id, group_error, now),
            }
            return;
        }
        let mut answers: BTreeMap<TopicPartition, (ErrorCode, Option<OffsetAndMetadata>)> =
            BTreeMap::new();
        for t in group.into_iter().flat_map(|g| g.topics) {
            let topic: Arc<str> = Arc::from(t.name.as_str());
            for p in t.partitions {
                let om = (p.committed_offset >= 0).then(|| OffsetAndMetadata {
                    offset: p.committed_offset,
                    leader_epoch: (p.committed_leader_epoch >= 0)
                        .then_some(p.committed_leader_epoch),
                    metadata: p.metadata.unwrap_or_default(),
                });
                answers.insert(
                    TopicPartition::new(topic.clone(), p.partition_index),
                    (p.error_code, om),
                );
            }
        }
        match query {
            Some(id) => {
                if let Some(code) = answers.values().map(|a| a.0).find(|c| !c.is_ok()) {
                    if code.is_retriable() {
                        self.query_failed(id, code, now);
                        return;
                    }
                    if let Some(i) = self.queries.iter().position(|q| q.id == id) {
                        let q = self.queries.remove(i).expect("index checked");
                        let _ = q.reply.send(Err(ConsumerError::Broker {
                            operation: "committed",
                            code,
                            message: None,
                        }));
                    }
                    return;
                }
                if let Some(i) = self.queries.iter().position(|q| q.id == id) {
                    let q = self.queries.remove(i).expect("index checked");
                    let map = q
                        .partitions
                        .iter()
                        .map(|tp| (tp.clone(), answers.get(tp).and_then(|a| a.1.clone())))
                        .collect();
                    let _ = q.reply.send(Ok(map));
                }
            }
            None => {
                self.positions_in_flight = false;
                let policy = self.config.auto_offset_reset;
                let mut st = shared.state.lock();
                let mut errors = Vec::new();
                let mut retry = false;
                for (tp, p) in st.assignment.iter_mut() {
                    if !p.committed_requested {
                        continue;
                    }
                    p.committed_requested = false;
                    if p.position.is_some() || p.reset.is_some() {
                        continue; // the application sought meanwhile
                    }
                    match answers.get(tp) {
                        Some((ErrorCode::None, Some(om))) => {
                            tracing::debug!(partition = %tp, offset = om.offset, "resuming from the committed offset");
                            p.position = Some(om.offset);
                            p.leader_epoch = om.leader_epoch;
                            // The log may have been truncated under it since (KIP-320).
                            p.awaiting_validation = om.leader_epoch.is_some();
                        }
                        Some((ErrorCode::None, None)) => match policy {
                            AutoOffsetReset::None => {
                                p.blocked = true;
                                errors.push(ConsumerError::NoOffset(tp.clone()));
                            }
                            reset => p.reset = Some(reset),
                        },
                        Some((code, _)) if code.is_retriable() => retry = true,
                        Some((code, _)) => errors.push(ConsumerError::Broker {
                            operation: "OffsetFetch",
                            code: *code,
                            message: Some(Arc::from(tp.to_string())),
                        }),
                        None => retry = true,
                    }
                }
                st.errors.extend(errors);
                drop(st);
                shared.notify();
                if retry {
                    self.positions_retry_at = Some(now + self.backoff());
                }
            }
        }
    }

    /// Queues a `committed()` query.
    pub fn enqueue_query(
        &mut self,
        partitions: Vec<TopicPartition>,
        timeout: Duration,
        reply: CommittedReply,
    ) {
        if self.group_id.is_none() {
            let _ = reply.send(Err(ConsumerError::NoGroupId("committed()")));
            return;
        }
        self.next_id += 1;
        let now = Instant::now();
        self.queries.push_back(CommittedQuery {
            id: self.next_id,
            partitions,
            timeout,
            deadline: super::deadline_after(now, timeout),
            reply,
            retry_at: None,
            last_error: None,
            in_flight: false,
        });
    }

    fn query_failed(&mut self, id: u64, code: ErrorCode, now: Instant) {
        if let Some(q) = self.queries.iter_mut().find(|q| q.id == id) {
            q.in_flight = false;
            q.retry_at = Some(now + self.config.common.retry_backoff);
            q.last_error = Some(Arc::from(code.to_string()));
        }
    }

    fn maybe_answer_query(&mut self, net: &mut Net, node: i32, now: Instant) {
        let Some(q) = self.queries.front_mut() else {
            return;
        };
        if q.in_flight || q.retry_at.is_some_and(|t| now < t) {
            return;
        }
        let req = OffsetFetchRequest::group(
            self.group_id.clone().unwrap_or_default(),
            Some(
                group_topics(&q.partitions)
                    .into_iter()
                    .map(|t| OffsetFetchRequestTopics {
                        name: t.topic,
                        partition_indexes: t.partitions,
                    })
                    .collect(),
            ),
            self.config.isolation_level == IsolationLevel::ReadCommitted,
        );
        let id = q.id;
        match net
            .client
            .send(node, &req, RequestContext::OffsetFetch(Some(id)), true, now)
        {
            Ok(_) => q.in_flight = true,
            Err((e, _)) => {
                q.retry_at = Some(now + self.config.common.retry_backoff);
                q.last_error = Some(Arc::from(e.to_string()));
            }
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
        self.member_id.clear();
        self.generation = -1;
        self.protocol = None;
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
        self.member_id.clear();
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
        if self.is_member() {
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
