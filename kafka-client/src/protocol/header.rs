//! Request header v1/v2 and response header v0/v1.

use super::primitives::{ReadType, Reader, WriteExt, WriteType};
use super::{ApiKey, DecodeError};

/// A request header. v1 has a nullable `i16` client id; v2 adds tagged fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// The API.
    pub api_key: ApiKey,
    /// Its version.
    pub api_version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
    /// `client.id`.
    pub client_id: Option<String>,
}

impl RequestHeader {
    /// Appends the header in `header_version` (1 or 2).
    pub fn encode(&self, header_version: i16, out: &mut Vec<u8>) {
        self.api_key.code().write(out);
        self.api_version.write(out);
        self.correlation_id.write(out);
        // The client id stays a classic nullable string even in v2.
        out.put_nullable_string(self.client_id.as_deref(), false);
        out.put_empty_tagged_fields(header_version >= 2);
    }

    /// Reads a header (used by tests that play the broker's side).
    pub fn decode(r: &mut Reader<'_>, header_version: i16) -> Result<Self, DecodeError> {
        let h = RequestHeader {
            api_key: ApiKey::from_code(i16::read(r)?),
            api_version: i16::read(r)?,
            correlation_id: i32::read(r)?,
            client_id: r.nullable_string(false)?,
        };
        r.skip_tagged_fields(header_version >= 2)?;
        Ok(h)
    }
}

/// A response header. v1 adds tagged fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's correlation id.
    pub correlation_id: i32,
}

impl ResponseHeader {
    /// Reads a header in `header_version` (0 or 1).
    pub fn decode(r: &mut Reader<'_>, header_version: i16) -> Result<Self, DecodeError> {
        let correlation_id = i32::read(r)?;
        r.skip_tagged_fields(header_version >= 1)?;
        Ok(Self { correlation_id })
    }

    /// Appends the header (tests that play the broker).
    pub fn encode(&self, header_version: i16, out: &mut Vec<u8>) {
        self.correlation_id.write(out);
        out.put_empty_tagged_fields(header_version >= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_roundtrip() {
        for v in [1, 2] {
            for client_id in [None, Some("crac-rs".to_owned())] {
                let h = RequestHeader {
                    api_key: ApiKey::Produce,
                    api_version: 9,
                    correlation_id: 42,
                    client_id,
                };
                let mut buf = Vec::new();
                h.encode(v, &mut buf);
                let mut r = Reader::new(&buf);
                assert_eq!(RequestHeader::decode(&mut r, v).unwrap(), h);
                r.expect_end().unwrap();
            }
        }
        for v in [0, 1] {
            let h = ResponseHeader { correlation_id: -7 };
            let mut buf = Vec::new();
            h.encode(v, &mut buf);
            let mut r = Reader::new(&buf);
            assert_eq!(ResponseHeader::decode(&mut r, v).unwrap(), h);
            r.expect_end().unwrap();
            assert!(ResponseHeader::decode(&mut Reader::new(&buf[..buf.len() - 1]), v).is_err());
        }
    }
}
