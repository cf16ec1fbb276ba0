//! The consumer group protocol of KIP-848 (`group.protocol=consumer`, GA in Kafka 4.0):
//! [`Kip848Membership`], a [`Kip848State`] machine as Java's new consumer's
//! (`ConsumerMembershipManager`). One request, ConsumerGroupHeartbeat, carries the whole
//! membership.
//!
//! - **Joining** (`UNSUBSCRIBED` -> `JOINING`): epoch 0, with the subscription,
//!   `group.remote.assignor` (the broker's assignor; its default otherwise), the rebalance
//!   timeout and an empty owned list. The member id is the client's own (KIP-1082), drawn once
//!   per consumer and again after each restore (clones of one image never share it).
//! - **Reconciling** (`STABLE` -> `RECONCILING` -> `ACKNOWLEDGING` -> `STABLE`): an answer may
//!   carry the member's assignment (topic ids and partitions). `poll()` revokes what is no
//!   longer assigned (`on_partitions_revoked`, committed first under auto-commit), installs the
//!   assignment and tells the listener what was added; the next heartbeat, sent at once, names
//!   the partitions owned now, which is how the broker learns a revocation is done (and only
//!   then gives those partitions to others). Nobody stops.
//! - **Fenced** (`FENCED_MEMBER_EPOCH`, `UNKNOWN_MEMBER_ID`, the poll timeout): the partitions
//!   are lost (`on_partitions_lost`) and the member joins again with epoch 0 (`FENCED` ->
//!   `JOINING`).
//! - **Leaving** (`LEAVING` -> `UNSUBSCRIBED`): epoch -1; a static member
//!   (`group.instance.id`) sends -2, a temporary leave: its partitions wait for it (the same
//!   instance id) until the broker's session timeout.
//!
//! Before a checkpoint the member commits, then leaves the same way: a dynamic member's
//! partitions move to the others at once (they keep their own: only the leaver's move); a
//! static member's wait for it. After the restore a copy under the same `group.instance.id`
//! (the restorer gives it back with `KAFKA_GROUP_INSTANCE_ID`) takes its own partitions back
//! without a rebalance, if within the session timeout; a copy under another id first removes
//! the image's static member for good (epoch -1 with its ids, refused harmlessly if a copy
//! under the original id took it back already), so that its partitions move now rather than
//! after the session timeout.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::error::ConsumerError;
use super::super::net::{GroupHeartbeatKind, Net, RequestContext};
use super::super::record::TopicPartition;
use super::super::shared::{RebalanceStep, Shared, Subscription};
use super::coordinator_error;
use super::member_state::{Kip848State, MemberState, StateMachine};
use super::membership::{Cx, GroupLink, GroupMembership};
use crate::network::security::base64;
use crate::protocol::ErrorCode;
use crate::protocol::messages::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, JOIN_EPOCH, LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH, TopicIdPartitions,
};
use crate::protocol::primitives::Uuid;

/// A member id for a new member: 16 random bytes from the operating system, in URL-safe
/// base64 (as Java's `Uuid.toString`). Drawn after a restore too, so clones differ.
pub(crate) fn new_member_id() -> String {
    let mut b = [0u8; 16];
    crac_api::os_random(&mut b);
    base64::encode_url(&b).to_string()
}

/// A member of a consumer group (KIP-848).
#[derive(Debug)]
pub(crate) struct Kip848Membership {
    state: StateMachine<Kip848State>,
    /// The client's own (KIP-1082); the coordinator may answer with another.
    member_id: String,
    /// The epoch the coordinator gave, while the state has one.
    member_epoch: i32,
    heartbeat_in_flight: bool,
    next_heartbeat: Instant,
    /// The assignment the coordinator sent last, not handed to `poll()` yet (topic id ->
    /// partitions).
    target: Option<BTreeMap<Uuid, BTreeSet<i32>>>,
    /// Names of the topic ids assignments named (a deleted topic may leave the metadata).
    names: HashMap<Uuid, Arc<str>>,
    /// The heartbeat interval the coordinator asked for.
    interval: Option<Duration>,
    /// A heartbeat is wanted now (acknowledging, or sent again after a lost one).
    urgent: bool,
    /// The subscription version the last heartbeat carried.
    sent_subscription: Option<u64>,
}

