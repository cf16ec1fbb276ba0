//! AddPartitionsToTxn (key 24): a transactional producer tells its transaction coordinator
//! which partitions the open transaction writes to, before it writes to them (so the
//! coordinator writes the commit or abort markers there).
//!
//! Versions 2-3, the client's form: 2 brings `PRODUCER_FENCED`, 3 is flexible. Versions 4 and
//! up batch several transactions and are for brokers only; with transactions v2 (KIP-890) a
//! client adds partitions implicitly with its Produce request instead.

use super::topic_errors::TopicPartitionErrors;
use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnTopic {
    /// Topic name.
    pub name: String,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnRequest {
    /// `transactional.id`.
    pub transactional_id: String,
    /// The producer id `InitProducerId` gave.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The partitions to add.
    pub topics: Vec<AddPartitionsToTxnTopic>,
}

impl Request for AddPartitionsToTxnRequest {
    const API_KEY: ApiKey = ApiKey::AddPartitionsToTxn;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 3;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = AddPartitionsToTxnResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.transactional_id, flexible);
        self.producer_id.write(out);
        self.producer_epoch.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.write(out);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }

    fn size_hint(&self) -> usize {
        32 + self.transactional_id.len()
            + self
                .topics
                .iter()
                .map(|t| 8 + t.name.len() + 4 * t.partitions.len())
                .sum::<usize>()
    }
}

impl AddPartitionsToTxnRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let transactional_id = r.string(flexible)?;
        let producer_id = i64::read(r)?;
        let producer_epoch = i16::read(r)?;
        let topics = r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, 4, i32::read)?;
            r.skip_tagged_fields(flexible)?;
            Ok(AddPartitionsToTxnTopic { name, partitions })
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            transactional_id,
            producer_id,
            producer_epoch,
            topics,
        })
    }
}

/// One topic's results. `OPERATION_NOT_ATTEMPTED` for a partition means another one of the
/// request failed.
pub type AddPartitionsToTxnTopicResult = TopicPartitionErrors;

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<AddPartitionsToTxnTopicResult>,
}

impl AddPartitionsToTxnResponse {
    /// Every (topic, partition, error), in the response's order.
    pub fn results(&self) -> impl Iterator<Item = (&str, i32, ErrorCode)> {
        TopicPartitionErrors::flatten(&self.topics)
    }
}

impl Response for AddPartitionsToTxnResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = AddPartitionsToTxnRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let topics = TopicPartitionErrors::read_array(r, flexible)?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl AddPartitionsToTxnResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = AddPartitionsToTxnRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        TopicPartitionErrors::write_array(&self.topics, flexible, out);
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    fn sample() -> AddPartitionsToTxnResponse {
        AddPartitionsToTxnResponse {
            throttle_time_ms: 2,
            topics: vec![
                AddPartitionsToTxnTopicResult {
                    name: "out".into(),
                    partitions: vec![(0, ErrorCode::None), (3, ErrorCode::OperationNotAttempted)],
                },
                AddPartitionsToTxnTopicResult {
                    name: "other".into(),
                    partitions: vec![(1, ErrorCode::TopicAuthorizationFailed)],
                },
            ],
        }
    }

    fn encoded(v: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample().encode(v, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in AddPartitionsToTxnRequest::MIN_VERSION..=AddPartitionsToTxnRequest::MAX_VERSION {
            let req = AddPartitionsToTxnRequest {
                transactional_id: "svc-1".into(),
                producer_id: 4000,
                producer_epoch: 3,
                topics: vec![AddPartitionsToTxnTopic {
                    name: "out".into(),
                    partitions: vec![0, 2, 5],
                }],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(AddPartitionsToTxnRequest::decode(&mut r, v).unwrap(), req);
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            let resp = AddPartitionsToTxnResponse::decode(&mut r, v).unwrap();
            r.expect_end().unwrap();
            assert_eq!(resp, sample());
            assert_eq!(
                resp.results().collect::<Vec<_>>(),
                [
                    ("out", 0, ErrorCode::None),
                    ("out", 3, ErrorCode::OperationNotAttempted),
                    ("other", 1, ErrorCode::TopicAuthorizationFailed),
                ]
            );
            every_cut_fails(&buf, |r| AddPartitionsToTxnResponse::decode(r, v));
        }
    }

    /// Version 2 on the wire, written down from the schema (not from this encoder).
    #[test]
    fn v2_request_bytes() {
        let req = AddPartitionsToTxnRequest {
            transactional_id: "t".into(),
            producer_id: 1,
            producer_epoch: 2,
            topics: vec![AddPartitionsToTxnTopic {
                name: "o".into(),
                partitions: vec![7],
            }],
        };
        let mut buf = Vec::new();
        req.encode(2, &mut buf);
        let expected: &[u8] = &[
            0, 1, b't', // transactional id
            0, 0, 0, 0, 0, 0, 0, 1, // producer id
            0, 2, // epoch
            0, 0, 0, 1, 0, 1, b'o', // one topic "o"
            0, 0, 0, 1, 0, 0, 0, 7, // partitions [7]
        ];
        assert_eq!(buf, expected);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 2i16..=3) {
            let _ = AddPartitionsToTxnResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 2i16..=3, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = AddPartitionsToTxnResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
