//! Fetch (key 1): record batches of partitions, from their leader or a preferred read replica.
//!
//! Versions 4-17: 4 is Kafka 4's baseline (record batch v2, isolation level); flexible from 12;
//! from 13 topics are named by id (KIP-516) instead of by name, in the request and the response
//! alike, so a request may use 13+ only when every topic's id is known
//! ([`FetchRequest::max_version`]). 18 adds only a follower's high watermark, nothing for a
//! consumer.
//!
//! Fetch sessions (KIP-227): the codec carries `session_id`, `session_epoch` and
//! `forgotten_topics_data`, so incremental sessions can be added; [`FetchRequest::default`] is
//! a sessionless full fetch (id 0, epoch -1, [`SESSIONLESS_EPOCH`]): every request lists every
//! partition with its offset and the broker keeps no per-consumer state. That costs some bytes
//! per request for a consumer with thousands of partitions, and buys simplicity where it
//! matters here: after a checkpoint/restore (or any reconnect) there is no session to lose or
//! re-create, and an image cloned N times cannot have N processes fighting over one session id.
//!
//! Records come as raw bytes (one or more record batches, the last possibly cut short by the
//! size limits) for the record module to decode.

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::record::shared_buffer;
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};
use bytes::Bytes;

/// The session epoch of a sessionless fetch (with session id 0): the broker creates no session.
pub const SESSIONLESS_EPOCH: i32 = -1;

/// Which records a consumer sees: `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Every record, including those of open and aborted transactions (0).
    #[default]
    ReadUncommitted,
    /// Records up to the last stable offset; aborted transactions are listed (1).
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value.
    pub fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }

    /// The level for a wire value.
    pub fn from_code(code: i8) -> Result<Self, DecodeError> {
        match code {
            0 => Ok(IsolationLevel::ReadUncommitted),
            1 => Ok(IsolationLevel::ReadCommitted),
            v => Err(DecodeError::InvalidValue {
                what: "isolation level",
                value: v as i64,
            }),
        }
    }
}

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the consumer knows (v9+), -1 if none: a stale one is fenced.
    pub current_leader_epoch: i32,
    /// The offset to fetch from.
    pub fetch_offset: i64,
    /// Epoch of the last fetched record (v12+), -1 if none: lets the leader detect a diverged
    /// log.
    pub last_fetched_epoch: i32,
    /// Followers only (v5+): -1.
    pub log_start_offset: i64,
    /// At most this many bytes for the partition (`max.partition.fetch.bytes`); at least one
    /// batch is returned even if larger.
    pub partition_max_bytes: i32,
}

/// One topic to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTopic {
    /// Name (sent up to v12).
    pub topic: String,
    /// Id (sent from v13).
    pub topic_id: Uuid,
    /// Partitions.
    pub partitions: Vec<FetchPartition>,
}

/// Partitions an incremental fetch session should drop (v7+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgottenTopic {
    /// Name (up to v12).
    pub topic: String,
    /// Id (from v13).
    pub topic_id: Uuid,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// How long the broker may wait for `min_bytes` (`fetch.max.wait.ms`).
    pub max_wait_ms: i32,
    /// Answer as soon as this many bytes are there (`fetch.min.bytes`).
    pub min_bytes: i32,
    /// Response size limit (`fetch.max.bytes`); at least one batch is returned even if larger.
    pub max_bytes: i32,
    /// `isolation.level`.
    pub isolation_level: IsolationLevel,
    /// Fetch session id (v7+): 0 for none or a new one.
    pub session_id: i32,
    /// Fetch session epoch (v7+): [`SESSIONLESS_EPOCH`] for no session, 0 to create one.
    pub session_epoch: i32,
    /// Topics and partitions.
    pub topics: Vec<FetchTopic>,
    /// In an incremental session, the partitions to remove from it (v7+).
    pub forgotten_topics_data: Vec<ForgottenTopic>,
    /// `client.rack` (v11+), so the leader can name a preferred read replica (KIP-392).
    pub rack_id: String,
}

