//! `Metadata`: the client's view of the cluster (brokers, partitions, leaders) and when to
//! refresh it.
//!
//! Refreshes happen on demand (a new topic, a leadership error, an unknown leader), when the
//! view is older than `metadata.max.age.ms`, and from scratch after a restore (bootstrap
//! servers resolved again). Leader changes are logged as tracing events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::ErrorCode;
use crate::protocol::messages::{MetadataRequest, MetadataResponse};
use crate::protocol::primitives::Uuid;

/// One partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Leader broker, if there is one.
    pub leader: Option<i32>,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition error from the last refresh.
    pub error: ErrorCode,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic error from the last refresh (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error: ErrorCode,
    /// Partitions by index.
    pub partitions: Vec<PartitionInfo>,
}

/// A broker's advertised address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// A snapshot of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Brokers by id.
    pub brokers: HashMap<i32, BrokerAddress>,
    /// Topics by name.
    pub topics: HashMap<Arc<str>, TopicInfo>,
}

impl Cluster {
    /// The leader epoch of a partition, if known (KIP-320: sent with fetches so a stale
    /// leader refuses them).
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topics
            .get(topic)?
            .partitions
            .get(usize::try_from(partition).ok()?)
            .map(|p| p.leader_epoch)
            .filter(|e| *e >= 0)
    }

    /// The leader of a partition, if known.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topics
            .get(topic)?
            .partitions
            .get(usize::try_from(partition).ok()?)?
            .leader
            .filter(|id| self.brokers.contains_key(id))
    }
}

/// A parsed `host:port` of `bootstrap.servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapServer {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// The cluster view and its refresh policy. Owned by the sender thread.
#[derive(Debug)]
pub struct Metadata {
    bootstrap: Vec<BootstrapServer>,
    cluster: Cluster,
    topics: HashSet<Arc<str>>,
    max_age: Duration,
    refresh_backoff: Duration,
    last_refresh: Option<Instant>,
    last_attempt: Option<Instant>,
    need_update: bool,
    bootstrapped: bool,
    version: u64,
    /// Bumped when a topic is added; a response to a request made before that does not
    /// cover the new topic, so it must not clear `need_update`.
    topics_generation: u64,
    requested_generation: u64,
    /// The highest leader epoch seen per partition, with its topic's id (KIP-320): an answer
    /// with an older epoch comes from a broker that has not caught up and is not applied.
    last_seen_epochs: HashMap<(Arc<str>, i32), (Uuid, i32)>,
}

impl Metadata {
    /// A view that knows only the bootstrap servers.
    pub fn new(
        bootstrap: Vec<BootstrapServer>,
        max_age: Duration,
        refresh_backoff: Duration,
    ) -> Self {
        Self {
            bootstrap,
            cluster: Cluster::default(),
            topics: HashSet::new(),
            max_age,
            refresh_backoff,
            last_refresh: None,
            last_attempt: None,
            need_update: true,
            bootstrapped: false,
            version: 0,
            topics_generation: 0,
            requested_generation: 0,
            last_seen_epochs: HashMap::new(),
        }
    }

    /// The bootstrap servers.
    pub fn bootstrap_servers(&self) -> &[BootstrapServer] {
        &self.bootstrap
    }

    /// Replaces the bootstrap servers (a restored copy told where the cluster is now).
    pub fn set_bootstrap_servers(&mut self, servers: Vec<BootstrapServer>) {
        self.bootstrap = servers;
    }

    /// The current view.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Increments with every applied response.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether a response from the real cluster has been applied since the last bootstrap.
    pub fn is_bootstrapped(&self) -> bool {
        self.bootstrapped
    }

    /// Adds a topic of interest; a refresh is requested if it is new.
    pub fn add_topic(&mut self, topic: &str) {
        if !self.topics.contains(topic) {
            self.topics.insert(Arc::from(topic));
            self.need_update = true;
            self.topics_generation += 1;
        }
    }

    /// Asks for a refresh at the next opportunity (after the refresh backoff).
    pub fn request_update(&mut self) {
        self.need_update = true;
    }

