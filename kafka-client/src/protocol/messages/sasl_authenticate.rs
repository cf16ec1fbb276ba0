//! SaslAuthenticate (key 36): one round of a SASL exchange. The broker's last answer carries
//! the session lifetime (KIP-368, version 1+): the client must authenticate again on the same
//! connection before it ends.
//!
//! Versions 0-2: 1 brings `session_lifetime_ms`; 2 is flexible. The bytes may hold a password
//! (PLAIN) or a token (OAUTHBEARER): the request borrows them, and the frame encoding them is
//! wiped by the caller after it is sent.

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslAuthenticateRequest<'a> {
    /// The mechanism's bytes for this round.
    pub auth_bytes: &'a [u8],
}

impl Request for SaslAuthenticateRequest<'_> {
    const API_KEY: ApiKey = ApiKey::Other(36);
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;
    const FLEXIBLE_FROM: i16 = 2;
    type Response = SaslAuthenticateResponse;

    fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = Self::is_flexible(version);
        out.put_nullable_bytes(Some(self.auth_bytes), flexible);
        out.put_empty_tagged_fields(flexible);
    }

    fn size_hint(&self) -> usize {
        self.auth_bytes.len() + 16
    }
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslAuthenticateResponse {
    /// Error (`SASL_AUTHENTICATION_FAILED` for bad credentials).
    pub error_code: ErrorCode,
    /// The broker's explanation.
    pub error_message: Option<String>,
    /// The mechanism's bytes from the broker.
    pub auth_bytes: Vec<u8>,
    /// How long the session lasts, 0 for no limit (version 1+).
    pub session_lifetime_ms: i64,
}

impl Response for SaslAuthenticateResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError> {
        let flexible = SaslAuthenticateRequest::is_flexible(version);
        let error_code = ErrorCode::from_i16(i16::read(r)?);
        let error_message = r.nullable_string(flexible)?;
        let auth_bytes = r.nullable_bytes(flexible)?.unwrap_or_default().to_vec();
        let session_lifetime_ms = if version >= 1 { i64::read(r)? } else { 0 };
        r.skip_tagged_fields(flexible)?;
        Ok(Self {
            error_code,
            error_message,
            auth_bytes,
            session_lifetime_ms,
        })
    }
}

impl SaslAuthenticateResponse {
    /// Appends the body (tests that play the broker).
    pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
        let flexible = SaslAuthenticateRequest::is_flexible(version);
        self.error_code.code().write(out);
        out.put_nullable_string(self.error_message.as_deref(), flexible);
        out.put_nullable_bytes(Some(&self.auth_bytes), flexible);
        if version >= 1 {
            self.session_lifetime_ms.write(out);
        }
        out.put_empty_tagged_fields(flexible);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails;
    use proptest::prelude::*;

    #[test]
    fn roundtrip_every_version() {
        for v in 0..=2 {
            let req = SaslAuthenticateRequest {
                auth_bytes: b"\0alice\0secret",
            };
            let mut buf = Vec::new();
            req.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(
                r.nullable_bytes(v >= 2).unwrap(),
                Some(&b"\0alice\0secret"[..])
            );
            let resp = SaslAuthenticateResponse {
                error_code: ErrorCode::SaslAuthenticationFailed,
                error_message: Some("Authentication failed".into()),
                auth_bytes: b"r=abc".to_vec(),
                session_lifetime_ms: if v >= 1 { 5000 } else { 0 },
            };
            let mut buf = Vec::new();
            resp.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(SaslAuthenticateResponse::decode(&mut r, v).unwrap(), resp);
            r.expect_end().unwrap();
            every_cut_fails(&buf, |r| SaslAuthenticateResponse::decode(r, v));
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), v in 0i16..=2) {
            let _ = SaslAuthenticateResponse::decode(&mut Reader::new(&bytes), v);
        }
    }
}
