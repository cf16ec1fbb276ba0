//! Metadata (key 3): brokers, topics, partitions and their leaders.
//!
//! Versions 4-12 (Kafka 4 removed 0-3); flexible from 9; topic ids from 10.

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Topics to describe; `None` for all topics, empty for brokers only.
    pub topics: Option<Vec<String>>,
    /// Whether the broker may create a missing topic (if its config allows).
    pub allow_auto_topic_creation: bool,
}

impl Request for MetadataRequest {
    const API_KEY: ApiKey = ApiKey::Metadata;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 12;
    const FLEXIBLE_FROM: i16 = 9;
    type Response = MetadataResponse;
    const CLIENT_THROTTLES_FROM: i16 = 6;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_length(self.topics.as_ref().map(Vec::len), flexible);
        for t in self.topics.iter().flatten() {
            if version >= 10 {
                Uuid::default().write(out);
            }
            out.put_string(t, flexible);
            out.put_empty_tagged_fields(flexible);
        }
        self.allow_auto_topic_creation.write(out);
        if (8..=10).contains(&version) {
            false.write(out);
        }
        if version >= 8 {
            false.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl MetadataRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let topics = match r.length(flexible)? {
            None => None,
            Some(n) => {
                let n = r.bounded_count(n, 1)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    if version >= 10 {
                        Uuid::read(r)?;
                    }
                    v.push(r.string(flexible)?);
                    r.skip_tagged_fields(flexible)?;
                }
                Some(v)
            }
        };
        let allow_auto_topic_creation = bool::read(r)?;
        if (8..=10).contains(&version) {
            bool::read(r)?;
        }
        if version >= 8 {
            bool::read(r)?;
        }
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            topics,
            allow_auto_topic_creation,
        })
    }
}

/// A broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBroker {
    /// Its id.
    pub node_id: i32,
    /// Host name as advertised.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

/// A partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPartition {
    /// Error for this partition (e.g. `LEADER_NOT_AVAILABLE`).
    pub error_code: ErrorCode,
    /// Index.
    pub partition_index: i32,
    /// Leader broker id, -1 if none.
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replicas.
    pub replica_nodes: Vec<i32>,
    /// In-sync replicas.
    pub isr_nodes: Vec<i32>,
    /// Offline replicas.
    pub offline_replicas: Vec<i32>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataTopic {
    /// Error for this topic (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error_code: ErrorCode,
    /// Name (null only when asked by id, v12+).
    pub name: Option<String>,
    /// Topic id (v10+).
    pub topic_id: Uuid,
    /// Internal topic.
    pub is_internal: bool,
    /// Partitions.
    pub partitions: Vec<MetadataPartition>,
    /// Authorized operations bitfield.
    pub topic_authorized_operations: i32,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Brokers.
    pub brokers: Vec<MetadataBroker>,
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Controller id.
    pub controller_id: i32,
    /// Topics.
    pub topics: Vec<MetadataTopic>,
}

fn read_i32_array(r: &mut Reader<'_>, flexible: bool) -> Result<Vec<i32>, DecodeError> {
    r.array_of(flexible, 4, i32::read)
}

fn write_i32_array(out: &mut Vec<u8>, v: &[i32], flexible: bool) {
    out.put_length(Some(v.len()), flexible);
    for x in v {
        x.write(out);
    }
}

impl Response for MetadataResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = MetadataRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let brokers = r.array_of(flexible, 10, |r| {
            let b = MetadataBroker {
                node_id: i32::read(r)?,
                host: r.string(flexible)?,
                port: i32::read(r)?,
                rack: r.nullable_string(flexible)?,
            };
            r.skip_tagged_fields(flexible)?;
            Ok(b)
        })?;
        let cluster_id = r.nullable_string(flexible)?;
        let controller_id = i32::read(r)?;
        let topics = r.array_of(flexible, 4, |r| {
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let name = if version >= 12 {
                r.nullable_string(flexible)?
            } else {
                Some(r.string(flexible)?)
            };
            let topic_id = if version >= 10 {
                Uuid::read(r)?
            } else {
                Uuid::default()
            };
            let is_internal = bool::read(r)?;
            let partitions = r.array_of(flexible, 14, |r| {
                let p = MetadataPartition {
                    error_code: ErrorCode::from_i16(i16::read(r)?),
                    partition_index: i32::read(r)?,
                    leader_id: i32::read(r)?,
                    leader_epoch: if version >= 7 { i32::read(r)? } else { -1 },
                    replica_nodes: read_i32_array(r, flexible)?,
                    isr_nodes: read_i32_array(r, flexible)?,
                    offline_replicas: if version >= 5 {
                        read_i32_array(r, flexible)?
                    } else {
                        Vec::new()
                    },
                };
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            let topic_authorized_operations = if version >= 8 {
                i32::read(r)?
            } else {
                i32::MIN
            };
            r.skip_tagged_fields(flexible)?;
            Ok(MetadataTopic {
                error_code,
                name,
                topic_id,
                is_internal,
                partitions,
                topic_authorized_operations,
            })
        })?;
        if (8..=10).contains(&version) {
            i32::read(r)?;
        }
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            brokers,
            cluster_id,
            controller_id,
            topics,
        })
    }
}

