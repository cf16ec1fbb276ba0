//! Record batch v2 (magic 2), the only format Kafka 4 accepts.
//!
//! [`BatchWriter`] is the producer's hot path: records are serialized straight into the
//! batch's buffer and the header (producer id, sequence, CRC32C) is written when the batch is
//! sent, and rewritten if it must be re-sent under a new producer id. [`decode_batches`] reads
//! batches back (tests, and later the consumer).

mod batch;

pub use super::compression::Compression;
pub use batch::{
    BATCH_HEADER_SIZE, BatchWriter, MAX_DECOMPRESSED_BATCH, RecordBatch, RecordSize,
    decode_batches, record_size,
};

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

/// A decoded record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedHeader {
    /// Key.
    pub key: String,
    /// Value.
    pub value: Option<Vec<u8>>,
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset (base offset + delta).
    pub offset: i64,
    /// Timestamp in ms since the epoch (base timestamp + delta).
    pub timestamp: i64,
    /// Key.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub value: Option<Vec<u8>>,
    /// Headers, in order, duplicates kept.
    pub headers: Vec<OwnedHeader>,
}
