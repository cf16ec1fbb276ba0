//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), eager or
//! cooperative (KIP-429), for [`Coordinator`].
//!
//! Eager (`range`, `roundrobin`, `sticky`): before rejoining, a member gives up all its
//! partitions. That step belongs to the application (its callbacks, its commits), so the
//! coordinator asks `poll()` for it through [`RebalanceStep`] and joins only once `poll()`
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
use super::super::config::GroupProtocol;
use super::super::error::ConsumerError;
use super::super::net::{Net, RequestContext};
use super::super::record::TopicPartition;
use super::super::shared::{RebalanceStep, Shared, Subscription};
use super::{Coordinator, JoinPhase, coordinator_error};
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

impl Coordinator {
    // --- membership ------------------------------------------------------------------------

    /// Forgets the generation (the coordinator no longer knows it); with `forget_member`, the
    /// member id too. The partitions are lost: `poll()` reports them as such and rejoins.
    pub(super) fn reset_generation(&mut self, shared: &Shared, forget_member: bool, why: &str) {
        tracing::info!(member_id = %self.member_id, generation = self.generation, reason = why, "member reset; rejoining");
        self.generation = -1;
        self.protocol = None;
        self.leader_snapshot = None;
        self.followup_rejoin = false;
        if forget_member {
            self.member_id.clear();
        }
        self.rejoin = Some(true);
        self.publish_membership(shared);
    }

