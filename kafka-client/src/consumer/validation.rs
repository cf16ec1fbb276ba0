//! Position validation after a leader change (KIP-320), as Java's consumer does it.
//!
//! When the metadata names a newer leader epoch for an assigned partition, or a position comes
//! from a committed offset that carries an epoch, the position is checked before anything more
//! is fetched: OffsetForLeaderEpoch asks the leader where the position's epoch ends in its
//! log. If it ends before the position, the log was truncated under the consumer (an unclean
//! leader election lost records it read or was about to read): the position moves back to where
//! the logs diverge (or, with `auto.offset.reset=none`, `poll()` reports
//! [`ConsumerError::LogTruncation`]). Without this, the consumer would fetch on from its old
//! position and silently skip the records the new leader wrote below it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::config::{AutoOffsetReset, ConsumerConfig};
use super::error::ConsumerError;
use super::net::{Checked, Net, RequestContext};
use super::record::TopicPartition;
use super::shared::{Shared, State};
use crate::network::NetworkError;
use crate::protocol::ErrorCode;
use crate::protocol::messages::offset_for_leader_epoch::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, OffsetForLeaderPartition,
    OffsetForLeaderTopic,
};

/// Finds the positions to check and checks them.
#[derive(Debug)]
pub(crate) struct PositionValidator {
    config: Arc<ConsumerConfig>,
    /// The leader epoch each assigned partition was last seen with.
    leader_epochs: HashMap<TopicPartition, i32>,
    /// The metadata version last looked at.
    metadata_version: u64,
    /// Partitions with an OffsetForLeaderEpoch in flight.
    in_flight: HashSet<TopicPartition>,
    /// Partitions not to ask about before an instant (after an error).
    backoff: HashMap<TopicPartition, Instant>,
}

impl PositionValidator {
    pub fn new(config: Arc<ConsumerConfig>) -> Self {
        Self {
            config,
            leader_epochs: HashMap::new(),
            metadata_version: u64::MAX,
            in_flight: HashSet::new(),
            backoff: HashMap::new(),
        }
    }

    /// Marks positions whose leader moved on for validation, and asks the leaders about the
    /// positions that wait for it.
    pub fn poll(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        self.backoff.retain(|_, t| *t > now);
        self.note_leader_changes(net, shared);
        self.send(net, shared, now);
    }

    fn note_leader_changes(&mut self, net: &Net, shared: &Shared) {
        if net.metadata.version() == self.metadata_version {
            return;
        }
        self.metadata_version = net.metadata.version();
        let cluster = net.metadata.cluster();
        let mut st = shared.state.lock();
        self.leader_epochs
            .retain(|tp, _| st.assignment.contains_key(tp));
        let mut moved = Vec::new();
        for tp in st.assignment.keys() {
            let Some(epoch) = cluster.leader_epoch(&tp.topic, tp.partition) else {
                continue;
            };
            if let Some(old) = self.leader_epochs.insert(tp.clone(), epoch)
                && epoch > old
            {
                moved.push((tp.clone(), old, epoch));
            }
        }
        for (tp, old, epoch) in moved {
            if require_validation(&mut st, &tp) {
                tracing::info!(partition = %tp, from = old, to = epoch, "leader epoch changed: validating the position");
            }
        }
    }

    fn send(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        let wanted: Checked = {
            let mut st = shared.state.lock();
            if st.checkpointing || st.closed {
                return;
            }
            let mut v = Vec::new();
            for (tp, p) in st.assignment.iter_mut() {
                if !p.awaiting_validation
                    || self.in_flight.contains(tp)
                    || self.backoff.contains_key(tp)
                {
                    continue;
                }
                match (p.position, p.leader_epoch) {
                    (Some(pos), Some(epoch)) => v.push((tp.clone(), pos, epoch)),
                    // Nothing to check a position without an epoch against.
                    _ => p.awaiting_validation = false,
                }
            }
            v
        };
        let mut by_node: BTreeMap<i32, Checked> = BTreeMap::new();
        for c in wanted {
            match net.leader(&c.0.topic, c.0.partition) {
                Some(node) => by_node.entry(node).or_default().push(c),
                None => net.metadata.request_update(),
            }
        }
        for (node, checked) in by_node {
            if net.ready(node, now) {
                self.send_to(net, shared, node, checked, now);
            }
        }
    }

