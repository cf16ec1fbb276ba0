//! OffsetFetch (key 9): a group's committed positions, where a consumer resumes after joining
//! (and after a restore).
//!
//! Versions 8-9: the groups-array form (KIP-709, several groups per request; a consumer asks for
//! its own); all flexible; `require_stable` (since 7) makes the coordinator answer
//! `UNSTABLE_OFFSET_COMMIT` while a transactional commit is pending; 9 adds the member id and
//! epoch of the new group protocol (null and -1 for a classic group). 10 (Kafka 4.1) names
//! topics by id only; names serve every Kafka 4 broker.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequestTopics {
    /// Name.
    pub name: String,
    /// Partition indexes.
    pub partition_indexes: Vec<i32>,
}

/// One group's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequestGroup {
    /// `group.id`.
    pub group_id: String,
    /// Member id (v9+, new group protocol only): null for a classic group.
    pub member_id: Option<String>,
    /// Member epoch (v9+, new group protocol only): -1 for a classic group.
    pub member_epoch: i32,
    /// The partitions to fetch; null for all the group has.
    pub topics: Option<Vec<OffsetFetchRequestTopics>>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequest {
    /// Groups.
    pub groups: Vec<OffsetFetchRequestGroup>,
    /// Whether to wait for pending transactional commits (`UNSTABLE_OFFSET_COMMIT` meanwhile),
    /// as the Java consumer does with read_committed.
    pub require_stable: bool,
}

impl OffsetFetchRequest {
    /// A request for one classic group's committed offsets of `topics`.
    pub fn group(
        group_id: impl Into<String>,
        topics: Option<Vec<OffsetFetchRequestTopics>>,
        require_stable: bool,
    ) -> Self {
        Self {
            groups: vec![OffsetFetchRequestGroup {
                group_id: group_id.into(),
                member_id: None,
                member_epoch: -1,
                topics,
            }],
            require_stable,
        }
    }
}

impl Request for OffsetFetchRequest {
    const API_KEY: ApiKey = ApiKey::OffsetFetch;
    const MIN_VERSION: i16 = 8;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = OffsetFetchResponse;
    const CLIENT_THROTTLES_FROM: i16 = 4;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            out.put_string(&g.group_id, true);
            if version >= 9 {
                out.put_nullable_string(g.member_id.as_deref(), true);
                g.member_epoch.write(out);
            }
            out.put_length(g.topics.as_ref().map(Vec::len), true);
            for t in g.topics.iter().flatten() {
                out.put_string(&t.name, true);
                out.put_length(Some(t.partition_indexes.len()), true);
                for p in &t.partition_indexes {
                    p.write(out);
                }
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        self.require_stable.write(out);
        out.put_empty_tagged_fields(true);
    }
}

impl OffsetFetchRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let groups = r.array_of(true, 3, |r| {
            let group_id = r.string(true)?;
            let (member_id, member_epoch) = if version >= 9 {
                (r.nullable_string(true)?, i32::read(r)?)
            } else {
                (None, -1)
            };
            let topics = match r.length(true)? {
                None => None,
                Some(n) => {
                    let n = r.bounded_count(n, 3)?;
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        let name = r.string(true)?;
                        let partition_indexes = r.array_of(true, 4, i32::read)?;
                        r.skip_tagged_fields(true)?;
                        v.push(OffsetFetchRequestTopics {
                            name,
                            partition_indexes,
                        });
                    }
                    Some(v)
                }
            };
            r.skip_tagged_fields(true)?;
            Ok(OffsetFetchRequestGroup {
                group_id,
                member_id,
                member_epoch,
                topics,
            })
        })?;
        let require_stable = bool::read(r)?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            groups,
            require_stable,
        })
    }
}

/// A committed position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResponsePartitions {
    /// Partition index.
    pub partition_index: i32,
    /// The offset of the next record to consume, -1 if none is committed.
    pub committed_offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Metadata committed with it.
    pub metadata: Option<String>,
    /// Error, e.g. `UNSTABLE_OFFSET_COMMIT`.
    pub error_code: ErrorCode,
}