    /// Forgets the cluster: the next refresh goes to the bootstrap servers, resolved again.
    /// Topics of interest are kept.
    pub fn rebootstrap(&mut self) {
        self.cluster.brokers.clear();
        // The cluster may be another one now, whose epochs started again.
        self.last_seen_epochs.clear();
        self.bootstrapped = false;
        self.need_update = true;
        self.last_attempt = None;
    }

    /// Whether a refresh is due at `now`.
    pub fn update_due(&self, now: Instant) -> bool {
        self.time_to_update(now) == Duration::ZERO
    }

    /// How long until a refresh is due.
    pub fn time_to_update(&self, now: Instant) -> Duration {
        let expire = match self.last_refresh {
            _ if self.need_update => Duration::ZERO,
            None => Duration::ZERO,
            Some(t) => (t + self.max_age).saturating_duration_since(now),
        };
        let backoff = self.last_attempt.map_or(Duration::ZERO, |t| {
            (t + self.refresh_backoff).saturating_duration_since(now)
        });
        expire.max(backoff)
    }

    /// The request for the topics of interest.
    pub fn request(&mut self, now: Instant, allow_auto_topic_creation: bool) -> MetadataRequest {
        self.last_attempt = Some(now);
        self.requested_generation = self.topics_generation;
        let mut topics: Vec<String> = self.topics.iter().map(|t| t.to_string()).collect();
        topics.sort();
        MetadataRequest {
            topics: Some(topics),
            allow_auto_topic_creation,
        }
    }

    /// A refresh failed (no answer): try again after the backoff.
    pub fn failed_attempt(&mut self, now: Instant) {
        self.last_attempt = Some(now);
        self.need_update = true;
    }

    /// Applies a response; returns whether any leader changed.
    pub fn update(&mut self, resp: &MetadataResponse, now: Instant) -> bool {
        let mut changed = false;
        let mut cluster = Cluster {
            cluster_id: resp.cluster_id.clone(),
            brokers: resp
                .brokers
                .iter()
                .filter_map(|b| {
                    let port = u16::try_from(b.port).ok()?;
                    Some((
                        b.node_id,
                        BrokerAddress {
                            host: b.host.clone(),
                            port,
                        },
                    ))
                })
                .collect(),
            topics: HashMap::new(),
        };
        let mut retry_soon = false;
        for t in &resp.topics {
            let Some(name) = t.name.as_deref() else {
                continue;
            };
            let name: Arc<str> = self
                .topics
                .get(name)
                .cloned()
                .unwrap_or_else(|| Arc::from(name));
            let mut partitions: Vec<PartitionInfo> = Vec::with_capacity(t.partitions.len());
            let mut sorted: Vec<_> = t.partitions.iter().collect();
            sorted.sort_by_key(|p| p.partition_index);
            for p in sorted {
                // Partitions are dense from 0; a gap means a broken answer: skip the topic.
                if p.partition_index as usize != partitions.len() {
                    break;
                }
                let leader = (p.leader_id >= 0).then_some(p.leader_id);
                if leader.is_none() || !p.error_code.is_ok() {
                    retry_soon = true;
                }
                let info = PartitionInfo {
                    leader,
                    leader_epoch: p.leader_epoch,
                    error: p.error_code,
                };
                match self.newer_or_same_epoch(&name, t.topic_id, p.partition_index, &info) {
                    Some(info) => partitions.push(info),
                    None => {
                        retry_soon = true;
                        partitions.push(self.known_partition(&name, p.partition_index, info));
                    }
                }
            }
            if !t.error_code.is_ok() {
                retry_soon = true;
            }
            if let Some(old) = self.cluster.topics.get(&name) {
                for (i, p) in partitions.iter().enumerate() {
                    let before = old.partitions.get(i).and_then(|o| o.leader);
                    if before != p.leader {
                        changed = true;
                        tracing::info!(topic = %name, partition = i, from = ?before, to = ?p.leader, epoch = p.leader_epoch, "partition leader changed");
                    }
                }
                if old.partitions.len() != partitions.len() {
                    tracing::info!(topic = %name, from = old.partitions.len(), to = partitions.len(), "partition count changed");
                }
            } else if t.error_code.is_ok() {
                tracing::debug!(topic = %name, partitions = partitions.len(), "topic metadata loaded");
            }
            cluster.topics.insert(
                name,
                TopicInfo {
                    error: t.error_code,
                    partitions,
                },
            );
        }
        self.cluster = cluster;
        self.version += 1;
        self.last_refresh = Some(now);
        self.last_attempt = Some(now);
        self.need_update = retry_soon || self.requested_generation != self.topics_generation;
        self.bootstrapped = true;
        changed
    }

