//! Record batch v2 (magic 2), the only format Kafka 4 accepts.
//!
//! [`BatchWriter`] is the producer's hot path: records are serialized straight into the
//! batch's buffer and the header (producer id, sequence, CRC32C) is written when the batch is
//! sent, and rewritten if it must be re-sent under a new producer id. [`decode_batches`] reads
//! batches back; decoded keys, values and header values are slices of one shared buffer per
//! batch (no allocation per record).

mod batch;

pub use super::compression::Compression;
pub use batch::{
    BATCH_HEADER_SIZE, BatchBytes, BatchWriter, MAX_DECOMPRESSED_BATCH, RecordBatch, RecordSize,
    decode_batches, record_size,
};
use bytes::Bytes;

/// `bytes` as the buffer that decoded records slice. Its reference count gets cache lines of
/// its own: the I/O thread counts up one batch's while the application counts down the last
/// one's, and two small counts side by side (as `Bytes::from` allocates them) made every record
/// wait for the other core's cache line.
pub fn shared_buffer(bytes: Vec<u8>) -> Bytes {
    #[repr(align(128))]
    struct OwnLines(Vec<u8>);
    impl AsRef<[u8]> for OwnLines {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    Bytes::from_owner(OwnLines(bytes))
}

/// A record header as the producer passes it: borrowed, key UTF-8, value nullable.
/// Duplicate keys are allowed and kept in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// Key.
    pub key: &'a str,
    /// Value; `None` is a null value.
    pub value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// A header with a value.
    pub fn new(key: &'a str, value: &'a [u8]) -> Self {
        Self {
            key,
            value: Some(value),
        }
    }
}

/// A decoded record header. Its value shares the fetched batch's buffer, as the record's key
/// and value do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedHeader {
    /// Key.
    pub key: String,
    /// Value.
    pub value: Option<Bytes>,
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset (base offset + delta).
    pub offset: i64,
    /// Timestamp in ms since the epoch (base timestamp + delta).
    pub timestamp: i64,
    /// Key: a slice of the batch's buffer (the fetched bytes, or the decompressed records).
    pub key: Option<Bytes>,
    /// Value: a slice of the batch's buffer.
    pub value: Option<Bytes>,
    /// Headers, in order, duplicates kept.
    pub headers: Vec<OwnedHeader>,
}
