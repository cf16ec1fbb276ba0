//! FindCoordinator (key 10): the broker that coordinates a consumer group (or a transactional
//! id).
//!
//! Versions 4-6, the batched form (KIP-699: `coordinator_keys` in, one result per key out),
//! which every Kafka 3.0+ broker speaks; the single-key form of 0-3 is not needed against
//! Kafka 4. All are flexible. 5 and 6 only allow new error codes and key types.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// Key type of a consumer group.
pub const KEY_TYPE_GROUP: i8 = 0;
/// Key type of a transactional id.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorRequest {
    /// [`KEY_TYPE_GROUP`] or [`KEY_TYPE_TRANSACTION`].
    pub key_type: i8,
    /// Group ids (or transactional ids).
    pub coordinator_keys: Vec<String>,
}

impl FindCoordinatorRequest {
    /// A request for the coordinator of one consumer group.
    pub fn group(group_id: impl Into<String>) -> Self {
        Self {
            key_type: KEY_TYPE_GROUP,
            coordinator_keys: vec![group_id.into()],
        }
    }

    /// A request for the transaction coordinator of one `transactional.id`.
    pub fn transaction(transactional_id: impl Into<String>) -> Self {
        Self {
            key_type: KEY_TYPE_TRANSACTION,
            coordinator_keys: vec![transactional_id.into()],
        }
    }
}

impl Request for FindCoordinatorRequest {
    const API_KEY: ApiKey = ApiKey::FindCoordinator;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 6;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = FindCoordinatorResponse;
    const CLIENT_THROTTLES_FROM: i16 = 2;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.key_type.write(out);
        out.put_length(Some(self.coordinator_keys.len()), true);
        for k in &self.coordinator_keys {
            out.put_string(k, true);
        }
        out.put_empty_tagged_fields(true);
    }
}

impl FindCoordinatorRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let key_type = i8::read(r)?;
        let coordinator_keys = r.array_of(true, 1, |r| r.string(true))?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            key_type,
            coordinator_keys,
        })
    }
}

/// The coordinator of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    /// The key asked for.
    pub key: String,
    /// Broker id, -1 on error.
    pub node_id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Error, e.g. `COORDINATOR_NOT_AVAILABLE` while the group's partition loads.
    pub error_code: ErrorCode,
    /// Error detail.
    pub error_message: Option<String>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// One per key.
    pub coordinators: Vec<Coordinator>,
}

impl Response for FindCoordinatorResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let coordinators = r.array_of(true, 14, |r| {
            let c = Coordinator {
                key: r.string(true)?,
                node_id: i32::read(r)?,
                host: r.string(true)?,
                port: i32::read(r)?,
                error_code: ErrorCode::from_i16(i16::read(r)?),
                error_message: r.nullable_string(true)?,
            };
            r.skip_tagged_fields(true)?;
            Ok(c)
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            coordinators,
        })
    }
}

impl FindCoordinatorResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.coordinators.len()), true);
        for c in &self.coordinators {
            out.put_string(&c.key, true);
            c.node_id.write(out);
            out.put_string(&c.host, true);
            c.port.write(out);
            c.error_code.code().write(out);
            out.put_nullable_string(c.error_message.as_deref(), true);
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    pub(crate) fn sample() -> FindCoordinatorResponse {
        FindCoordinatorResponse {
            throttle_time_ms: 0,
            coordinators: vec![
                Coordinator {
                    key: "g1".into(),
                    node_id: 2,
                    host: "127.0.0.1".into(),
                    port: 9093,
                    error_code: ErrorCode::None,
                    error_message: None,
                },
                Coordinator {
                    key: "g2".into(),
                    node_id: -1,
                    host: String::new(),
                    port: -1,
                    error_code: ErrorCode::CoordinatorNotAvailable,
                    error_message: Some("loading".into()),
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
        for v in FindCoordinatorRequest::MIN_VERSION..=FindCoordinatorRequest::MAX_VERSION {
            let mut req = FindCoordinatorRequest::group("g1");
            req.coordinator_keys.push("g2".into());
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(FindCoordinatorRequest::decode(&mut r, v).unwrap(), req);
            r.expect_end().unwrap();

            let buf = encoded(v);
            let mut r = Reader::new(&buf);
            assert_eq!(
                FindCoordinatorResponse::decode(&mut r, v).unwrap(),
                sample()
            );
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| FindCoordinatorResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), v in 4i16..=6) {
            let _ = FindCoordinatorResponse::decode(&mut Reader::new(&bytes), v);
        }

        #[test]
        fn mutations_never_panic(v in 4i16..=6, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut buf = encoded(v);
            for (i, b) in flips {
                let i = i % buf.len();
                buf[i] = b;
            }
            let _ = FindCoordinatorResponse::decode(&mut Reader::new(&buf), v);
        }
    }
}
