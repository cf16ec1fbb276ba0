//! `Net`: what a client's I/O thread owns to talk to a cluster, shared by the producer's
//! `Sender` and the consumer's network thread: the [`NetworkClient`] (connections, in-flight
//! requests), the [`Metadata`] (cluster view), the topic ids metadata named, and the
//! bootstrap/metadata scaffolding around them (which node to ask, when to refresh, how a
//! response changes the set of nodes, what a checkpoint and a restore reset).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Metadata, NetworkClient, NetworkError};
use crate::config::CommonConfig;
use crate::protocol::messages::MetadataResponse;
use crate::protocol::primitives::Uuid;

/// A caller's request context that can stand for a Metadata request.
pub trait MetadataContext {
    /// The context of a Metadata request.
    fn metadata() -> Self;
}

/// Connections and cluster view of one client. `T` is the client's request context.
#[derive(Debug)]
pub struct Net<T> {
    /// Every connection and in-flight request.
    pub client: NetworkClient<T>,
    /// The cluster view.
    pub metadata: Metadata,
    /// Topic ids from metadata (Fetch v13+ names topics by id).
    pub topic_ids: HashMap<Arc<str>, Uuid>,
    /// Whether a Metadata request is in flight.
    pub metadata_in_flight: bool,
    /// `allow.auto.create.topics`, sent with every Metadata request.
    pub allow_auto_create_topics: bool,
    /// A node outside the brokers of the metadata (a group coordinator's own connection),
    /// kept when metadata updates prune nodes.
    pub coordinator_node: Option<i32>,
    /// `crac.bootstrap.servers.var`.
    bootstrap_var: String,
}

impl<T: MetadataContext> Net<T> {
    /// A view that knows only the bootstrap servers of `common`.
    pub fn new(client: NetworkClient<T>, common: &CommonConfig) -> Self {
        Self {
            client,
            metadata: Metadata::new(
                common.bootstrap_servers.clone(),
                common.metadata_max_age,
                common.retry_backoff,
            ),
            topic_ids: HashMap::new(),
            metadata_in_flight: false,
            allow_auto_create_topics: common.allow_auto_create_topics,
            coordinator_node: None,
            bootstrap_var: common.crac_bootstrap_servers_var.clone(),
        }
    }

