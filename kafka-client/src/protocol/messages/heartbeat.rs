//! Heartbeat (key 12): keeps a member in its group between rebalances; the answer says when a
//! rebalance started (`REBALANCE_IN_PROGRESS`) and the member must rejoin.
//!
//! Versions 3-4: 3 brings `group.instance.id`; 4 is flexible.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, Request};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// `group.id`.
    pub group_id: String,
    /// The current generation.
    pub generation_id: i32,
    /// This member's id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
}

impl Request for HeartbeatRequest {
    const API_KEY: ApiKey = ApiKey::Heartbeat;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = HeartbeatResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.group_id, flexible);
        self.generation_id.write(out);
        out.put_string(&self.member_id, flexible);
        out.put_nullable_string(self.group_instance_id.as_deref(), flexible);
        out.put_empty_tagged_fields(flexible);
    }
}

impl HeartbeatRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let req = Self {
            group_id: r.string(flexible)?,
            generation_id: i32::read(r)?,
            member_id: r.string(flexible)?,
            group_instance_id: r.nullable_string(flexible)?,
        };
        r.skip_tagged_fields(flexible)?;
        Ok(req)
    }
}

super::common::error_only_response!(HeartbeatResponse, HeartbeatRequest);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;
    use crate::protocol::{ErrorCode, Response};
    use proptest::prelude::*;

    #[test]
    fn roundtrip_every_version() {
        for v in HeartbeatRequest::MIN_VERSION..=HeartbeatRequest::MAX_VERSION {
            for group_instance_id in [None, Some("i-1".to_owned())] {
                let req = HeartbeatRequest {
                    group_id: "g".into(),
                    generation_id: 7,
                    member_id: "m-1".into(),
                    group_instance_id,
                };
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(HeartbeatRequest::decode(&mut r, v).unwrap(), req, "v{v}");
                r.expect_end().unwrap();
            }
            let resp = HeartbeatResponse {
                throttle_time_ms: 3,
                error_code: ErrorCode::RebalanceInProgress,
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(HeartbeatResponse::decode(&mut r, v).unwrap(), resp);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| HeartbeatResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), v in 3i16..=4) {
            let _ = HeartbeatResponse::decode(&mut Reader::new(&bytes), v);
        }
    }
}
