//! ApiVersions (key 18): which versions of each API the broker supports.
//!
//! v3+ is flexible and carries the client's software name and version. A broker that does not
//! know the requested version answers in v0 with `UNSUPPORTED_VERSION` and lists the
//! ApiVersions range it does support (KIP-511); the client then retries with that.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{
    ApiKey, ApiVersionsTable, DecodeError, ErrorCode, Request, Response, VersionRange,
};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsRequest {
    /// `client_software_name` (v3+).
    pub client_software_name: String,
    /// `client_software_version` (v3+).
    pub client_software_version: String,
}

impl Default for ApiVersionsRequest {
    fn default() -> Self {
        Self {
            client_software_name: "crac-rs-kafka-client".to_owned(),
            client_software_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

impl Request for ApiVersionsRequest {
    const API_KEY: ApiKey = ApiKey::ApiVersions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = ApiVersionsResponse;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        if version >= 3 {
            out.put_string(&self.client_software_name, true);
            out.put_string(&self.client_software_version, true);
            out.put_empty_tagged_fields(true);
        }
    }

    fn response_header_version(_version: i16) -> i16 {
        // Always v0, so that a client can read the error of a version the broker lacks.
        0
    }
}

impl ApiVersionsRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        if version >= 3 {
            let client_software_name = r.string(true)?;
            let client_software_version = r.string(true)?;
            r.skip_tagged_fields(true)?;
            Ok(Self {
                client_software_name,
                client_software_version,
            })
        } else {
            Ok(Self {
                client_software_name: String::new(),
                client_software_version: String::new(),
            })
        }
    }
}

/// One API's supported range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersion {
    /// The API key.
    pub api_key: i16,
    /// Lowest supported version.
    pub min_version: i16,
    /// Highest supported version.
    pub max_version: i16,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsResponse {
    /// Top-level error.
    pub error_code: ErrorCode,
    /// Supported ranges.
    pub api_keys: Vec<ApiVersion>,
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
}

impl ApiVersionsResponse {
    /// The ranges as a negotiation table.
    pub fn table(&self) -> ApiVersionsTable {
        ApiVersionsTable::new(self.api_keys.iter().map(|k| {
            (
                k.api_key,
                VersionRange {
                    min: k.min_version,
                    max: k.max_version,
                },
            )
        }))
    }

    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = version >= 3;
        self.error_code.code().write(out);
        out.put_length(Some(self.api_keys.len()), flexible);
        for k in &self.api_keys {
            k.api_key.write(out);
            k.min_version.write(out);
            k.max_version.write(out);
            out.put_empty_tagged_fields(flexible);
        }
        if version >= 1 {
            self.throttle_time_ms.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl Response for ApiVersionsResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        // An UNSUPPORTED_VERSION answer is always in v0, whatever we asked for.
        let version = if error_code == ErrorCode::UnsupportedVersion {
            0
        } else {
            version
        };
        let flexible = version >= 3;
        let api_keys = r.array_of(flexible, 6, |r| {
            let k = ApiVersion {
                api_key: i16::read(r)?,
                min_version: i16::read(r)?,
                max_version: i16::read(r)?,
            };
            r.skip_tagged_fields(flexible)?;
            Ok(k)
        })?;
        let throttle_time_ms = if version >= 1 { i32::read(r)? } else { 0 };
        // Tagged fields (supported/finalized features) are not needed by a client.
        r.skip_tagged_fields(flexible)?;
        if error_code == ErrorCode::UnsupportedVersion {
            // Newer brokers may append fields we did not ask for; what matters is the list.
            let rest = r.remaining();
            r.take(rest)?;
        }
        Ok(Self {
            error_code,
            api_keys,
            throttle_time_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{RequestHeader, ResponseHeader, decode_response, encode_frame};

    fn sample() -> ApiVersionsResponse {
        ApiVersionsResponse {
            error_code: ErrorCode::None,
            api_keys: vec![
                ApiVersion {
                    api_key: 0,
                    min_version: 3,
                    max_version: 12,
                },
                ApiVersion {
                    api_key: 18,
                    min_version: 0,
                    max_version: 4,
                },
            ],
            throttle_time_ms: 5,
        }
    }

    #[test]
    fn request_roundtrip() {
        for v in 0..=4 {
            let req = ApiVersionsRequest::default();
            let frame = encode_frame(&req, v, 7, Some("c"));
            let mut r = Reader::new(&frame[4..]);
            let h = RequestHeader::decode(&mut r, ApiVersionsRequest::request_header_version(v))
                .unwrap();
            assert_eq!(
                (h.api_key, h.api_version, h.correlation_id),
                (ApiKey::ApiVersions, v, 7)
            );
            let got = ApiVersionsRequest::decode(&mut r, v).unwrap();
            r.expect_end().unwrap();
            if v >= 3 {
                assert_eq!(got, req);
            }
        }
    }

    #[test]
    fn response_roundtrip_every_version() {
        for v in 0..=4 {
            let mut want = sample();
            if v == 0 {
                want.throttle_time_ms = 0;
            }
            let mut frame = Vec::new();
            ResponseHeader { correlation_id: 3 }.encode(0, &mut frame);
            want.encode(v, &mut frame);
            let got = decode_response::<ApiVersionsRequest>(&frame, v, 3).unwrap();
            assert_eq!(got, want);
            assert_eq!(
                got.table()
                    .negotiate(ApiKey::Produce, VersionRange { min: 3, max: 11 }),
                Ok(11)
            );
        }
    }

    #[test]
    fn unsupported_version_answer_is_read_as_v0() {
        let mut frame = Vec::new();
        ResponseHeader { correlation_id: 1 }.encode(0, &mut frame);
        ApiVersionsResponse {
            error_code: ErrorCode::UnsupportedVersion,
            api_keys: vec![ApiVersion {
                api_key: 18,
                min_version: 0,
                max_version: 2,
            }],
            throttle_time_ms: 0,
        }
        .encode(0, &mut frame);
        let got = decode_response::<ApiVersionsRequest>(&frame, 4, 1).unwrap();
        assert_eq!(got.error_code, ErrorCode::UnsupportedVersion);
        assert_eq!(
            got.table().get(ApiKey::ApiVersions),
            Some(VersionRange { min: 0, max: 2 })
        );
    }
}
