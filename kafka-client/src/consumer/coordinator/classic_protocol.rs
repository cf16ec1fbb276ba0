//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), eager or
//! cooperative (KIP-429): [`ClassicMembership`], a [`ClassicState`] machine with the
//! member id and generation the coordinator gives.
//!
//! Eager (`range`, `roundrobin`, `sticky`): before rejoining, a member gives up all its
//! partitions. That step belongs to the application (its callbacks, its commits), so the
//! membership asks `poll()` for it through [`RebalanceStep`] and joins only once `poll()`
//! answers `JoinAllowed`, which is why a member that does not poll is not rejoined (and is
//! removed by the coordinator after the rebalance timeout, `max.poll.interval.ms`).
//!
//! Cooperative (`cooperative-sticky` alone): a member keeps its partitions (and goes on
//! fetching them) while it rejoins, sending them as owned in its subscription; the assignment
//! it receives says which to give up (`on_partitions_revoked` for those only) and which are
//! new (`on_partitions_assigned` for those only). Having given some up, it rejoins at once, and
//! that second rebalance hands them to their new owners. Lost partitions (the member was
//! fenced or timed out) are given up first, through `on_partitions_lost`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::assignor::{
    AssignorKind, GroupMember, LastAssignment, RebalanceProtocol, cooperative_violations, flatten,
    group_by_topic,
};
use super::super::config::ConsumerConfig;
use super::super::error::ConsumerError;
use super::super::net::RequestContext;
use super::super::record::TopicPartition;
use super::super::shared::{RebalanceStep, Shared, Subscription};
use super::coordinator_error;
use super::member_state::{ClassicState, StateMachine};
use super::membership::{Cx, GroupLink, GroupMembership};
use crate::protocol::ErrorCode;
use crate::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, PROTOCOL_TYPE,
};
use crate::protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse,
};
use crate::protocol::messages::leave_group::{
    LeaveGroupRequest, LeaveGroupResponse, MemberIdentity,
};
use crate::protocol::messages::sync_group::{
    SyncGroupRequest, SyncGroupRequestAssignment, SyncGroupResponse,
};

/// A member of a classic group.
#[derive(Debug)]
pub(crate) struct ClassicMembership {
    state: StateMachine<ClassicState>,
    /// Given by the coordinator (empty until then, and after it forgot the member).
    member_id: String,
    /// The generation joined (-1: none). Kept through a rejoin until the JoinGroup answers.
    generation: i32,
    /// The assignor the coordinator chose.
    protocol: Option<String>,
    /// Eager or cooperative: from the assignors configured.
    rebalance_protocol: RebalanceProtocol,
    /// `session.timeout.ms`.
    session_timeout: Duration,
    /// The last assignment received, for the sticky assignors' user data.
    last_assignment: LastAssignment,
    /// Partitions were revoked by a cooperative rebalance: rejoin once `poll()` gave them up.
    followup_rejoin: bool,
    /// The leader's JoinGroup answer while it assigns (it waits for metadata of every
    /// member's topics); only in `CompletingRebalance`.
    leader_join: Option<Box<JoinGroupResponse>>,
    join_retry_at: Option<Instant>,
    /// The subscription the current (or pending) membership joined with.
    joined_subscription: u64,
    join_sent_subscription: u64,
    /// A rejoin is wanted (`Some(lost)`), to hand to `poll()` when it is free.
    rejoin: Option<bool>,
    /// Leader only: partition counts the assignment was computed with.
    leader_snapshot: Option<HashMap<String, i32>>,
    heartbeat_in_flight: bool,
    next_heartbeat: Instant,
    /// When the coordinator last showed it holds this member's session (a heartbeat answered,
    /// a join or sync completed): past `session.timeout.ms` the member counts itself evicted.
    session_alive_at: Instant,
}

