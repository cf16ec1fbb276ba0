//! DescribeTransactions (key 65): a transactional id's state, producer, timeout and the
//! partitions of its open transaction (KIP-664), from its transaction coordinator.
//!
//! Version 0 (flexible).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeTransactionsRequest {
    /// `transactional.id`s.
    pub transactional_ids: Vec<String>,
}

impl Request for DescribeTransactionsRequest {
    const API_KEY: ApiKey = ApiKey::DescribeTransactions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;
    const FLEXIBLE_FROM: i16 = 0;
    type Response = DescribeTransactionsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.transactional_ids.len()), true);
        for id in &self.transactional_ids {
            out.put_string(id, true);
        }
        out.put_empty_tagged_fields(true);
    }
}

/// A transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionStateDescription {
    /// Error (`TRANSACTIONAL_ID_NOT_FOUND`, `NOT_COORDINATOR`, …).
    pub error_code: ErrorCode,
    /// `transactional.id`.
    pub transactional_id: String,
    /// State (`Empty`, `Ongoing`, `PrepareCommit`, `CompleteCommit`, …).
    pub transaction_state: String,
    /// `transaction.timeout.ms`.
    pub transaction_timeout_ms: i32,
    /// When the open transaction began (-1: none open).
    pub transaction_start_time_ms: i64,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// The partitions in the open transaction, per topic.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeTransactionsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per transactional id.
    pub transaction_states: Vec<TransactionStateDescription>,
}

impl Response for DescribeTransactionsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let transaction_states = r.array_of(true, 29, |r| {
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let transactional_id = r.string(true)?;
            let transaction_state = r.string(true)?;
            let transaction_timeout_ms = i32::read(r)?;
            let transaction_start_time_ms = i64::read(r)?;
            let producer_id = i64::read(r)?;
            let producer_epoch = i16::read(r)?;
            let topics = r.array_of(true, 3, |r| {
                let topic = r.string(true)?;
                let partitions = r.array_of(true, 4, i32::read)?;
                r.skip_tagged_fields(true)?;
                Ok((topic, partitions))
            })?;
            r.skip_tagged_fields(true)?;
            Ok(TransactionStateDescription {
                error_code,
                transactional_id,
                transaction_state,
                transaction_timeout_ms,
                transaction_start_time_ms,
                producer_id,
                producer_epoch,
                topics,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            transaction_states,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl DescribeTransactionsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.transaction_states.len()), true);
        for t in &self.transaction_states {
            t.error_code.code().write(out);
            out.put_string(&t.transactional_id, true);
            out.put_string(&t.transaction_state, true);
            t.transaction_timeout_ms.write(out);
            t.transaction_start_time_ms.write(out);
            t.producer_id.write(out);
            t.producer_epoch.write(out);
            out.put_length(Some(t.topics.len()), true);
            for (topic, partitions) in &t.topics {
                out.put_string(topic, true);
                out.put_length(Some(partitions.len()), true);
                for p in partitions {
                    p.write(out);
                }
                out.put_empty_tagged_fields(true);
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
        let want = DescribeTransactionsResponse {
            throttle_time_ms: 0,
            transaction_states: vec![TransactionStateDescription {
                error_code: ErrorCode::None,
                transactional_id: "tx".into(),
                transaction_state: "Ongoing".into(),
                transaction_timeout_ms: 60_000,
                transaction_start_time_ms: 1_700_000_000_000,
                producer_id: 9,
                producer_epoch: 1,
                topics: vec![("t".into(), vec![0, 2])],
            }],
        };
        let mut buf = Vec::new();
        want.encode(0, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(
            DescribeTransactionsResponse::decode(&mut r, 0).unwrap(),
            want
        );
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| DescribeTransactionsResponse::decode(r, 0));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = DescribeTransactionsRequest {
            transactional_ids: vec!["x".into()],
        };
        let mut out = Vec::new();
        req.encode(0, &mut out);
        assert_eq!(out, [2, 2, b'x', 0]);
    }
}
