//! DeleteTopics (key 20): topics by name (or by id), sent to the controller.
//!
//! Versions 4-6, the flexible ones (Kafka 4 brokers speak 1-6): 5 adds an error message per
//! topic; 6 names topics as `(name or null, id)` pairs and answers with both.

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopicsRequest {
    /// Topics by name.
    pub names: Vec<String>,
    /// How long the controller may take.
    pub timeout_ms: i32,
}

impl Request for DeleteTopicsRequest {
    const API_KEY: ApiKey = ApiKey::DeleteTopics;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 6;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = DeleteTopicsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.names.len()), true);
        for n in &self.names {
            if version >= 6 {
                out.put_nullable_string(Some(n), true);
                Uuid::default().write(out);
                out.put_empty_tagged_fields(true);
            } else {
                out.put_string(n, true);
            }
        }
        self.timeout_ms.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// One topic's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletableTopicResult {
    /// Name (null in v6+ when the topic was named by id only).
    pub name: Option<String>,
    /// Id (v6+).
    pub topic_id: Uuid,
    /// Error.
    pub error_code: ErrorCode,
    /// The controller's message (v5+).
    pub error_message: Option<String>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopicsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub responses: Vec<DeletableTopicResult>,
}

impl Response for DeleteTopicsResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let responses = r.array_of(true, 4, |r| {
            let name = if version >= 6 {
                r.nullable_string(true)?
            } else {
                Some(r.string(true)?)
            };
            let topic_id = if version >= 6 {
                Uuid::read(r)?
            } else {
                Uuid::default()
            };
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let error_message = if version >= 5 {
                r.nullable_string(true)?
            } else {
                None
            };
            r.skip_tagged_fields(true)?;
            Ok(DeletableTopicResult {
                name,
                topic_id,
                error_code,
                error_message,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            responses,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl DeleteTopicsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.responses.len()), true);
        for t in &self.responses {
            if version >= 6 {
                out.put_nullable_string(t.name.as_deref(), true);
                t.topic_id.write(out);
            } else {
                out.put_string(t.name.as_deref().unwrap_or(""), true);
            }
            t.error_code.code().write(out);
            if version >= 5 {
                out.put_nullable_string(t.error_message.as_deref(), true);
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
        for v in 4..=6 {
            let want = DeleteTopicsResponse {
                throttle_time_ms: 1,
                responses: vec![
                    DeletableTopicResult {
                        name: Some("a".into()),
                        topic_id: if v >= 6 {
                            Uuid([3; 16])
                        } else {
                            Uuid::default()
                        },
                        error_code: ErrorCode::None,
                        error_message: None,
                    },
                    DeletableTopicResult {
                        name: Some("b".into()),
                        topic_id: Uuid::default(),
                        error_code: ErrorCode::UnknownTopicOrPartition,
                        error_message: (v >= 5).then(|| "no such topic".into()),
                    },
                ],
            };
            let mut buf = Vec::new();
            want.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(DeleteTopicsResponse::decode(&mut r, v).unwrap(), want);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| DeleteTopicsResponse::decode(r, v));
        }
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DeleteTopicsRequest {
            names: vec!["t".into()],
            timeout_ms: 1000,
        };
        let mut out = Vec::new();
        req.encode(6, &mut out);
        let mut want = vec![2, 2, b't'];
        want.extend([0; 16]);
        want.extend([0, 0, 0, 0x03, 0xe8, 0]);
        assert_eq!(out, want);
        out.clear();
        req.encode(4, &mut out);
        assert_eq!(out, [2, 2, b't', 0, 0, 0x03, 0xe8, 0]);
    }

    #[test]
    fn a_response_by_hand() {
        // v5: throttle 0; one topic "t", error 3, message null; tags.
        let b = [0, 0, 0, 0, 2, 2, b't', 0, 3, 0, 0, 0];
        let got = DeleteTopicsResponse::decode(&mut Reader::new(&b), 5).unwrap();
        assert_eq!(got.responses[0].name.as_deref(), Some("t"));
        assert_eq!(
            got.responses[0].error_code,
            ErrorCode::UnknownTopicOrPartition
        );
    }
}
