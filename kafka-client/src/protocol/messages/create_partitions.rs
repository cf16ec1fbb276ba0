//! CreatePartitions (key 37): raises a topic's partition count (optionally placing the new
//! partitions' replicas), at the controller.
//!
//! Versions 2-3, the flexible ones (Kafka 4 brokers speak 0-3; 3 only changes quota behaviour).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// A topic's new partition count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsTopic {
    /// Name.
    pub name: String,
    /// The new total count.
    pub count: i32,
    /// Replicas of each new partition (`None`: the controller places them).
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsRequest {
    /// Topics.
    pub topics: Vec<CreatePartitionsTopic>,
    /// How long the controller may take.
    pub timeout_ms: i32,
    /// Only check.
    pub validate_only: bool,
}

impl Request for CreatePartitionsRequest {
    const API_KEY: ApiKey = ApiKey::CreatePartitions;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 3;
    const FLEXIBLE_FROM: i16 = 2;
    type Response = CreatePartitionsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.topics.len()), true);
        for t in &self.topics {
            out.put_string(&t.name, true);
            t.count.write(out);
            match &t.assignments {
                None => out.put_length(None, true),
                Some(a) => {
                    out.put_length(Some(a.len()), true);
                    for brokers in a {
                        out.put_length(Some(brokers.len()), true);
                        for b in brokers {
                            b.write(out);
                        }
                        out.put_empty_tagged_fields(true);
                    }
                }
            }
            out.put_empty_tagged_fields(true);
        }
        self.timeout_ms.write(out);
        self.validate_only.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// One topic's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsResult {
    /// Name.
    pub name: String,
    /// Error.
    pub error_code: ErrorCode,
    /// The controller's message.
    pub error_message: Option<String>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartitionsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub results: Vec<CreatePartitionsResult>,
}

impl Response for CreatePartitionsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let results = r.array_of(true, 5, |r| {
            let x = CreatePartitionsResult {
                name: r.string(true)?,
                error_code: ErrorCode::from_i16(i16::read(r)?),
                error_message: r.nullable_string(true)?,
            };
            r.skip_tagged_fields(true)?;
            Ok(x)
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            results,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl CreatePartitionsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.results.len()), true);
        for x in &self.results {
            out.put_string(&x.name, true);
            x.error_code.code().write(out);
            out.put_nullable_string(x.error_message.as_deref(), true);
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
        let want = CreatePartitionsResponse {
            throttle_time_ms: 0,
            results: vec![CreatePartitionsResult {
                name: "t".into(),
                error_code: ErrorCode::InvalidPartitions,
                error_message: Some("fewer".into()),
            }],
        };
        let mut buf = Vec::new();
        want.encode(3, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(CreatePartitionsResponse::decode(&mut r, 3).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| CreatePartitionsResponse::decode(r, 3));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: "t".into(),
                count: 4,
                assignments: None,
            }],
            timeout_ms: 1,
            validate_only: false,
        };
        let mut out = Vec::new();
        req.encode(3, &mut out);
        assert_eq!(out, [2, 2, b't', 0, 0, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0]);
    }
}