impl Default for FetchRequest {
    /// The Java consumer's defaults, sessionless, no topics.
    fn default() -> Self {
        Self {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 52_428_800,
            isolation_level: IsolationLevel::ReadUncommitted,
            session_id: 0,
            session_epoch: SESSIONLESS_EPOCH,
            topics: Vec::new(),
            forgotten_topics_data: Vec::new(),
            rack_id: String::new(),
        }
    }
}

impl FetchRequest {
    /// The highest version this request can be sent in: 12 if a topic's id is unknown (nil),
    /// [`Self::MAX_VERSION`] otherwise. Negotiate with
    /// `VersionRange { min: FetchRequest::MIN_VERSION, max: request.max_version() }`.
    pub fn max_version(&self) -> i16 {
        let ids_known = self.topics.iter().all(|t| t.topic_id != Uuid::default())
            && self
                .forgotten_topics_data
                .iter()
                .all(|t| t.topic_id != Uuid::default());
        if ids_known { Self::MAX_VERSION } else { 12 }
    }

    /// Whether `version` names topics by id rather than by name.
    pub fn uses_topic_ids(version: i16) -> bool {
        version >= 13
    }
}

fn put_topic_ref(out: &mut Vec<u8>, version: i16, name: &str, id: &Uuid, flexible: bool) {
    if FetchRequest::uses_topic_ids(version) {
        id.write(out);
    } else {
        out.put_string(name, flexible);
    }
}

fn read_topic_ref(
    r: &mut Reader<'_>,
    version: i16,
    flexible: bool,
) -> Result<(String, Uuid), DecodeError> {
    if FetchRequest::uses_topic_ids(version) {
        Ok((String::new(), Uuid::read(r)?))
    } else {
        Ok((r.string(flexible)?, Uuid::default()))
    }
}

/// The smallest encoding of a topic name or id, for bounding counts.
fn topic_ref_min(version: i16, flexible: bool) -> usize {
    if FetchRequest::uses_topic_ids(version) {
        16
    } else if flexible {
        1
    } else {
        2
    }
}

impl Request for FetchRequest {
    const API_KEY: ApiKey = ApiKey::Fetch;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 17;
    const FLEXIBLE_FROM: i16 = 12;
    type Response = FetchResponse;
    const CLIENT_THROTTLES_FROM: i16 = 8;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        if version <= 14 {
            (-1i32).write(out); // replica id: a consumer
        }
        self.max_wait_ms.write(out);
        self.min_bytes.write(out);
        self.max_bytes.write(out);
        self.isolation_level.code().write(out);
        if version >= 7 {
            self.session_id.write(out);
            self.session_epoch.write(out);
        }
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            put_topic_ref(out, version, &t.topic, &t.topic_id, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition.write(out);
                if version >= 9 {
                    p.current_leader_epoch.write(out);
                }
                p.fetch_offset.write(out);
                if version >= 12 {
                    p.last_fetched_epoch.write(out);
                }
                if version >= 5 {
                    p.log_start_offset.write(out);
                }
                p.partition_max_bytes.write(out);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        if version >= 7 {
            out.put_length(Some(self.forgotten_topics_data.len()), flexible);
            for t in &self.forgotten_topics_data {
                put_topic_ref(out, version, &t.topic, &t.topic_id, flexible);
                out.put_length(Some(t.partitions.len()), flexible);
                for p in &t.partitions {
                    p.write(out);
                }
                out.put_empty_tagged_fields(flexible);
            }
        }
        if version >= 11 {
            out.put_string(&self.rack_id, flexible);
        }
        // Tags 0 (cluster id) and 1 (replica state) are for brokers.
        out.put_empty_tagged_fields(flexible);
    }
}

