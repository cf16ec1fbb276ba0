//! What the consumer's network thread owns for talking to brokers: the `NetworkClient`, the
//! `Metadata` (with the topic ids Fetch v13+ needs), and the contexts of in-flight requests.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::config::AutoOffsetReset;
use super::record::TopicPartition;
use crate::network::{Metadata, NetworkClient};
use crate::protocol::messages::MetadataResponse;
use crate::protocol::primitives::Uuid;

/// Brokers are nodes `0..`, bootstrap servers `-1, -2, …` (as in Java); the group
/// coordinator gets a connection of its own as node `COORDINATOR_BASE - broker id`, so a
/// JoinGroup held for a whole rebalance never delays fetches from the same broker.
pub(crate) const COORDINATOR_BASE: i32 = i32::MAX;

/// What an in-flight request was.
#[derive(Debug)]
pub(crate) enum RequestContext {
    Metadata,
    Fetch(FetchContext),
    ListOffsets(Vec<(TopicPartition, AutoOffsetReset)>),
    FindCoordinator,
    JoinGroup,
    SyncGroup,
    Heartbeat,
    LeaveGroup,
    /// The id of the commit in the coordinator's queue.
    OffsetCommit(u64),
    /// Positions to initialize (`None`) or a `committed()` query (its id).
    OffsetFetch(Option<u64>),
}

/// A Fetch in flight: which positions it asked for, and the topic ids it named.
#[derive(Debug)]
pub(crate) struct FetchContext {
    pub node: i32,
    pub partitions: Vec<(TopicPartition, i64)>,
    pub topic_names: HashMap<Uuid, Arc<str>>,
}

/// Connections and cluster view.
#[derive(Debug)]
pub(crate) struct Net {
    pub client: NetworkClient<RequestContext>,
    pub metadata: Metadata,
    /// Topic ids from metadata (Fetch v13+ names topics by id).
    pub topic_ids: HashMap<Arc<str>, Uuid>,
    pub metadata_in_flight: bool,
    pub allow_auto_create_topics: bool,
    /// The coordinator's node, kept when metadata updates prune nodes.
    pub coordinator_node: Option<i32>,
}

impl Net {
    /// Registers the bootstrap servers until the first metadata answer names the brokers.
    /// Returns contexts lost by address changes.
    pub fn ensure_bootstrap_nodes(&mut self) -> Vec<RequestContext> {
        if self.metadata.is_bootstrapped() {
            return Vec::new();
        }
        let servers = self.metadata.bootstrap_servers().to_vec();
        let mut lost = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            lost.extend(self.client.set_node(-(i as i32) - 1, &s.host, s.port));
        }
        lost
    }

    fn candidate_nodes(&self) -> Vec<i32> {
        if self.metadata.is_bootstrapped() && !self.metadata.cluster().brokers.is_empty() {
            let mut v: Vec<i32> = self.metadata.cluster().brokers.keys().copied().collect();
            v.sort_unstable();
            v
        } else {
            (0..self.metadata.bootstrap_servers().len())
                .map(|i| -(i as i32) - 1)
                .collect()
        }
    }

    /// A connected broker for a request any broker answers (metadata, FindCoordinator);
    /// starts connecting one if none is, and returns `None` until one is ready.
    pub fn any_node(&mut self, now: Instant) -> Option<i32> {
        let candidates = self.candidate_nodes();
        if candidates.iter().any(|&n| self.client.is_ready(n)) {
            return self.client.least_loaded(&candidates, now);
        }
        if candidates.iter().any(|&n| self.client.is_connecting(n)) {
            return None;
        }
        let node = self.client.least_loaded(&candidates, now)?;
        let _ = self.client.connect(node, now);
        None
    }

    /// Whether `node` can take a request now; if it is not connected, starts connecting it
    /// (unless it is backing off).
    pub fn ready(&mut self, node: i32, now: Instant) -> bool {
        if self.client.is_ready(node) {
            return true;
        }
        if self.client.can_attempt(node, now) {
            let _ = self.client.connect(node, now);
        }
        false
    }

    /// Sends a metadata request if one is due.
    pub fn maybe_update_metadata(&mut self, now: Instant) {
        if self.metadata_in_flight || !self.metadata.update_due(now) {
            return;
        }
        let Some(node) = self.any_node(now) else {
            return;
        };
        let req = self.metadata.request(now, self.allow_auto_create_topics);
        match self
            .client
            .send(node, &req, RequestContext::Metadata, true, now)
        {
            Ok(_) => self.metadata_in_flight = true,
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "metadata request failed");
                self.metadata.failed_attempt(now);
            }
        }
    }

    /// Applies a metadata response: the cluster view, topic ids, broker addresses. Returns
    /// the contexts of requests lost because a node went away or moved.
    pub fn apply_metadata(&mut self, resp: &MetadataResponse, now: Instant) -> Vec<RequestContext> {
        self.metadata.update(resp, now);
        for t in &resp.topics {
            if let Some(name) = &t.name {
                if t.topic_id != Uuid::default() {
                    self.topic_ids.insert(Arc::from(name.as_str()), t.topic_id);
                }
            }
        }
        let brokers: Vec<(i32, String, u16)> = self
            .metadata
            .cluster()
            .brokers
            .iter()
            .map(|(id, b)| (*id, b.host.clone(), b.port))
            .collect();
        let mut lost = Vec::new();
        if !brokers.is_empty() {
            for (id, host, port) in &brokers {
                lost.extend(self.client.set_node(*id, host, *port));
            }
            let coordinator = self.coordinator_node;
            lost.extend(
                self.client.retain_nodes(|id| {
                    Some(id) == coordinator || brokers.iter().any(|b| b.0 == id)
                }),
            );
        }
        lost
    }

    /// The leader of a partition, if the metadata knows one.
    pub fn leader(&self, tp: &TopicPartition) -> Option<i32> {
        self.metadata.cluster().leader(&tp.topic, tp.partition)
    }
}