/// One topic's positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResponseTopics {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetFetchResponsePartitions>,
}

/// One group's positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResponseGroup {
    /// `group.id`.
    pub group_id: String,
    /// Topics.
    pub topics: Vec<OffsetFetchResponseTopics>,
    /// Group-level error, e.g. `NOT_COORDINATOR` or `COORDINATOR_LOAD_IN_PROGRESS`.
    pub error_code: ErrorCode,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per group.
    pub groups: Vec<OffsetFetchResponseGroup>,
}

impl Response for OffsetFetchResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let groups = r.array_of(true, 4, |r| {
            let group_id = r.string(true)?;
            let topics = r.array_of(true, 3, |r| {
                let name = r.string(true)?;
                let partitions = r.array_of(true, 20, |r| {
                    let p = OffsetFetchResponsePartitions {
                        partition_index: i32::read(r)?,
                        committed_offset: i64::read(r)?,
                        committed_leader_epoch: i32::read(r)?,
                        metadata: r.nullable_string(true)?,
                        error_code: ErrorCode::from_i16(i16::read(r)?),
                    };
                    r.skip_tagged_fields(true)?;
                    Ok(p)
                })?;
                r.skip_tagged_fields(true)?;
                Ok(OffsetFetchResponseTopics { name, partitions })
            })?;
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            r.skip_tagged_fields(true)?;
            Ok(OffsetFetchResponseGroup {
                group_id,
                topics,
                error_code,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            groups,
        })
    }
}

impl OffsetFetchResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            out.put_string(&g.group_id, true);
            out.put_length(Some(g.topics.len()), true);
            for t in &g.topics {
                out.put_string(&t.name, true);
                out.put_length(Some(t.partitions.len()), true);
                for p in &t.partitions {
                    p.partition_index.write(out);
                    p.committed_offset.write(out);
                    p.committed_leader_epoch.write(out);
                    out.put_nullable_string(p.metadata.as_deref(), true);
                    p.error_code.code().write(out);
                    out.put_empty_tagged_fields(true);
                }
                out.put_empty_tagged_fields(true);
            }
            g.error_code.code().write(out);
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    fn sample() -> OffsetFetchResponse {
        OffsetFetchResponse {
            throttle_time_ms: 0,
            groups: vec![OffsetFetchResponseGroup {
                group_id: "g".into(),
                topics: vec![OffsetFetchResponseTopics {
                    name: "t".into(),
                    partitions: vec![
                        OffsetFetchResponsePartitions {
                            partition_index: 0,
                            committed_offset: 100,
                            committed_leader_epoch: 2,
                            metadata: Some(String::new()),
                            error_code: ErrorCode::None,
                        },
                        OffsetFetchResponsePartitions {
                            partition_index: 1,
                            committed_offset: -1,
                            committed_leader_epoch: -1,
                            metadata: None,
                            error_code: ErrorCode::UnstableOffsetCommit,
                        },
                    ],
                }],
                error_code: ErrorCode::None,
            }],
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample().encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in OffsetFetchRequest::MIN_VERSION..=OffsetFetchRequest::MAX_VERSION {
            for topics in [
                None,
                Some(vec![OffsetFetchRequestTopics {
                    name: "t".into(),
                    partition_indexes: vec![0, 1, 2],
                }]),
            ] {
                let req = OffsetFetchRequest::group("g", topics, true);
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(OffsetFetchRequest::decode(&mut r, v).unwrap(), req, "v{v}");
                r.expect_end().unwrap();
            }

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                OffsetFetchResponse::decode(&mut r, v).unwrap(),
                sample(),
                "v{v}"
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| OffsetFetchResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128), v in 8i16..=9) {
            let _ = OffsetFetchResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 8i16..=9, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = OffsetFetchResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
