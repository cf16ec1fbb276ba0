//! ListTransactions (key 66): the transactional ids a broker coordinates, with their state
//! (KIP-664); an admin client asks every broker.
//!
//! Versions 0-1 (flexible): 1 filters by how long a transaction has been open (KIP-994).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTransactionsRequest {
    /// Only these states (`Ongoing`, `PrepareCommit`, `CompleteAbort`, …; empty: all).
    pub state_filters: Vec<String>,
    /// Only these producer ids (empty: all).
    pub producer_id_filters: Vec<i64>,
    /// Only transactions open longer than this, in ms (v1+; -1: all).
    pub duration_filter: i64,
}

impl Request for ListTransactionsRequest {
    const API_KEY: ApiKey = ApiKey::ListTransactions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;
    const FLEXIBLE_FROM: i16 = 0;
    type Response = ListTransactionsResponse;
    const CLIENT_THROTTLES_FROM: i16 = 0;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.state_filters.len()), true);
        for s in &self.state_filters {
            out.put_string(s, true);
        }
        out.put_length(Some(self.producer_id_filters.len()), true);
        for p in &self.producer_id_filters {
            p.write(out);
        }
        if version >= 1 {
            self.duration_filter.write(out);
        }
        out.put_empty_tagged_fields(true);
    }
}

/// A transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTransaction {
    /// `transactional.id`.
    pub transactional_id: String,
    /// Its current producer id.
    pub producer_id: i64,
    /// State.
    pub transaction_state: String,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListTransactionsResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Filters naming states the broker does not know.
    pub unknown_state_filters: Vec<String>,
    /// Transactions.
    pub transaction_states: Vec<ListedTransaction>,
}

impl Response for ListTransactionsResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let unknown_state_filters = r.array_of(true, 1, |r| r.string(true))?;
        let transaction_states = r.array_of(true, 11, |r| {
            let t = ListedTransaction {
                transactional_id: r.string(true)?,
                producer_id: i64::read(r)?,
                transaction_state: r.string(true)?,
            };
            r.skip_tagged_fields(true)?;
            Ok(t)
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            unknown_state_filters,
            transaction_states,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl ListTransactionsResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        self.error_code.code().write(out);
        out.put_length(Some(self.unknown_state_filters.len()), true);
        for s in &self.unknown_state_filters {
            out.put_string(s, true);
        }
        out.put_length(Some(self.transaction_states.len()), true);
        for t in &self.transaction_states {
            out.put_string(&t.transactional_id, true);
            t.producer_id.write(out);
            out.put_string(&t.transaction_state, true);
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
        let want = ListTransactionsResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            unknown_state_filters: vec!["Nope".into()],
            transaction_states: vec![ListedTransaction {
                transactional_id: "tx".into(),
                producer_id: 7,
                transaction_state: "Ongoing".into(),
            }],
        };
        let mut buf = Vec::new();
        want.encode(1, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(ListTransactionsResponse::decode(&mut r, 1).unwrap(), want);
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| ListTransactionsResponse::decode(r, 1));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = ListTransactionsRequest {
            state_filters: vec![],
            producer_id_filters: vec![1],
            duration_filter: -1,
        };
        let mut out = Vec::new();
        req.encode(1, &mut out);
        let mut want = vec![1, 2, 0, 0, 0, 0, 0, 0, 0, 1];
        want.extend([0xff; 8]);
        want.push(0);
        assert_eq!(out, want);
    }
}