    /// Registers the bootstrap servers as nodes (negative ids, as in Java) until the first
    /// metadata answer names the real brokers. Returns contexts lost by address changes.
    ///
    /// Also whenever the cluster view names no broker (a lone broker in controlled shutdown
    /// answers without itself): the nodes [`any_node`](Self::any_node) then falls back to
    /// must exist, or no connection is attempted again (a producer whose only broker
    /// restarted stayed without a connection until it was closed).
    pub fn ensure_bootstrap_nodes(&mut self) -> Vec<T> {
        if self.names_brokers() {
            return Vec::new();
        }
        let servers = self.metadata.bootstrap_servers().to_vec();
        let mut lost = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            lost.extend(self.client.set_node(-(i as i32) - 1, &s.host, s.port));
        }
        lost
    }

    /// Whether the cluster view names brokers (else the bootstrap servers stand in for them).
    fn names_brokers(&self) -> bool {
        self.metadata.is_bootstrapped() && !self.metadata.cluster().brokers.is_empty()
    }

    fn candidate_nodes(&self) -> Vec<i32> {
        if self.names_brokers() {
            let mut v: Vec<i32> = self.metadata.cluster().brokers.keys().copied().collect();
            v.sort_unstable();
            v
        } else {
            (0..self.metadata.bootstrap_servers().len())
                .map(|i| -(i as i32) - 1)
                .collect()
        }
    }

    /// A connected broker for a request any broker answers (metadata, producer id,
    /// FindCoordinator); starts connecting one if none is (the request goes out on a later
    /// turn), and returns `None` until one is ready.
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

    /// Sends a Metadata request if one is due. A request that could not be written counts as
    /// a failed attempt and comes back as the node and the error, for the caller to act on.
    pub fn maybe_update_metadata(&mut self, now: Instant) -> Result<(), (i32, NetworkError)> {
        if self.metadata_in_flight || !self.metadata.update_due(now) {
            return Ok(());
        }
        let Some(node) = self.any_node(now) else {
            return Ok(());
        };
        let req = self.metadata.request(now, self.allow_auto_create_topics);
        match self.client.send(node, &req, T::metadata(), true, now) {
            Ok(_) => {
                self.metadata_in_flight = true;
                Ok(())
            }
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "metadata request failed");
                self.metadata.failed_attempt(now);
                Err((node, e))
            }
        }
    }

    /// The Metadata request in flight will not be answered: try again after the backoff.
    pub fn metadata_lost(&mut self, now: Instant) {
        self.metadata_in_flight = false;
        self.metadata.failed_attempt(now);
    }

    /// Applies a metadata response: the cluster view, topic ids, broker addresses. Returns
    /// the contexts of requests lost because a node went away or moved.
    pub fn apply_metadata(&mut self, resp: &MetadataResponse, now: Instant) -> Vec<T> {
        self.metadata.update(resp, now);
        for t in &resp.topics {
            if let Some(name) = &t.name
                && t.topic_id != Uuid::default()
            {
                self.topic_ids.insert(Arc::from(name.as_str()), t.topic_id);
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
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        self.metadata.cluster().leader(topic, partition)
    }

    /// Closes every connection (checkpoint, close); returns what was in flight.
    pub fn close_all(&mut self, reason: &str) -> Vec<T> {
        let lost = self.client.close_all(reason);
        self.metadata_in_flight = false;
        lost
    }

    /// After a restore: forget every node, the cluster view and the topic ids, so the next
    /// request re-bootstraps (the cluster may have changed while the process was an image).
    pub fn rebootstrap(&mut self) -> Vec<T> {
        let lost = self.client.clear_nodes();
        self.metadata.rebootstrap();
        self.bootstrap_from_restorer();
        self.metadata_in_flight = false;
        self.coordinator_node = None;
        self.topic_ids.clear();
        lost
    }

    /// The bootstrap servers the restorer gave (`crac.bootstrap.servers.var`), if any: a copy
    /// restored on another host reaches the cluster there under other addresses. A value
    /// that does not parse is reported and the configured servers kept.
    fn bootstrap_from_restorer(&mut self) {
        if self.bootstrap_var.is_empty() {
            return;
        }
        let Some(v) = crate::network::checkpoint::restore_var(&self.bootstrap_var) else {
            return;
        };
        match crate::network::metadata::parse_bootstrap(&v) {
            Ok(servers) => {
                tracing::info!(var = %self.bootstrap_var, servers = %v, "bootstrap servers from the restorer");
                self.metadata.set_bootstrap_servers(servers);
            }
            Err(why) => tracing::error!(
                var = %self.bootstrap_var, value = %v, %why,
                "the restorer's bootstrap servers do not parse; the configured ones are kept"
            ),
        }
    }

    /// Shifts every deadline by `by` (after a restore whose monotonic clock jumped).
    pub fn rebase(&mut self, by: Duration) {
        self.client.rebase(by);
        self.metadata.rebase(by);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkConfig;
    use crate::protocol::messages::metadata::MetadataBroker;

    #[derive(Debug)]
    struct Ctx;

    impl MetadataContext for Ctx {
        fn metadata() -> Self {
            Ctx
        }
    }

    fn answer(brokers: &[i32]) -> MetadataResponse {
        let broker = |node_id| MetadataBroker {
            node_id,
            host: "127.0.0.1".into(),
            port: 1,
            rack: None,
        };
        MetadataResponse {
            throttle_time_ms: 0,
            brokers: brokers.iter().map(|&id| broker(id)).collect(),
            cluster_id: None,
            controller_id: -1,
            topics: Vec::new(),
        }
    }

    #[test]
    fn a_cluster_view_without_brokers_connects_through_the_bootstrap_servers_again() {
        let mut common = CommonConfig::default();
        common.set("bootstrap.servers", "127.0.0.1:1").unwrap();
        let (events, _rx) = std::sync::mpsc::channel();
        let client = NetworkClient::new(NetworkConfig::new(&common, 5), events);
        let mut net: Net<Ctx> = Net::new(client, &common);
        net.ensure_bootstrap_nodes();
        assert!(net.client.knows(-1));
        let now = Instant::now();
        // The first answer names broker 1: the bootstrap node gives way to it.
        net.apply_metadata(&answer(&[1]), now);
        assert!(net.client.knows(1) && !net.client.knows(-1));
        // The only broker, shutting down, answers without itself.
        net.apply_metadata(&answer(&[]), now);
        net.ensure_bootstrap_nodes();
        assert!(
            net.client.knows(-1),
            "the node any_node falls back to exists"
        );
        assert_eq!(net.any_node(now), None, "not connected yet");
        assert!(
            net.client.is_connecting(-1),
            "a connection attempt has started"
        );
        net.client.close_all("test");
    }
}