impl FetchRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        if version <= 14 {
            i32::read(r)?;
        }
        let max_wait_ms = i32::read(r)?;
        let min_bytes = i32::read(r)?;
        let max_bytes = i32::read(r)?;
        let isolation_level = IsolationLevel::from_code(i8::read(r)?)?;
        let (session_id, session_epoch) = if version >= 7 {
            (i32::read(r)?, i32::read(r)?)
        } else {
            (0, SESSIONLESS_EPOCH)
        };
        let tmin = topic_ref_min(version, flexible);
        let topics = r.array_of(flexible, tmin + 1, |r| {
            let (topic, topic_id) = read_topic_ref(r, version, flexible)?;
            let partitions = r.array_of(flexible, 16, |r| {
                let partition = i32::read(r)?;
                let current_leader_epoch = if version >= 9 { i32::read(r)? } else { -1 };
                let fetch_offset = i64::read(r)?;
                let last_fetched_epoch = if version >= 12 { i32::read(r)? } else { -1 };
                let p = FetchPartition {
                    partition,
                    current_leader_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    log_start_offset: if version >= 5 { i64::read(r)? } else { -1 },
                    partition_max_bytes: i32::read(r)?,
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(FetchTopic {
                topic,
                topic_id,
                partitions,
            })
        })?;
        let forgotten_topics_data = if version >= 7 {
            r.array_of(flexible, tmin + 1, |r| {
                let (topic, topic_id) = read_topic_ref(r, version, flexible)?;
                let partitions = r.array_of(flexible, 4, i32::read)?;
                r.skip_tagged_fields(flexible)?;
                Ok(ForgottenTopic {
                    topic,
                    topic_id,
                    partitions,
                })
            })?
        } else {
            Vec::new()
        };
        let rack_id = if version >= 11 {
            r.string(flexible)?
        } else {
            String::new()
        };
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
            topics,
            forgotten_topics_data,
            rack_id,
        })
    }
}

/// A transaction aborted within the fetched range (read_committed): its records from
/// `first_offset` on, by `producer_id`, up to its abort marker, are to be skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer.
    pub producer_id: i64,
    /// Its first offset.
    pub first_offset: i64,
}

/// Where the leader's log diverges from what the fetcher has (v12+, tagged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// The largest epoch both logs share.
    pub epoch: i32,
    /// Its end offset: records from here on diverge.
    pub end_offset: i64,
}

/// The current leader, returned with leadership errors (v12+, tagged, KIP-951).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderIdAndEpoch {
    /// Broker id, -1 if unknown.
    pub leader_id: i32,
    /// Its epoch, -1 if unknown.
    pub leader_epoch: i32,
}

/// One partition's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionData {
    /// Partition index.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset, -1 if unknown.
    pub last_stable_offset: i64,
    /// Log start offset (v5+), -1 if unknown.
    pub log_start_offset: i64,
    /// Diverging epoch (v12+, tagged).
    pub diverging_epoch: Option<EpochEndOffset>,
    /// The current leader on a leadership error (v12+, tagged).
    pub current_leader: Option<LeaderIdAndEpoch>,
    /// Aborted transactions in the range (read_committed); null when none were asked for.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// The replica to fetch from next (v11+), -1 for the leader.
    pub preferred_read_replica: i32,
    /// Record batches, raw; the last one may be cut short. The decoded records' keys and
    /// values are slices of it.
    pub records: Option<Bytes>,
}

/// One topic's partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchableTopicResponse {
    /// Name (up to v12).
    pub topic: String,
    /// Id (from v13).
    pub topic_id: Uuid,
    /// Partitions.
    pub partitions: Vec<FetchPartitionData>,
}

/// A broker's endpoint, for the leaders named in partitions' `current_leader` (v16+, tagged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    /// Broker id.
    pub node_id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack.
    pub rack: Option<String>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Top-level error (v7+), e.g. a fetch session error.
    pub error_code: ErrorCode,
    /// The fetch session (v7+), 0 for none.
    pub session_id: i32,
    /// Per topic.
    pub responses: Vec<FetchableTopicResponse>,
    /// Endpoints of new leaders (v16+, tagged).
    pub node_endpoints: Vec<NodeEndpoint>,
}

