//! ListGroups (key 16): the groups a broker coordinates (an admin client asks every broker).
//!
//! Versions 3-5, the flexible ones: 4 filters by state (KIP-518), 5 by type (`classic`,
//! `consumer`, `share`; KIP-848) and answers with each group's type.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsRequest {
    /// Only groups in these states (v4+; empty: all).
    pub states_filter: Vec<String>,
    /// Only groups of these types (v5+; empty: all).
    pub types_filter: Vec<String>,
}

impl Request for ListGroupsRequest {
    const API_KEY: ApiKey = ApiKey::ListGroups;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = ListGroupsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        if version >= 4 {
            put_strings(out, &self.states_filter);
        }
        if version >= 5 {
            put_strings(out, &self.types_filter);
        }
        out.put_empty_tagged_fields(true);
    }
}

fn put_strings(out: &mut Vec<u8>, v: &[String]) {
    out.put_length(Some(v.len()), true);
    for s in v {
        out.put_string(s, true);
    }
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    /// Id.
    pub group_id: String,
    /// `consumer` for consumer groups (classic protocol type), empty for KIP-848 ones.
    pub protocol_type: String,
    /// State (v4+).
    pub group_state: String,
    /// Type (v5+): `classic`, `consumer`, `share`.
    pub group_type: String,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListGroupsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Groups.
    pub groups: Vec<ListedGroup>,
}

impl Response for ListGroupsResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let groups = r.array_of(true, 3, |r| {
            let group_id = r.string(true)?;
            let protocol_type = r.string(true)?;
            let group_state = if version >= 4 {
                r.string(true)?
            } else {
                String::new()
            };
            let group_type = if version >= 5 {
                r.string(true)?
            } else {
                String::new()
            };
            r.skip_tagged_fields(true)?;
            Ok(ListedGroup {
                group_id,
                protocol_type,
                group_state,
                group_type,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            groups,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl ListGroupsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            out.put_string(&g.group_id, true);
            out.put_string(&g.protocol_type, true);
            if version >= 4 {
                out.put_string(&g.group_state, true);
            }
            if version >= 5 {
                out.put_string(&g.group_type, true);
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
        for v in 3..=5 {
            let want = ListGroupsResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::None,
                groups: vec![ListedGroup {
                    group_id: "g".into(),
                    protocol_type: "consumer".into(),
                    group_state: if v >= 4 {
                        "Stable".into()
                    } else {
                        String::new()
                    },
                    group_type: if v >= 5 {
                        "classic".into()
                    } else {
                        String::new()
                    },
                }],
            };
            let mut buf = Vec::new();
            want.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(ListGroupsResponse::decode(&mut r, v).unwrap(), want);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| ListGroupsResponse::decode(r, v));
        }
    }

    #[test]
    fn the_request_in_bytes() {
        let req = ListGroupsRequest {
            states_filter: vec!["Empty".into()],
            types_filter: vec![],
        };
        let mut out = Vec::new();
        req.encode(5, &mut out);
        assert_eq!(out, [2, 6, b'E', b'm', b'p', b't', b'y', 1, 0]);
        out.clear();
        req.encode(3, &mut out);
        assert_eq!(out, [0]);
    }
}
