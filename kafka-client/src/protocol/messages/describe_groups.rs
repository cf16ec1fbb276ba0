//! DescribeGroups (key 15): a classic group's state, protocol and members with their
//! subscription and assignment bytes, from the group's coordinator.
//!
//! Versions 5-6, the flexible ones (Kafka 4 brokers speak 0-6): 6 adds an error message per
//! group and answers `GROUP_ID_NOT_FOUND` for a group that does not exist (KIP-1043) where
//! earlier versions answer a "Dead" group.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
    /// Also the operations the caller may perform.
    pub include_authorized_operations: bool,
}

impl Request for DescribeGroupsRequest {
    const API_KEY: ApiKey = ApiKey::DescribeGroups;
    const MIN_VERSION: i16 = 5;
    const MAX_VERSION: i16 = 6;
    const FLEXIBLE_FROM: i16 = 5;
    type Response = DescribeGroupsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            out.put_string(g, true);
        }
        self.include_authorized_operations.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// A member of a classic group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroupMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// The member's host, as the coordinator saw it.
    pub client_host: String,
    /// Its subscription (the consumer protocol's bytes).
    pub member_metadata: Vec<u8>,
    /// Its assignment (the consumer protocol's bytes).
    pub member_assignment: Vec<u8>,
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    /// Error.
    pub error_code: ErrorCode,
    /// The coordinator's message (v6+).
    pub error_message: Option<String>,
    /// Id.
    pub group_id: String,
    /// State: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`, `Dead`.
    pub group_state: String,
    /// `consumer` for consumer groups.
    pub protocol_type: String,
    /// The assignor chosen (`range`, `cooperative-sticky`, …).
    pub protocol_data: String,
    /// Members.
    pub members: Vec<DescribedGroupMember>,
    /// Operations the caller may perform (a bit set; `i32::MIN` when not asked).
    pub authorized_operations: i32,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per group.
    pub groups: Vec<DescribedGroup>,
}

impl Response for DescribeGroupsResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let groups = r.array_of(true, 11, |r| {
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let error_message = if version >= 6 {
                r.nullable_string(true)?
            } else {
                None
            };
            let group_id = r.string(true)?;
            let group_state = r.string(true)?;
            let protocol_type = r.string(true)?;
            let protocol_data = r.string(true)?;
            let members = r.array_of(true, 7, |r| {
                let m = DescribedGroupMember {
                    member_id: r.string(true)?,
                    group_instance_id: r.nullable_string(true)?,
                    client_id: r.string(true)?,
                    client_host: r.string(true)?,
                    member_metadata: bytes(r)?,
                    member_assignment: bytes(r)?,
                };
                r.skip_tagged_fields(true)?;
                Ok(m)
            })?;
            let authorized_operations = i32::read(r)?;
            r.skip_tagged_fields(true)?;
            Ok(DescribedGroup {
                error_code,
                error_message,
                group_id,
                group_state,
                protocol_type,
                protocol_data,
                members,
                authorized_operations,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            groups,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

fn bytes(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    Ok(r.nullable_bytes(true)?
        .ok_or(DecodeError::UnexpectedNull("member bytes"))?
        .to_vec())
}

impl DescribeGroupsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            g.error_code.code().write(out);
            if version >= 6 {
                out.put_nullable_string(g.error_message.as_deref(), true);
            }
            out.put_string(&g.group_id, true);
            out.put_string(&g.group_state, true);
            out.put_string(&g.protocol_type, true);
            out.put_string(&g.protocol_data, true);
            out.put_length(Some(g.members.len()), true);
            for m in &g.members {
                out.put_string(&m.member_id, true);
                out.put_nullable_string(m.group_instance_id.as_deref(), true);
                out.put_string(&m.client_id, true);
                out.put_string(&m.client_host, true);
                out.put_nullable_bytes(Some(&m.member_metadata), true);
                out.put_nullable_bytes(Some(&m.member_assignment), true);
                out.put_empty_tagged_fields(true);
            }
            g.authorized_operations.write(out);
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
        for v in 5..=6 {
            let want = DescribeGroupsResponse {
                throttle_time_ms: 0,
                groups: vec![DescribedGroup {
                    error_code: ErrorCode::None,
                    error_message: None,
                    group_id: "g".into(),
                    group_state: "Stable".into(),
                    protocol_type: "consumer".into(),
                    protocol_data: "range".into(),
                    members: vec![DescribedGroupMember {
                        member_id: "m-1".into(),
                        group_instance_id: Some("i".into()),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        member_metadata: vec![0, 3, 1],
                        member_assignment: vec![],
                    }],
                    authorized_operations: i32::MIN,
                }],
            };
            let mut buf = Vec::new();
            want.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(DescribeGroupsResponse::decode(&mut r, v).unwrap(), want);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| DescribeGroupsResponse::decode(r, v));
        }
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DescribeGroupsRequest {
            groups: vec!["g".into()],
            include_authorized_operations: false,
        };
        let mut out = Vec::new();
        req.encode(6, &mut out);
        assert_eq!(out, [2, 2, b'g', 0, 0]);
    }
}
