//! CreateTopics (key 19): topics with their partition count and replication factor (or
//! explicit replicas) and configs, sent to the controller (a KRaft broker forwards it).
//!
//! Versions 5-7, the flexible ones (Kafka 4 brokers speak 2-7): 5 answers with the topic's
//! partitions, replication factor and configs as created; 6 only changes quota behaviour
//! (`THROTTLING_QUOTA_EXCEEDED` instead of a delayed answer); 7 adds the topic id.

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableTopic {
    /// Name.
    pub name: String,
    /// Partitions, or -1 for the broker's default (or when `assignments` are given).
    pub num_partitions: i32,
    /// Replication factor, or -1 for the broker's default (or with `assignments`).
    pub replication_factor: i16,
    /// Explicit replicas: `(partition, broker ids)`.
    pub assignments: Vec<(i32, Vec<i32>)>,
    /// Topic configs: `(name, value)`.
    pub configs: Vec<(String, Option<String>)>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicsRequest {
    /// Topics.
    pub topics: Vec<CreatableTopic>,
    /// How long the controller may take.
    pub timeout_ms: i32,
    /// Only check; create nothing.
    pub validate_only: bool,
}

impl Request for CreateTopicsRequest {
    const API_KEY: ApiKey = ApiKey::CreateTopics;
    const MIN_VERSION: i16 = 5;
    const MAX_VERSION: i16 = 7;
    const FLEXIBLE_FROM: i16 = 5;
    type Response = CreateTopicsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 3;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.topics.len()), true);
        for t in &self.topics {
            out.put_string(&t.name, true);
            t.num_partitions.write(out);
            t.replication_factor.write(out);
            out.put_length(Some(t.assignments.len()), true);
            for (partition, brokers) in &t.assignments {
                partition.write(out);
                out.put_length(Some(brokers.len()), true);
                for b in brokers {
                    b.write(out);
                }
                out.put_empty_tagged_fields(true);
            }
            out.put_length(Some(t.configs.len()), true);
            for (name, value) in &t.configs {
                out.put_string(name, true);
                out.put_nullable_string(value.as_deref(), true);
                out.put_empty_tagged_fields(true);
            }
            out.put_empty_tagged_fields(true);
        }
        self.timeout_ms.write(out);
        self.validate_only.write(out);
        out.put_empty_tagged_fields(true);
    }

    fn size_hint(&self) -> usize {
        64 + self
            .topics
            .iter()
            .map(|t| 32 + t.name.len() + t.configs.len() * 48 + t.assignments.len() * 16)
            .sum::<usize>()
    }
}

/// A config of a created topic, as the controller set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedConfig {
    /// Name.
    pub name: String,
    /// Value (null when sensitive).
    pub value: Option<String>,
    /// Read-only.
    pub read_only: bool,
    /// Where the value comes from (Kafka's `ConfigSource` id).
    pub config_source: i8,
    /// Sensitive (its value is not shown).
    pub is_sensitive: bool,
}

/// One topic's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableTopicResult {
    /// Name.
    pub name: String,
    /// Id (v7+; zero before, and when only validated).
    pub topic_id: Uuid,
    /// Error.
    pub error_code: ErrorCode,
    /// The controller's message.
    pub error_message: Option<String>,
    /// Partitions (-1 when not given).
    pub num_partitions: i32,
    /// Replication factor (-1 when not given).
    pub replication_factor: i16,
    /// Configs (null when the caller may not describe them).
    pub configs: Option<Vec<CreatedConfig>>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<CreatableTopicResult>,
}

