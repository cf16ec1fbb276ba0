//! DeleteRecords (key 21): moves a partition's start (its low watermark) up to an offset,
//! deleting the records before it; sent to each partition's leader.
//!
//! Version 2 only, the flexible one (Kafka 4 brokers speak 0-2; nothing else changed).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request: per topic, `(partition, offset before which to delete)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsRequest {
    /// Topics and their partitions' offsets (-1: the high watermark).
    pub topics: Vec<(String, Vec<(i32, i64)>)>,
    /// How long the leader may wait for the followers.
    pub timeout_ms: i32,
}

impl Request for DeleteRecordsRequest {
    const API_KEY: ApiKey = ApiKey::DeleteRecords;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 2;
    const FLEXIBLE_FROM: i16 = 2;
    type Response = DeleteRecordsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.topics.len()), true);
        for (name, partitions) in &self.topics {
            out.put_string(name, true);
            out.put_length(Some(partitions.len()), true);
            for (p, offset) in partitions {
                p.write(out);
                offset.write(out);
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        self.timeout_ms.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsPartitionResult {
    /// Index.
    pub partition_index: i32,
    /// The partition's start after the deletion.
    pub low_watermark: i64,
    /// Error.
    pub error_code: ErrorCode,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic, per partition.
    pub topics: Vec<(String, Vec<DeleteRecordsPartitionResult>)>,
}

impl Response for DeleteRecordsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(true, 3, |r| {
            let name = r.string(true)?;
            let partitions = r.array_of(true, 15, |r| {
                let p = DeleteRecordsPartitionResult {
                    partition_index: i32::read(r)?,
                    low_watermark: i64::read(r)?,
                    error_code: ErrorCode::from_i16(i16::read(r)?),
                };
                r.skip_tagged_fields(true)?;
                Ok(p)
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

impl DeleteRecordsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), true);
        for (name, partitions) in &self.topics {
            out.put_string(name, true);
            out.put_length(Some(partitions.len()), true);
            for p in partitions {
                p.partition_index.write(out);
                p.low_watermark.write(out);
                p.error_code.code().write(out);
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
        let want = DeleteRecordsResponse {
            throttle_time_ms: 0,
            topics: vec![(
                "t".into(),
                vec![
                    DeleteRecordsPartitionResult {
                        partition_index: 0,
                        low_watermark: 7,
                        error_code: ErrorCode::None,
                    },
                    DeleteRecordsPartitionResult {
                        partition_index: 1,
                        low_watermark: -1,
                        error_code: ErrorCode::OffsetOutOfRange,
                    },
                ],
            )],
        };
        let mut buf = Vec::new();
        want.encode(2, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(DeleteRecordsResponse::decode(&mut r, 2).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| DeleteRecordsResponse::decode(r, 2));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DeleteRecordsRequest {
            topics: vec![("t".into(), vec![(1, 5)])],
            timeout_ms: 1,
        };
        let mut out = Vec::new();
        req.encode(2, &mut out);
        assert_eq!(
            out,
            [
                2, 2, b't', 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 1, 0
            ]
        );
    }
}
