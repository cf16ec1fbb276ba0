//! The `Fetcher`: sends Fetch requests to partition leaders and hands what comes back (decoded
//! by [`batch_reader`](super::batch_reader)) to `poll()`; resets positions with ListOffsets
//! (`auto.offset.reset`, `seek_to_beginning`/`seek_to_end`).
//!
//! One Fetch in flight per broker, covering every assigned partition it leads that has a
//! position and room in the buffer: up to two fetched chunks per partition wait for `poll()`
//! ([`MAX_CHUNKS`](super::shared::MAX_CHUNKS)), the second fetched from where the first ends
//! while the application drains the first, which bounds memory to about two fetches per
//! partition.
//! Fetches are sessionless (session id 0, epoch -1), so a restored image (or N clones of it)
//! has no fetch session to lose. Topics are named by id (v13+) when metadata gave every id,
//! by name (v12) otherwise.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch_reader::{DecompressionBudget, parse_partition_within};
use super::config::{AutoOffsetReset, ConsumerConfig};
use super::error::ConsumerError;
use super::net::{FetchContext, Net, RequestContext};
use super::record::TopicPartition;
use super::shared::{CompletedFetch, RebalanceStep, Shared};
use crate::protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use crate::protocol::messages::list_offsets::{
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListOffsetsPartition, ListOffsetsRequest,
    ListOffsetsResponse, ListOffsetsTopic,
};
use crate::protocol::primitives::Uuid;
use crate::protocol::{ApiKey, ErrorCode, Request};

/// A Fetch request sent by topic name: versions up to 12, for when a topic's id is not known
/// (v13+ name topics by id only).
#[derive(Debug)]
pub struct FetchByName<'a>(pub &'a FetchRequest);

impl Request for FetchByName<'_> {
    const API_KEY: ApiKey = ApiKey::Fetch;
    const MIN_VERSION: i16 = FetchRequest::MIN_VERSION;
    const MAX_VERSION: i16 = 12;
    const FLEXIBLE_FROM: i16 = FetchRequest::FLEXIBLE_FROM;
    type Response = <FetchRequest as Request>::Response;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.0.encode(version, out)
    }

    fn size_hint(&self) -> usize {
        self.0.size_hint()
    }
}

/// Fetch counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FetchCounters {
    pub requests: u64,
    pub bytes: u64,
    pub records: u64,
}

/// The fetching side of the network thread.
#[derive(Debug)]
pub(crate) struct Fetcher {
    config: Arc<ConsumerConfig>,
    /// Brokers with a Fetch in flight.
    in_flight: HashSet<i32>,
    /// Partitions not to fetch before an instant (after an error).
    backoff: HashMap<TopicPartition, Instant>,
    /// Partitions with a ListOffsets in flight.
    resetting: HashSet<TopicPartition>,
    /// Partitions whose last fetched data was left undecoded when the response's
    /// decompression budget ran out: they go first in the next fetch, so they get a fresh
    /// budget (and a batch over the whole budget becomes that partition's error).
    deferred: HashSet<TopicPartition>,
    pub counters: FetchCounters,
}

impl Fetcher {
    pub fn new(config: Arc<ConsumerConfig>) -> Self {
        Self {
            config,
            in_flight: HashSet::new(),
            backoff: HashMap::new(),
            resetting: HashSet::new(),
            deferred: HashSet::new(),
            counters: FetchCounters::default(),
        }
    }

    /// Sends what is due: position resets, then fetches.
    pub fn poll(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        self.backoff.retain(|_, t| *t > now);
        self.send_resets(net, shared, now);
        self.send_fetches(net, shared, now);
    }

    fn send_fetches(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        let fetchable: Vec<(TopicPartition, i64)> = {
            let st = shared.state.lock();
            if st.checkpointing || st.closed || matches!(st.rebalance, RebalanceStep::Assigned(_)) {
                return;
            }
            st.assignment
                .keys()
                .filter(|tp| !self.backoff.contains_key(*tp))
                .filter_map(|tp| st.fetch_offset(tp).map(|from| (tp.clone(), from)))
                .collect()
        };
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        for (tp, pos) in fetchable {
            match net.leader(&tp.topic, tp.partition) {
                Some(node) => by_node.entry(node).or_default().push((tp, pos)),
                None => {
                    net.metadata.add_topic(&tp.topic);
                    net.metadata.request_update();
                }
            }
        }
        for (node, partitions) in by_node {
            if self.in_flight.contains(&node) || !net.ready(node, now) {
                continue;
            }
            self.send_fetch(net, node, partitions, now);
        }
    }

