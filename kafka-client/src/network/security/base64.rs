//! Base64 for SCRAM (standard alphabet, padded), JWS (URL-safe, unpadded) and PEM bodies,
//! over `base64ct` (constant-time, so a secret's encoding does not leak through timing). What
//! this module adds: encodings come back in a [`Zeroizing`] string, since they often hold a
//! secret (a nonce, a proof, a key), and decoding takes padding as optional, as the hand-written
//! decoder this replaces did (`base64ct`'s padded decoder would refuse a missing `=`).

use base64ct::{Base64, Base64Unpadded, Base64UrlUnpadded, Encoding};
use zeroize::Zeroizing;

/// Standard base64 with padding.
pub fn encode(data: &[u8]) -> Zeroizing<String> {
    Zeroizing::new(Base64::encode_string(data))
}

/// URL-safe base64 without padding (JWS).
pub fn encode_url(data: &[u8]) -> Zeroizing<String> {
    Zeroizing::new(Base64UrlUnpadded::encode_string(data))
}

/// Decodes standard base64 (padding optional); `None` if it is not base64 (a character out of
/// the alphabet, a lone leftover character, leftover bits that are not zero).
pub fn decode(text: &str) -> Option<Vec<u8>> {
    Base64Unpadded::decode_vec(text.trim_end_matches('=')).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()).as_str(), enc);
            assert_eq!(decode(enc).unwrap(), plain.as_bytes());
        }
        assert_eq!(encode_url(&[0xfb, 0xff]).as_str(), "-_8");
        assert_eq!(decode("Zm9v!"), None);
        assert_eq!(decode("Z"), None);
        // Padding optional, leftover bits must be zero, no '=' inside.
        assert_eq!(decode("Zm8").unwrap(), b"fo");
        assert_eq!(decode("Zg").unwrap(), b"f");
        assert_eq!(decode("Zh=="), None);
        assert_eq!(decode("Zg==Zg=="), None);
        assert_eq!(decode("Zm 9v"), None);
    }
}
