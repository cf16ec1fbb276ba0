//! IncrementalAlterConfigs (key 44): set, delete, append to or subtract from single configs of
//! topics, brokers, broker loggers or groups (KIP-339), leaving the others as they are.
//!
//! Version 1 only, the flexible one (Kafka 4 brokers speak 0-1; 1 changed nothing else).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterableConfig {
    /// Name.
    pub name: String,
    /// 0 set, 1 delete (back to the default), 2 append (lists), 3 subtract (lists).
    pub config_operation: i8,
    /// The value (null for delete).
    pub value: Option<String>,
}

/// A resource and its changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigsResource {
    /// 2 topic, 4 broker, 8 broker logger, 32 group.
    pub resource_type: i8,
    /// Its name (a broker's: its id; empty: the cluster-wide default).
    pub resource_name: String,
    /// Changes.
    pub configs: Vec<AlterableConfig>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalAlterConfigsRequest {
    /// Resources.
    pub resources: Vec<AlterConfigsResource>,
    /// Only check.
    pub validate_only: bool,
}

impl Request for IncrementalAlterConfigsRequest {
    const API_KEY: ApiKey = ApiKey::IncrementalAlterConfigs;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 1;
    const FLEXIBLE_FROM: i16 = 1;
    type Response = IncrementalAlterConfigsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.resources.len()), true);
        for r in &self.resources {
            r.resource_type.write(out);
            out.put_string(&r.resource_name, true);
            out.put_length(Some(r.configs.len()), true);
            for c in &r.configs {
                out.put_string(&c.name, true);
                c.config_operation.write(out);
                out.put_nullable_string(c.value.as_deref(), true);
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        self.validate_only.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// One resource's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigsResourceResponse {
    /// Error.
    pub error_code: ErrorCode,
    /// The broker's message.
    pub error_message: Option<String>,
    /// Type.
    pub resource_type: i8,
    /// Name.
    pub resource_name: String,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalAlterConfigsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per resource.
    pub responses: Vec<AlterConfigsResourceResponse>,
}

impl Response for IncrementalAlterConfigsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let responses = r.array_of(true, 6, |r| {
            let x = AlterConfigsResourceResponse {
                error_code: ErrorCode::from_i16(i16::read(r)?),
                error_message: r.nullable_string(true)?,
                resource_type: i8::read(r)?,
                resource_name: r.string(true)?,
            };
            r.skip_tagged_fields(true)?;
            Ok(x)
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

impl IncrementalAlterConfigsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.responses.len()), true);
        for x in &self.responses {
            x.error_code.code().write(out);
            out.put_nullable_string(x.error_message.as_deref(), true);
            x.resource_type.write(out);
            out.put_string(&x.resource_name, true);
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
        let want = IncrementalAlterConfigsResponse {
            throttle_time_ms: 3,
            responses: vec![
                AlterConfigsResourceResponse {
                    error_code: ErrorCode::None,
                    error_message: None,
                    resource_type: 2,
                    resource_name: "t".into(),
                },
                AlterConfigsResourceResponse {
                    error_code: ErrorCode::InvalidConfig,
                    error_message: Some("bad value".into()),
                    resource_type: 4,
                    resource_name: "1".into(),
                },
            ],
        };
        let mut buf = Vec::new();
        want.encode(1, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(
            IncrementalAlterConfigsResponse::decode(&mut r, 1).unwrap(),
            want
        );
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| IncrementalAlterConfigsResponse::decode(r, 1));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = IncrementalAlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: 2,
                resource_name: "t".into(),
                configs: vec![AlterableConfig {
                    name: "k".into(),
                    config_operation: 1,
                    value: None,
                }],
            }],
            validate_only: false,
        };
        let mut out = Vec::new();
        req.encode(1, &mut out);
        assert_eq!(out, [2, 2, 2, b't', 2, 2, b'k', 1, 0, 0, 0, 0, 0]);
    }
}
