//! EndTxn (key 26): a transactional producer asks its transaction coordinator to commit or
//! abort the open transaction (the coordinator writes the markers to every partition and
//! group the transaction touched).
//!
//! Versions 2-4: 2 brings `PRODUCER_FENCED`, 3 is flexible, 4 allows `TRANSACTION_ABORTABLE`.
//! Version 5 (transactions v2, KIP-890) bumps the epoch at every end and answers with it; this
//! client runs transactions v1, where the epoch stays.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, Request};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    /// `transactional.id`.
    pub transactional_id: String,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// Commit (true) or abort (false).
    pub committed: bool,
}

impl Request for EndTxnRequest {
    const API_KEY: ApiKey = ApiKey::EndTxn;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = EndTxnResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.transactional_id, flexible);
        self.producer_id.write(out);
        self.producer_epoch.write(out);
        self.committed.write(out);
        out.put_empty_tagged_fields(flexible);
    }
}

impl EndTxnRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let req = Self {
            transactional_id: r.string(flexible)?,
            producer_id: i64::read(r)?,
            producer_epoch: i16::read(r)?,
            committed: bool::read(r)?,
        };
        r.skip_tagged_fields(flexible)?;
        Ok(req)
    }
}

super::common::error_only_response!(EndTxnResponse, EndTxnRequest);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;
    use crate::protocol::{ErrorCode, Response};
    use proptest::prelude::*;

    #[test]
    fn roundtrip_every_version() {
        for v in EndTxnRequest::MIN_VERSION..=EndTxnRequest::MAX_VERSION {
            for committed in [true, false] {
                let req = EndTxnRequest {
                    transactional_id: "svc-1".into(),
                    producer_id: 77,
                    producer_epoch: 4,
                    committed,
                };
                let mut buf = Vec::new();
                req.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(EndTxnRequest::decode(&mut r, v).unwrap(), req);
                r.expect_end().unwrap();
            }
            let resp = EndTxnResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::ProducerFenced,
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(EndTxnResponse::decode(&mut r, v).unwrap(), resp);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| EndTxnResponse::decode(r, v));
        }
    }

    /// Version 2 on the wire, written down from the schema.
    #[test]
    fn v2_request_bytes() {
        let req = EndTxnRequest {
            transactional_id: "t".into(),
            producer_id: 3,
            producer_epoch: 1,
            committed: true,
        };
        let mut buf = Vec::new();
        req.encode(2, &mut buf);
        let expected: &[u8] = &[0, 1, b't', 0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 1];
        assert_eq!(buf, expected);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), v in 2i16..=4) {
            let _ = EndTxnResponse::decode(&mut Reader::new(&bytes), v);
        }
    }
}