    fn send_fetch(
        &mut self,
        net: &mut Net,
        node: i32,
        mut partitions: Vec<(TopicPartition, i64)>,
        now: Instant,
    ) {
        // Brokers answer (and fill fetch.max.bytes) in the order asked: deferred partitions
        // first, then by topic and partition.
        partitions.sort_by_key(|(tp, _)| !self.deferred.contains(tp));
        let mut topics: Vec<(Arc<str>, Vec<FetchPartition>)> = Vec::new();
        let mut topic_index: HashMap<&str, usize> = HashMap::new();
        for (tp, pos) in &partitions {
            let i = *topic_index.entry(&tp.topic).or_insert_with(|| {
                topics.push((tp.topic.clone(), Vec::new()));
                topics.len() - 1
            });
            topics[i].1.push(FetchPartition {
                partition: tp.partition,
                // KIP-320: a leader that is not the one the metadata names refuses the fetch.
                current_leader_epoch: net
                    .metadata
                    .cluster()
                    .leader_epoch(&tp.topic, tp.partition)
                    .unwrap_or(-1),
                fetch_offset: *pos,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: self.config.max_partition_fetch_bytes,
            });
        }
        let mut topic_names = HashMap::new();
        let req = FetchRequest {
            max_wait_ms: self.config.fetch_max_wait.as_millis() as i32,
            min_bytes: self.config.fetch_min_bytes,
            max_bytes: self.config.fetch_max_bytes,
            isolation_level: self.config.isolation_level,
            rack_id: self.config.client_rack.clone(),
            topics: topics
                .into_iter()
                .map(|(topic, parts)| {
                    let topic_id = net.topic_ids.get(&topic).copied().unwrap_or_default();
                    if topic_id != Uuid::default() {
                        topic_names.insert(topic_id, topic.clone());
                    }
                    FetchTopic {
                        topic: topic.to_string(),
                        topic_id,
                        partitions: parts,
                    }
                })
                .collect(),
            ..FetchRequest::default()
        };
        let ctx = RequestContext::Fetch(FetchContext {
            node,
            partitions,
            topic_names,
        });
        let sent = if req.max_version() > FetchByName::MAX_VERSION {
            net.client.send(node, &req, ctx, true, now)
        } else {
            net.client.send(node, &FetchByName(&req), ctx, true, now)
        };
        match sent {
            Ok(_) => {
                self.in_flight.insert(node);
                self.counters.requests += 1;
            }
            Err((e, _)) => {
                tracing::warn!(node, error = %e, "fetch not sent");
                net.metadata.request_update();
            }
        }
    }