    pub(super) fn request_rejoin_if_needed(&mut self, net: &Net, shared: &Shared) {
        if self.suspended || self.rebalancing() {
            return;
        }
        let mut st = shared.state.lock();
        let Subscription::Topics(topics) = &st.subscription else {
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
    fn rebalance_request_timeout(&self) -> Duration {
        self.config
            .common
            .request_timeout
            .max(self.config.max_poll_interval + Duration::from_secs(5))
    }

    pub(super) fn maybe_join(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.suspended
            || self.rebalancing()
            || self.join_retry_at.is_some_and(|t| now < t)
            || self.leave_wanted.is_some()
        {
            return;
        }
        let (topics, version, owned) = {
            let st = shared.state.lock();
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
        if self.failed_subscription == Some(version) {
            return;
        }
        let mut subscription = ConsumerProtocolSubscription {
            topics,
            user_data: None,
            owned_partitions: group_by_topic(&owned),
            generation_id: self.generation,
            rack_id: (!self.config.client_rack.is_empty()).then(|| self.config.client_rack.clone()),
        };
        let mut protocols = Vec::with_capacity(self.config.assignors.len());
        for a in &self.config.assignors {
            subscription.user_data = a.user_data(&self.last_assignment);
            protocols.push(JoinGroupRequestProtocol {
                name: a.name().into(),
                metadata: subscription.encode(ConsumerProtocolSubscription::VERSION),
            });
        }
        let req = JoinGroupRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            session_timeout_ms: self.config.session_timeout.as_millis() as i32,
            rebalance_timeout_ms: self.config.max_poll_interval.as_millis() as i32,
            member_id: self.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
            protocol_type: PROTOCOL_TYPE.into(),
            protocols,
            reason: Some("joining the group".into()),
        };
        let timeout = self.rebalance_request_timeout();
        match net
            .client
            .send_with_timeout(node, &req, RequestContext::JoinGroup, timeout, now)
        {
            Ok(_) => {
                tracing::debug!(member_id = %self.member_id, owned = owned.len(), "JoinGroup sent");
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
    pub(super) fn maybe_assign(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        _node: i32,
        now: Instant,
    ) {
        let JoinPhase::Assigning(resp) = &self.join else {
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
        self.join = JoinPhase::Idle;
        self.send_sync(net, shared, assignments, now);
    }

    pub(super) fn send_sync(
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
        let timeout = self.rebalance_request_timeout();
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
                let partitions = flatten(&assignment.assigned_partitions);
                for tp in &partitions {
                    net.metadata.add_topic(&tp.topic);
                }
                self.joined_subscription = self.join_sent_subscription;
                self.next_heartbeat = now + self.config.heartbeat_interval;
                self.session_alive_at = now;
                self.last_assignment = LastAssignment {
                    generation: self.generation,
                    partitions: Some(partitions.clone()),
                };
                let mut st = shared.state.lock();
                let step = RebalanceStep::assign(&st.assignment, partitions);
                if let RebalanceStep::Assign { revoked, added, .. } = &step {
                    tracing::info!(member_id = %self.member_id, generation = self.generation, added = added.len(), revoked = revoked.len(), "assignment received");
                    // Cooperative: what this member gave up goes to its new owner in the
                    // next rebalance, which this member starts.
                    self.followup_rejoin = !revoked.is_empty();
                }
                st.rebalance = step;
                st.rebalances += 1;
                st.assigned_membership = self.membership();
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

    pub(super) fn maybe_heartbeat(&mut self, net: &mut Net, node: i32, now: Instant) {
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
    pub(super) fn rebalance_in_progress(&mut self, shared: &Shared, from: &str) {
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
    pub(super) fn fenced(&mut self, shared: &Shared, from: &str) {
        let id = self.instance_id.clone().unwrap_or_default();
        self.reset_generation(shared, true, from);
        self.report_fatal(shared, ConsumerError::Fenced(Arc::from(id)));
    }

    /// Java's client-side session timeout: no heartbeat answered for `session.timeout.ms`
    /// means the coordinator has removed this member and may have given its partitions to
    /// others. The member gives them up as lost, looks the coordinator up again and joins as
    /// a new member.
    pub(super) fn check_session_timeout(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
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
    pub(super) fn check_poll_timeout(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
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
        if self.group_protocol == GroupProtocol::Consumer {
            if let Some(node) = self.node.filter(|&n| net.client.is_ready(n)) {
                self.send_group_leave(net, shared, node, now, "consumer poll timeout has expired");
            }
            self.group_fenced(shared, "poll timeout");
            return;
        }
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
        if !self.in_group() {
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

    pub(super) fn maybe_leave(&mut self, net: &mut Net, shared: &Shared, node: i32, now: Instant) {
        if self.leave_in_flight {
            return;
        }
        if let Some(reason) = self.leave_wanted.take() {
            if !self.in_group() {
                return;
            }
            if self.group_protocol == GroupProtocol::Consumer {
                self.send_group_leave(net, shared, node, now, &reason);
                return;
            }
            if self.instance_id.is_some() {
                // A static member leaves only for now, as Java's: the coordinator keeps it and
                // its partitions until session.timeout.ms, and a member with its instance id
                // (a restored copy, a restarted process) takes them back without a rebalance.
                tracing::info!(member_id = %self.member_id, instance = ?self.instance_id, reason, "static member: leaving without LeaveGroup; its partitions wait for it until session.timeout.ms");
                self.generation = -1;
                self.leader_snapshot = None;
                self.publish_membership(shared);
                return;
            }
            self.send_leave(net, node, now, &reason);
            self.member_id.clear();
            self.generation = -1;
            self.leader_snapshot = None;
            self.publish_membership(shared);
        }
    }

    pub(super) fn send_leave(&mut self, net: &mut Net, node: i32, now: Instant, reason: &str) {
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

    /// Removes the image's static member for good (see `maybe_release`).
    pub(super) fn send_classic_release(
        &mut self,
        net: &mut Net,
        node: i32,
        now: Instant,
        member: String,
        instance: String,
    ) {
        let req = LeaveGroupRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            members: vec![MemberIdentity {
                member_id: member,
                group_instance_id: Some(instance),
                reason: Some("restored from a checkpoint under another group.instance.id".into()),
            }],
        };
        match net
            .client
            .send(node, &req, RequestContext::Release, true, now)
        {
            Ok(_) => self.release_in_flight = true,
            Err((e, _)) => tracing::warn!(error = %e, "LeaveGroup (release) not sent"),
        }
    }

    pub fn on_leave_group(&mut self, resp: LeaveGroupResponse, shared: &Shared) {
        self.leave_in_flight = false;
        let code = resp.error();
        if code.is_ok() || code == ErrorCode::UnknownMemberId {
            tracing::info!("left the group");
        } else {
            tracing::warn!(%code, "LeaveGroup answered with an error");
        }
        self.publish_membership(shared);
    }
}
