//! ListOffsets (key 2): the offset of a partition at a timestamp, or its earliest or latest
//! offset (`auto.offset.reset`, `seek_to_beginning`/`seek_to_end`, `offsets_for_times`).
//!
//! Versions 2-10: 2 adds the isolation level (`isolation.level=read_committed` needs it; Kafka 4
//! removed 0); flexible from 6; 10 adds a timeout. 11 only allows a new tiered-storage timestamp.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

use super::fetch::IsolationLevel;

/// The timestamp that asks for the latest offset (the high watermark, or the last stable
/// offset for read_committed).
pub const LATEST_TIMESTAMP: i64 = -1;
/// The timestamp that asks for the earliest offset (the log start offset).
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// The timestamp that asks for the offset of the record with the largest timestamp (v7+).
pub const MAX_TIMESTAMP: i64 = -3;

/// One partition to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartition {
    /// Partition index.
    pub partition_index: i32,
    /// The leader epoch the consumer knows (v4+), -1 if none.
    pub current_leader_epoch: i32,
    /// A timestamp in ms, or [`LATEST_TIMESTAMP`], [`EARLIEST_TIMESTAMP`], [`MAX_TIMESTAMP`].
    pub timestamp: i64,
}

/// One topic to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsTopic {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartition>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    /// `isolation.level`: read_committed answers "latest" with the last stable offset.
    pub isolation_level: IsolationLevel,
    /// Topics.
    pub topics: Vec<ListOffsetsTopic>,
    /// How long the broker may wait for offsets from remote storage (v10+).
    pub timeout_ms: i32,
}

impl Request for ListOffsetsRequest {
    const API_KEY: ApiKey = ApiKey::ListOffsets;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 10;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = ListOffsetsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 3;

    /// [`MAX_TIMESTAMP`] needs v7: an older broker would read it as a timestamp.
    fn min_version(&self) -> i16 {
        let max_timestamp = self
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.timestamp == MAX_TIMESTAMP);
        if max_timestamp { 7 } else { Self::MIN_VERSION }
    }

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        (-1i32).write(out); // replica id: a consumer
        self.isolation_level.code().write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition_index.write(out);
                if version >= 4 {
                    p.current_leader_epoch.write(out);
                }
                p.timestamp.write(out);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        if version >= 10 {
            self.timeout_ms.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl ListOffsetsRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        i32::read(r)?;
        let isolation_level = IsolationLevel::from_code(i8::read(r)?)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 12, |r| {
                let partition_index = i32::read(r)?;
                let current_leader_epoch = if version >= 4 { i32::read(r)? } else { -1 };
                let p = ListOffsetsPartition {
                    partition_index,
                    current_leader_epoch,
                    timestamp: i64::read(r)?,
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(ListOffsetsTopic { name, partitions })
        })?;
        let timeout_ms = if version >= 10 { i32::read(r)? } else { 0 };
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            isolation_level,
            topics,
            timeout_ms,
        })
    }
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartitionResponse {
    /// Partition index.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// The timestamp of the offset found, -1 for earliest/latest.
    pub timestamp: i64,
    /// The offset, -1 if there is none (no record at or after the timestamp).
    pub offset: i64,
    /// Its leader epoch (v4+), -1 if unknown.
    pub leader_epoch: i32,
}

/// One topic's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsTopicResponse {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartitionResponse>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<ListOffsetsTopicResponse>,
}

impl Response for ListOffsetsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = ListOffsetsRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 22, |r| {
                let partition_index = i32::read(r)?;
                let error_code = ErrorCode::from_i16(i16::read(r)?);
                let timestamp = i64::read(r)?;
                let offset = i64::read(r)?;
                let leader_epoch = if version >= 4 { i32::read(r)? } else { -1 };
                r.skip_tagged_fields(flexible)?;
                Ok(ListOffsetsPartitionResponse {
                    partition_index,
                    error_code,
                    timestamp,
                    offset,
                    leader_epoch,
                })
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(ListOffsetsTopicResponse { name, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl ListOffsetsResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = ListOffsetsRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition_index.write(out);
                p.error_code.code().write(out);
                p.timestamp.write(out);
                p.offset.write(out);
                if version >= 4 {
                    p.leader_epoch.write(out);
                }
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    #[test]
    fn max_timestamp_needs_v7_and_an_older_broker_is_refused_at_negotiation() {
        use crate::protocol::api::{ApiVersionsTable, VersionRange};
        let req = |timestamp| ListOffsetsRequest {
            isolation_level: IsolationLevel::ReadUncommitted,
            topics: vec![ListOffsetsTopic {
                name: "t".into(),
                partitions: vec![
                    ListOffsetsPartition {
                        partition_index: 0,
                        current_leader_epoch: -1,
                        timestamp: EARLIEST_TIMESTAMP,
                    },
                    ListOffsetsPartition {
                        partition_index: 1,
                        current_leader_epoch: -1,
                        timestamp,
                    },
                ],
            }],
            timeout_ms: 0,
        };
        assert_eq!(req(LATEST_TIMESTAMP).min_version(), 2);
        assert_eq!(req(1_700_000_000_000).min_version(), 2);
        assert_eq!(req(MAX_TIMESTAMP).min_version(), 7);
        let old = ApiVersionsTable::new([(2, VersionRange { min: 1, max: 6 })]);
        let wanted = |r: &ListOffsetsRequest| VersionRange {
            min: r.min_version(),
            max: ListOffsetsRequest::MAX_VERSION,
        };
        assert_eq!(
            old.negotiate(ApiKey::ListOffsets, wanted(&req(LATEST_TIMESTAMP))),
            Ok(6)
        );
        assert!(
            old.negotiate(ApiKey::ListOffsets, wanted(&req(MAX_TIMESTAMP)))
                .is_err()
        );
    }

    pub(crate) fn sample(version: i16) -> ListOffsetsResponse {
        ListOffsetsResponse {
            throttle_time_ms: 0,
            topics: vec![ListOffsetsTopicResponse {
                name: "t".into(),
                partitions: vec![
                    ListOffsetsPartitionResponse {
                        partition_index: 0,
                        error_code: ErrorCode::None,
                        timestamp: -1,
                        offset: 42,
                        leader_epoch: if version >= 4 { 3 } else { -1 },
                    },
                    ListOffsetsPartitionResponse {
                        partition_index: 1,
                        error_code: ErrorCode::NotLeaderOrFollower,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                    },
                ],
            }],
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample(version).encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in ListOffsetsRequest::MIN_VERSION..=ListOffsetsRequest::MAX_VERSION {
            let req = ListOffsetsRequest {
                isolation_level: IsolationLevel::ReadCommitted,
                topics: vec![ListOffsetsTopic {
                    name: "t".into(),
                    partitions: vec![
                        ListOffsetsPartition {
                            partition_index: 0,
                            current_leader_epoch: if v >= 4 { 3 } else { -1 },
                            timestamp: EARLIEST_TIMESTAMP,
                        },
                        ListOffsetsPartition {
                            partition_index: 1,
                            current_leader_epoch: -1,
                            timestamp: 1_700_000_000_000,
                        },
                    ],
                }],
                timeout_ms: if v >= 10 { 30_000 } else { 0 },
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(ListOffsetsRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                ListOffsetsResponse::decode(&mut r, v).unwrap(),
                sample(v),
                "v{v}"
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| ListOffsetsResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 2i16..=10) {
            let _ = ListOffsetsResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 2i16..=10, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = ListOffsetsResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