/// Runs `f` on a tagged field's bytes, which it must consume entirely.
fn read_tagged<T>(
    bytes: &[u8],
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut t = Reader::new(bytes);
    let v = f(&mut t)?;
    t.expect_end()?;
    Ok(v)
}

impl Response for FetchResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = FetchRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let (error_code, session_id) = if version >= 7 {
            (ErrorCode::from_i16(i16::read(r)?), i32::read(r)?)
        } else {
            (ErrorCode::None, 0)
        };
        let tmin = topic_ref_min(version, flexible);
        let responses = r.array_of(flexible, tmin + 1, |r| {
            let (topic, topic_id) = read_topic_ref(r, version, flexible)?;
            // index, error, high watermark, last stable offset, and the two length prefixes.
            let pmin = 4 + 2 + 8 + 8 + if flexible { 2 } else { 8 };
            let partitions = r.array_of(flexible, pmin, |r| {
                let partition_index = i32::read(r)?;
                let error_code = ErrorCode::from_i16(i16::read(r)?);
                let high_watermark = i64::read(r)?;
                let last_stable_offset = i64::read(r)?;
                let log_start_offset = if version >= 5 { i64::read(r)? } else { -1 };
                let aborted_transactions = match r.length(flexible)? {
                    None => None,
                    Some(n) => {
                        let n = r.bounded_count(n, 16)?;
                        let mut v = Vec::with_capacity(n);
                        for _ in 0..n {
                            v.push(AbortedTransaction {
                                producer_id: i64::read(r)?,
                                first_offset: i64::read(r)?,
                            });
                            r.skip_tagged_fields(flexible)?;
                        }
                        Some(v)
                    }
                };
                let preferred_read_replica = if version >= 11 { i32::read(r)? } else { -1 };
                let records = r
                    .nullable_bytes(flexible)?
                    .map(|b| shared_buffer(b.to_vec()));
                let mut diverging_epoch = None;
                let mut current_leader = None;
                if flexible {
                    for (tag, bytes) in r.tagged_fields()? {
                        match tag {
                            0 => {
                                diverging_epoch = Some(read_tagged(bytes, |t| {
                                    let e = EpochEndOffset {
                                        epoch: i32::read(t)?,
                                        end_offset: i64::read(t)?,
                                    };
                                    t.skip_tagged_fields(true)?;
                                    Ok(e)
                                })?)
                            }
                            1 => {
                                current_leader = Some(read_tagged(bytes, |t| {
                                    let l = LeaderIdAndEpoch {
                                        leader_id: i32::read(t)?,
                                        leader_epoch: i32::read(t)?,
                                    };
                                    t.skip_tagged_fields(true)?;
                                    Ok(l)
                                })?)
                            }
                            // 2: snapshot id, for KRaft followers.
                            _ => {}
                        }
                    }
                }
                Ok(FetchPartitionData {
                    partition_index,
                    error_code,
                    high_watermark,
                    last_stable_offset,
                    log_start_offset,
                    diverging_epoch,
                    current_leader,
                    aborted_transactions,
                    preferred_read_replica,
                    records,
                })
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(FetchableTopicResponse {
                topic,
                topic_id,
                partitions,
            })
        })?;
        let mut node_endpoints = Vec::new();
        if flexible {
            for (tag, bytes) in r.tagged_fields()? {
                if tag == 0 && version >= 16 {
                    node_endpoints = read_tagged(bytes, |t| {
                        t.array_of(true, 10, |t| {
                            let e = NodeEndpoint {
                                node_id: i32::read(t)?,
                                host: t.string(true)?,
                                port: i32::read(t)?,
                                rack: t.nullable_string(true)?,
                            };
                            t.skip_tagged_fields(true)?;
                            Ok(e)
                        })
                    })?;
                }
            }
        }
        Ok(Self {
            throttle_time_ms,
            error_code,
            session_id,
            responses,
            node_endpoints,
        })
    }
}

