//! The consumer group protocol of KIP-848 (`group.protocol=consumer`, GA in Kafka 4.0) for
//! [`Coordinator`], as Java's new consumer speaks it (`ConsumerMembershipManager`): one
//! request, ConsumerGroupHeartbeat, carries the whole membership.
//!
//! - **Joining**: epoch 0, with the subscription, `group.remote.assignor` (the broker's
//!   assignor; its default otherwise), the rebalance timeout and an empty owned list. The
//!   member id is the client's own (KIP-1082), drawn once per consumer and again after each
//!   restore (clones of one image never share it).
//! - **Reconciling**: an answer may carry the member's assignment (topic ids and partitions).
//!   `poll()` revokes what is no longer assigned (`on_partitions_revoked`, committed first
//!   under auto-commit), installs the assignment and tells the listener what was added; the next
//!   heartbeat, sent at once, names the partitions owned now, which is how the broker learns a
//!   revocation is done (and only then gives those partitions to others). Nobody stops.
//! - **Fenced** (`FENCED_MEMBER_EPOCH`, `UNKNOWN_MEMBER_ID`, the poll timeout): the partitions
//!   are lost (`on_partitions_lost`) and the member joins again with epoch 0.
//! - **Leaving**: epoch -1; a static member (`group.instance.id`) sends -2, a temporary leave:
//!   its partitions wait for it (the same instance id) until the broker's session timeout.
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
use super::{Coordinator, coordinator_error};
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

/// What the consumer group protocol keeps between heartbeats.
#[derive(Debug, Default)]
pub(crate) struct GroupState {
    /// The assignment the coordinator sent last, not installed yet (topic id -> partitions).
    target: Option<BTreeMap<Uuid, BTreeSet<i32>>>,
    /// Names of the topic ids assignments named (a deleted topic may leave the metadata).
    names: HashMap<Uuid, Arc<str>>,
    /// The heartbeat interval the coordinator asked for.
    interval: Option<Duration>,
    /// `poll()` was handed an assignment: acknowledge it as soon as it is installed.
    ack_pending: bool,
    /// A heartbeat is wanted now (joined, acknowledged, subscription changed).
    urgent: bool,
    /// The subscription version the last heartbeat carried.
    sent_subscription: Option<u64>,
}

impl GroupState {
    /// Whether a heartbeat is due at once.
    pub(super) fn due_now(&self) -> bool {
        self.urgent
    }
}

impl Coordinator {
    /// The epoch this member leaves with: -2 for a static member (its partitions wait for it
    /// until the session timeout), -1 otherwise.
    fn leave_epoch(&self) -> i32 {
        if self.instance_id.is_some() {
            LEAVE_STATIC_EPOCH
        } else {
            LEAVE_EPOCH
        }
    }