impl ClassicMembership {
    pub fn new(config: &ConsumerConfig) -> Self {
        Self {
            state: StateMachine::new(ClassicState::Unjoined),
            member_id: String::new(),
            generation: -1,
            protocol: None,
            rebalance_protocol: RebalanceProtocol::of(&config.assignors),
            session_timeout: config.session_timeout,
            last_assignment: LastAssignment::default(),
            followup_rejoin: false,
            leader_join: None,
            join_retry_at: None,
            joined_subscription: 0,
            join_sent_subscription: 0,
            rejoin: None,
            leader_snapshot: None,
            heartbeat_in_flight: false,
            next_heartbeat: Instant::now(),
            session_alive_at: Instant::now(),
        }
    }

    /// A new member for a restored process, which remembers the subscription it joined with
    /// (the checkpoint gave the partitions up; `poll()` hands the rejoin over).
    pub fn renewed(&self) -> Self {
        Self {
            state: StateMachine::new(ClassicState::Unjoined),
            member_id: String::new(),
            generation: -1,
            protocol: None,
            rebalance_protocol: self.rebalance_protocol,
            session_timeout: self.session_timeout,
            last_assignment: LastAssignment::default(),
            followup_rejoin: false,
            leader_join: None,
            join_retry_at: None,
            joined_subscription: self.joined_subscription,
            join_sent_subscription: self.join_sent_subscription,
            rejoin: None,
            leader_snapshot: None,
            heartbeat_in_flight: false,
            next_heartbeat: self.next_heartbeat,
            session_alive_at: Instant::now(),
        }
    }

    fn publish(&self, cx: &Cx<'_>) {
        cx.publish(&self.member_id, self.generation);
    }

    /// A JoinGroup or SyncGroup failed, was lost or abandoned: no rebalance under way.
    fn rebalance_over(&mut self, why: &'static str) {
        if self.rebalancing() {
            self.leader_join = None;
            self.state.enter(ClassicState::Unjoined, why);
        }
    }

    /// The generation is gone (reset, left, forgotten).
    fn drop_generation(&mut self, why: &'static str) {
        self.generation = -1;
        if self.state.is(ClassicState::Stable) {
            self.state.enter(ClassicState::Unjoined, why);
        }
    }

    // --- membership ------------------------------------------------------------------------

    /// Forgets the generation (the coordinator no longer knows it); with `forget_member`, the
    /// member id too. The partitions are lost: `poll()` reports them as such and rejoins.
    fn reset_generation(&mut self, cx: &Cx<'_>, forget_member: bool, why: &'static str) {
        tracing::info!(member_id = %self.member_id, generation = self.generation, reason = why, "member reset; rejoining");
        self.drop_generation(why);
        self.protocol = None;
        self.leader_snapshot = None;
        self.followup_rejoin = false;
        if forget_member {
            self.member_id.clear();
        }
        self.rejoin = Some(true);
        self.publish(cx);
    }

