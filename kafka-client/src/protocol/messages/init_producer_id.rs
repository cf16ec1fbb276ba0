//! InitProducerId (key 22): a producer id and epoch for the idempotent producer.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request. Without a transactional id the broker hands out a fresh producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// Null for the idempotent (non-transactional) producer.
    pub transactional_id: Option<String>,
    /// Ignored without a transactional id.
    pub transaction_timeout_ms: i32,
    /// The current id (v3+), -1 for a new one.
    pub producer_id: i64,
    /// The current epoch (v3+), -1 for a new one.
    pub producer_epoch: i16,
}

impl Default for InitProducerIdRequest {
    fn default() -> Self {
        Self {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

impl Request for InitProducerIdRequest {
    const API_KEY: ApiKey = ApiKey::InitProducerId;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 2;
    type Response = InitProducerIdResponse;
    const CLIENT_THROTTLES_FROM: i16 = 1;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_nullable_string(self.transactional_id.as_deref(), flexible);
        self.transaction_timeout_ms.write(out);
        if version >= 3 {
            self.producer_id.write(out);
            self.producer_epoch.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

impl InitProducerIdRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = Self::is_flexible(version);
        let transactional_id = r.nullable_string(flexible)?;
        let transaction_timeout_ms = i32::read(r)?;
        let (producer_id, producer_epoch) = if version >= 3 {
            (i64::read(r)?, i16::read(r)?)
        } else {
            (-1, -1)
        };
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            transactional_id,
            transaction_timeout_ms,
            producer_id,
            producer_epoch,
        })
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
}

impl Response for InitProducerIdResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let resp = Self {
            throttle_time_ms: i32::read(r)?,
            error_code: ErrorCode::from_i16(i16::read(r)?),
            producer_id: i64::read(r)?,
            producer_epoch: i16::read(r)?,
        };
        r.skip_tagged_fields(InitProducerIdRequest::is_flexible(version))?;
        Ok(resp)
    }
}

impl InitProducerIdResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        self.producer_id.write(out);
        self.producer_epoch.write(out);
        out.put_empty_tagged_fields(InitProducerIdRequest::is_flexible(version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_every_version() {
        for v in 0..=5 {
            let mut req = InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 1000,
                producer_id: 9,
                producer_epoch: 2,
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            if v < 3 {
                req.producer_id = -1;
                req.producer_epoch = -1;
            }
            assert_eq!(InitProducerIdRequest::decode(&mut r, v).unwrap(), req);
            r.expect_end().unwrap();

            let resp = InitProducerIdResponse {
                throttle_time_ms: 1,
                error_code: ErrorCode::None,
                producer_id: 1234,
                producer_epoch: 0,
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(InitProducerIdResponse::decode(&mut r, v).unwrap(), resp);
            r.expect_end().unwrap();
        }
    }
}
