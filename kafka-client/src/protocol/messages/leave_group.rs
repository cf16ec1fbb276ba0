//! LeaveGroup (key 13): members leave their group at once, so that their partitions move to the
//! other members now rather than after `session.timeout.ms` (what the consumer does before a
//! checkpoint).
//!
//! Versions 3-5: 3 makes it a batch of members identified by member id and
//! `group.instance.id` (KIP-345); flexible from 4; 5 adds a reason per member (KIP-800).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// A member that leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberIdentity {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// Why it leaves (v5+).
    pub reason: Option<String>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    /// `group.id`.
    pub group_id: String,
    /// Members leaving (a consumer sends itself).
    pub members: Vec<MemberIdentity>,
}

impl Request for LeaveGroupRequest {
    const API_KEY: ApiKey = ApiKey::LeaveGroup;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = LeaveGroupResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.group_id, flexible);
        out.put_length(Some(self.members.len()), flexible);
        for m in &self.members {
            out.put_string(&m.member_id, flexible);
            out.put_nullable_string(m.group_instance_id.as_deref(), flexible);
            if version >= 5 {
                out.put_nullable_string(m.reason.as_deref(), flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl LeaveGroupRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let group_id = r.string(flexible)?;
        let members = r.array_of(flexible, 2, |r| {
            let m = MemberIdentity {
                member_id: r.string(flexible)?,
                group_instance_id: r.nullable_string(flexible)?,
                reason: if version >= 5 {
                    r.nullable_string(flexible)?
                } else {
                    None
                },
            };
            r.skip_tagged_fields(flexible)?;
            Ok(m)
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self { group_id, members })
    }
}

/// One member's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberResponse {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// Error, e.g. `UNKNOWN_MEMBER_ID`.
    pub error_code: ErrorCode,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Group-level error.
    pub error_code: ErrorCode,
    /// Per member.
    pub members: Vec<MemberResponse>,
}

impl Response for LeaveGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = LeaveGroupRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let members = r.array_of(flexible, 4, |r| {
            let m = MemberResponse {
                member_id: r.string(flexible)?,
                group_instance_id: r.nullable_string(flexible)?,
                error_code: ErrorCode::from_i16(i16::read(r)?),
            };
            r.skip_tagged_fields(flexible)?;
            Ok(m)
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            members,
        })
    }
}

impl LeaveGroupResponse {
    /// The first member's error, else the group-level one.
    pub fn error(&self) -> ErrorCode {
        self.members
            .iter()
            .map(|m| m.error_code)
            .find(|c| !c.is_ok())
            .unwrap_or(self.error_code)
    }

    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = LeaveGroupRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        out.put_length(Some(self.members.len()), flexible);
        for m in &self.members {
            out.put_string(&m.member_id, flexible);
            out.put_nullable_string(m.group_instance_id.as_deref(), flexible);
            m.error_code.code().write(out);
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    fn sample() -> LeaveGroupResponse {
        LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            members: vec![
                MemberResponse {
                    member_id: "m-1".into(),
                    group_instance_id: None,
                    error_code: ErrorCode::None,
                },
                MemberResponse {
                    member_id: String::new(),
                    group_instance_id: Some("i-2".into()),
                    error_code: ErrorCode::UnknownMemberId,
                },
            ],
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample().encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in LeaveGroupRequest::MIN_VERSION..=LeaveGroupRequest::MAX_VERSION {
            let req = LeaveGroupRequest {
                group_id: "g".into(),
                members: vec![MemberIdentity {
                    member_id: "m-1".into(),
                    group_instance_id: Some("i-1".into()),
                    reason: (v >= 5).then(|| "checkpoint".into()),
                }],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(LeaveGroupRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                LeaveGroupResponse::decode(&mut r, v).unwrap(),
                sample(),
                "v{v}"
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| LeaveGroupResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128), v in 3i16..=5) {
            let _ = LeaveGroupResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 3i16..=5, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = LeaveGroupResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
