//! What the messages' unit tests share: the checks every decoder must pass on a response cut
//! short (a broker that closed mid-frame, a frame length that lied).

use std::fmt::Debug;

use crate::protocol::DecodeError;
use crate::protocol::primitives::Reader;

/// No strict prefix of `buf` reads as a whole message: the decoder fails, or it stops with
/// bytes left (for the messages whose fields after a cut can be empty).
pub(crate) fn every_cut_fails<T: Debug>(
    buf: &[u8],
    decode: impl Fn(&mut Reader<'_>) -> Result<T, DecodeError>,
) {
    for cut in 0..buf.len() {
        let mut r = Reader::new(&buf[..cut]);
        let got = decode(&mut r).and_then(|m| r.expect_end().map(|()| m));
        assert!(
            got.is_err(),
            "{cut} of {} bytes decoded: {got:?}",
            buf.len()
        );
    }
}

/// The decoder fails on every strict prefix of `buf` (stricter than [`every_cut_fails`]: for
/// the messages whose last field is never empty).
pub(crate) fn every_cut_fails_to_decode<T: Debug>(
    buf: &[u8],
    decode: impl Fn(&mut Reader<'_>) -> Result<T, DecodeError>,
) {
    for cut in 0..buf.len() {
        let got = decode(&mut Reader::new(&buf[..cut]));
        assert!(
            got.is_err(),
            "{cut} of {} bytes decoded: {got:?}",
            buf.len()
        );
    }
}
