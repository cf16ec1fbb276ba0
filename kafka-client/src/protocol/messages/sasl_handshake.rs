//! SaslHandshake (key 17): the client names its SASL mechanism; the broker answers with the
//! mechanisms it enables (`UNSUPPORTED_SASL_MECHANISM` when the named one is not among them).
//!
//! Version 1 only: the authentication bytes then go in SaslAuthenticate requests (version 0
//! sent them as raw frames, which Kafka 4 no longer accepts).

use crate::protocol::primitives::{ReadType, Reader, WriteExt};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslHandshakeRequest {
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`, ...
    pub mechanism: String,
}

impl Request for SaslHandshakeRequest {
    const API_KEY: ApiKey = ApiKey::Other(17);
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 1;
    const FLEXIBLE_FROM: i16 = i16::MAX;
    type Response = SaslHandshakeResponse;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_string(&self.mechanism, false);
    }
}

impl SaslHandshakeRequest {
    /// Decodes a request body (tests that play the broker).
    pub fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        Ok(Self {
            mechanism: r.string(false)?,
        })
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslHandshakeResponse {
    /// Error.
    pub error_code: ErrorCode,
    /// The mechanisms the broker enables on this listener.
    pub mechanisms: Vec<String>,
}

impl Response for SaslHandshakeResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let mechanisms = r.array_of(false, 2, |r| r.string(false))?;
        Ok(Self {
            error_code,
            mechanisms,
        })
    }
}

impl SaslHandshakeResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        use crate::protocol::primitives::WriteType;
        self.error_code.code().write(out);
        out.put_length(Some(self.mechanisms.len()), false);
        for m in &self.mechanisms {
            out.put_string(m, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    #[test]
    fn roundtrip() {
        let req = SaslHandshakeRequest {
            mechanism: "SCRAM-SHA-512".into(),
        };
        let mut buf = Vec::new();
        req.encode(1, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(SaslHandshakeRequest::decode(&mut r, 1).unwrap(), req);
        r.expect_end().unwrap();
        let resp = SaslHandshakeResponse {
            error_code: ErrorCode::UnsupportedSaslMechanism,
            mechanisms: vec!["PLAIN".into(), "OAUTHBEARER".into()],
        };
        let mut buf = Vec::new();
        resp.encode(1, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(SaslHandshakeResponse::decode(&mut r, 1).unwrap(), resp);
        r.expect_end().unwrap();
        every_cut_fails(&buf, |r| SaslHandshakeResponse::decode(r, 1));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = SaslHandshakeResponse::decode(&mut Reader::new(&bytes), 1);
        }
    }
}