    fn request_rejoin_if_needed(&mut self, cx: &mut Cx<'_>) {
        if cx.link.suspended || self.rebalancing() {
            return;
        }
        let shared = cx.shared;
        let mut st = shared.state.lock();
        let Subscription::Topics(topics) = &st.subscription else {
            self.rejoin = None;
            return;
        };
        // After a fatal group error the member does not join again, but partitions it lost
        // (fenced) are still given up.
        if cx.link.failed_subscription == Some(st.subscription_version) && self.rejoin != Some(true)
        {
            return;
        }
        if st.subscription_version != self.joined_subscription && self.rejoin.is_none() {
            self.rejoin = Some(false);
        }
        if self.rejoin.is_none()
            && let Some(snapshot) = &self.leader_snapshot
        {
            let changed = snapshot.iter().any(|(t, &n)| {
                cx.net
                    .metadata
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
        if self.rejoin.is_none() && self.followup_rejoin && st.rebalance == RebalanceStep::None {
            // Cooperative: partitions were revoked; the next rebalance gives them away.
            tracing::info!("partitions revoked: rejoining so that they move to their new owners");
            self.followup_rejoin = false;
            self.rejoin = Some(false);
        }
        match &st.rebalance {
            RebalanceStep::None => {
                let Some(lost) = self.rejoin.take() else {
                    return;
                };
                // Eager: everything is given up. Cooperative: only what was lost or is no
                // longer subscribed; the rest is kept through the rebalance.
                let partitions: Vec<TopicPartition> = st
                    .assignment
                    .keys()
                    .filter(|tp| {
                        lost || self.rebalance_protocol == RebalanceProtocol::Eager
                            || !topics.contains(&*tp.topic)
                    })
                    .cloned()
                    .collect();
                st.rebalance = if partitions.is_empty()
                    && self.rebalance_protocol == RebalanceProtocol::Cooperative
                {
                    RebalanceStep::JoinAllowed
                } else {
                    RebalanceStep::Revoke { partitions, lost }
                };
                drop(st);
                shared.notify();
            }
            RebalanceStep::Revoke { .. } | RebalanceStep::JoinAllowed => self.rejoin = None,
            RebalanceStep::Assign { .. } | RebalanceStep::Assigned(_) => {}
        }
    }

    /// The coordinator holds a JoinGroup (and a SyncGroup) until every member rejoined, up to
    /// the rebalance timeout: as Java, wait that long for the answer.
    fn rebalance_request_timeout(config: &ConsumerConfig) -> Duration {
        config
            .common
            .request_timeout
            .max(config.max_poll_interval + Duration::from_secs(5))
    }

    fn maybe_join(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant) {
        if cx.link.suspended
            || self.rebalancing()
            || self.join_retry_at.is_some_and(|t| now < t)
            || cx.link.leave_wanted.is_some()
        {
            return;
        }
        let (topics, version, owned) = {
            let st = cx.shared.state.lock();
            match (&st.rebalance, &st.subscription) {
                (RebalanceStep::JoinAllowed, Subscription::Topics(t)) => (
                    t.iter().cloned().collect::<Vec<_>>(),
                    st.subscription_version,
                    // Eager: everything was given up before joining. Cooperative: what is
                    // kept is claimed, so that the leader leaves it where it is.
                    st.assignment.keys().cloned().collect::<Vec<_>>(),
                ),
                _ => return,
            }
        };
        if cx.link.failed_subscription == Some(version) {
            return;
        }
        let config = &cx.link.config;
        let mut subscription = ConsumerProtocolSubscription {
            topics,
            user_data: None,
            owned_partitions: group_by_topic(&owned),
            generation_id: self.generation,
            rack_id: (!config.client_rack.is_empty()).then(|| config.client_rack.clone()),
        };
        let mut protocols = Vec::with_capacity(config.assignors.len());
        for a in &config.assignors {
            subscription.user_data = a.user_data(&self.last_assignment);
            protocols.push(JoinGroupRequestProtocol {
                name: a.name().into(),
                metadata: subscription.encode(ConsumerProtocolSubscription::VERSION),
            });
        }
        let req = JoinGroupRequest {
            group_id: cx.link.group(),
            session_timeout_ms: config.session_timeout.as_millis() as i32,
            rebalance_timeout_ms: config.max_poll_interval.as_millis() as i32,
            member_id: self.member_id.clone(),
            group_instance_id: cx.link.instance_id.clone(),
            protocol_type: PROTOCOL_TYPE.into(),
            protocols,
            reason: Some("joining the group".into()),
        };
        let timeout = Self::rebalance_request_timeout(config);
        match cx
            .net
            .client
            .send_with_timeout(node, &req, RequestContext::JoinGroup, timeout, now)
        {
            Ok(_) => {
                tracing::debug!(member_id = %self.member_id, owned = owned.len(), "JoinGroup sent");
                self.state
                    .enter(ClassicState::PreparingRebalance, "JoinGroup sent");
                self.join_sent_subscription = version;
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, "JoinGroup request failed");
                self.join_retry_at = Some(now + cx.link.backoff());
                if matches!(e, crate::network::NetworkError::Version { .. }) {
                    cx.report_fatal(ConsumerError::Fatal(Arc::from(e.to_string())));
                }
            }
        }
    }

    pub fn on_join_group(&mut self, cx: &mut Cx<'_>, resp: JoinGroupResponse) {
        let now = Instant::now();
        match resp.error_code {
            ErrorCode::None => {
                self.state
                    .enter(ClassicState::CompletingRebalance, "JoinGroup answered");
                self.member_id = resp.member_id.clone();
                self.generation = resp.generation_id;
                self.session_alive_at = now;
                self.protocol = resp.protocol_name.clone();
                self.publish(cx);
                tracing::info!(member_id = %self.member_id, generation = self.generation, protocol = ?self.protocol, leader = resp.is_leader(), members = resp.members.len(), "joined group");
                if resp.is_leader() && !resp.skip_assignment {
                    self.leader_join = Some(Box::new(resp));
                } else {
                    self.send_sync(cx, Vec::new(), now);
                }
                return;
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
            code if coordinator_error(code) => cx.link.coordinator_unknown(code.name()),
            ErrorCode::RebalanceInProgress => self.join_retry_at = Some(now + cx.link.backoff()),
            ErrorCode::FencedInstanceId => self.fenced(cx, "JoinGroup"),
            code @ (ErrorCode::InconsistentGroupProtocol
            | ErrorCode::GroupAuthorizationFailed
            | ErrorCode::InvalidSessionTimeout
            | ErrorCode::GroupMaxSizeReached
            | ErrorCode::InvalidGroupId
            | ErrorCode::UnsupportedVersion) => {
                cx.report_fatal(ConsumerError::Broker {
                    operation: "JoinGroup",
                    code,
                    message: None,
                });
            }
            code => {
                tracing::warn!(%code, "JoinGroup failed; retrying");
                self.join_retry_at = Some(now + cx.link.backoff());
            }
        }
        self.rebalance_over("JoinGroup failed");
    }

    /// The leader assigns once the metadata covers every member's topics.
    fn maybe_assign(&mut self, cx: &mut Cx<'_>, now: Instant) {
        let Some(resp) = &self.leader_join else {
            return;
        };
        let mut members = Vec::with_capacity(resp.members.len());
        for m in &resp.members {
            let sub = match ConsumerProtocolSubscription::decode(&m.metadata) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(member = %m.member_id, error = %e, "unreadable subscription; the member gets nothing");
                    ConsumerProtocolSubscription::default()
                }
            };
            members.push(GroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                topics: sub.topics,
                owned: flatten(&sub.owned_partitions),
                generation: (sub.generation_id >= 0).then_some(sub.generation_id),
                user_data: sub.user_data,
            });
        }
        let mut missing = false;
        let mut counts = HashMap::new();
        for t in members.iter().flat_map(|m| m.topics.iter()) {
            match cx.net.metadata.cluster().topics.get(t.as_str()) {
                Some(info) if info.error.is_ok() => {
                    counts.insert(t.clone(), info.partitions.len() as i32);
                }
                Some(_) => {}
                None => {
                    cx.net.metadata.add_topic(t);
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
            self.rebalance_over("unknown assignor");
            cx.report_fatal(e);
            return;
        };
        let mut assignment = kind.assign(&members, &counts);
        if kind.supports_cooperative() {
            // Java's validateCooperativeAssignment: no partition changes hands in one
            // rebalance. The assignor guarantees it; a violation would be a bug, and two
            // members would own one partition: hold such partitions back instead.
            let bad = cooperative_violations(&members, &assignment);
            if !bad.is_empty() {
                tracing::error!(partitions = ?bad, "cooperative assignment hands partitions over in one rebalance; holding them back");
                for m in &members {
                    if let Some(list) = assignment.get_mut(&m.member_id) {
                        list.retain(|tp| m.owned.contains(tp) || !bad.contains(tp));
                    }
                }
            }
        }
        tracing::info!(assignor = %kind, members = members.len(), partitions = counts.values().sum::<i32>(), "assigned partitions as group leader");
        self.leader_snapshot = Some(counts);
        let assignments = assignment
            .into_iter()
            .map(|(member_id, parts)| SyncGroupRequestAssignment {
                member_id,
                assignment: ConsumerProtocolAssignment {
                    assigned_partitions: group_by_topic(&parts),
                    user_data: None,
                }
                .encode(ConsumerProtocolAssignment::VERSION),
            })
            .collect();
        self.leader_join = None;
        self.send_sync(cx, assignments, now);
    }

    /// Sends SyncGroup; the rebalance is over if it cannot be sent.
    fn send_sync(
        &mut self,
        cx: &mut Cx<'_>,
        assignments: Vec<SyncGroupRequestAssignment>,
        now: Instant,
    ) {
        let Some(node) = cx.link.node else {
            self.rebalance_over("no coordinator to send SyncGroup to");
            return;
        };
        let req = SyncGroupRequest {
            group_id: cx.link.group(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: cx.link.instance_id.clone(),
            protocol_type: Some(PROTOCOL_TYPE.into()),
            protocol_name: self.protocol.clone(),
            assignments,
        };
        let timeout = Self::rebalance_request_timeout(&cx.link.config);
        if let Err((e, _)) =
            cx.net
                .client
                .send_with_timeout(node, &req, RequestContext::SyncGroup, timeout, now)
        {
            tracing::warn!(error = %e, "SyncGroup request failed; rejoining");
            self.rebalance_over("SyncGroup not sent");
            cx.link.coordinator_unknown("SyncGroup could not be sent");
        }
    }

    pub fn on_sync_group(&mut self, cx: &mut Cx<'_>, resp: SyncGroupResponse) {
        let now = Instant::now();
        match resp.error_code {
            ErrorCode::None => {
                let assignment = match ConsumerProtocolAssignment::decode(&resp.assignment) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable assignment; rejoining");
                        self.rebalance_over("unreadable assignment");
                        self.join_retry_at = Some(now + cx.link.backoff());
                        return;
                    }
                };
                self.state.enter(ClassicState::Stable, "SyncGroup answered");
                self.install(cx, flatten(&assignment.assigned_partitions), now);
                return;
            }
            ErrorCode::RebalanceInProgress => {} // join again (the step is still JoinAllowed)
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                self.generation = -1;
            }
            ErrorCode::IllegalGeneration => self.generation = -1,
            code if coordinator_error(code) => cx.link.coordinator_unknown(code.name()),
            ErrorCode::FencedInstanceId => self.fenced(cx, "SyncGroup"),
            code => {
                tracing::warn!(%code, "SyncGroup failed; rejoining");
                self.join_retry_at = Some(now + cx.link.backoff());
            }
        }
        self.rebalance_over("SyncGroup failed");
    }