impl FetchResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = FetchRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        if version >= 7 {
            self.error_code.code().write(out);
            self.session_id.write(out);
        }
        out.put_length(Some(self.responses.len()), flexible);
        for t in &self.responses {
            put_topic_ref(out, version, &t.topic, &t.topic_id, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition_index.write(out);
                p.error_code.code().write(out);
                p.high_watermark.write(out);
                p.last_stable_offset.write(out);
                if version >= 5 {
                    p.log_start_offset.write(out);
                }
                out.put_length(p.aborted_transactions.as_ref().map(Vec::len), flexible);
                for a in p.aborted_transactions.iter().flatten() {
                    a.producer_id.write(out);
                    a.first_offset.write(out);
                    out.put_empty_tagged_fields(flexible);
                }
                if version >= 11 {
                    p.preferred_read_replica.write(out);
                }
                out.put_nullable_bytes(p.records.as_deref(), flexible);
                if flexible {
                    let mut tags = Vec::new();
                    if let Some(e) = p.diverging_epoch {
                        let mut v = Vec::new();
                        e.epoch.write(&mut v);
                        e.end_offset.write(&mut v);
                        v.put_empty_tagged_fields(true);
                        tags.push((0, v));
                    }
                    if let Some(l) = p.current_leader {
                        let mut v = Vec::new();
                        l.leader_id.write(&mut v);
                        l.leader_epoch.write(&mut v);
                        v.put_empty_tagged_fields(true);
                        tags.push((1, v));
                    }
                    out.put_tagged_fields(&tags);
                }
            }
            out.put_empty_tagged_fields(flexible);
        }
        if flexible {
            if version >= 16 && !self.node_endpoints.is_empty() {
                let mut v = Vec::new();
                v.put_length(Some(self.node_endpoints.len()), true);
                for e in &self.node_endpoints {
                    e.node_id.write(&mut v);
                    v.put_string(&e.host, true);
                    e.port.write(&mut v);
                    v.put_nullable_string(e.rack.as_deref(), true);
                    v.put_empty_tagged_fields(true);
                }
                out.put_tagged_fields(&[(0, v)]);
            } else {
                out.put_empty_tagged_fields(true);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use crate::protocol::primitives::UnsignedVarint;
    use proptest::prelude::*;

    const ID: Uuid = Uuid([9; 16]);

    pub(crate) fn sample_request(version: i16) -> FetchRequest {
        let ids = FetchRequest::uses_topic_ids(version);
        FetchRequest {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: IsolationLevel::ReadCommitted,
            session_id: if version >= 7 { 12 } else { 0 },
            session_epoch: if version >= 7 { 3 } else { SESSIONLESS_EPOCH },
            topics: vec![FetchTopic {
                topic: if ids { String::new() } else { "t".into() },
                topic_id: if ids { ID } else { Uuid::default() },
                partitions: vec![FetchPartition {
                    partition: 2,
                    current_leader_epoch: if version >= 9 { 5 } else { -1 },
                    fetch_offset: 1234,
                    last_fetched_epoch: if version >= 12 { 4 } else { -1 },
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                }],
            }],
            forgotten_topics_data: if version >= 7 {
                vec![ForgottenTopic {
                    topic: if ids { String::new() } else { "old".into() },
                    topic_id: if ids { ID } else { Uuid::default() },
                    partitions: vec![0, 1],
                }]
            } else {
                vec![]
            },
            rack_id: if version >= 11 {
                "r1".into()
            } else {
                String::new()
            },
        }
    }

    pub(crate) fn sample(version: i16) -> FetchResponse {
        let ids = FetchRequest::uses_topic_ids(version);
        let flexible = version >= 12;
        FetchResponse {
            throttle_time_ms: 1,
            error_code: ErrorCode::None,
            session_id: if version >= 7 { 77 } else { 0 },
            responses: vec![FetchableTopicResponse {
                topic: if ids { String::new() } else { "t".into() },
                topic_id: if ids { ID } else { Uuid::default() },
                partitions: vec![
                    FetchPartitionData {
                        partition_index: 0,
                        error_code: ErrorCode::None,
                        high_watermark: 100,
                        last_stable_offset: 90,
                        log_start_offset: if version >= 5 { 0 } else { -1 },
                        diverging_epoch: flexible.then_some(EpochEndOffset {
                            epoch: 3,
                            end_offset: 50,
                        }),
                        current_leader: None,
                        aborted_transactions: Some(vec![AbortedTransaction {
                            producer_id: 7,
                            first_offset: 60,
                        }]),
                        preferred_read_replica: if version >= 11 { 2 } else { -1 },
                        records: Some(Bytes::from_static(&[1, 2, 3, 4, 5])),
                    },
                    FetchPartitionData {
                        partition_index: 1,
                        error_code: ErrorCode::NotLeaderOrFollower,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        diverging_epoch: None,
                        current_leader: flexible.then_some(LeaderIdAndEpoch {
                            leader_id: 3,
                            leader_epoch: 9,
                        }),
                        aborted_transactions: None,
                        preferred_read_replica: -1,
                        records: None,
                    },
                ],
            }],
            node_endpoints: if version >= 16 {
                vec![NodeEndpoint {
                    node_id: 3,
                    host: "127.0.0.1".into(),
                    port: 9094,
                    rack: None,
                }]
            } else {
                vec![]
            },
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample(version).encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION {
            let req = sample_request(v);
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(FetchRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let resp = sample(v);
            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(FetchResponse::decode(&mut r, v).unwrap(), resp, "v{v}");
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| FetchResponse::decode(r, v));
        }
    }

    #[test]
    fn topic_ids_decide_the_version() {
        let mut req = sample_request(13);
        assert_eq!(req.max_version(), FetchRequest::MAX_VERSION);
        req.topics[0].topic_id = Uuid::default();
        assert_eq!(req.max_version(), 12);
        let req = FetchRequest::default();
        assert_eq!((req.session_id, req.session_epoch), (0, SESSIONLESS_EPOCH));
        assert_eq!(req.max_version(), FetchRequest::MAX_VERSION);
    }

    #[test]
    fn unknown_tags_are_skipped() {
        // A v12 partition with an unknown tag 7 and a snapshot id (tag 2) decodes.
        let mut buf = Vec::new();
        0i32.write(&mut buf); // throttle
        0i16.write(&mut buf);
        0i32.write(&mut buf); // session
        buf.put_length(Some(1), true);
        buf.put_string("t", true);
        buf.put_length(Some(1), true);
        0i32.write(&mut buf);
        0i16.write(&mut buf);
        5i64.write(&mut buf);
        5i64.write(&mut buf);
        0i64.write(&mut buf);
        buf.put_length(None, true);
        (-1i32).write(&mut buf);
        buf.put_nullable_bytes(Some(&[]), true);
        buf.put_tagged_fields(&[(2, vec![0; 13]), (7, vec![1, 2])]);
        buf.put_empty_tagged_fields(true);
        UnsignedVarint(0).write(&mut buf);
        let resp = FetchResponse::decode(&mut Reader::new(&buf), 12).unwrap();
        assert_eq!(resp.responses[0].partitions[0].high_watermark, 5);
        assert_eq!(
            resp.responses[0].partitions[0].records.as_deref(),
            Some(&[][..])
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), v in 4i16..=17) {
            let _ = FetchResponse::decode(&mut Reader::new(&bytes), v);
            let _ = FetchRequest::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 4i16..=17, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = FetchResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
