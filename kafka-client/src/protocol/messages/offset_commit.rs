//! OffsetCommit (key 8): stores a group's consumed positions (the offset of the next record to
//! read) with the group coordinator.
//!
//! Versions 7-9: 7 brings `group.instance.id` (and 6 the leader epoch, 5 dropped the retention
//! time); flexible from 8; 9 is 8 for the new group protocol. 10 (Kafka 4.1) names topics by id
//! only; names serve every Kafka 4 broker, so the consumer need not track ids for commits.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// One partition's position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequestPartition {
    /// Partition index.
    pub partition_index: i32,
    /// The offset of the next record to consume.
    pub committed_offset: i64,
    /// The leader epoch of the last consumed record, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Free-form metadata.
    pub committed_metadata: Option<String>,
}

/// One topic's positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequestTopic {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetCommitRequestPartition>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    /// `group.id`.
    pub group_id: String,
    /// The generation of the member, or -1 for a consumer outside a group (`assign`).
    pub generation_id_or_member_epoch: i32,
    /// The member id, or empty outside a group.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// Positions.
    pub topics: Vec<OffsetCommitRequestTopic>,
}

impl Request for OffsetCommitRequest {
    const API_KEY: ApiKey = ApiKey::OffsetCommit;
    const MIN_VERSION: i16 = 7;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 8;
    type Response = OffsetCommitResponse;
    const CLIENT_THROTTLES_FROM: i16 = 4;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.group_id, flexible);
        self.generation_id_or_member_epoch.write(out);
        out.put_string(&self.member_id, flexible);
        out.put_nullable_string(self.group_instance_id.as_deref(), flexible);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition_index.write(out);
                p.committed_offset.write(out);
                p.committed_leader_epoch.write(out);
                out.put_nullable_string(p.committed_metadata.as_deref(), flexible);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl OffsetCommitRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let group_id = r.string(flexible)?;
        let generation_id_or_member_epoch = i32::read(r)?;
        let member_id = r.string(flexible)?;
        let group_instance_id = r.nullable_string(flexible)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 17, |r| {
                let p = OffsetCommitRequestPartition {
                    partition_index: i32::read(r)?,
                    committed_offset: i64::read(r)?,
                    committed_leader_epoch: i32::read(r)?,
                    committed_metadata: r.nullable_string(flexible)?,
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(OffsetCommitRequestTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            group_id,
            generation_id_or_member_epoch,
            member_id,
            group_instance_id,
            topics,
        })
    }
}

/// One partition's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetCommitResponsePartition {
    /// Partition index.
    pub partition_index: i32,
    /// Error, e.g. `ILLEGAL_GENERATION` or `REBALANCE_IN_PROGRESS` when the group moved on.
    pub error_code: ErrorCode,
}

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitResponseTopic {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetCommitResponsePartition>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<OffsetCommitResponseTopic>,
}

impl Response for OffsetCommitResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = OffsetCommitRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 6, |r| {
                let p = OffsetCommitResponsePartition {
                    partition_index: i32::read(r)?,
                    error_code: ErrorCode::from_i16(i16::read(r)?),
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(OffsetCommitResponseTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl OffsetCommitResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = OffsetCommitRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition_index.write(out);
                p.error_code.code().write(out);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    fn sample() -> OffsetCommitResponse {
        OffsetCommitResponse {
            throttle_time_ms: 0,
            topics: vec![OffsetCommitResponseTopic {
                name: "t".into(),
                partitions: vec![
                    OffsetCommitResponsePartition {
                        partition_index: 0,
                        error_code: ErrorCode::None,
                    },
                    OffsetCommitResponsePartition {
                        partition_index: 1,
                        error_code: ErrorCode::IllegalGeneration,
                    },
                ],
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
        for v in OffsetCommitRequest::MIN_VERSION..=OffsetCommitRequest::MAX_VERSION {
            let req = OffsetCommitRequest {
                group_id: "g".into(),
                generation_id_or_member_epoch: 3,
                member_id: "m-1".into(),
                group_instance_id: Some("i-1".into()),
                topics: vec![OffsetCommitRequestTopic {
                    name: "t".into(),
                    partitions: vec![
                        OffsetCommitRequestPartition {
                            partition_index: 0,
                            committed_offset: 100,
                            committed_leader_epoch: 2,
                            committed_metadata: None,
                        },
                        OffsetCommitRequestPartition {
                            partition_index: 1,
                            committed_offset: 0,
                            committed_leader_epoch: -1,
                            committed_metadata: Some(String::new()),
                        },
                    ],
                }],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(OffsetCommitRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                OffsetCommitResponse::decode(&mut r, v).unwrap(),
                sample(),
                "v{v}"
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| OffsetCommitResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128), v in 7i16..=9) {
            let _ = OffsetCommitResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 7i16..=9, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = OffsetCommitResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
