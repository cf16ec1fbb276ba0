//! AddOffsetsToTxn (key 25): a transactional producer tells its transaction coordinator that
//! the open transaction commits offsets of a consumer group (the coordinator then writes the
//! markers to the group's offsets partition too). The offsets themselves go to the group
//! coordinator next, with TxnOffsetCommit.
//!
//! Versions 2-4: 2 brings `PRODUCER_FENCED`, 3 is flexible, 4 allows `TRANSACTION_ABORTABLE`.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, Request};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsToTxnRequest {
    /// `transactional.id`.
    pub transactional_id: String,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The consumer group whose offsets the transaction commits.
    pub group_id: String,
}

impl Request for AddOffsetsToTxnRequest {
    const API_KEY: ApiKey = ApiKey::AddOffsetsToTxn;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 3;
    type Response = AddOffsetsToTxnResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_string(&self.transactional_id, flexible);
        self.producer_id.write(out);
        self.producer_epoch.write(out);
        out.put_string(&self.group_id, flexible);
        out.put_empty_tagged_fields(flexible);
    }
}

impl AddOffsetsToTxnRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let req = Self {
            transactional_id: r.string(flexible)?,
            producer_id: i64::read(r)?,
            producer_epoch: i16::read(r)?,
            group_id: r.string(flexible)?,
        };
        r.skip_tagged_fields(flexible)?;
        Ok(req)
    }
}

super::common::error_only_response!(AddOffsetsToTxnResponse, AddOffsetsToTxnRequest);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;
    use crate::protocol::{ErrorCode, Response};
    use proptest::prelude::*;

    #[test]
    fn roundtrip_every_version() {
        for v in AddOffsetsToTxnRequest::MIN_VERSION..=AddOffsetsToTxnRequest::MAX_VERSION {
            let req = AddOffsetsToTxnRequest {
                transactional_id: "svc-1".into(),
                producer_id: 12,
                producer_epoch: 1,
                group_id: "readers".into(),
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(AddOffsetsToTxnRequest::decode(&mut r, v).unwrap(), req);
            r.expect_end().unwrap();

            let resp = AddOffsetsToTxnResponse {
                throttle_time_ms: 1,
                error_code: ErrorCode::ConcurrentTransactions,
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(AddOffsetsToTxnResponse::decode(&mut r, v).unwrap(), resp);
            r.expect_end().unwrap();
            every_cut_fails_to_decode(&buf, |r| AddOffsetsToTxnResponse::decode(r, v));
        }
    }

    /// Version 3 (flexible) on the wire, written down from the schema.
    #[test]
    fn v3_request_bytes() {
        let req = AddOffsetsToTxnRequest {
            transactional_id: "t".into(),
            producer_id: 5,
            producer_epoch: 0,
            group_id: "g".into(),
        };
        let mut buf = Vec::new();
        req.encode(3, &mut buf);
        let expected: &[u8] = &[
            2, b't', // compact string "t"
            0, 0, 0, 0, 0, 0, 0, 5, // producer id
            0, 0, // epoch
            2, b'g', // compact string "g"
            0,    // no tagged fields
        ];
        assert_eq!(buf, expected);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), v in 2i16..=4) {
            let _ = AddOffsetsToTxnResponse::decode(&mut Reader::new(&bytes), v);
        }
    }
}