    /// `info` if its leader epoch is not older than the one last seen for the partition (and
    /// then it is the one last seen); `None` for an answer from a broker behind the others.
    /// A partition without an epoch (an error answer) is taken as it is.
    fn newer_or_same_epoch(
        &mut self,
        topic: &Arc<str>,
        topic_id: Uuid,
        partition: i32,
        info: &PartitionInfo,
    ) -> Option<PartitionInfo> {
        let key = (topic.clone(), partition);
        if info.leader_epoch < 0 {
            self.last_seen_epochs.remove(&key);
            return Some(info.clone());
        }
        match self.last_seen_epochs.get(&key) {
            // A topic deleted and created again starts its epochs over.
            Some(&(id, seen)) if info.leader_epoch < seen && id == topic_id => {
                tracing::debug!(%topic, partition, epoch = info.leader_epoch, seen, "metadata with an older leader epoch ignored");
                None
            }
            _ => {
                self.last_seen_epochs
                    .insert(key, (topic_id, info.leader_epoch));
                Some(info.clone())
            }
        }
    }

    /// What the current view has of a partition whose new answer was stale (`fallback` if
    /// it has nothing).
    fn known_partition(
        &self,
        topic: &str,
        partition: i32,
        fallback: PartitionInfo,
    ) -> PartitionInfo {
        self.cluster
            .topics
            .get(topic)
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .cloned()
            .unwrap_or(PartitionInfo {
                leader: None,
                ..fallback
            })
    }

    /// Applies the new leader a broker named in a Produce response (KIP-951), if it is a
    /// known broker and newer than what the view has, so retries go there without waiting for
    /// the next refresh. Returns whether the leader changed.
    pub fn apply_leader_hint(
        &mut self,
        topic: &str,
        partition: i32,
        leader: i32,
        epoch: i32,
    ) -> bool {
        if leader < 0 || !self.cluster.brokers.contains_key(&leader) {
            return false;
        }
        let Some(p) = self
            .cluster
            .topics
            .get_mut(topic)
            .and_then(|t| t.partitions.get_mut(usize::try_from(partition).ok()?))
        else {
            return false;
        };
        if epoch <= p.leader_epoch || p.leader == Some(leader) {
            return false;
        }
        tracing::info!(topic, partition, from = ?p.leader, to = leader, epoch, "partition leader changed (from a produce response)");
        p.leader = Some(leader);
        p.leader_epoch = epoch;
        if let Some(seen) = self
            .last_seen_epochs
            .get_mut(&(Arc::from(topic), partition))
        {
            seen.1 = seen.1.max(epoch);
        }
        true
    }

    /// Shifts timestamps by `by` (after a restore whose monotonic clock jumped).
    pub fn rebase(&mut self, by: Duration) {
        if let Some(t) = self.last_refresh.as_mut() {
            *t += by;
        }
        if let Some(t) = self.last_attempt.as_mut() {
            *t += by;
        }
    }
}