    /// A Fetch response: each partition's records go to the buffer (if the partition is still
    /// at the position they were fetched from), errors to metadata refreshes, resets, or
    /// `poll()`.
    pub fn on_fetch(
        &mut self,
        net: &mut Net,
        ctx: FetchContext,
        version: i16,
        resp: FetchResponse,
        shared: &Shared,
    ) {
        self.in_flight.remove(&ctx.node);
        let now = Instant::now();
        if !resp.error_code.is_ok() {
            tracing::warn!(node = ctx.node, code = %resp.error_code, "fetch failed");
            net.metadata.request_update();
            for (tp, _) in &ctx.partitions {
                self.backoff
                    .insert(tp.clone(), now + self.config.common.retry_backoff);
            }
            return;
        }
        let positions: HashMap<&TopicPartition, i64> =
            ctx.partitions.iter().map(|(tp, p)| (tp, *p)).collect();
        let mut budget = DecompressionBudget::new(self.config.max_decompressed_bytes())
            .with_max_ratio(self.config.fetch_max_compression_ratio);
        for t in resp.responses {
            let topic: Arc<str> = if FetchRequest::uses_topic_ids(version) {
                match ctx.topic_names.get(&t.topic_id) {
                    Some(n) => n.clone(),
                    None => continue, // an id we did not ask for
                }
            } else {
                Arc::from(t.topic.as_str())
            };
            for p in t.partitions {
                let tp = TopicPartition::new(topic.clone(), p.partition_index);
                let Some(&position) = positions.get(&tp) else {
                    continue;
                };
                match p.error_code {
                    ErrorCode::None => {
                        let Some(data) = p.records.as_ref().filter(|d| !d.is_empty()) else {
                            continue;
                        };
                        self.counters.bytes += data.len() as u64;
                        if !shared.state.lock().accepts_fetch(&tp, position) {
                            continue;
                        }
                        let aborted = p.aborted_transactions.as_deref().unwrap_or(&[]);
                        let parsed = parse_partition_within(
                            &topic,
                            tp.partition,
                            position,
                            data,
                            self.config.isolation_level,
                            aborted,
                            &mut budget,
                        );
                        if parsed.deferred {
                            tracing::debug!(partition = %tp, offset = parsed.next_offset, "decompression budget of the fetch spent: the rest is fetched again");
                            self.deferred.insert(tp.clone());
                        } else {
                            self.deferred.remove(&tp);
                        }
                        if parsed.records.is_empty()
                            && parsed.next_offset == position
                            && parsed.error.is_none()
                        {
                            continue;
                        }
                        self.counters.records += parsed.records.len() as u64;
                        let mut st = shared.state.lock();
                        if !st.accepts_fetch(&tp, position) {
                            continue;
                        }
                        let error = parsed.error.map(|(offset, source)| {
                            tracing::warn!(partition = %tp, offset, error = %source, "corrupt record batch");
                            ConsumerError::CorruptRecord {
                                partition: tp.clone(),
                                offset,
                                source,
                            }
                        });
                        st.push_fetch(CompletedFetch {
                            tp,
                            position,
                            records: parsed.records,
                            next_offset: parsed.next_offset,
                            error,
                        });
                        drop(st);
                        shared.notify();
                    }
                    ErrorCode::OffsetOutOfRange => self.out_of_range(&tp, position, shared),
                    code
                    @ (ErrorCode::TopicAuthorizationFailed | ErrorCode::RecordListTooLarge) => {
                        let mut st = shared.state.lock();
                        if st.accepts_fetch(&tp, position) {
                            st.errors.push_back(ConsumerError::Broker {
                                operation: "fetch",
                                code,
                                message: Some(Arc::from(tp.to_string())),
                            });
                        }
                        drop(st);
                        shared.notify();
                        self.backoff
                            .insert(tp, now + self.config.common.retry_backoff_max);
                    }
                    code => {
                        // Leadership moved, a replica is catching up, the topic id changed:
                        // look again and retry.
                        tracing::debug!(partition = %tp, %code, "fetch error; refreshing metadata");
                        if matches!(
                            code,
                            ErrorCode::UnknownTopicId | ErrorCode::InconsistentTopicId
                        ) {
                            net.topic_ids.remove(&tp.topic);
                        }
                        net.metadata.request_update();
                        self.backoff
                            .insert(tp, now + self.config.common.retry_backoff);
                    }
                }
            }
        }
    }

    /// The fetch's connection closed before the answer.
    pub fn on_fetch_lost(&mut self, ctx: FetchContext) {
        self.in_flight.remove(&ctx.node);
    }

    fn out_of_range(&mut self, tp: &TopicPartition, position: i64, shared: &Shared) {
        let mut st = shared.state.lock();
        if !st.accepts_fetch(tp, position) {
            return;
        }
        if st.assignment.get(tp).and_then(|p| p.position) != Some(position) {
            // A chunk fetched ahead of the position is out of range (the log was truncated
            // past the buffered chunk): the application reads that chunk first; the fetch
            // from the position it then reaches decides.
            drop(st);
            self.backoff.insert(
                tp.clone(),
                Instant::now() + self.config.common.retry_backoff,
            );
            return;
        }
        let policy = self.config.auto_offset_reset;
        let p = st.assignment.get_mut(tp).expect("accepts_fetch checked it");
        if policy == AutoOffsetReset::None {
            p.blocked = true;
            st.errors.push_back(ConsumerError::OffsetOutOfRange {
                partition: tp.clone(),
                offset: position,
            });
        } else {
            tracing::info!(partition = %tp, offset = position, reset = %policy, "offset out of range: resetting");
            p.position = None;
            p.reset = Some(policy);
        }
        drop(st);
        shared.notify();
    }

