//! TxnOffsetCommit (key 28): a transactional producer stores a consumer group's offsets with
//! the group coordinator, as part of its open transaction (visible once the transaction
//! commits, dropped if it aborts).
//!
//! Versions 3-4: 3 brings the member id, generation and `group.instance.id` (KIP-447: the group
//! coordinator refuses offsets from a member that no longer owns its partitions, which fences
//! zombies without one `transactional.id` per input partition); 4 allows
//! `TRANSACTION_ABORTABLE`. Both are flexible.

use super::topic_errors::TopicPartitionErrors;
use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// One partition's offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitPartition {
    /// Partition index.
    pub partition_index: i32,
    /// The offset of the next record to consume.
    pub committed_offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Free-form metadata.
    pub committed_metadata: Option<String>,
}

/// One topic's offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitTopic {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<TxnOffsetCommitPartition>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitRequest {
    /// `transactional.id`.
    pub transactional_id: String,
    /// `group.id`.
    pub group_id: String,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The consumer's generation, -1 for none.
    pub generation_id: i32,
    /// The consumer's member id, empty for none.
    pub member_id: String,
    /// The consumer's `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// Offsets.
    pub topics: Vec<TxnOffsetCommitTopic>,
}

impl Request for TxnOffsetCommitRequest {
    const API_KEY: ApiKey = ApiKey::TxnOffsetCommit;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = TxnOffsetCommitResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_string(&self.transactional_id, true);
        out.put_string(&self.group_id, true);
        self.producer_id.write(out);
        self.producer_epoch.write(out);
        self.generation_id.write(out);
        out.put_string(&self.member_id, true);
        out.put_nullable_string(self.group_instance_id.as_deref(), true);
        out.put_length(Some(self.topics.len()), true);
        for t in &self.topics {
            out.put_string(&t.name, true);
            out.put_length(Some(t.partitions.len()), true);
            for p in &t.partitions {
                p.partition_index.write(out);
                p.committed_offset.write(out);
                p.committed_leader_epoch.write(out);
                out.put_nullable_string(p.committed_metadata.as_deref(), true);
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

impl TxnOffsetCommitRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let transactional_id = r.string(true)?;
        let group_id = r.string(true)?;
        let producer_id = i64::read(r)?;
        let producer_epoch = i16::read(r)?;
        let generation_id = i32::read(r)?;
        let member_id = r.string(true)?;
        let group_instance_id = r.nullable_string(true)?;
        let topics = r.array_of(true, 2, |r| {
            let name = r.string(true)?;
            let partitions = r.array_of(true, 18, |r| {
                let p = TxnOffsetCommitPartition {
                    partition_index: i32::read(r)?,
                    committed_offset: i64::read(r)?,
                    committed_leader_epoch: i32::read(r)?,
                    committed_metadata: r.nullable_string(true)?,
                };
                r.skip_tagged_fields(true)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(true)?;
            Ok(TxnOffsetCommitTopic { name, partitions })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            transactional_id,
            group_id,
            producer_id,
            producer_epoch,
            generation_id,
            member_id,
            group_instance_id,
            topics,
        })
    }
}

/// One topic's results.
pub type TxnOffsetCommitTopicResult = TopicPartitionErrors;

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<TxnOffsetCommitTopicResult>,
}

impl TxnOffsetCommitResponse {
    /// Every (topic, partition, error), in the response's order.
    pub fn results(&self) -> impl Iterator<Item = (&str, i32, ErrorCode)> {
        TopicPartitionErrors::flatten(&self.topics)
    }
}

impl Response for TxnOffsetCommitResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let topics = TopicPartitionErrors::read_array(r, true)?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl TxnOffsetCommitResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        TopicPartitionErrors::write_array(&self.topics, true, out);
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    fn sample() -> TxnOffsetCommitResponse {
        TxnOffsetCommitResponse {
            throttle_time_ms: 0,
            topics: vec![TxnOffsetCommitTopicResult {
                name: "in".into(),
                partitions: vec![(0, ErrorCode::None), (1, ErrorCode::UnknownMemberId)],
            }],
        }
    }

    fn encoded(v: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample().encode(v, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in TxnOffsetCommitRequest::MIN_VERSION..=TxnOffsetCommitRequest::MAX_VERSION {
            for group_instance_id in [None, Some("worker-1".to_owned())] {
                let req = TxnOffsetCommitRequest {
                    transactional_id: "svc-1".into(),
                    group_id: "readers".into(),
                    producer_id: 9,
                    producer_epoch: 2,
                    generation_id: 5,
                    member_id: "m-1".into(),
                    group_instance_id,
                    topics: vec![TxnOffsetCommitTopic {
                        name: "in".into(),
                        partitions: vec![TxnOffsetCommitPartition {
                            partition_index: 3,
                            committed_offset: 1234,
                            committed_leader_epoch: 7,
                            committed_metadata: None,
                        }],
                    }],
                };
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(TxnOffsetCommitRequest::decode(&mut r, v).unwrap(), req);
                r.expect_end().unwrap();
            }
            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            let resp = TxnOffsetCommitResponse::decode(&mut r, v).unwrap();
            r.expect_end().unwrap();
            assert_eq!(resp, sample());
            assert_eq!(
                resp.results().collect::<Vec<_>>(),
                [
                    ("in", 0, ErrorCode::None),
                    ("in", 1, ErrorCode::UnknownMemberId)
                ]
            );
            every_cut_fails(&buf, |r| TxnOffsetCommitResponse::decode(r, v));
        }
    }

    /// Version 3 on the wire, written down from the schema.
    #[test]
    fn v3_request_bytes() {
        let req = TxnOffsetCommitRequest {
            transactional_id: "t".into(),
            group_id: "g".into(),
            producer_id: 1,
            producer_epoch: 0,
            generation_id: 2,
            member_id: "m".into(),
            group_instance_id: None,
            topics: vec![TxnOffsetCommitTopic {
                name: "i".into(),
                partitions: vec![TxnOffsetCommitPartition {
                    partition_index: 0,
                    committed_offset: 10,
                    committed_leader_epoch: -1,
                    committed_metadata: Some(String::new()),
                }],
            }],
        };
        let mut buf = Vec::new();
        req.encode(3, &mut buf);
        let expected: &[u8] = &[
            2, b't', 2, b'g', // transactional id, group id
            0, 0, 0, 0, 0, 0, 0, 1, 0, 0, // producer id, epoch
            0, 0, 0, 2, 2, b'm', 0, // generation, member id, null instance id
            2, 2, b'i', // one topic "i"
            2, 0, 0, 0, 0, // one partition: 0
            0, 0, 0, 0, 0, 0, 0, 10, 0xff, 0xff, 0xff, 0xff, // offset 10, epoch -1
            1, 0, // empty metadata, no tags
            0, 0, // topic tags, request tags
        ];
        assert_eq!(buf, expected);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 3i16..=4) {
            let _ = TxnOffsetCommitResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 3i16..=4, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = TxnOffsetCommitResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