    fn base_request(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: self.group_id.clone().unwrap_or_default(),
            member_id: self.member_id.clone(),
            member_epoch: epoch,
            instance_id: self.instance_id.clone(),
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
                self.group
                    .names
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
    pub(super) fn maybe_group_heartbeat(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        now: Instant,
    ) {
        if self.heartbeat_in_flight || self.leave_wanted.is_some() || self.leave_in_flight {
            return;
        }
        let (topics, version, owned, step) = {
            let st = shared.state.lock();
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
        if self.failed_subscription == Some(version) {
            return;
        }
        let joining = self.generation <= 0;
        if joining {
            // Joining needs an empty assignment: what the image or a fencing left is given up
            // by poll() first (JoinAllowed says it is done).
            let ready = matches!(step, RebalanceStep::None | RebalanceStep::JoinAllowed)
                && owned.is_empty();
            if self.suspended || !ready {
                return;
            }
        } else {
            if self.group.ack_pending && step == RebalanceStep::None {
                self.group.ack_pending = false;
                self.group.urgent = true;
            }
            let changed = self.group.sent_subscription != Some(version);
            if !(self.group.urgent || changed || now >= self.next_heartbeat) {
                return;
            }
        }
        let mut req = self.base_request(if joining { JOIN_EPOCH } else { self.generation });
        req.rack_id =
            (!self.config.client_rack.is_empty()).then(|| self.config.client_rack.clone());
        req.rebalance_timeout_ms = self.config.max_poll_interval.as_millis() as i32;
        req.subscribed_topic_names = Some(topics);
        req.server_assignor = self.config.group_remote_assignor.clone();
        req.topic_partitions = Some(self.owned_by_id(net, &owned));
        if joining {
            tracing::info!(member_id = %self.member_id, instance = ?self.instance_id, "joining the consumer group (KIP-848)");
            self.generation = JOIN_EPOCH;
            let mut st = shared.state.lock();
            if st.rebalance == RebalanceStep::JoinAllowed {
                st.rebalance = RebalanceStep::None;
            }
        }
        self.group.urgent = false;
        self.send_group_heartbeat(
            net,
            shared,
            node,
            now,
            req,
            GroupHeartbeatKind::Member {
                subscription: version,
            },
        );
    }

    /// Removes the image's static member for good (a restored copy under another id).
    pub(super) fn send_group_release(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        now: Instant,
        member: String,
        instance: String,
    ) {
        let mut req = self.base_request(LEAVE_EPOCH);
        req.member_id = member;
        req.instance_id = Some(instance);
        self.send_group_heartbeat(net, shared, node, now, req, GroupHeartbeatKind::Release);
    }

    fn send_group_heartbeat(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        now: Instant,
        req: ConsumerGroupHeartbeatRequest,
        kind: GroupHeartbeatKind,
    ) {
        let interval = self
            .group
            .interval
            .unwrap_or(self.config.heartbeat_interval);
        self.next_heartbeat = now + interval;
        let sent_subscription = match kind {
            GroupHeartbeatKind::Member { subscription } => Some(subscription),
            _ => None,
        };
        let release = kind == GroupHeartbeatKind::Release;
        let leave = kind == GroupHeartbeatKind::Leave;
        match net
            .client
            .send(node, &req, RequestContext::GroupHeartbeat(kind), true, now)
        {
            Ok(_) => {
                self.heartbeat_in_flight = !release && !leave;
                self.release_in_flight = release;
                self.leave_in_flight = leave;
                if sent_subscription.is_some() {
                    self.group.sent_subscription = sent_subscription;
                }
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, "ConsumerGroupHeartbeat not sent");
                if matches!(e, crate::network::NetworkError::Version { .. }) {
                    self.report_fatal(
                        shared,
                        ConsumerError::Fatal(Arc::from(format!(
                            "group.protocol=consumer needs brokers with ConsumerGroupHeartbeat \
                             (Kafka 4.0 or newer): {e}"
                        ))),
                    );
                }
            }
        }
    }

    /// Leaves: epoch -1, or -2 for a static member (see [`leave_epoch`](Self::leave_epoch)).
    pub(super) fn send_group_leave(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        now: Instant,
        reason: &str,
    ) {
        let epoch = self.leave_epoch();
        tracing::info!(member_id = %self.member_id, epoch, reason, "leaving the consumer group");
        let req = self.base_request(epoch);
        self.send_group_heartbeat(net, shared, node, now, req, GroupHeartbeatKind::Leave);
        self.generation = -1;
        self.group.target = None;
        self.group.ack_pending = false;
        self.publish_membership(shared);
    }

    /// The member lost its place (fenced, poll timeout): its partitions are lost (`poll()`
    /// tells the listener), and it joins again with epoch 0 once they are given up.
    pub(super) fn group_fenced(&mut self, shared: &Shared, why: &str) {
        tracing::warn!(member_id = %self.member_id, epoch = self.generation, reason = why, "fenced from the consumer group: partitions lost; joining again");
        self.generation = JOIN_EPOCH;
        self.group.target = None;
        self.group.ack_pending = false;
        self.publish_membership(shared);
        let mut st = shared.state.lock();
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
        shared.notify();
    }

    /// Hands the latest assignment to `poll()` when it is free (one reconciliation at a time,
    /// as in Java): topic ids resolved through the metadata; those not known yet wait for it.
    pub(super) fn maybe_reconcile(&mut self, net: &mut Net, shared: &Shared) {
        if self.suspended || self.generation <= 0 {
            return;
        }
        let Some(target) = &self.group.target else {
            return;
        };
        let mut st = shared.state.lock();
        if st.rebalance != RebalanceStep::None {
            return;
        }
        let mut assignment = Vec::new();
        let mut unresolved = false;
        for (id, parts) in target {
            let name = net
                .topic_ids
                .iter()
                .find(|(_, v)| *v == id)
                .map(|(n, _)| n.clone())
                .or_else(|| self.group.names.get(id).cloned());
            let Some(name) = name else {
                unresolved = true;
                continue;
            };
            self.group.names.insert(*id, name.clone());
            assignment.extend(parts.iter().map(|&p| TopicPartition::new(name.clone(), p)));
        }
        if unresolved {
            tracing::debug!("assignment names a topic id the metadata does not know yet");
            net.metadata.request_update();
        } else {
            self.group.target = None;
        }
        st.assigned_membership = self.membership();
        let current: BTreeSet<&TopicPartition> = st.assignment.keys().collect();
        if current == assignment.iter().collect::<BTreeSet<_>>() {
            // The partitions installed, under this epoch (`st.rebalance` is None here).
            st.polled_membership = st.assigned_membership.clone();
            return;
        }
        let step = RebalanceStep::assign(&st.assignment, assignment);
        if self.group.ack_pending {
            // The assignment installed before this one is acknowledged now, not after this.
            self.group.urgent = true;
        }
        if let RebalanceStep::Assign { revoked, added, .. } = &step {
            tracing::info!(member_id = %self.member_id, epoch = self.generation, added = added.len(), revoked = revoked.len(), "reconciling the assignment");
        }
        st.rebalance = step;
        st.rebalances += 1;
        drop(st);
        self.group.ack_pending = true;
        shared.notify();
    }

    pub fn on_group_heartbeat(
        &mut self,
        net: &mut Net,
        kind: GroupHeartbeatKind,
        resp: ConsumerGroupHeartbeatResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        match kind {
            GroupHeartbeatKind::Release => {
                self.on_release(resp.error_code);
                return;
            }
            GroupHeartbeatKind::Leave => {
                self.leave_in_flight = false;
                if resp.error_code.is_ok() {
                    tracing::info!("left the consumer group");
                } else {
                    tracing::warn!(code = %resp.error_code, message = ?resp.error_message, "leave answered with an error");
                }
                return;
            }
            GroupHeartbeatKind::Member { .. } => self.heartbeat_in_flight = false,
        }
        if self.leave_wanted.is_some() || self.generation < 0 {
            return; // left meanwhile
        }
        match resp.error_code {
            ErrorCode::None => self.group_heartbeat_ok(resp, shared, now),
            ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId => {
                self.group_fenced(shared, resp.error_code.name());
            }
            ErrorCode::CoordinatorLoadInProgress => {
                self.next_heartbeat = now + self.backoff();
            }
            code if coordinator_error(code) => {
                self.coordinator_unknown(net, shared, code.name());
            }
            ErrorCode::FencedInstanceId => {
                let id = self.instance_id.clone().unwrap_or_default();
                self.group_fenced(shared, "FENCED_INSTANCE_ID");
                self.report_fatal(shared, ConsumerError::Fenced(Arc::from(id)));
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
                self.report_fatal(
                    shared,
                    ConsumerError::Broker {
                        operation: "ConsumerGroupHeartbeat",
                        code,
                        message: Some(Arc::from(format!(
                            "{}{hint}",
                            resp.error_message.unwrap_or_default()
                        ))),
                    },
                );
            }
            code => {
                tracing::warn!(%code, message = ?resp.error_message, "ConsumerGroupHeartbeat failed; retrying");
                self.next_heartbeat = now + self.backoff();
            }
        }
    }

    fn group_heartbeat_ok(
        &mut self,
        resp: ConsumerGroupHeartbeatResponse,
        shared: &Shared,
        now: Instant,
    ) {
        self.session_alive_at = now;
        if let Some(id) = resp.member_id.filter(|id| !id.is_empty()) {
            self.member_id = id;
        }
        let new_epoch = resp.member_epoch != self.generation;
        if new_epoch {
            tracing::info!(member_id = %self.member_id, from = self.generation, to = resp.member_epoch, "member epoch");
        }
        self.generation = resp.member_epoch;
        if resp.heartbeat_interval_ms > 0 {
            let interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
            if self.group.interval != Some(interval) {
                self.next_heartbeat = now + interval;
            }
            self.group.interval = Some(interval);
        }
        if let Some(parts) = resp.assignment {
            let mut target: BTreeMap<Uuid, BTreeSet<i32>> = BTreeMap::new();
            for t in parts {
                target.entry(t.topic_id).or_default().extend(t.partitions);
            }
            self.group.target = Some(target);
        }
        self.publish_membership(shared);
        if new_epoch && self.group.target.is_none() {
            self.same_partitions_new_epoch(shared);
        }
    }

    /// A new epoch for the partitions installed (the broker bumped it, nothing to reconcile):
    /// `group_metadata()` follows it at once, as Java's new consumer's does, so that offsets
    /// sent to a transaction carry the epoch the coordinator checks (else ILLEGAL_GENERATION
    /// until the next reassignment). An assignment under way records its epoch when `poll()`
    /// installs it.
    fn same_partitions_new_epoch(&self, shared: &Shared) {
        let mut st = shared.state.lock();
        if st.rebalance == RebalanceStep::None {
            st.assigned_membership = self.membership();
            st.polled_membership = st.assigned_membership.clone();
        }
    }

    /// A heartbeat will not be answered (its connection closed): sent again.
    pub(super) fn group_heartbeat_lost(&mut self, kind: GroupHeartbeatKind) {
        match kind {
            GroupHeartbeatKind::Release => self.release_in_flight = false,
            GroupHeartbeatKind::Leave => self.leave_in_flight = false,
            GroupHeartbeatKind::Member { .. } => {
                self.heartbeat_in_flight = false;
                self.group.urgent = true;
            }
        }
        self.node = None;
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