impl Kip848Membership {
    /// A new member, not in the group yet. KIP-1082: the member chooses its id, once per life
    /// (and once per restore).
    pub fn new() -> Self {
        Self {
            state: StateMachine::new(Kip848State::Unsubscribed),
            member_id: new_member_id(),
            member_epoch: LEAVE_EPOCH,
            heartbeat_in_flight: false,
            next_heartbeat: Instant::now(),
            target: None,
            names: HashMap::new(),
            interval: None,
            urgent: false,
            sent_subscription: None,
        }
    }

    /// The member epoch of the state: -1 out of the group, 0 joining, the coordinator's in it.
    fn epoch(&self) -> i32 {
        match self.state.get() {
            Kip848State::Unsubscribed | Kip848State::Leaving => LEAVE_EPOCH,
            Kip848State::Joining | Kip848State::Fenced => JOIN_EPOCH,
            Kip848State::Reconciling | Kip848State::Acknowledging | Kip848State::Stable => {
                self.member_epoch
            }
        }
    }

    fn publish(&self, cx: &Cx<'_>) {
        cx.publish(&self.member_id, self.epoch());
    }

    /// The epoch this member leaves with: -2 for a static member (its partitions wait for it
    /// until the session timeout), -1 otherwise.
    fn leave_epoch(link: &GroupLink) -> i32 {
        if link.instance_id.is_some() {
            LEAVE_STATIC_EPOCH
        } else {
            LEAVE_EPOCH
        }
    }

