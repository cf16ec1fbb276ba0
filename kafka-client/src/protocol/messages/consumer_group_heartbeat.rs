//! ConsumerGroupHeartbeat (key 68): the whole membership of the consumer group protocol of
//! KIP-848 (`group.protocol=consumer`, Kafka 4.0+). A member joins with epoch 0, heartbeats
//! with the epoch the coordinator gave it and the partitions it owns, and receives its
//! assignment (computed by the broker's assignor) in the answers; it leaves with epoch -1, or
//! -2 when a static member means to come back within the session timeout.
//!
//! Versions 0-1, both flexible; 1 adds `subscribed_topic_regex` (not used here) and makes the
//! member id the client's own (KIP-1082). Nullable fields mean "unchanged since the last
//! heartbeat".

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// Epoch of a member joining (or rejoining after it was fenced).
pub const JOIN_EPOCH: i32 = 0;
/// Epoch of a member leaving the group for good.
pub const LEAVE_EPOCH: i32 = -1;
/// Epoch of a static member leaving for now: its partitions wait for it (same
/// `group.instance.id`) until the session timeout.
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// Partitions of one topic, by topic id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicIdPartitions {
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerGroupHeartbeatRequest {
    /// `group.id`.
    pub group_id: String,
    /// The member id (chosen by the client, kept for its whole life).
    pub member_id: String,
    /// 0 to join, the current epoch to heartbeat, -1 / -2 to leave.
    pub member_epoch: i32,
    /// `group.instance.id` (null: none, or unchanged).
    pub instance_id: Option<String>,
    /// `client.rack` (null: none, or unchanged).
    pub rack_id: Option<String>,
    /// `max.poll.interval.ms`; -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// Subscribed topics (null: unchanged).
    pub subscribed_topic_names: Option<Vec<String>>,
    /// Subscribed topic regex (v1+; null: none or unchanged).
    pub subscribed_topic_regex: Option<String>,
    /// `group.remote.assignor` (null: the broker's default, or unchanged).
    pub server_assignor: Option<String>,
    /// Partitions owned now (null: unchanged).
    pub topic_partitions: Option<Vec<TopicIdPartitions>>,
}

fn write_topic_partitions(out: &mut Vec<u8>, list: Option<&[TopicIdPartitions]>) {
    out.put_length(list.map(<[_]>::len), true);
    for t in list.unwrap_or_default() {
        t.topic_id.write(out);
        out.put_length(Some(t.partitions.len()), true);
        for p in &t.partitions {
            p.write(out);
        }
        out.put_empty_tagged_fields(true);
    }
}

fn read_topic_partitions(r: &mut Reader<'_>) -> Result<TopicIdPartitions, DecodeError> {
    let t = TopicIdPartitions {
        topic_id: Uuid::read(r)?,
        partitions: r.array_of(true, 4, i32::read)?,
    };
    r.skip_tagged_fields(true)?;
    Ok(t)
}

impl Request for ConsumerGroupHeartbeatRequest {
    const API_KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;
    const FLEXIBLE_FROM: i16 = 0;
    type Response = ConsumerGroupHeartbeatResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        out.put_string(&self.group_id, true);
        out.put_string(&self.member_id, true);
        self.member_epoch.write(out);
        out.put_nullable_string(self.instance_id.as_deref(), true);
        out.put_nullable_string(self.rack_id.as_deref(), true);
        self.rebalance_timeout_ms.write(out);
        let topics = self.subscribed_topic_names.as_deref();
        out.put_length(topics.map(<[_]>::len), true);
        for t in topics.unwrap_or_default() {
            out.put_string(t, true);
        }
        if version >= 1 {
            out.put_nullable_string(self.subscribed_topic_regex.as_deref(), true);
        }
        out.put_nullable_string(self.server_assignor.as_deref(), true);
        write_topic_partitions(out, self.topic_partitions.as_deref());
        out.put_empty_tagged_fields(true);
    }

    fn size_hint(&self) -> usize {
        96 + self.topic_partitions.as_ref().map_or(0, |t| t.len() * 64)
    }
}

impl ConsumerGroupHeartbeatRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let req = Self {
            group_id: r.string(true)?,
            member_id: r.string(true)?,
            member_epoch: i32::read(r)?,
            instance_id: r.nullable_string(true)?,
            rack_id: r.nullable_string(true)?,
            rebalance_timeout_ms: i32::read(r)?,
            subscribed_topic_names: r.nullable_array_of(true, 1, |r| r.string(true))?,
            subscribed_topic_regex: if version >= 1 {
                r.nullable_string(true)?
            } else {
                None
            },
            server_assignor: r.nullable_string(true)?,
            topic_partitions: r.nullable_array_of(true, 18, read_topic_partitions)?,
        };
        r.skip_tagged_fields(true)?;
        Ok(req)
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupHeartbeatResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// The broker's explanation of the error.
    pub error_message: Option<String>,
    /// The member id (echoed).
    pub member_id: Option<String>,
    /// The member's epoch now.
    pub member_epoch: i32,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: i32,
    /// The partitions assigned now, when the broker sends them (null: unchanged).
    pub assignment: Option<Vec<TopicIdPartitions>>,
}

impl Response for ConsumerGroupHeartbeatResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let error_message = r.nullable_string(true)?;
        let member_id = r.nullable_string(true)?;
        let member_epoch = i32::read(r)?;
        let heartbeat_interval_ms = i32::read(r)?;
        // A nullable struct: -1 for null, 1 for present.
        let assignment = match i8::read(r)? {
            -1 => None,
            1 => {
                let parts = r.array_of(true, 18, read_topic_partitions)?;
                r.skip_tagged_fields(true)?;
                Some(parts)
            }
            v => {
                return Err(DecodeError::InvalidValue {
                    what: "nullable struct marker",
                    value: v as i64,
                });
            }
        };
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            error_message,
            member_id,
            member_epoch,
            heartbeat_interval_ms,
            assignment,
        })
    }
}

impl ConsumerGroupHeartbeatResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        out.put_nullable_string(self.error_message.as_deref(), true);
        out.put_nullable_string(self.member_id.as_deref(), true);
        self.member_epoch.write(out);
        self.heartbeat_interval_ms.write(out);
        match &self.assignment {
            None => (-1i8).write(out),
            Some(parts) => {
                1i8.write(out);
                write_topic_partitions(out, Some(parts));
                out.put_empty_tagged_fields(true);
            }
        }
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;
    use proptest::prelude::*;

    fn request() -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: "g".into(),
            member_id: "m".into(),
            member_epoch: 3,
            instance_id: Some("i".into()),
            rack_id: None,
            rebalance_timeout_ms: 300_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            subscribed_topic_regex: None,
            server_assignor: Some("uniform".into()),
            topic_partitions: Some(vec![TopicIdPartitions {
                topic_id: Uuid([1; 16]),
                partitions: vec![0, 2],
            }]),
        }
    }

    #[test]
    fn java_bytes() {
        // ConsumerGroupHeartbeatRequestData v0 as Java's generated writer lays it out: compact
        // strings, a nullable compact array of topic names, a nullable compact array of
        // (uuid, compact int32 array, tagged fields), trailing tagged fields.
        let mut want: Vec<u8> = vec![2, b'g', 2, b'm', 0, 0, 0, 3, 2, b'i', 0, 0, 4, 0x93, 0xe0];
        want.extend_from_slice(&[2, 2, b't']); // topic names
        want.extend_from_slice(&[8, b'u', b'n', b'i', b'f', b'o', b'r', b'm']);
        want.extend_from_slice(&[2]);
        want.extend_from_slice(&[1; 16]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0]);
        let mut out = Vec::new();
        request().encode(0, &mut out);
        assert_eq!(out, want);
    }

    #[test]
    fn roundtrip_every_version() {
        for v in 0..=1 {
            for req in [request(), ConsumerGroupHeartbeatRequest::default()] {
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(
                    ConsumerGroupHeartbeatRequest::decode(&mut r, v).unwrap(),
                    req
                );
                r.expect_end().unwrap();
            }
            for assignment in [None, Some(vec![]), request().topic_partitions] {
                let resp = ConsumerGroupHeartbeatResponse {
                    throttle_time_ms: 1,
                    error_code: ErrorCode::FencedMemberEpoch,
                    error_message: Some("x".into()),
                    member_id: Some("m".into()),
                    member_epoch: 7,
                    heartbeat_interval_ms: 5000,
                    assignment,
                };
                let mut buf = Vec::new();
                resp.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(
                    ConsumerGroupHeartbeatResponse::decode(&mut r, v).unwrap(),
                    resp
                );
                r.expect_end().unwrap();
                every_cut_fails_to_decode(&buf, |r| ConsumerGroupHeartbeatResponse::decode(r, v));
            }
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = ConsumerGroupHeartbeatResponse::decode(&mut Reader::new(&bytes), 1);
        }
    }
}