/// Parses `bootstrap.servers` (`host:port,host:port`, IPv6 as `[addr]:port`).
pub fn parse_bootstrap(s: &str) -> Result<Vec<BootstrapServer>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("{part:?} has no port (expected host:port)"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{part:?} has an invalid port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{part:?} has no host"));
        }
        out.push(BootstrapServer {
            host: host.to_owned(),
            port,
        });
    }
    if out.is_empty() {
        return Err("no servers given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_parsing() {
        let v = parse_bootstrap("127.0.0.1:9092, localhost:1,[::1]:3").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[2].host, "::1");
        assert!(parse_bootstrap("").is_err());
        assert!(parse_bootstrap("host").is_err());
        assert!(parse_bootstrap("host:x").is_err());
    }

    #[test]
    fn update_and_leader_changes() {
        let mut m = Metadata::new(
            parse_bootstrap("127.0.0.1:1").unwrap(),
            Duration::from_secs(300),
            Duration::from_millis(100),
        );
        m.add_topic("t");
        let now = Instant::now();
        assert!(m.update_due(now));
        let resp = crate::protocol::messages::metadata::tests::sample(12);
        assert!(!m.update(&resp, now));
        assert_eq!(m.cluster().leader("t", 1), Some(2));
        assert!(!m.update_due(now));
        let mut moved = resp.clone();
        moved.topics[0].partitions[1].leader_id = 1;
        assert!(m.update(&moved, now));
        assert_eq!(m.cluster().leader("t", 1), Some(1));
        assert_eq!(m.cluster().leader("t", 9), None);
        m.request_update();
        assert!(!m.update_due(now));
        assert!(m.update_due(now + Duration::from_millis(100)));
    }

    #[test]
    fn leader_hints_apply_only_when_newer_and_known() {
        let mut m = Metadata::new(
            parse_bootstrap("127.0.0.1:1").unwrap(),
            Duration::from_secs(300),
            Duration::ZERO,
        );
        m.add_topic("t");
        let now = Instant::now();
        m.update(&crate::protocol::messages::metadata::tests::sample(12), now);
        assert_eq!(m.cluster().leader("t", 1), Some(2));
        assert!(!m.apply_leader_hint("t", 1, 1, 4), "same epoch");
        assert!(!m.apply_leader_hint("t", 1, 9, 5), "unknown broker");
        assert!(!m.apply_leader_hint("t", 7, 1, 5), "unknown partition");
        assert!(m.apply_leader_hint("t", 1, 1, 5));
        assert_eq!(m.cluster().leader("t", 1), Some(1));
    }

    #[test]
    fn metadata_with_an_older_leader_epoch_is_not_applied() {
        let mut m = Metadata::new(
            parse_bootstrap("127.0.0.1:1").unwrap(),
            Duration::from_secs(300),
            Duration::ZERO,
        );
        m.add_topic("t");
        let now = Instant::now();
        let resp = crate::protocol::messages::metadata::tests::sample(12);
        let (leader, epoch) = {
            let p = &resp.topics[0].partitions[1];
            (p.leader_id, p.leader_epoch)
        };
        m.update(&resp, now);
        // A broker that has not caught up answers with the previous leader and epoch.
        let mut stale = resp.clone();
        stale.topics[0].partitions[1].leader_id = 1;
        stale.topics[0].partitions[1].leader_epoch = epoch - 1;
        m.update(&stale, now);
        assert_eq!(m.cluster().leader("t", 1), Some(leader));
        assert_eq!(m.cluster().leader_epoch("t", 1), Some(epoch));
        assert!(m.update_due(now), "asks again");
        // A newer epoch is applied; so is the same topic name with another id.
        let mut newer = stale.clone();
        newer.topics[0].partitions[1].leader_epoch = epoch + 1;
        m.update(&newer, now);
        assert_eq!(m.cluster().leader("t", 1), Some(1));
        let mut recreated = resp.clone();
        recreated.topics[0].topic_id = Uuid([9; 16]);
        recreated.topics[0].partitions[1].leader_epoch = 0;
        m.update(&recreated, now);
        assert_eq!(m.cluster().leader_epoch("t", 1), Some(0));
    }

    #[test]
    fn topic_added_while_a_request_is_in_flight_is_not_forgotten() {
        let mut m = Metadata::new(
            parse_bootstrap("127.0.0.1:1").unwrap(),
            Duration::from_secs(300),
            Duration::ZERO,
        );
        let now = Instant::now();
        let req = m.request(now, true);
        assert_eq!(req.topics, Some(vec![]));
        m.add_topic("t");
        let resp = crate::protocol::messages::metadata::tests::sample(12);
        let mut empty = resp.clone();
        empty.topics.clear();
        m.update(&empty, now);
        assert!(m.update_due(now), "the new topic still needs a refresh");
        let req = m.request(now, true);
        assert_eq!(req.topics, Some(vec!["t".to_owned()]));
        m.update(&resp, now);
        assert!(!m.update_due(now));
    }
}
