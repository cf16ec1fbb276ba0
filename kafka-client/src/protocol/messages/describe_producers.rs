//! DescribeProducers (key 61): the producers a partition's leader knows as active (KIP-664),
//! with their last sequence and open transaction: what a hanging transaction shows.
//!
//! Version 0 (flexible).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request: per topic, partition indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeProducersRequest {
    /// Topics and partitions.
    pub topics: Vec<(String, Vec<i32>)>,
}

impl Request for DescribeProducersRequest {
    const API_KEY: ApiKey = ApiKey::DescribeProducers;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;
    const FLEXIBLE_FROM: i16 = 0;
    type Response = DescribeProducersResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.topics.len()), true);
        for (name, partitions) in &self.topics {
            out.put_string(name, true);
            out.put_length(Some(partitions.len()), true);
            for p in partitions {
                p.write(out);
            }
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

/// An active producer of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Epoch.
    pub producer_epoch: i32,
    /// Last sequence written.
    pub last_sequence: i32,
    /// Timestamp of its last write.
    pub last_timestamp: i64,
    /// The transaction coordinator's epoch (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none open).
    pub current_txn_start_offset: i64,
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeProducersPartition {
    /// Index.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// The leader's message.
    pub error_message: Option<String>,
    /// Active producers.
    pub active_producers: Vec<ProducerState>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeProducersResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic, per partition.
    pub topics: Vec<(String, Vec<DescribeProducersPartition>)>,
}

impl Response for DescribeProducersResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(true, 3, |r| {
            let name = r.string(true)?;
            let partitions = r.array_of(true, 9, |r| {
                let partition_index = i32::read(r)?;
                let error_code = ErrorCode::from_i16(i16::read(r)?);
                let error_message = r.nullable_string(true)?;
                let active_producers = r.array_of(true, 37, |r| {
                    let p = ProducerState {
                        producer_id: i64::read(r)?,
                        producer_epoch: i32::read(r)?,
                        last_sequence: i32::read(r)?,
                        last_timestamp: i64::read(r)?,
                        coordinator_epoch: i32::read(r)?,
                        current_txn_start_offset: i64::read(r)?,
                    };
                    r.skip_tagged_fields(true)?;
                    Ok(p)
                })?;
                r.skip_tagged_fields(true)?;
                Ok(DescribeProducersPartition {
                    partition_index,
                    error_code,
                    error_message,
                    active_producers,
                })
            })?;
            r.skip_tagged_fields(true)?;
            Ok((name, partitions))
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl DescribeProducersResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), true);
        for (name, partitions) in &self.topics {
            out.put_string(name, true);
            out.put_length(Some(partitions.len()), true);
            for p in partitions {
                p.partition_index.write(out);
                p.error_code.code().write(out);
                out.put_nullable_string(p.error_message.as_deref(), true);
                out.put_length(Some(p.active_producers.len()), true);
                for s in &p.active_producers {
                    s.producer_id.write(out);
                    s.producer_epoch.write(out);
                    s.last_sequence.write(out);
                    s.last_timestamp.write(out);
                    s.coordinator_epoch.write(out);
                    s.current_txn_start_offset.write(out);
                    out.put_empty_tagged_fields(true);
                }
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;

    #[test]
    fn the_response_round_trips_and_every_cut_fails() {
        let want = DescribeProducersResponse {
            throttle_time_ms: 0,
            topics: vec![(
                "t".into(),
                vec![DescribeProducersPartition {
                    partition_index: 0,
                    error_code: ErrorCode::None,
                    error_message: None,
                    active_producers: vec![ProducerState {
                        producer_id: 1000,
                        producer_epoch: 2,
                        last_sequence: 9,
                        last_timestamp: 1_700_000_000_000,
                        coordinator_epoch: -1,
                        current_txn_start_offset: -1,
                    }],
                }],
            )],
        };
        let mut buf = Vec::new();
        want.encode(0, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(DescribeProducersResponse::decode(&mut r, 0).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| DescribeProducersResponse::decode(r, 0));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DescribeProducersRequest {
            topics: vec![("t".into(), vec![3])],
        };
        let mut out = Vec::new();
        req.encode(0, &mut out);
        assert_eq!(out, [2, 2, b't', 2, 0, 0, 0, 3, 0, 0]);
    }
}