    fn send_to(
        &mut self,
        net: &mut Net,
        shared: &Shared,
        node: i32,
        checked: Checked,
        now: Instant,
    ) {
        let mut topics: BTreeMap<&str, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        for (tp, _, epoch) in &checked {
            topics
                .entry(&tp.topic)
                .or_default()
                .push(OffsetForLeaderPartition {
                    partition: tp.partition,
                    current_leader_epoch: net
                        .metadata
                        .cluster()
                        .leader_epoch(&tp.topic, tp.partition)
                        .unwrap_or(-1),
                    leader_epoch: *epoch,
                });
        }
        let req = OffsetForLeaderEpochRequest {
            topics: topics
                .into_iter()
                .map(|(t, partitions)| OffsetForLeaderTopic {
                    topic: t.to_owned(),
                    partitions,
                })
                .collect(),
        };
        let names: Vec<TopicPartition> = checked.iter().map(|c| c.0.clone()).collect();
        let ctx = RequestContext::OffsetForLeaderEpoch(checked);
        match net.client.send(node, &req, ctx, true, now) {
            Ok(_) => self.in_flight.extend(names),
            Err((NetworkError::Version { .. }, _)) => {
                // A broker without the API cannot say: go on as Java does.
                tracing::debug!(node, "broker cannot validate positions; skipped");
                let mut st = shared.state.lock();
                for tp in names {
                    if let Some(p) = st.assignment.get_mut(&tp) {
                        p.awaiting_validation = false;
                    }
                }
            }
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "OffsetForLeaderEpoch not sent");
                net.metadata.request_update();
            }
        }
    }

    /// The leader's answer: positions confirmed, or moved back to where the logs diverge.
    pub fn on_response(
        &mut self,
        net: &mut Net,
        checked: Checked,
        resp: OffsetForLeaderEpochResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let mut answers = HashMap::new();
        for t in resp.topics {
            let topic: Arc<str> = Arc::from(t.topic.as_str());
            for p in t.partitions {
                answers.insert(TopicPartition::new(topic.clone(), p.partition), p);
            }
        }
        let policy = self.config.auto_offset_reset;
        let mut st = shared.state.lock();
        let mut errors = Vec::new();
        for (tp, position, _) in checked {
            self.in_flight.remove(&tp);
            let Some(p) = st.assignment.get_mut(&tp) else {
                continue;
            };
            if !p.awaiting_validation || p.position != Some(position) {
                continue; // sought or reset meanwhile
            }
            let answer = answers.get(&tp);
            match answer.map(|a| (a.error_code, a.leader_epoch, a.end_offset)) {
                Some((ErrorCode::None, epoch, end)) if epoch < 0 || end < 0 => {
                    // The leader has nothing of that epoch any more: start over as if the
                    // position were out of range.
                    tracing::warn!(partition = %tp, position, "the position's leader epoch is gone from the log");
                    p.awaiting_validation = false;
                    if policy == AutoOffsetReset::None {
                        p.blocked = true;
                        errors.push(ConsumerError::OffsetOutOfRange {
                            partition: tp.clone(),
                            offset: position,
                        });
                    } else {
                        p.position = None;
                        p.leader_epoch = None;
                        p.reset = Some(policy);
                    }
                }
                Some((ErrorCode::None, epoch, end)) if end < position => {
                    p.awaiting_validation = false;
                    if policy == AutoOffsetReset::None {
                        tracing::warn!(partition = %tp, position, divergent_offset = end, "log truncated under the position");
                        p.blocked = true;
                        errors.push(ConsumerError::LogTruncation {
                            partition: tp.clone(),
                            offset: position,
                            divergent_offset: end,
                        });
                    } else {
                        tracing::warn!(partition = %tp, position, divergent_offset = end, "log truncated under the position: reading on from where it diverges");
                        p.position = Some(end);
                        p.leader_epoch = Some(epoch);
                    }
                }
                Some((ErrorCode::None, ..)) => {
                    tracing::debug!(partition = %tp, position, "position validated");
                    p.awaiting_validation = false;
                }
                other => {
                    // A leader that moved again, a stale view (FENCED_LEADER_EPOCH), a leader
                    // behind the view (UNKNOWN_LEADER_EPOCH): look again and retry.
                    tracing::debug!(partition = %tp, answer = ?other.map(|a| a.0), "OffsetForLeaderEpoch: retrying");
                    net.metadata.request_update();
                    self.backoff
                        .insert(tp, now + self.config.common.retry_backoff);
                }
            }
        }
        st.errors.extend(errors);
        drop(st);
        shared.notify();
    }

    /// The request's connection closed before the answer.
    pub fn on_lost(&mut self, checked: Checked) {
        for (tp, ..) in checked {
            self.in_flight.remove(&tp);
        }
    }

    /// Forgets requests in flight (every connection was closed).
    pub fn reset(&mut self) {
        self.in_flight.clear();
        self.backoff.clear();
        self.metadata_version = u64::MAX;
    }

    /// When the next backoff ends.
    pub fn next_due(&self, now: Instant) -> Option<std::time::Duration> {
        self.backoff
            .values()
            .map(|t| t.saturating_duration_since(now))
            .min()
    }
}

/// Marks `tp`'s position for validation if it has an epoch to check (dropping what was
/// fetched ahead of it, which came from the old leader). Returns whether it did.
pub(crate) fn require_validation(st: &mut State, tp: &TopicPartition) -> bool {
    let Some(p) = st.assignment.get_mut(tp) else {
        return false;
    };
    if p.position.is_none() || p.leader_epoch.is_none() || p.blocked {
        return false;
    }
    p.awaiting_validation = true;
    st.drop_buffered(tp);
    true
}