impl MetadataResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = MetadataRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.brokers.len()), flexible);
        for b in &self.brokers {
            b.node_id.write(out);
            out.put_string(&b.host, flexible);
            b.port.write(out);
            out.put_nullable_string(b.rack.as_deref(), flexible);
            out.put_empty_tagged_fields(flexible);
        }
        out.put_nullable_string(self.cluster_id.as_deref(), flexible);
        self.controller_id.write(out);
        out.put_length(Some(self.topics.len()), flexible);
        for t in &self.topics {
            t.error_code.code().write(out);
            if version >= 12 {
                out.put_nullable_string(t.name.as_deref(), flexible);
            } else {
                out.put_string(t.name.as_deref().unwrap_or(""), flexible);
            }
            if version >= 10 {
                t.topic_id.write(out);
            }
            t.is_internal.write(out);
            out.put_length(Some(t.partitions.len()), flexible);
            for p in &t.partitions {
                p.error_code.code().write(out);
                p.partition_index.write(out);
                p.leader_id.write(out);
                if version >= 7 {
                    p.leader_epoch.write(out);
                }
                write_i32_array(out, &p.replica_nodes, flexible);
                write_i32_array(out, &p.isr_nodes, flexible);
                if version >= 5 {
                    write_i32_array(out, &p.offline_replicas, flexible);
                }
                out.put_empty_tagged_fields(flexible);
            }
            if version >= 8 {
                t.topic_authorized_operations.write(out);
            }
            out.put_empty_tagged_fields(flexible);
        }
        if (8..=10).contains(&version) {
            i32::MIN.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;

    pub(crate) fn sample(version: i16) -> MetadataResponse {
        MetadataResponse {
            throttle_time_ms: 0,
            brokers: vec![
                MetadataBroker {
                    node_id: 1,
                    host: "127.0.0.1".into(),
                    port: 9092,
                    rack: None,
                },
                MetadataBroker {
                    node_id: 2,
                    host: "localhost".into(),
                    port: 9093,
                    rack: Some("r1".into()),
                },
            ],
            cluster_id: Some("abc".into()),
            controller_id: 1,
            topics: vec![MetadataTopic {
                error_code: ErrorCode::None,
                name: Some("t".into()),
                topic_id: if version >= 10 {
                    Uuid([3; 16])
                } else {
                    Uuid::default()
                },
                is_internal: false,
                partitions: (0..3)
                    .map(|i| MetadataPartition {
                        error_code: ErrorCode::None,
                        partition_index: i,
                        leader_id: 1 + i % 2,
                        leader_epoch: if version >= 7 { 4 } else { -1 },
                        replica_nodes: vec![1, 2],
                        isr_nodes: vec![1, 2],
                        offline_replicas: vec![],
                    })
                    .collect(),
                topic_authorized_operations: i32::MIN,
            }],
        }
    }

    #[test]
    fn roundtrip_every_version() {
        for v in MetadataRequest::MIN_VERSION..=MetadataRequest::MAX_VERSION {
            for topics in [
                None,
                Some(vec![]),
                Some(vec!["a".to_owned(), "bb".to_owned()]),
            ] {
                let req = MetadataRequest {
                    topics,
                    allow_auto_topic_creation: true,
                };
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(MetadataRequest::decode(&mut r, v).unwrap(), req, "v{v}");
                r.expect_end().unwrap();
            }
            let resp = sample(v);
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(MetadataResponse::decode(&mut r, v).unwrap(), resp, "v{v}");
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| MetadataResponse::decode(r, v));
        }
    }
}