    /// Hands the assignment SyncGroup brought to `poll()`.
    fn install(&mut self, cx: &mut Cx<'_>, partitions: Vec<TopicPartition>, now: Instant) {
        for tp in &partitions {
            cx.net.metadata.add_topic(&tp.topic);
        }
        self.joined_subscription = self.join_sent_subscription;
        self.next_heartbeat = now + cx.link.config.heartbeat_interval;
        self.session_alive_at = now;
        self.last_assignment = LastAssignment {
            generation: self.generation,
            partitions: Some(partitions.clone()),
        };
        let mut st = cx.shared.state.lock();
        let step = RebalanceStep::assign(&st.assignment, partitions);
        if let RebalanceStep::Assign { revoked, added, .. } = &step {
            tracing::info!(member_id = %self.member_id, generation = self.generation, added = added.len(), revoked = revoked.len(), "assignment received");
            // Cooperative: what this member gave up goes to its new owner in the
            // next rebalance, which this member starts.
            self.followup_rejoin = !revoked.is_empty();
        }
        st.rebalance = step;
        st.rebalances += 1;
        st.assigned_membership = cx.link.membership(&self.member_id, self.generation);
        drop(st);
        cx.shared.notify();
    }

    fn maybe_heartbeat(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant) {
        if !self.is_member()
            || self.rebalancing()
            || self.heartbeat_in_flight
            || now < self.next_heartbeat
            || cx.link.leave_wanted.is_some()
        {
            return;
        }
        let req = HeartbeatRequest {
            group_id: cx.link.group(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: cx.link.instance_id.clone(),
        };
        self.next_heartbeat = now + cx.link.config.heartbeat_interval;
        match cx
            .net
            .client
            .send(node, &req, RequestContext::Heartbeat, true, now)
        {
            Ok(_) => self.heartbeat_in_flight = true,
            Err((e, _)) => tracing::debug!(error = %e, "heartbeat not sent"),
        }
    }

    pub fn on_heartbeat(&mut self, cx: &mut Cx<'_>, resp: HeartbeatResponse) {
        self.heartbeat_in_flight = false;
        match resp.error_code {
            ErrorCode::None => self.session_alive_at = Instant::now(),
            ErrorCode::RebalanceInProgress => {
                // The member is still in the group (for the rebalance timeout).
                self.session_alive_at = Instant::now();
                self.rebalance_in_progress(cx.shared, "heartbeat");
            }
            ErrorCode::IllegalGeneration => self.reset_generation(cx, false, "ILLEGAL_GENERATION"),
            ErrorCode::UnknownMemberId => self.reset_generation(cx, true, "UNKNOWN_MEMBER_ID"),
            ErrorCode::FencedInstanceId => self.fenced(cx, "Heartbeat"),
            code if coordinator_error(code) => cx.link.coordinator_unknown(code.name()),
            code => tracing::warn!(%code, "heartbeat failed"),
        }
    }

    /// Another member with this `group.instance.id` took over: this one's partitions are
    /// lost and it does not join again (`poll()` reports [`ConsumerError::Fenced`]).
    fn fenced(&mut self, cx: &mut Cx<'_>, from: &'static str) {
        let id = cx.link.instance_id.clone().unwrap_or_default();
        self.reset_generation(cx, true, from);
        cx.report_fatal(ConsumerError::Fenced(Arc::from(id)));
    }

    /// Java's client-side session timeout: no heartbeat answered for `session.timeout.ms`
    /// means the coordinator has removed this member and may have given its partitions to
    /// others. The member gives them up as lost, looks the coordinator up again and joins as
    /// a new member.
    fn check_session_timeout(&mut self, cx: &mut Cx<'_>, now: Instant) {
        if cx.link.suspended || !self.is_member() || self.rebalancing() {
            return;
        }
        let session_timeout = self.session_timeout;
        let silent = now.saturating_duration_since(self.session_alive_at);
        if silent <= session_timeout {
            return;
        }
        tracing::warn!(
            session_timeout_ms = session_timeout.as_millis() as u64,
            silent_ms = silent.as_millis() as u64,
            "no heartbeat answered within session.timeout.ms: the coordinator has removed this member; its partitions are lost"
        );
        cx.link
            .coordinator_unknown("session timed out without a heartbeat answered");
        self.reset_generation(cx, true, "session timeout");
    }

    // --- leaving -----------------------------------------------------------------------------

    fn send_leave(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant, reason: &str) {
        tracing::info!(member_id = %self.member_id, reason, "leaving group");
        let req = LeaveGroupRequest {
            group_id: cx.link.group(),
            members: vec![MemberIdentity {
                member_id: self.member_id.clone(),
                group_instance_id: cx.link.instance_id.clone(),
                reason: Some(reason.to_owned()),
            }],
        };
        match cx
            .net
            .client
            .send(node, &req, RequestContext::LeaveGroup, true, now)
        {
            Ok(_) => cx.link.leave_in_flight = true,
            Err((e, _)) => tracing::warn!(error = %e, "LeaveGroup not sent"),
        }
    }

    pub fn on_leave_group(
        &mut self,
        link: &mut GroupLink,
        shared: &Shared,
        resp: LeaveGroupResponse,
    ) {
        link.leave_in_flight = false;
        let code = resp.error();
        if code.is_ok() || code == ErrorCode::UnknownMemberId {
            tracing::info!("left the group");
        } else {
            tracing::warn!(%code, "LeaveGroup answered with an error");
        }
        link.publish(shared, &self.member_id, self.generation);
    }
}

impl GroupMembership for ClassicMembership {
    fn member_id(&self) -> &str {
        &self.member_id
    }

