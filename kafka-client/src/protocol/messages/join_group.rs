//! JoinGroup (key 11): joins a consumer group of the classic protocol; the coordinator answers
//! once every member has (re)joined, the leader with every member's subscription.
//!
//! Versions 5-9: 5 brings `group.instance.id` (static membership, KIP-345), and since 4 a new
//! member's first join is answered `MEMBER_ID_REQUIRED` with the member id to join again with;
//! flexible from 6; 7 returns the protocol type; 8 sends a reason (KIP-800); 9 may tell a static
//! leader to skip the assignment.
//!
//! The protocol metadata of a consumer is a
//! [`ConsumerProtocolSubscription`](super::consumer_protocol::ConsumerProtocolSubscription),
//! under protocol type [`PROTOCOL_TYPE`](super::consumer_protocol::PROTOCOL_TYPE) and one
//! protocol name per assignor (`range`, `roundrobin`, ...).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// One protocol (assignor) the member supports, with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequestProtocol {
    /// Protocol (assignor) name.
    pub name: String,
    /// Metadata: an encoded subscription.
    pub metadata: Vec<u8>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupRequest {
    /// `group.id`.
    pub group_id: String,
    /// `session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `max.poll.interval.ms`: how long the coordinator waits for members to rejoin.
    pub rebalance_timeout_ms: i32,
    /// Empty on the first join; then the id the coordinator gave.
    pub member_id: String,
    /// `group.instance.id` (static membership).
    pub group_instance_id: Option<String>,
    /// `consumer` for consumers.
    pub protocol_type: String,
    /// Supported protocols, in order of preference.
    pub protocols: Vec<JoinGroupRequestProtocol>,
    /// Why the member (re)joins (v8+).
    pub reason: Option<String>,
}

impl Request for JoinGroupRequest {
    const API_KEY: ApiKey = ApiKey::JoinGroup;
    const MIN_VERSION: i16 = 5;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = JoinGroupResponse;
    const CLIENT_THROTTLES_FROM: i16 = 3;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.group_id, flexible);
        self.session_timeout_ms.write(out);
        self.rebalance_timeout_ms.write(out);
        out.put_string(&self.member_id, flexible);
        out.put_nullable_string(self.group_instance_id.as_deref(), flexible);
        out.put_string(&self.protocol_type, flexible);
        out.put_length(Some(self.protocols.len()), flexible);
        for p in &self.protocols {
            out.put_string(&p.name, flexible);
            out.put_nullable_bytes(Some(&p.metadata), flexible);
            out.put_empty_tagged_fields(flexible);
        }
        if version >= 8 {
            out.put_nullable_string(self.reason.as_deref(), flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl JoinGroupRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let group_id = r.string(flexible)?;
        let session_timeout_ms = i32::read(r)?;
        let rebalance_timeout_ms = i32::read(r)?;
        let member_id = r.string(flexible)?;
        let group_instance_id = r.nullable_string(flexible)?;
        let protocol_type = r.string(flexible)?;
        let protocols = r.array_of(flexible, 2, |r| {
            let p = JoinGroupRequestProtocol {
                name: r.string(flexible)?,
                metadata: read_bytes(r, flexible, "protocol metadata")?,
            };
            r.skip_tagged_fields(flexible)?;
            Ok(p)
        })?;
        let reason = if version >= 8 {
            r.nullable_string(flexible)?
        } else {
            None
        };
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            group_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            member_id,
            group_instance_id,
            protocol_type,
            protocols,
            reason,
        })
    }
}

/// Non-null bytes, copied out of the frame.
pub(crate) fn read_bytes(
    r: &mut Reader<'_>,
    flexible: bool,
    what: &'static str,
) -> Result<Vec<u8>, DecodeError> {
    r.nullable_bytes(flexible)?
        .map(<[u8]>::to_vec)
        .ok_or(DecodeError::UnexpectedNull(what))
}

/// A member of the group, as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupResponseMember {
    /// Member id.
    pub member_id: String,
    /// Its `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// Its metadata for the chosen protocol: an encoded subscription.
    pub metadata: Vec<u8>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error; `MEMBER_ID_REQUIRED` means: join again with `member_id`.
    pub error_code: ErrorCode,
    /// The generation, -1 on error.
    pub generation_id: i32,
    /// The group's protocol type (v7+).
    pub protocol_type: Option<String>,
    /// The chosen protocol (assignor); null (v7+) or empty on error.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// A static leader that rejoined must not assign again (v9+).
    pub skip_assignment: bool,
    /// This member's id.
    pub member_id: String,
    /// Every member, for the leader only (empty for followers).
    pub members: Vec<JoinGroupResponseMember>,
}