    fn base_request(&self, link: &GroupLink, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: link.group(),
            member_id: self.member_id.clone(),
            member_epoch: epoch,
            instance_id: link.instance_id.clone(),
            rack_id: None,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            subscribed_topic_regex: None,
            server_assignor: None,
            topic_partitions: None,
        }
    }

    /// The owned partitions by topic id. Partitions of a topic whose id is unknown (none
    /// should be: they came from an assignment by id) are left out.
    fn owned_by_id(&self, net: &Net, owned: &[TopicPartition]) -> Vec<TopicIdPartitions> {
        let mut by_id: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        for tp in owned {
            let id = net.topic_ids.get(&tp.topic).copied().or_else(|| {
                self.names
                    .iter()
                    .find(|(_, n)| n.as_ref() == tp.topic.as_ref())
                    .map(|(id, _)| *id)
            });
            match id {
                Some(id) => by_id.entry(id).or_default().push(tp.partition),
                None => tracing::warn!(partition = %tp, "no topic id known for an owned partition"),
            }
        }
        by_id
            .into_iter()
            .map(|(topic_id, partitions)| TopicIdPartitions {
                topic_id,
                partitions,
            })
            .collect()
    }

    /// Heartbeats: joining (epoch 0) once `poll()` has nothing left to give up, then the
    /// member's heartbeat every interval, or at once to acknowledge an assignment.
    fn maybe_heartbeat(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant) {
        if self.heartbeat_in_flight || cx.link.leave_wanted.is_some() || cx.link.leave_in_flight {
            return;
        }
        let (topics, version, owned, step) = {
            let st = cx.shared.state.lock();
            let Subscription::Topics(t) = &st.subscription else {
                return;
            };
            (
                t.iter().cloned().collect::<Vec<_>>(),
                st.subscription_version,
                st.assignment.keys().cloned().collect::<Vec<_>>(),
                st.rebalance.clone(),
            )
        };
        if cx.link.failed_subscription == Some(version) {
            return;
        }
        let joining = !self.is_member();
        if joining {
            // Joining needs an empty assignment: what the image or a fencing left is given up
            // by poll() first (JoinAllowed says it is done).
            let ready = matches!(step, RebalanceStep::None | RebalanceStep::JoinAllowed)
                && owned.is_empty();
            if cx.link.suspended || !ready {
                return;
            }
        } else {
            if self.state.is(Kip848State::Reconciling) && step == RebalanceStep::None {
                self.state.enter(
                    Kip848State::Acknowledging,
                    "poll() installed the assignment",
                );
                self.urgent = true;
            }
            let changed = self.sent_subscription != Some(version);
            if !(self.urgent || changed || now >= self.next_heartbeat) {
                return;
            }
        }
        let config = &cx.link.config;
        let mut req = self.base_request(cx.link, if joining { JOIN_EPOCH } else { self.epoch() });
        req.rack_id = (!config.client_rack.is_empty()).then(|| config.client_rack.clone());
        req.rebalance_timeout_ms = config.max_poll_interval.as_millis() as i32;
        req.subscribed_topic_names = Some(topics);
        req.server_assignor = config.group_remote_assignor.clone();
        req.topic_partitions = Some(self.owned_by_id(cx.net, &owned));
        if joining {
            tracing::info!(member_id = %self.member_id, instance = ?cx.link.instance_id, "joining the consumer group (KIP-848)");
            self.state
                .enter(Kip848State::Joining, "heartbeat with epoch 0");
            let mut st = cx.shared.state.lock();
            if st.rebalance == RebalanceStep::JoinAllowed {
                st.rebalance = RebalanceStep::None;
            }
        }
        self.urgent = false;
        if self.state.is(Kip848State::Acknowledging) {
            self.state
                .enter(Kip848State::Stable, "acknowledging heartbeat sent");
        }
        self.send(
            cx,
            node,
            now,
            req,
            GroupHeartbeatKind::Member {
                subscription: version,
            },
        );
    }

    /// Sends a heartbeat; returns whether it went out.
    fn send(
        &mut self,
        cx: &mut Cx<'_>,
        node: i32,
        now: Instant,
        req: ConsumerGroupHeartbeatRequest,
        kind: GroupHeartbeatKind,
    ) -> bool {
        let interval = self.interval.unwrap_or(cx.link.config.heartbeat_interval);
        self.next_heartbeat = now + interval;
        let sent_subscription = match kind {
            GroupHeartbeatKind::Member { subscription } => Some(subscription),
            _ => None,
        };
        let release = kind == GroupHeartbeatKind::Release;
        let leave = kind == GroupHeartbeatKind::Leave;
        match cx
            .net
            .client
            .send(node, &req, RequestContext::GroupHeartbeat(kind), true, now)
        {
            Ok(_) => {
                self.heartbeat_in_flight = !release && !leave;
                cx.link.release_in_flight = release;
                cx.link.leave_in_flight = leave;
                if sent_subscription.is_some() {
                    self.sent_subscription = sent_subscription;
                }
                true
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, "ConsumerGroupHeartbeat not sent");
                if matches!(e, crate::network::NetworkError::Version { .. }) {
                    cx.report_fatal(ConsumerError::Fatal(Arc::from(format!(
                        "group.protocol=consumer needs brokers with ConsumerGroupHeartbeat \
                         (Kafka 4.0 or newer): {e}"
                    ))));
                }
                false
            }
        }
    }

    /// Leaves: epoch -1, or -2 for a static member (see [`leave_epoch`](Self::leave_epoch)).
    fn send_leave(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant, reason: &str) {
        let epoch = Self::leave_epoch(cx.link);
        tracing::info!(member_id = %self.member_id, epoch, reason, "leaving the consumer group");
        let req = self.base_request(cx.link, epoch);
        let sent = self.send(cx, node, now, req, GroupHeartbeatKind::Leave);
        self.target = None;
        if sent {
            self.state.enter(Kip848State::Leaving, "leave sent");
        } else {
            self.state
                .enter(Kip848State::Unsubscribed, "leave not sent");
        }
        self.publish(cx);
    }

    /// The member lost its place (fenced, poll timeout): its partitions are lost (`poll()`
    /// tells the listener), and it joins again with epoch 0 once they are given up.
    fn fenced(&mut self, cx: &Cx<'_>, why: &'static str) {
        tracing::warn!(member_id = %self.member_id, epoch = self.epoch(), reason = why, "fenced from the consumer group: partitions lost; joining again");
        self.target = None;
        self.state.enter(Kip848State::Fenced, why);
        self.publish(cx);
        let mut st = cx.shared.state.lock();
        let partitions: Vec<TopicPartition> = st.assignment.keys().cloned().collect();
        st.rebalance = if partitions.is_empty() {
            RebalanceStep::JoinAllowed
        } else {
            RebalanceStep::Revoke {
                partitions,
                lost: true,
            }
        };
        drop(st);
        cx.shared.notify();
    }

    /// Hands the latest assignment to `poll()` when it is free (one reconciliation at a time,
    /// as in Java): topic ids resolved through the metadata; those not known yet wait for it.
    fn maybe_reconcile(&mut self, cx: &mut Cx<'_>) {
        if cx.link.suspended || !self.is_member() {
            return;
        }
        let Some(target) = &self.target else {
            return;
        };
        let mut st = cx.shared.state.lock();
        if st.rebalance != RebalanceStep::None {
            return;
        }
        let mut assignment = Vec::new();
        let mut unresolved = false;
        for (id, parts) in target {
            let name = cx
                .net
                .topic_ids
                .iter()
                .find(|(_, v)| *v == id)
                .map(|(n, _)| n.clone())
                .or_else(|| self.names.get(id).cloned());
            let Some(name) = name else {
                unresolved = true;
                continue;
            };
            self.names.insert(*id, name.clone());
            assignment.extend(parts.iter().map(|&p| TopicPartition::new(name.clone(), p)));
        }
        if unresolved {
            tracing::debug!("assignment names a topic id the metadata does not know yet");
            cx.net.metadata.request_update();
        } else {
            self.target = None;
        }
        st.assigned_membership = cx.link.membership(&self.member_id, self.member_epoch);
        let current: BTreeSet<&TopicPartition> = st.assignment.keys().collect();
        if current == assignment.iter().collect::<BTreeSet<_>>() {
            // The partitions installed, under this epoch (`st.rebalance` is None here).
            st.polled_membership = st.assigned_membership.clone();
            return;
        }
        let step = RebalanceStep::assign(&st.assignment, assignment);
        if self.state.is(Kip848State::Reconciling) {
            // The assignment installed before this one is acknowledged now, not after this.
            self.urgent = true;
        }
        if let RebalanceStep::Assign { revoked, added, .. } = &step {
            tracing::info!(member_id = %self.member_id, epoch = self.member_epoch, added = added.len(), revoked = revoked.len(), "reconciling the assignment");
        }
        st.rebalance = step;
        st.rebalances += 1;
        drop(st);
        self.state
            .enter(Kip848State::Reconciling, "assignment handed to poll()");
        cx.shared.notify();
    }

    /// The answer to a heartbeat of this member (joining, heartbeating or leaving).
    pub fn on_heartbeat(
        &mut self,
        cx: &mut Cx<'_>,
        kind: GroupHeartbeatKind,
        resp: ConsumerGroupHeartbeatResponse,
    ) {
        let now = Instant::now();
        match kind {
            GroupHeartbeatKind::Release => return, // the coordinator's
            GroupHeartbeatKind::Leave => {
                cx.link.leave_in_flight = false;
                if resp.error_code.is_ok() {
                    tracing::info!("left the consumer group");
                } else {
                    tracing::warn!(code = %resp.error_code, message = ?resp.error_message, "leave answered with an error");
                }
                self.leave_done("leave answered");
                return;
            }
            GroupHeartbeatKind::Member { .. } => self.heartbeat_in_flight = false,
        }
        if cx.link.leave_wanted.is_some() || !self.state.get().in_group() {
            return; // left meanwhile
        }
        match resp.error_code {
            ErrorCode::None => self.heartbeat_ok(cx, resp, now),
            ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId => {
                self.fenced(cx, resp.error_code.name());
            }
            ErrorCode::CoordinatorLoadInProgress => {
                self.next_heartbeat = now + cx.link.backoff();
            }
            code if coordinator_error(code) => cx.link.coordinator_unknown(code.name()),
            ErrorCode::FencedInstanceId => {
                let id = cx.link.instance_id.clone().unwrap_or_default();
                self.fenced(cx, "FENCED_INSTANCE_ID");
                cx.report_fatal(ConsumerError::Fenced(Arc::from(id)));
            }
            code @ (ErrorCode::UnreleasedInstanceId
            | ErrorCode::UnsupportedAssignor
            | ErrorCode::GroupAuthorizationFailed
            | ErrorCode::GroupMaxSizeReached
            | ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedVersion
            | ErrorCode::GroupIdNotFound) => {
                let hint = match code {
                    ErrorCode::UnreleasedInstanceId => {
                        ": another member with this group.instance.id is in the group and has \
                         not left it (two copies restored under one instance id?)"
                    }
                    ErrorCode::UnsupportedAssignor => ": see group.remote.assignor",
                    _ => "",
                };
                cx.report_fatal(ConsumerError::Broker {
                    operation: "ConsumerGroupHeartbeat",
                    code,
                    message: Some(Arc::from(format!(
                        "{}{hint}",
                        resp.error_message.unwrap_or_default()
                    ))),
                });
            }
            code => {
                tracing::warn!(%code, message = ?resp.error_message, "ConsumerGroupHeartbeat failed; retrying");
                self.next_heartbeat = now + cx.link.backoff();
            }
        }
    }

    fn heartbeat_ok(
        &mut self,
        cx: &mut Cx<'_>,
        resp: ConsumerGroupHeartbeatResponse,
        now: Instant,
    ) {
        if let Some(id) = resp.member_id.filter(|id| !id.is_empty()) {
            self.member_id = id;
        }
        if resp.member_epoch <= 0 {
            // Only a leave is answered without a member epoch.
            tracing::warn!(
                epoch = resp.member_epoch,
                state = self.state.get().name(),
                "ConsumerGroupHeartbeat answered without a member epoch; ignored"
            );
            return;
        }
        let new_epoch = resp.member_epoch != self.epoch();
        if new_epoch {
            tracing::info!(member_id = %self.member_id, from = self.epoch(), to = resp.member_epoch, "member epoch");
        }
        self.member_epoch = resp.member_epoch;
        if !self.is_member() {
            self.state
                .enter(Kip848State::Stable, "heartbeat answered with an epoch");
        }
        if resp.heartbeat_interval_ms > 0 {
            let interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
            if self.interval != Some(interval) {
                self.next_heartbeat = now + interval;
            }
            self.interval = Some(interval);
        }
        if let Some(parts) = resp.assignment {
            let mut target: BTreeMap<Uuid, BTreeSet<i32>> = BTreeMap::new();
            for t in parts {
                target.entry(t.topic_id).or_default().extend(t.partitions);
            }
            self.target = Some(target);
        }
        self.publish(cx);
        if new_epoch && self.target.is_none() {
            self.same_partitions_new_epoch(cx);
        }
    }

    /// A new epoch for the partitions installed (the broker bumped it, nothing to reconcile):
    /// `group_metadata()` follows it at once, as Java's new consumer's does, so that offsets
    /// sent to a transaction carry the epoch the coordinator checks (else ILLEGAL_GENERATION
    /// until the next reassignment). An assignment under way records its epoch when `poll()`
    /// installs it.
    fn same_partitions_new_epoch(&self, cx: &Cx<'_>) {
        let mut st = cx.shared.state.lock();
        if st.rebalance == RebalanceStep::None {
            st.assigned_membership = cx.link.membership(&self.member_id, self.member_epoch);
            st.polled_membership = st.assigned_membership.clone();
        }
    }

    /// The leave is answered or lost: out of the group (unless the member is to join again:
    /// the poll timeout sends its leave, then fences it).
    fn leave_done(&mut self, why: &'static str) {
        if self.state.is(Kip848State::Leaving) {
            self.state.enter(Kip848State::Unsubscribed, why);
        }
    }

    /// An OffsetCommit answered ILLEGAL_GENERATION or FENCED_INSTANCE_ID, which a KIP-848
    /// coordinator does not send for its members: handled as the classic protocol handles them
    /// (out of the group, the member id forgotten with `forget_member`), as before the
    /// protocols were split.
    fn classic_reset(&mut self, cx: &Cx<'_>, forget_member: bool, why: &'static str) {
        tracing::info!(member_id = %self.member_id, generation = self.epoch(), reason = why, "member reset; rejoining");
        if self.state.get().in_group() {
            self.state.enter(Kip848State::Unsubscribed, why);
        }
        if forget_member {
            self.member_id.clear();
        }
        self.publish(cx);
    }
}