    fn generation(&self) -> i32 {
        self.generation
    }

    fn is_member(&self) -> bool {
        !self.member_id.is_empty() && self.generation >= 0
    }

    fn in_group(&self) -> bool {
        !self.member_id.is_empty()
    }

    fn rebalancing(&self) -> bool {
        matches!(
            self.state.get(),
            ClassicState::PreparingRebalance | ClassicState::CompletingRebalance
        )
    }

    fn prepare(&mut self, cx: &mut Cx<'_>, now: Instant) {
        self.check_session_timeout(cx, now);
        self.request_rejoin_if_needed(cx);
    }

    fn drive(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant) {
        self.maybe_join(cx, node, now);
        self.maybe_assign(cx, now);
        self.maybe_heartbeat(cx, node, now);
    }

    fn poll_timeout(&mut self, cx: &mut Cx<'_>, now: Instant) {
        if let Some(node) = cx.ready_node() {
            self.send_leave(cx, node, now, "consumer poll timeout has expired");
        }
        self.reset_generation(cx, true, "poll timeout");
    }

    fn leave(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant, reason: &str) {
        if cx.link.instance_id.is_some() {
            // A static member leaves only for now, as Java's: the coordinator keeps it and
            // its partitions until session.timeout.ms, and a member with its instance id
            // (a restored copy, a restarted process) takes them back without a rebalance.
            tracing::info!(member_id = %self.member_id, instance = ?cx.link.instance_id, reason, "static member: leaving without LeaveGroup; its partitions wait for it until session.timeout.ms");
            self.drop_generation("static member left for now");
            self.leader_snapshot = None;
            self.publish(cx);
            return;
        }
        self.send_leave(cx, node, now, reason);
        self.member_id.clear();
        self.drop_generation("left the group");
        self.leader_snapshot = None;
        self.publish(cx);
    }

