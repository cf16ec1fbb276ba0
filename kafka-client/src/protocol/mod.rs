//! The Kafka wire protocol, hand-written in layers: [`primitives`] (types and the
//! [`ReadType`]/[`WriteType`] traits), [`header`] (request and response headers), one module per
//! message under [`messages`], and [`record`] (record batch v2).
//!
//! A message type implements [`Request`] (with its response type, the versions this client
//! speaks and from which version it is flexible). [`api::ApiVersionsTable`] picks the highest
//! version both sides support. Adding a message (Fetch, JoinGroup, ...) is one file in
//! `messages/` implementing the two traits.

// The codec is complete in both directions because the fake broker of the tests encodes
// responses and decodes requests with it: without `testing` those halves are unused.
#![cfg_attr(not(feature = "testing"), allow(dead_code, unused_imports))]

pub mod api;
pub mod compression;
mod error;
pub mod header;
pub mod messages;
pub mod primitives;
pub mod record;

pub use api::{ApiKey, ApiVersionsTable, VersionRange};
pub use error::{DecodeError, ErrorCode};
pub use header::{RequestHeader, ResponseHeader};
pub use primitives::{ReadType, Reader, WriteType};

/// A request message.
pub trait Request {
    /// Its API.
    const API_KEY: ApiKey;
    /// The lowest version this client encodes.
    const MIN_VERSION: i16;
    /// The highest version this client encodes.
    const MAX_VERSION: i16;
    /// The first flexible version (compact encodings, tagged fields).
    const FLEXIBLE_FROM: i16;
    /// The response to it.
    type Response: Response;
    /// From this version on, a broker answers a request over quota at once with a throttle
    /// time and the client holds back for that long (KIP-219); before it, the broker delays
    /// the answer itself.
    const CLIENT_THROTTLES_FROM: i16 = i16::MAX;

    /// Appends the body (without header) in `version`.
    fn encode(&self, version: i16, out: &mut Vec<u8>);

    /// About how many bytes the encoded body takes, so the frame is allocated once.
    fn size_hint(&self) -> usize {
        64
    }

    /// The lowest version that can carry this request's content (a field or a value older
    /// versions lack): a broker that speaks only older ones refuses it at negotiation instead
    /// of receiving something it reads otherwise.
    fn min_version(&self) -> i16 {
        Self::MIN_VERSION
    }

    /// The range this client speaks.
    fn versions() -> VersionRange {
        VersionRange {
            min: Self::MIN_VERSION,
            max: Self::MAX_VERSION,
        }
    }

    /// Whether `version` is flexible.
    fn is_flexible(version: i16) -> bool {
        version >= Self::FLEXIBLE_FROM
    }

    /// The request header version for `version` (v2 when flexible, v1 otherwise).
    fn request_header_version(version: i16) -> i16 {
        if Self::is_flexible(version) { 2 } else { 1 }
    }

    /// The response header version for `version` (v1 when flexible, v0 otherwise).
    /// ApiVersions overrides this: its response header is always v0.
    fn response_header_version(version: i16) -> i16 {
        if Self::is_flexible(version) { 1 } else { 0 }
    }
}

/// A response message.
pub trait Response: Sized {
    /// Decodes the body (after the header) in `version`. Must consume the whole body.
    fn decode(r: &mut Reader<'_>, version: i16) -> Result<Self, DecodeError>;

    /// `throttle_time_ms`, for the responses that carry one.
    fn throttle_time_ms(&self) -> i32 {
        0
    }
}

/// Encodes a complete frame (4-byte size, header, body) for `request` in `version`.
pub fn encode_frame<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame_into(request, version, correlation_id, client_id, &mut out);
    out
}

/// [`encode_frame`] into `out` (cleared first), whose allocation a sender keeps from one
/// request to the next.
pub fn encode_frame_into<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    out: &mut Vec<u8>,
) {
    let body = |out: &mut Vec<u8>| request.encode(version, out);
    let hint = request.size_hint();
    encode_frame_with::<R>(version, correlation_id, client_id, out, hint, 0, body);
}

/// A Produce request's frame without its records: `records_at` gets the offset in `out` at
/// which each partition's batch belongs, in the request's order, for a gathering write that
/// sends them from the batches' own buffers (no copy of every byte into a request buffer
/// that, at `max.request.size`, would be memory beside `buffer.memory`).
pub fn encode_produce_frame(
    request: &messages::ProduceRequest<'_>,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    out: &mut Vec<u8>,
    records_at: &mut Vec<usize>,
) {
    records_at.clear();
    let records = request.records_len();
    let hint = request.size_hint() - records;
    let body = |out: &mut Vec<u8>| request.encode_without_records(version, out, records_at);
    encode_frame_with::<messages::ProduceRequest<'_>>(
        version,
        correlation_id,
        client_id,
        out,
        hint,
        records,
        body,
    );
}

/// A frame's size, header and body (`body`'s bytes and `elsewhere` bytes written apart).
fn encode_frame_with<R: Request>(
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    out: &mut Vec<u8>,
    size_hint: usize,
    elsewhere: usize,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let client_id_len = client_id.map_or(0, str::len);
    let needed = size_hint + client_id_len + 32;
    out.clear();
    if out.capacity() < needed {
        // A new buffer rather than `reserve`, whose `realloc` would copy the last request.
        crate::large_buffers::release_large(out);
        *out = Vec::with_capacity(needed);
    }
    out.extend_from_slice(&[0; 4]);
    RequestHeader {
        api_key: R::API_KEY,
        api_version: version,
        correlation_id,
        client_id: client_id.map(str::to_owned),
    }
    .encode(R::request_header_version(version), out);
    body(out);
    let size = (out.len() - 4 + elsewhere) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
}

/// Decodes a response frame body (without the 4-byte size): checks the correlation id and
/// decodes the body in `version`.
pub fn decode_response<R: Request>(
    frame: &[u8],
    version: i16,
    correlation_id: i32,
) -> Result<R::Response, DecodeError> {
    let mut r = Reader::new(frame);
    let header = ResponseHeader::decode(&mut r, R::response_header_version(version))?;
    if header.correlation_id != correlation_id {
        return Err(DecodeError::CorrelationMismatch {
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    let resp = R::Response::decode(&mut r, version)?;
    r.expect_end()?;
    Ok(resp)
}