impl GroupMembership for Kip848Membership {
    fn member_id(&self) -> &str {
        &self.member_id
    }

    fn generation(&self) -> i32 {
        self.epoch()
    }

    fn is_member(&self) -> bool {
        self.state.get().has_epoch()
    }

    fn in_group(&self) -> bool {
        self.state.get().in_group() || self.heartbeat_in_flight
    }

    fn rebalancing(&self) -> bool {
        false
    }

    fn prepare(&mut self, cx: &mut Cx<'_>, _now: Instant) {
        self.maybe_reconcile(cx);
    }

    fn drive(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant) {
        self.maybe_heartbeat(cx, node, now);
    }

    fn poll_timeout(&mut self, cx: &mut Cx<'_>, now: Instant) {
        if let Some(node) = cx.ready_node() {
            self.send_leave(cx, node, now, "consumer poll timeout has expired");
        }
        self.fenced(cx, "poll timeout");
    }

    fn leave(&mut self, cx: &mut Cx<'_>, node: i32, now: Instant, reason: &str) {
        self.send_leave(cx, node, now, reason);
    }

    fn abandon_rebalance(&mut self) {}

    /// Removes the image's static member for good (a restored copy under another id).
    fn send_release(
        &mut self,
        cx: &mut Cx<'_>,
        node: i32,
        now: Instant,
        member: String,
        instance: String,
    ) {
        let mut req = self.base_request(cx.link, LEAVE_EPOCH);
        req.member_id = member;
        req.instance_id = Some(instance);
        self.send(cx, node, now, req, GroupHeartbeatKind::Release);
    }

