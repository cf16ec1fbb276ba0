//! What several messages share: the response that carries nothing but the throttle time and
//! an error code (Heartbeat, AddOffsetsToTxn, EndTxn).

/// Defines `$name`, the response of request `$request` that holds `throttle_time_ms` and
/// `error_code` only (then tagged fields in flexible versions): the type, its decoding, and
/// its encoding for tests that play the broker.
macro_rules! error_only_response {
    ($name:ident, $request:ident) => {
        /// The response.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            /// Throttle time.
            pub throttle_time_ms: i32,
            /// Error.
            pub error_code: $crate::protocol::ErrorCode,
        }

        impl $crate::protocol::Response for $name {
            fn throttle_time_ms(&self) -> i32 {
                self.throttle_time_ms
            }

            fn decode(
                r: &mut $crate::protocol::primitives::Reader<'_>,
                version: i16,
            ) -> Result<Self, $crate::protocol::DecodeError> {
                use $crate::protocol::Request as _;
                use $crate::protocol::primitives::ReadType as _;
                let resp = Self {
                    throttle_time_ms: i32::read(r)?,
                    error_code: $crate::protocol::ErrorCode::from_i16(i16::read(r)?),
                };
                r.skip_tagged_fields($request::is_flexible(version))?;
                Ok(resp)
            }
        }

        impl $name {
            /// Appends the body (tests that play the broker).
            pub fn encode(&self, version: i16, out: &mut Vec<u8>) {
                use $crate::protocol::Request as _;
                use $crate::protocol::primitives::{WriteExt as _, WriteType as _};
                self.throttle_time_ms.write(out);
                self.error_code.code().write(out);
                out.put_empty_tagged_fields($request::is_flexible(version));
            }
        }
    };
}
pub(crate) use error_only_response;