    fn abandon_rebalance(&mut self) {
        self.rebalance_over("leaving during a rebalance");
    }

    fn send_release(
        &mut self,
        cx: &mut Cx<'_>,
        node: i32,
        now: Instant,
        member: String,
        instance: String,
    ) {
        let req = LeaveGroupRequest {
            group_id: cx.link.group(),
            members: vec![MemberIdentity {
                member_id: member,
                group_instance_id: Some(instance),
                reason: Some("restored from a checkpoint under another group.instance.id".into()),
            }],
        };
        match cx
            .net
            .client
            .send(node, &req, RequestContext::Release, true, now)
        {
            Ok(_) => cx.link.release_in_flight = true,
            Err((e, _)) => tracing::warn!(error = %e, "LeaveGroup (release) not sent"),
        }
    }

    fn request_lost(&mut self, link: &mut GroupLink, ctx: RequestContext, now: Instant) {
        match ctx {
            RequestContext::JoinGroup | RequestContext::SyncGroup => {
                self.rebalance_over("connection lost");
                self.join_retry_at = Some(now + link.backoff());
                link.node = None;
            }
            RequestContext::Heartbeat => {
                self.heartbeat_in_flight = false;
                link.node = None;
            }
            RequestContext::LeaveGroup => link.leave_in_flight = false,
            _ => {}
        }
    }

