//! DescribeConfigs (key 32): the configs of topics, brokers, broker loggers or groups, with
//! where each value comes from; topics go to any broker, a broker's own configs to it.
//!
//! Version 4 only, the flexible one (Kafka 4 brokers speak 1-4; 3 added each config's type
//! and documentation, which this client always reads).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// A resource to describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsResource {
    /// 2 topic, 4 broker, 8 broker logger, 32 group.
    pub resource_type: i8,
    /// Its name (a broker's: its id).
    pub resource_name: String,
    /// Only these keys (`None`: all).
    pub configuration_keys: Option<Vec<String>>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsRequest {
    /// Resources.
    pub resources: Vec<DescribeConfigsResource>,
    /// Also the values each config would have at lower levels.
    pub include_synonyms: bool,
    /// Also each config's documentation.
    pub include_documentation: bool,
}

impl Request for DescribeConfigsRequest {
    const API_KEY: ApiKey = ApiKey::DescribeConfigs;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = DescribeConfigsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.resources.len()), true);
        for r in &self.resources {
            r.resource_type.write(out);
            out.put_string(&r.resource_name, true);
            match &r.configuration_keys {
                None => out.put_length(None, true),
                Some(keys) => {
                    out.put_length(Some(keys.len()), true);
                    for k in keys {
                        out.put_string(k, true);
                    }
                }
            }
            out.put_empty_tagged_fields(true);
        }
        self.include_synonyms.write(out);
        self.include_documentation.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// A value the config would take at another level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    /// Name (at that level).
    pub name: String,
    /// Value.
    pub value: Option<String>,
    /// The level (Kafka's `ConfigSource` id).
    pub source: i8,
}

/// One config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Name.
    pub name: String,
    /// Value (null when sensitive).
    pub value: Option<String>,
    /// Read-only.
    pub read_only: bool,
    /// Where the value comes from (Kafka's `ConfigSource` id: 1 dynamic topic, 2 dynamic
    /// broker, 3 dynamic default broker, 4 static broker, 5 default, 6 dynamic logger, 8 group).
    pub config_source: i8,
    /// Sensitive.
    pub is_sensitive: bool,
    /// The values at other levels (when asked for).
    pub synonyms: Vec<ConfigSynonym>,
    /// Its type (Kafka's `ConfigType` id; 0 unknown).
    pub config_type: i8,
    /// Its documentation (when asked for).
    pub documentation: Option<String>,
}

/// One resource's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsResult {
    /// Error.
    pub error_code: ErrorCode,
    /// The broker's message.
    pub error_message: Option<String>,
    /// Type.
    pub resource_type: i8,
    /// Name.
    pub resource_name: String,
    /// Configs.
    pub configs: Vec<DescribedConfig>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per resource.
    pub results: Vec<DescribeConfigsResult>,
}

impl Response for DescribeConfigsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let results = r.array_of(true, 7, |r| {
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let error_message = r.nullable_string(true)?;
            let resource_type = i8::read(r)?;
            let resource_name = r.string(true)?;
            let configs = r.array_of(true, 10, |r| {
                let name = r.string(true)?;
                let value = r.nullable_string(true)?;
                let read_only = bool::read(r)?;
                let config_source = i8::read(r)?;
                let is_sensitive = bool::read(r)?;
                let synonyms = r.array_of(true, 4, |r| {
                    let s = ConfigSynonym {
                        name: r.string(true)?,
                        value: r.nullable_string(true)?,
                        source: i8::read(r)?,
                    };
                    r.skip_tagged_fields(true)?;
                    Ok(s)
                })?;
                let config_type = i8::read(r)?;
                let documentation = r.nullable_string(true)?;
                r.skip_tagged_fields(true)?;
                Ok(DescribedConfig {
                    name,
                    value,
                    read_only,
                    config_source,
                    is_sensitive,
                    synonyms,
                    config_type,
                    documentation,
                })
            })?;
            r.skip_tagged_fields(true)?;
            Ok(DescribeConfigsResult {
                error_code,
                error_message,
                resource_type,
                resource_name,
                configs,
            })
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

impl DescribeConfigsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.results.len()), true);
        for res in &self.results {
            res.error_code.code().write(out);
            out.put_nullable_string(res.error_message.as_deref(), true);
            res.resource_type.write(out);
            out.put_string(&res.resource_name, true);
            out.put_length(Some(res.configs.len()), true);
            for c in &res.configs {
                out.put_string(&c.name, true);
                out.put_nullable_string(c.value.as_deref(), true);
                c.read_only.write(out);
                c.config_source.write(out);
                c.is_sensitive.write(out);
                out.put_length(Some(c.synonyms.len()), true);
                for s in &c.synonyms {
                    out.put_string(&s.name, true);
                    out.put_nullable_string(s.value.as_deref(), true);
                    s.source.write(out);
                    out.put_empty_tagged_fields(true);
                }
                c.config_type.write(out);
                out.put_nullable_string(c.documentation.as_deref(), true);
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
        let want = DescribeConfigsResponse {
            throttle_time_ms: 0,
            results: vec![
                DescribeConfigsResult {
                    error_code: ErrorCode::None,
                    error_message: None,
                    resource_type: 2,
                    resource_name: "t".into(),
                    configs: vec![DescribedConfig {
                        name: "retention.ms".into(),
                        value: Some("1000".into()),
                        read_only: false,
                        config_source: 1,
                        is_sensitive: false,
                        synonyms: vec![ConfigSynonym {
                            name: "log.retention.ms".into(),
                            value: None,
                            source: 5,
                        }],
                        config_type: 5,
                        documentation: Some("how long".into()),
                    }],
                },
                DescribeConfigsResult {
                    error_code: ErrorCode::UnknownTopicOrPartition,
                    error_message: Some("no".into()),
                    resource_type: 2,
                    resource_name: "u".into(),
                    configs: vec![],
                },
            ],
        };
        let mut buf = Vec::new();
        want.encode(4, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(DescribeConfigsResponse::decode(&mut r, 4).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| DescribeConfigsResponse::decode(r, 4));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: 2,
                resource_name: "t".into(),
                configuration_keys: None,
            }],
            include_synonyms: false,
            include_documentation: true,
        };
        let mut out = Vec::new();
        req.encode(4, &mut out);
        assert_eq!(out, [2, 2, 2, b't', 0, 0, 0, 1, 0]);
    }

    #[test]
    fn a_hostile_count_fails_fast() {
        let mut b = vec![0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x07];
        b.extend([0; 10]);
        assert!(DescribeConfigsResponse::decode(&mut Reader::new(&b), 4).is_err());
    }
}