impl Response for CreateTopicsResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        // name (1) + error (2) + message (1) + counts (6) + configs (1) + tags (1).
        let topics = r.array_of(true, 12, |r| {
            let name = r.string(true)?;
            let topic_id = if version >= 7 {
                Uuid::read(r)?
            } else {
                Uuid::default()
            };
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let error_message = r.nullable_string(true)?;
            let num_partitions = i32::read(r)?;
            let replication_factor = i16::read(r)?;
            let configs = r.nullable_array_of(true, 5, |r| {
                let c = CreatedConfig {
                    name: r.string(true)?,
                    value: r.nullable_string(true)?,
                    read_only: bool::read(r)?,
                    config_source: i8::read(r)?,
                    is_sensitive: bool::read(r)?,
                };
                r.skip_tagged_fields(true)?;
                Ok(c)
            })?;
            // Tag 0 is topic_config_error_code: the configs could not be described; the
            // topic itself was created, so it is not an error of the create.
            r.skip_tagged_fields(true)?;
            Ok(CreatableTopicResult {
                name,
                topic_id,
                error_code,
                error_message,
                num_partitions,
                replication_factor,
                configs,
            })
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

impl CreateTopicsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.topics.len()), true);
        for t in &self.topics {
            out.put_string(&t.name, true);
            if version >= 7 {
                t.topic_id.write(out);
            }
            t.error_code.code().write(out);
            out.put_nullable_string(t.error_message.as_deref(), true);
            t.num_partitions.write(out);
            t.replication_factor.write(out);
            match &t.configs {
                None => out.put_length(None, true),
                Some(cs) => {
                    out.put_length(Some(cs.len()), true);
                    for c in cs {
                        out.put_string(&c.name, true);
                        out.put_nullable_string(c.value.as_deref(), true);
                        c.read_only.write(out);
                        c.config_source.write(out);
                        c.is_sensitive.write(out);
                        out.put_empty_tagged_fields(true);
                    }
                }
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

    fn sample() -> CreateTopicsResponse {
        CreateTopicsResponse {
            throttle_time_ms: 5,
            topics: vec![
                CreatableTopicResult {
                    name: "a".into(),
                    topic_id: Uuid([9; 16]),
                    error_code: ErrorCode::None,
                    error_message: None,
                    num_partitions: 3,
                    replication_factor: 2,
                    configs: Some(vec![CreatedConfig {
                        name: "retention.ms".into(),
                        value: Some("1000".into()),
                        read_only: false,
                        config_source: 1,
                        is_sensitive: false,
                    }]),
                },
                CreatableTopicResult {
                    name: "b".into(),
                    topic_id: Uuid::default(),
                    error_code: ErrorCode::TopicAlreadyExists,
                    error_message: Some("Topic 'b' already exists.".into()),
                    num_partitions: -1,
                    replication_factor: -1,
                    configs: None,
                },
            ],
        }
    }

    #[test]
    fn the_response_round_trips_and_every_cut_fails() {
        for v in 5..=7 {
            let mut want = sample();
            if v < 7 {
                want.topics[0].topic_id = Uuid::default();
            }
            let mut buf = Vec::new();
            want.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(CreateTopicsResponse::decode(&mut r, v).unwrap(), want);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| CreateTopicsResponse::decode(r, v));
        }
    }

    #[test]
    fn a_response_by_hand() {
        // v7: throttle 0; one topic "t", id 1..16, no error, no message, 1 partition,
        // replication 1, null configs; tags.
        let mut b = vec![0, 0, 0, 0, 2, 2, b't'];
        b.extend(1..=16u8);
        b.extend([0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0]);
        let got = CreateTopicsResponse::decode(&mut Reader::new(&b), 7).unwrap();
        let t = &got.topics[0];
        assert_eq!(t.name, "t");
        assert_eq!(t.topic_id.0[0], 1);
        assert_eq!((t.num_partitions, t.replication_factor), (1, 1));
        assert_eq!(t.configs, None);
    }

    #[test]
    fn the_request_in_bytes() {
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "t".into(),
                num_partitions: 2,
                replication_factor: -1,
                assignments: vec![],
                configs: vec![("k".into(), Some("v".into()))],
            }],
            timeout_ms: 1000,
            validate_only: true,
        };
        let mut out = Vec::new();
        req.encode(7, &mut out);
        let mut want = vec![
            2, 2, b't', 0, 0, 0, 2, 0xff, 0xff, 1, 2, 2, b'k', 2, b'v', 0, 0,
        ];
        want.extend([0, 0, 0x03, 0xe8, 1, 0]);
        assert_eq!(out, want);
    }

    #[test]
    fn a_hostile_count_fails_fast() {
        let mut b = vec![0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x07];
        b.extend([0; 10]);
        assert!(CreateTopicsResponse::decode(&mut Reader::new(&b), 7).is_err());
    }
}