    fn send_resets(&mut self, net: &mut Net, shared: &Shared, now: Instant) {
        let wanted: Vec<(TopicPartition, AutoOffsetReset)> = {
            let st = shared.state.lock();
            if st.checkpointing || st.closed {
                return;
            }
            st.assignment
                .iter()
                .filter(|(tp, _)| !self.resetting.contains(*tp) && !self.backoff.contains_key(*tp))
                .filter_map(|(tp, p)| p.reset.map(|r| (tp.clone(), r)))
                .collect()
        };
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, AutoOffsetReset)>> = BTreeMap::new();
        for (tp, r) in wanted {
            match net.leader(&tp.topic, tp.partition) {
                Some(node) => by_node.entry(node).or_default().push((tp, r)),
                None => {
                    net.metadata.add_topic(&tp.topic);
                    net.metadata.request_update();
                }
            }
        }
        for (node, parts) in by_node {
            if !net.ready(node, now) {
                continue;
            }
            let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
            for (tp, r) in &parts {
                topics
                    .entry(&tp.topic)
                    .or_default()
                    .push(ListOffsetsPartition {
                        partition_index: tp.partition,
                        current_leader_epoch: net
                            .metadata
                            .cluster()
                            .leader_epoch(&tp.topic, tp.partition)
                            .unwrap_or(-1),
                        timestamp: if *r == AutoOffsetReset::Earliest {
                            EARLIEST_TIMESTAMP
                        } else {
                            LATEST_TIMESTAMP
                        },
                    });
            }
            let req = ListOffsetsRequest {
                isolation_level: self.config.isolation_level,
                topics: topics
                    .into_iter()
                    .map(|(name, partitions)| ListOffsetsTopic {
                        name: name.to_owned(),
                        partitions,
                    })
                    .collect(),
                timeout_ms: self.config.common.request_timeout.as_millis() as i32,
            };
            let names: Vec<TopicPartition> = parts.iter().map(|(tp, _)| tp.clone()).collect();
            match net
                .client
                .send(node, &req, RequestContext::ListOffsets(parts), true, now)
            {
                Ok(_) => self.resetting.extend(names),
                Err((e, _)) => tracing::warn!(node, error = %e, "ListOffsets not sent"),
            }
        }
    }

    /// A ListOffsets response: positions for the partitions still waiting for that reset.
    pub fn on_list_offsets(
        &mut self,
        net: &mut Net,
        asked: Vec<(TopicPartition, AutoOffsetReset)>,
        resp: ListOffsetsResponse,
        shared: &Shared,
    ) {
        let now = Instant::now();
        let mut answers: HashMap<TopicPartition, (ErrorCode, i64)> = HashMap::new();
        for t in resp.topics {
            let topic: Arc<str> = Arc::from(t.name.as_str());
            for p in t.partitions {
                answers.insert(
                    TopicPartition::new(topic.clone(), p.partition_index),
                    (p.error_code, p.offset),
                );
            }
        }
        let mut st = shared.state.lock();
        for (tp, r) in asked {
            self.resetting.remove(&tp);
            let Some(p) = st.assignment.get_mut(&tp) else {
                continue;
            };
            if p.reset != Some(r) {
                continue;
            }
            match answers.get(&tp) {
                Some((ErrorCode::None, offset)) if *offset >= 0 => {
                    tracing::debug!(partition = %tp, offset, reset = %r, "position reset");
                    p.position = Some(*offset);
                    p.reset = None;
                    p.leader_epoch = None;
                    p.awaiting_validation = false;
                }
                other => {
                    tracing::debug!(partition = %tp, answer = ?other, "ListOffsets: retrying");
                    net.metadata.request_update();
                    self.backoff
                        .insert(tp, now + self.config.common.retry_backoff);
                }
            }
        }
        drop(st);
        shared.notify();
    }

    /// The ListOffsets' connection closed before the answer.
    pub fn on_list_offsets_lost(&mut self, asked: Vec<(TopicPartition, AutoOffsetReset)>) {
        for (tp, _) in asked {
            self.resetting.remove(&tp);
        }
    }

    /// Forgets requests in flight (every connection was closed).
    pub fn reset(&mut self) {
        self.in_flight.clear();
        self.resetting.clear();
        self.backoff.clear();
        self.deferred.clear();
    }

    /// How long until a backoff ends.
    pub fn next_due(&self, now: Instant) -> Duration {
        self.backoff
            .values()
            .map(|t| t.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1))
    }

    /// Shifts deadlines by `by` (a restore whose monotonic clock jumped).
    pub fn rebase(&mut self, by: Duration) {
        for t in self.backoff.values_mut() {
            *t += by;
        }
    }
}