impl JoinGroupResponse {
    /// Whether this member leads the group and must compute the assignment.
    pub fn is_leader(&self) -> bool {
        self.leader == self.member_id
    }

    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = JoinGroupRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        self.generation_id.write(out);
        if version >= 7 {
            out.put_nullable_string(self.protocol_type.as_deref(), flexible);
            out.put_nullable_string(self.protocol_name.as_deref(), flexible);
        } else {
            out.put_string(self.protocol_name.as_deref().unwrap_or(""), flexible);
        }
        out.put_string(&self.leader, flexible);
        if version >= 9 {
            self.skip_assignment.write(out);
        }
        out.put_string(&self.member_id, flexible);
        out.put_length(Some(self.members.len()), flexible);
        for m in &self.members {
            out.put_string(&m.member_id, flexible);
            out.put_nullable_string(m.group_instance_id.as_deref(), flexible);
            out.put_nullable_bytes(Some(&m.metadata), flexible);
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl Response for JoinGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = JoinGroupRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let generation_id = i32::read(r)?;
        let (protocol_type, protocol_name) = if version >= 7 {
            (r.nullable_string(flexible)?, r.nullable_string(flexible)?)
        } else {
            (None, Some(r.string(flexible)?))
        };
        let leader = r.string(flexible)?;
        let skip_assignment = if version >= 9 { bool::read(r)? } else { false };
        let member_id = r.string(flexible)?;
        let members = r.array_of(flexible, 3, |r| {
            let m = JoinGroupResponseMember {
                member_id: r.string(flexible)?,
                group_instance_id: r.nullable_string(flexible)?,
                metadata: read_bytes(r, flexible, "member metadata")?,
            };
            r.skip_tagged_fields(flexible)?;
            Ok(m)
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            generation_id,
            protocol_type,
            protocol_name,
            leader,
            skip_assignment,
            member_id,
            members,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    pub(crate) fn sample(version: i16) -> JoinGroupResponse {
        JoinGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            generation_id: 4,
            protocol_type: (version >= 7).then(|| "consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            skip_assignment: version >= 9,
            member_id: "m-1".into(),
            members: vec![
                JoinGroupResponseMember {
                    member_id: "m-1".into(),
                    group_instance_id: None,
                    metadata: vec![0, 3, 0, 0, 0, 0],
                },
                JoinGroupResponseMember {
                    member_id: "m-2".into(),
                    group_instance_id: Some("i-2".into()),
                    metadata: vec![],
                },
            ],
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample(version).encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in JoinGroupRequest::MIN_VERSION..=JoinGroupRequest::MAX_VERSION {
            let req = JoinGroupRequest {
                group_id: "g".into(),
                session_timeout_ms: 45_000,
                rebalance_timeout_ms: 300_000,
                member_id: String::new(),
                group_instance_id: Some("i-1".into()),
                protocol_type: "consumer".into(),
                protocols: vec![
                    JoinGroupRequestProtocol {
                        name: "range".into(),
                        metadata: vec![1, 2, 3],
                    },
                    JoinGroupRequestProtocol {
                        name: "roundrobin".into(),
                        metadata: vec![],
                    },
                ],
                reason: (v >= 8).then(|| "restored".into()),
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(JoinGroupRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            let got = JoinGroupResponse::decode(&mut r, v).unwrap();
            assert_eq!(got, sample(v), "v{v}");
            assert!(got.is_leader());
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| JoinGroupResponse::decode(r, v));
        }
    }

    #[test]
    fn error_answer_with_null_protocol() {
        for v in 7..=9 {
            let resp = JoinGroupResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::MemberIdRequired,
                generation_id: -1,
                protocol_type: None,
                protocol_name: None,
                leader: String::new(),
                skip_assignment: false,
                member_id: "consumer-1-abc".into(),
                members: vec![],
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            assert_eq!(
                JoinGroupResponse::decode(&mut Reader::new(&buf), v).unwrap(),
                resp
            );
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 5i16..=9) {
            let _ = JoinGroupResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 5i16..=9, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = JoinGroupResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