    /// A heartbeat will not be answered (its connection closed): sent again.
    fn request_lost(&mut self, link: &mut GroupLink, ctx: RequestContext, _now: Instant) {
        let RequestContext::GroupHeartbeat(kind) = ctx else {
            return;
        };
        match kind {
            GroupHeartbeatKind::Release => link.release_in_flight = false,
            GroupHeartbeatKind::Leave => {
                link.leave_in_flight = false;
                self.leave_done("leave lost");
            }
            GroupHeartbeatKind::Member { .. } => {
                self.heartbeat_in_flight = false;
                self.urgent = true;
            }
        }
        link.node = None;
    }

    fn forget(&mut self) {
        if self.state.get().in_group() {
            self.state.enter(Kip848State::Unsubscribed, "forgotten");
        }
    }

    fn rebalance_in_progress(&mut self, _shared: &Shared, _from: &str) {}

    fn commit_error(&mut self, cx: &mut Cx<'_>, code: ErrorCode) -> Option<ConsumerError> {
        match code {
            // The heartbeat finds out and rejoins; the commit fails.
            ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch => {
                Some(ConsumerError::CommitFailed(Arc::from(format!(
                    "{code}: this member is no longer in the group (its partitions may belong \
                     to another member now); poll() rejoins"
                ))))
            }
            ErrorCode::IllegalGeneration => {
                self.classic_reset(cx, false, code.name());
                Some(ConsumerError::CommitFailed(Arc::from(format!(
                    "{code}: the group rebalanced and this member's partitions may belong to another member now; poll() rejoins"
                ))))
            }
            ErrorCode::FencedInstanceId => {
                let iid = cx.link.instance_id.clone().unwrap_or_default();
                self.classic_reset(cx, true, "OffsetCommit");
                cx.report_fatal(ConsumerError::Fenced(Arc::from(iid.clone())));
                Some(ConsumerError::Fenced(Arc::from(iid)))
            }
            _ => None,
        }
    }

    fn next_due(&self, now: Instant) -> Duration {
        if self.urgent {
            return Duration::ZERO;
        }
        if self.is_member() && !self.heartbeat_in_flight {
            return self.next_heartbeat.saturating_duration_since(now);
        }
        Duration::MAX
    }

    fn rebase(&mut self, by: Duration) {
        self.next_heartbeat += by;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_random_and_url_safe() {
        let a = new_member_id();
        assert_eq!(a.len(), 22, "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(a, new_member_id());
    }
}
