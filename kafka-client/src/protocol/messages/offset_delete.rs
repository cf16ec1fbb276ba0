//! OffsetDelete (key 47): removes a group's committed offsets of partitions it no longer
//! consumes (KIP-496), at the group's coordinator.
//!
//! Version 0 only (Kafka 4 brokers speak 0; it is not flexible).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteRequest {
    /// The group.
    pub group_id: String,
    /// Per topic, the partitions whose offsets go.
    pub topics: Vec<(String, Vec<i32>)>,
}

impl Request for OffsetDeleteRequest {
    const API_KEY: ApiKey = ApiKey::OffsetDelete;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;
    const FLEXIBLE_FROM: i16 = i16::MAX;
    type Response = OffsetDeleteResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_string(&self.group_id, false);
        out.put_length(Some(self.topics.len()), false);
        for (name, partitions) in &self.topics {
            out.put_string(name, false);
            out.put_length(Some(partitions.len()), false);
            for p in partitions {
                p.write(out);
            }
        }
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteResponse {
    /// The group's error (`GROUP_ID_NOT_FOUND`, `NON_EMPTY_GROUP`…).
    pub error_code: ErrorCode,
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic, `(partition, error)` (`GROUP_SUBSCRIBED_TO_TOPIC` while consumed).
    pub topics: Vec<(String, Vec<(i32, ErrorCode)>)>,
}

impl Response for OffsetDeleteResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let throttle_time_ms = i32::read(r)?;
        let topics = r.array_of(false, 6, |r| {
            let name = r.string(false)?;
            let partitions = r.array_of(false, 6, |r| {
                Ok((i32::read(r)?, ErrorCode::from_i16(i16::read(r)?)))
            })?;
            Ok((name, partitions))
        })?;
        Ok(Self {
            error_code,
            throttle_time_ms,
            topics,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl OffsetDeleteResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.error_code.code().write(out);
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), false);
        for (name, partitions) in &self.topics {
            out.put_string(name, false);
            out.put_length(Some(partitions.len()), false);
            for (p, e) in partitions {
                p.write(out);
                e.code().write(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;

    #[test]
    fn the_response_round_trips_and_every_cut_fails() {
        let want = OffsetDeleteResponse {
            error_code: ErrorCode::None,
            throttle_time_ms: 0,
            topics: vec![(
                "t".into(),
                vec![(0, ErrorCode::None), (1, ErrorCode::GroupSubscribedToTopic)],
            )],
        };
        let mut buf = Vec::new();
        want.encode(0, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(OffsetDeleteResponse::decode(&mut r, 0).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| OffsetDeleteResponse::decode(r, 0));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = OffsetDeleteRequest {
            group_id: "g".into(),
            topics: vec![("t".into(), vec![2])],
        };
        let mut out = Vec::new();
        req.encode(0, &mut out);
        assert_eq!(
            out,
            [0, 1, b'g', 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 2]
        );
    }
}
