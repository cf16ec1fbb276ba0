//! SyncGroup (key 14): after a join, the leader sends every member's assignment and each
//! member receives its own.
//!
//! Versions 3-5: 3 brings `group.instance.id`; flexible from 4; 5 sends and returns the protocol
//! type and name (KIP-559). The assignment of a consumer is a
//! [`ConsumerProtocolAssignment`](super::consumer_protocol::ConsumerProtocolAssignment).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

use super::join_group::read_bytes;

/// One member's assignment (sent by the leader only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequestAssignment {
    /// Member id.
    pub member_id: String,
    /// An encoded assignment.
    pub assignment: Vec<u8>,
}

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupRequest {
    /// `group.id`.
    pub group_id: String,
    /// The generation of the join.
    pub generation_id: i32,
    /// This member's id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// The protocol type of the join (v5+).
    pub protocol_type: Option<String>,
    /// The protocol chosen by the join (v5+).
    pub protocol_name: Option<String>,
    /// Every member's assignment from the leader; empty from followers.
    pub assignments: Vec<SyncGroupRequestAssignment>,
}

impl Request for SyncGroupRequest {
    const API_KEY: ApiKey = ApiKey::SyncGroup;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = SyncGroupResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.group_id, flexible);
        self.generation_id.write(out);
        out.put_string(&self.member_id, flexible);
        out.put_nullable_string(self.group_instance_id.as_deref(), flexible);
        if version >= 5 {
            out.put_nullable_string(self.protocol_type.as_deref(), flexible);
            out.put_nullable_string(self.protocol_name.as_deref(), flexible);
        }
        out.put_length(Some(self.assignments.len()), flexible);
        for a in &self.assignments {
            out.put_string(&a.member_id, flexible);
            out.put_nullable_bytes(Some(&a.assignment), flexible);
            out.put_empty_tagged_fields(flexible);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl SyncGroupRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let group_id = r.string(flexible)?;
        let generation_id = i32::read(r)?;
        let member_id = r.string(flexible)?;
        let group_instance_id = r.nullable_string(flexible)?;
        let (protocol_type, protocol_name) = if version >= 5 {
            (r.nullable_string(flexible)?, r.nullable_string(flexible)?)
        } else {
            (None, None)
        };
        let assignments = r.array_of(flexible, 2, |r| {
            let a = SyncGroupRequestAssignment {
                member_id: r.string(flexible)?,
                assignment: read_bytes(r, flexible, "assignment")?,
            };
            r.skip_tagged_fields(flexible)?;
            Ok(a)
        })?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        })
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error; `REBALANCE_IN_PROGRESS` means: join again.
    pub error_code: ErrorCode,
    /// The group's protocol type (v5+).
    pub protocol_type: Option<String>,
    /// The group's protocol (v5+).
    pub protocol_name: Option<String>,
    /// This member's encoded assignment (empty on error).
    pub assignment: Vec<u8>,
}

impl Response for SyncGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = SyncGroupRequest::is_flexible(version);
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let (protocol_type, protocol_name) = if version >= 5 {
            (r.nullable_string(flexible)?, r.nullable_string(flexible)?)
        } else {
            (None, None)
        };
        let assignment = read_bytes(r, flexible, "assignment")?;
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            protocol_type,
            protocol_name,
            assignment,
        })
    }
}

impl SyncGroupResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = SyncGroupRequest::is_flexible(version);
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        if version >= 5 {
            out.put_nullable_string(self.protocol_type.as_deref(), flexible);
            out.put_nullable_string(self.protocol_name.as_deref(), flexible);
        }
        out.put_nullable_bytes(Some(&self.assignment), flexible);
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    pub(crate) fn sample(version: i16) -> SyncGroupResponse {
        SyncGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            protocol_type: (version >= 5).then(|| "consumer".into()),
            protocol_name: (version >= 5).then(|| "range".into()),
            assignment: vec![0, 3, 0, 0, 0, 1],
        }
    }

    fn encoded(version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        sample(version).encode(version, &mut buf);
        buf
    }

    #[test]
    fn roundtrip_every_version() {
        for v in SyncGroupRequest::MIN_VERSION..=SyncGroupRequest::MAX_VERSION {
            let req = SyncGroupRequest {
                group_id: "g".into(),
                generation_id: 4,
                member_id: "m-1".into(),
                group_instance_id: None,
                protocol_type: (v >= 5).then(|| "consumer".into()),
                protocol_name: (v >= 5).then(|| "range".into()),
                assignments: vec![
                    SyncGroupRequestAssignment {
                        member_id: "m-1".into(),
                        assignment: vec![1, 2],
                    },
                    SyncGroupRequestAssignment {
                        member_id: "m-2".into(),
                        assignment: vec![],
                    },
                ],
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(SyncGroupRequest::decode(&mut r, v).unwrap(), req, "v{v}");
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                SyncGroupResponse::decode(&mut r, v).unwrap(),
                sample(v),
                "v{v}"
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| SyncGroupResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128), v in 3i16..=5) {
            let _ = SyncGroupResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 3i16..=5, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = SyncGroupResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
