//! OffsetForLeaderEpoch (key 23): where a leader epoch ends in a partition's log, as its
//! current leader knows it. The consumer asks after a leader change (KIP-320): if the epoch of
//! its position ends before the position, the log was truncated under it (an unclean leader
//! election) and the records it would fetch next are not the ones it was about to read.
//!
//! Versions 2-4 (Kafka 4 removed 0 and 1): 2 adds the current leader epoch, 3 the replica id,
//! flexible from 4.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The replica id a consumer sends.
const CONSUMER_REPLICA_ID: i32 = -1;

/// One partition to ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForLeaderPartition {
    /// Partition index.
    pub partition: i32,
    /// The leader epoch the client knows, to fence a stale leader (-1: none).
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is wanted.
    pub leader_epoch: i32,
}

/// One topic to ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForLeaderTopic {
    /// Name.
    pub topic: String,
    /// Partitions.
    pub partitions: Vec<OffsetForLeaderPartition>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetForLeaderEpochRequest {
    /// Topics.
    pub topics: Vec<OffsetForLeaderTopic>,
}

impl Request for OffsetForLeaderEpochRequest {
    const API_KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = OffsetForLeaderEpochResponse;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        if version >= 3 {
            CONSUMER_REPLICA_ID.write(out);
        }
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.topic, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.partition.write(out);
                p.current_leader_epoch.write(out);
                p.leader_epoch.write(out);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl OffsetForLeaderEpochRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        if version >= 3 {
            i32::read(r)?;
        }
        let topics = r.array_of(flexible, 2, |r| {
            let topic = r.string(flexible)?;
            let partitions = r.array_of(flexible, 12, |r| {
                let p = OffsetForLeaderPartition {
                    partition: i32::read(r)?,
                    current_leader_epoch: i32::read(r)?,
                    leader_epoch: i32::read(r)?,
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(OffsetForLeaderTopic { topic, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self { topics })
    }
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// Error.
    pub error_code: ErrorCode,
    /// Partition index.
    pub partition: i32,
    /// The largest epoch at or below the one asked for that the log has (-1: none).
    pub leader_epoch: i32,
    /// Where that epoch ends: the first offset of the next epoch, or the log end offset for
    /// the latest (-1: unknown).
    pub end_offset: i64,
}

/// One topic's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForLeaderTopicResult {
    /// Name.
    pub topic: String,
    /// Partitions.
    pub partitions: Vec<EpochEndOffset>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForLeaderEpochResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<OffsetForLeaderTopicResult>,
}

impl Response for OffsetForLeaderEpochResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = OffsetForLeaderEpochRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(flexible, 2, |r| {
            let topic = r.string(flexible)?;
            let partitions = r.array_of(flexible, 18, |r| {
                let p = EpochEndOffset {
                    error_code: ErrorCode::from_i16(i16::read(r)?),
                    partition: i32::read(r)?,
                    leader_epoch: i32::read(r)?,
                    end_offset: i64::read(r)?,
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(OffsetForLeaderTopicResult { topic, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl OffsetForLeaderEpochResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = OffsetForLeaderEpochRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.topic, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.error_code.code().write(out);
                p.partition.write(out);
                p.leader_epoch.write(out);
                p.end_offset.write(out);
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

    fn sample() -> OffsetForLeaderEpochResponse {
        OffsetForLeaderEpochResponse {
            throttle_time_ms: 5,
            topics: vec![OffsetForLeaderTopicResult {
                topic: "t".into(),
                partitions: vec![
                    EpochEndOffset {
                        error_code: ErrorCode::None,
                        partition: 0,
                        leader_epoch: 3,
                        end_offset: 42,
                    },
                    EpochEndOffset {
                        error_code: ErrorCode::FencedLeaderEpoch,
                        partition: 1,
                        leader_epoch: -1,
                        end_offset: -1,
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
        for v in 2..=4 {
            let req = OffsetForLeaderEpochRequest {
                topics: vec![OffsetForLeaderTopic {
                    topic: "t".into(),
                    partitions: vec![OffsetForLeaderPartition {
                        partition: 2,
                        current_leader_epoch: 7,
                        leader_epoch: 5,
                    }],
                }],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(OffsetForLeaderEpochRequest::decode(&mut r, v).unwrap(), req);
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                OffsetForLeaderEpochResponse::decode(&mut r, v).unwrap(),
                sample()
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| OffsetForLeaderEpochResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 2i16..=4) {
            let _ = OffsetForLeaderEpochResponse::decode(&mut Reader::new(&bytes), v);
        }
    }
}