    fn forget(&mut self) {
        self.member_id.clear();
        self.drop_generation("forgotten");
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

    fn commit_error(&mut self, cx: &mut Cx<'_>, code: ErrorCode) -> Option<ConsumerError> {
        match code {
            ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration => {
                self.reset_generation(cx, code == ErrorCode::UnknownMemberId, code.name());
                Some(ConsumerError::CommitFailed(Arc::from(format!(
                    "{code}: the group rebalanced and this member's partitions may belong to another member now; poll() rejoins"
                ))))
            }
            ErrorCode::FencedInstanceId => {
                let iid = cx.link.instance_id.clone().unwrap_or_default();
                self.fenced(cx, "OffsetCommit");
                Some(ConsumerError::Fenced(Arc::from(iid)))
            }
            _ => None,
        }
    }

    fn next_due(&self, now: Instant) -> Duration {
        let mut t = Duration::MAX;
        if self.is_member() && !self.heartbeat_in_flight {
            t = t.min(self.next_heartbeat.saturating_duration_since(now));
        }
        if self.is_member() {
            // The session timeout is checked even without heartbeats answered.
            let expiry = self.session_alive_at + self.session_timeout;
            t = t.min(expiry.saturating_duration_since(now) + Duration::from_millis(1));
        }
        if let Some(at) = self.join_retry_at {
            t = t.min(at.saturating_duration_since(now));
        }
        t
    }

    fn rebase(&mut self, by: Duration) {
        self.next_heartbeat += by;
        self.session_alive_at += by;
    }
}
