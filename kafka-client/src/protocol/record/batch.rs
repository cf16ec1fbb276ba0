//! Encoding and decoding of one record batch.
//!
//! Layout (offsets in bytes): base offset i64 @0, batch length i32 @8 (bytes after it),
//! partition leader epoch i32 @12, magic i8 @16, CRC32C u32 @17 (over everything from @21),
//! attributes i16 @21, last offset delta i32 @23, base timestamp i64 @27, max timestamp i64
//! @35, producer id i64 @43, producer epoch i16 @51, base sequence i32 @53, record count i32
//! @57, records @61.

use super::{Compression, Header, OwnedHeader, Record, shared_buffer};
use crate::large_buffers::{Chunked, release_large};
use crate::protocol::DecodeError;
use crate::protocol::primitives::{
    ReadType, Reader, Varint, Varlong, WriteType, varint_len, varlong_len,
};
use bytes::Bytes;

/// Size of the batch header before the first record.
pub const BATCH_HEADER_SIZE: usize = 61;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const MIN_RECORD_SIZE: usize = 7;

fn bytes_field_len(b: Option<&[u8]>) -> usize {
    match b {
        None => 1,
        Some(b) => varint_len(b.len() as i32) + b.len(),
    }
}

/// The encoded size of one record (its length prefix included).
pub fn record_size(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    let body = body_size(timestamp_delta, offset_delta, key, value, headers);
    varint_len(body as i32) + body
}

fn body_size(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    RecordSize::new(key, value, headers).body(timestamp_delta, offset_delta)
}

/// The size of one record, measured once: everything but its timestamp and offset deltas,
/// which depend on the batch it goes into. The producer measures a record once per `send()`
/// and derives from it the size estimate its limits check, the room check and the append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSize {
    /// Attributes, key, value and headers.
    fixed: usize,
}

impl RecordSize {
    /// Measures a record.
    pub fn new(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> Self {
        let mut fixed =
            1 + bytes_field_len(key) + bytes_field_len(value) + varint_len(headers.len() as i32);
        for h in headers {
            fixed += bytes_field_len(Some(h.key.as_bytes())) + bytes_field_len(h.value);
        }
        Self { fixed }
    }

    fn body(self, timestamp_delta: i64, offset_delta: i32) -> usize {
        self.fixed + varlong_len(timestamp_delta) + varint_len(offset_delta)
    }

    /// The encoded size with these deltas, its length prefix included (what [`record_size`]
    /// returns).
    pub fn encoded(self, timestamp_delta: i64, offset_delta: i32) -> usize {
        let body = self.body(timestamp_delta, offset_delta);
        varint_len(body as i32) + body
    }
}

fn put_bytes_field(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => Varint(-1).write(out),
        Some(b) => {
            Varint(b.len() as i32).write(out);
            out.extend_from_slice(b);
        }
    }
}

/// Largest records section a compressed batch may inflate to when decoded by [`RecordBatch::decode`]
/// (the consumer passes its own budget to [`RecordBatch::decode_within`]).
pub const MAX_DECOMPRESSED_BATCH: usize = 64 * 1024 * 1024;

/// Builds one batch in place: the header is reserved, records are appended as they come.
/// With compression, the records section is compressed once, at the first `seal`.
#[derive(Debug)]
pub struct BatchWriter {
    /// Header and records, in chunks (a batch that keeps growing copies nothing and maps
    /// nothing of its own: see [`Chunked`]).
    buf: Chunked<u8>,
    compressed: Option<Vec<u8>>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    compression: Compression,
    transactional: bool,
}

/// An encoded batch as the writer holds it: its first chunk (header included) and the chunks
/// it grew into. Sent as one `bytes` field; compared by content.
#[derive(Debug, Clone, Copy)]
pub struct BatchBytes<'a> {
    head: &'a [u8],
    tail: &'a [Vec<u8>],
}

impl<'a> BatchBytes<'a> {
    /// A batch's first chunk and the chunks it grew into.
    pub fn new(head: &'a [u8], tail: &'a [Vec<u8>]) -> Self {
        Self { head, tail }
    }

    /// The chunks in order.
    pub fn chunks(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        std::iter::once(self.head).chain(self.tail.iter().map(Vec::as_slice))
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.iter().map(Vec::len).sum::<usize>()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One contiguous copy.
    pub fn to_vec(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.chunks().for_each(|c| out.extend_from_slice(c));
        out
    }
}

impl<'a> From<&'a [u8]> for BatchBytes<'a> {
    fn from(head: &'a [u8]) -> Self {
        Self { head, tail: &[] }
    }
}

impl PartialEq for BatchBytes<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.chunks().flatten().eq(other.chunks().flatten())
    }
}

impl Eq for BatchBytes<'_> {}

impl BatchWriter {
    /// An empty batch with room for `capacity` bytes.
    pub fn new(capacity: usize, compression: Compression) -> Self {
        let mut buf = Chunked::with_capacity(capacity.max(BATCH_HEADER_SIZE));
        buf.first_mut().resize(BATCH_HEADER_SIZE, 0);
        Self {
            buf,
            compressed: None,
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            compression,
            transactional: false,
        }
    }

    /// Marks the batch as part of a transaction (attribute bit 4): the broker keeps it from
    /// `read_committed` consumers until the transaction's commit marker.
    pub fn set_transactional(&mut self, on: bool) {
        self.transactional = on;
    }

    /// Records in the batch.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// Bytes used, header included.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Bytes allocated.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The bytes allocated once a record of `extra` bytes is appended.
    pub fn capacity_after(&self, extra: usize) -> usize {
        self.buf.capacity() + self.buf.growth(extra)
    }

    /// The size `append` would add for this record.
    pub fn size_of(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> usize {
        RecordSize::new(key, value, headers).encoded(self.timestamp_delta(timestamp), self.count)
    }

    fn timestamp_delta(&self, timestamp: i64) -> i64 {
        if self.count == 0 {
            0
        } else {
            timestamp.wrapping_sub(self.base_timestamp)
        }
    }

    /// Appends one record and returns its index in the batch.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> i32 {
        let size = RecordSize::new(key, value, headers);
        self.try_append(timestamp, key, value, headers, size, usize::MAX)
            .expect("no limit")
    }

    /// Appends one record, measured by `size` (from the same key, value and headers), if the
    /// batch stays within `limit` bytes, header included, or is empty; returns its index, or
    /// `None` (nothing written) when it does not fit.
    pub fn try_append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        size: RecordSize,
        limit: usize,
    ) -> Option<i32> {
        let delta = self.timestamp_delta(timestamp);
        let body = size.body(delta, self.count);
        let total = varint_len(body as i32) + body;
        if self.count > 0 && self.buf.len() + total > limit {
            return None;
        }
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        // A record is written whole into one chunk.
        let out = self.buf.room(total);
        let start = out.len();
        Varint(body as i32).write(out);
        out.push(0); // record attributes: unused
        Varlong(delta).write(out);
        Varint(self.count).write(out);
        put_bytes_field(out, key);
        put_bytes_field(out, value);
        Varint(headers.len() as i32).write(out);
        for h in headers {
            put_bytes_field(out, Some(h.key.as_bytes()));
            put_bytes_field(out, h.value);
        }
        debug_assert_eq!(out.len() - start, total, "RecordSize of another record");
        self.count += 1;
        Some(self.count - 1)
    }

    /// Writes the header for sending and returns the complete batch. Called again with other
    /// producer fields (a new producer id after a reset or a restore), it rewrites the header
    /// and the CRC; the records (compressed or not) are untouched.
    pub fn seal(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> BatchBytes<'_> {
        let mut codec = self.compression;
        if codec != Compression::None && self.compressed.is_none() {
            let mut out = Vec::with_capacity(self.buf.len() / 2 + BATCH_HEADER_SIZE);
            out.resize(BATCH_HEADER_SIZE, 0);
            // The codecs take one slice: a grown batch is joined first (compressing costs
            // more than the copy).
            let (head, tail) = self.buf.parts();
            let joined;
            let records = if tail.is_empty() {
                &head[BATCH_HEADER_SIZE..]
            } else {
                joined = BatchBytes::new(head, tail).to_vec();
                &joined[BATCH_HEADER_SIZE..]
            };
            match crate::protocol::compression::compress(codec, records, &mut out) {
                Ok(()) => self.compressed = Some(out),
                Err(e) => {
                    // Compressing in memory fails only on a codec's internal limit; the
                    // batch is as valid uncompressed.
                    tracing::warn!(%codec, error = %e, "compression failed, sending the batch uncompressed");
                    self.compression = Compression::None;
                    codec = Compression::None;
                }
            }
        }
        let len = match &self.compressed {
            Some(c) => c.len(),
            None => self.buf.len(),
        };
        let b = match self.compressed.as_mut() {
            Some(c) => c,
            None => self.buf.first_mut(),
        };
        b[0..8].copy_from_slice(&0i64.to_be_bytes());
        b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_be_bytes());
        b[16] = 2;
        let attributes = codec.attribute_bits() | if self.transactional { 0x10 } else { 0 };
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        b[23..27].copy_from_slice(&(self.count - 1).max(0).to_be_bytes());
        b[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        b[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
        b[53..57].copy_from_slice(&base_sequence.to_be_bytes());
        b[57..61].copy_from_slice(&self.count.to_be_bytes());
        let mut crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
        if self.compressed.is_none() {
            let (_, tail) = self.buf.parts();
            crc = tail
                .iter()
                .fold(crc, |c, chunk| crc32c::crc32c_append(c, chunk));
        }
        let b = match self.compressed.as_mut() {
            Some(c) => c,
            None => self.buf.first_mut(),
        };
        b[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
        self.bytes()
    }

    /// The batch as last sealed (compressed if a codec is set).
    pub fn bytes(&self) -> BatchBytes<'_> {
        match &self.compressed {
            Some(c) => BatchBytes::from(c.as_slice()),
            None => {
                let (head, tail) = self.buf.parts();
                BatchBytes::new(head, tail)
            }
        }
    }

    /// Frees the buffers (the record count stays): for a batch that is done while its
    /// owner still holds it.
    pub fn free(&mut self) {
        self.buf = Chunked::with_capacity(0);
        if let Some(c) = self.compressed.as_mut() {
            release_large(c);
        }
        self.compressed = None;
    }

    /// Base timestamp (the first record's).
    pub fn base_timestamp(&self) -> i64 {
        self.base_timestamp
    }
}

impl Drop for BatchWriter {
    /// A large compressed batch is freed without raising glibc's mmap threshold (see
    /// `large_buffers`; the records' chunks see to themselves).
    fn drop(&mut self) {
        if let Some(c) = self.compressed.as_mut() {
            release_large(c);
        }
    }
}

/// A decoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Leader epoch that wrote it.
    pub partition_leader_epoch: i32,
    /// Raw attributes.
    pub attributes: i16,
    /// Last offset delta.
    pub last_offset_delta: i32,
    /// First timestamp.
    pub base_timestamp: i64,
    /// Largest timestamp.
    pub max_timestamp: i64,
    /// Producer id, -1 if none.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 if none.
    pub base_sequence: i32,
    /// Records.
    pub records: Vec<Record>,
}

impl RecordBatch {
    /// The codec named by the attributes.
    pub fn compression_bits(&self) -> u8 {
        (self.attributes & 0x07) as u8
    }

    /// Whether the batch is transactional.
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    /// Whether the batch is a control batch.
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    /// Whether timestamps are LogAppendTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & 0x08 != 0
    }

    /// Encodes the batch (uncompressed), keeping offsets and timestamps as deltas of the first
    /// record. For tests and tools; the producer uses [`BatchWriter`] directly.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = BatchWriter::new(256, Compression::None);
        for r in &self.records {
            let headers: Vec<Header<'_>> = r
                .headers
                .iter()
                .map(|h| Header {
                    key: &h.key,
                    value: h.value.as_deref(),
                })
                .collect();
            w.append(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers);
        }
        let mut b = w
            .seal(self.producer_id, self.producer_epoch, self.base_sequence)
            .to_vec();
        b[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b[21..23].copy_from_slice(&(self.attributes & !0x07).to_be_bytes());
        if self.records.is_empty() {
            b[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
            b[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
            b[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        }
        let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
        b[CRC_OFFSET..ATTRIBUTES_OFFSET].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// Decodes one batch from `r`, checking its CRC; compressed records may inflate to
    /// [`MAX_DECOMPRESSED_BATCH`]. Keys and values are copied into one buffer for the batch.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut budget = MAX_DECOMPRESSED_BATCH;
        Self::decode_within(r, &mut budget)
    }

    /// Decodes one batch from `r`, checking its CRC. Compressed records may inflate to at most
    /// `budget` bytes, which are taken from it; beyond it the batch is
    /// [`DecodeError::DecompressedTooLarge`] and the whole budget is spent (the work was done).
    pub fn decode_within(r: &mut Reader<'_>, budget: &mut usize) -> Result<Self, DecodeError> {
        Self::decode_bounded(r, &Bytes::new(), budget, usize::MAX)
    }

    /// [`decode_within`](Self::decode_within) with a bound of its own for a compressed batch:
    /// at most [`inflation_bound`](crate::protocol::compression::inflation_bound)`(size,
    /// max_ratio)`, beyond which it is [`DecodeError::InflationBound`] (a bomb, which no
    /// budget would take) rather than [`DecodeError::DecompressedTooLarge`].
    ///
    /// `r` reads within `source` (the fetched bytes): an uncompressed batch's keys and values
    /// are slices of it, a compressed batch's slices of its decompressed records. A reader over
    /// other bytes gets the batch's records copied into one buffer.
    pub fn decode_bounded(
        r: &mut Reader<'_>,
        source: &Bytes,
        budget: &mut usize,
        max_ratio: usize,
    ) -> Result<Self, DecodeError> {
        let base_offset = i64::read(r)?;
        let batch_length = i32::read(r)?;
        if batch_length < (BATCH_HEADER_SIZE - 12) as i32 {
            return Err(DecodeError::InvalidValue {
                what: "batch length",
                value: batch_length as i64,
            });
        }
        let body = r.take(batch_length as usize)?;
        let mut r = Reader::new(body);
        let partition_leader_epoch = i32::read(&mut r)?;
        let magic = i8::read(&mut r)?;
        if magic != 2 {
            return Err(DecodeError::UnsupportedMagic(magic));
        }
        let stored = u32::read(&mut r)?;
        let computed = crc32c::crc32c(&body[ATTRIBUTES_OFFSET - 12..]);
        if stored != computed {
            return Err(DecodeError::CrcMismatch { stored, computed });
        }
        let attributes = i16::read(&mut r)?;
        let last_offset_delta = i32::read(&mut r)?;
        let base_timestamp = i64::read(&mut r)?;
        let max_timestamp = i64::read(&mut r)?;
        let producer_id = i64::read(&mut r)?;
        let producer_epoch = i16::read(&mut r)?;
        let base_sequence = i32::read(&mut r)?;
        let count = i32::read(&mut r)?;
        if count < 0 {
            return Err(DecodeError::NegativeLength(count as i64));
        }
        let codec = crate::protocol::compression::from_attributes(attributes)?;
        // The records section as one buffer that every key and value slices.
        let records = if codec == Compression::None {
            within(source, r.rest())
        } else {
            let rest = r.remaining();
            let own = crate::protocol::compression::inflation_bound(rest, max_ratio);
            let bound = (*budget).min(own);
            let inflated =
                match crate::protocol::compression::decompress(codec, r.take(rest)?, bound) {
                    Ok(v) => v,
                    Err(DecodeError::DecompressedTooLarge { at_least, max }) => {
                        // The work up to the bound was done: it counts, so that refused batches
                        // cannot each cost a whole bound.
                        *budget -= max;
                        return Err(if max == own {
                            DecodeError::InflationBound {
                                compressed: rest,
                                max,
                            }
                        } else {
                            DecodeError::DecompressedTooLarge { at_least, max }
                        });
                    }
                    Err(e) => return Err(e),
                };
            *budget -= inflated.len();
            shared_buffer(inflated)
        };
        let mut r = Reader::new(&records);
        let count = r.bounded_count(count as usize, MIN_RECORD_SIZE)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(decode_record(
                &mut r,
                &records,
                base_offset,
                base_timestamp,
            )?);
        }
        r.expect_end()?;
        Ok(Self {
            base_offset,
            partition_leader_epoch,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records: out,
        })
    }
}

/// The records of a batch as one shared buffer: a slice of `source` when `records` lies in it,
/// else a copy (a reader over bytes that are not `source`'s).
fn within(source: &Bytes, records: &[u8]) -> Bytes {
    let start = (records.as_ptr() as usize).wrapping_sub(source.as_ptr() as usize);
    if start <= source.len() && records.len() <= source.len() - start {
        source.slice(start..start + records.len())
    } else {
        shared_buffer(records.to_vec())
    }
}

/// A nullable bytes field, as a slice of `source`, which holds every byte `r` reads.
fn read_bytes_field(r: &mut Reader<'_>, source: &Bytes) -> Result<Option<Bytes>, DecodeError> {
    match Varint::read(r)?.0 {
        -1 => Ok(None),
        n if n < 0 => Err(DecodeError::NegativeLength(n as i64)),
        n => Ok(Some(within(source, r.take(n as usize)?))),
    }
}

fn decode_record(
    r: &mut Reader<'_>,
    source: &Bytes,
    base_offset: i64,
    base_timestamp: i64,
) -> Result<Record, DecodeError> {
    let len = Varint::read(r)?.0;
    if len < 0 {
        return Err(DecodeError::NegativeLength(len as i64));
    }
    let mut r = Reader::new(r.take(len as usize)?);
    let _attributes = i8::read(&mut r)?;
    let timestamp_delta = Varlong::read(&mut r)?.0;
    let offset_delta = Varint::read(&mut r)?.0;
    let key = read_bytes_field(&mut r, source)?;
    let value = read_bytes_field(&mut r, source)?;
    let n = Varint::read(&mut r)?.0;
    if n < 0 {
        return Err(DecodeError::NegativeLength(n as i64));
    }
    let n = r.bounded_count(n as usize, 2)?;
    let mut headers = Vec::with_capacity(n);
    for _ in 0..n {
        let key =
            read_bytes_field(&mut r, source)?.ok_or(DecodeError::UnexpectedNull("header key"))?;
        let key = std::str::from_utf8(&key).map_err(|_| DecodeError::InvalidUtf8)?;
        headers.push(OwnedHeader {
            key: key.to_owned(),
            value: read_bytes_field(&mut r, source)?,
        });
    }
    r.expect_end()?;
    Ok(Record {
        offset: base_offset.wrapping_add(offset_delta as i64),
        timestamp: base_timestamp.wrapping_add(timestamp_delta),
        key,
        value,
        headers,
    })
}

/// Decodes every complete batch in `data` (a fetch or produce `records` field). A partial
/// batch at the end (brokers may cut a fetch response mid-batch) is ignored; anything else
/// malformed is an error.
pub fn decode_batches(data: &[u8]) -> Result<Vec<RecordBatch>, DecodeError> {
    let mut r = Reader::new(data);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        if r.remaining() < 12 {
            break;
        }
        let mut peek = r.clone();
        peek.take(8)?;
        let len = i32::read(&mut peek)?;
        if len >= 0 && (len as usize) > peek.remaining() {
            break;
        }
        out.push(RecordBatch::decode(&mut r)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_header() -> impl Strategy<Value = OwnedHeader> {
        (
            "[a-z]{0,6}",
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        )
            .prop_map(|(key, value)| OwnedHeader {
                key,
                value: value.map(Bytes::from),
            })
    }

    fn arb_batch() -> impl Strategy<Value = RecordBatch> {
        let record = (
            0i64..1_000_000,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..50)),
            proptest::collection::vec(arb_header(), 0..4),
        );
        (
            0i64..1 << 40,
            any::<i64>(),
            any::<i16>(),
            any::<i32>(),
            1_600_000_000_000i64..1_900_000_000_000,
            proptest::collection::vec(record, 1..10),
        )
            .prop_map(|(base_offset, pid, epoch, seq, ts, recs)| {
                let records: Vec<Record> = recs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (dt, key, value, headers))| Record {
                        offset: base_offset + i as i64,
                        timestamp: ts + dt,
                        key: key.map(Bytes::from),
                        value: value.map(Bytes::from),
                        headers,
                    })
                    .collect();
                RecordBatch {
                    base_offset,
                    partition_leader_epoch: 5,
                    attributes: 0,
                    last_offset_delta: records.len() as i32 - 1,
                    base_timestamp: records[0].timestamp,
                    max_timestamp: records.iter().map(|r| r.timestamp).max().unwrap(),
                    producer_id: pid,
                    producer_epoch: epoch,
                    base_sequence: seq,
                    records,
                }
            })
    }

    proptest! {
        #[test]
        fn batch_roundtrip(b in arb_batch()) {
            let bytes = b.encode();
            let got = decode_batches(&bytes).unwrap();
            prop_assert_eq!(got, vec![b]);
        }

        #[test]
        fn mutated_batches_never_panic(b in arb_batch(), idx: usize, byte: u8, cut: usize) {
            let mut bytes = b.encode();
            let i = idx % bytes.len();
            bytes[i] = byte;
            let _ = decode_batches(&bytes);
            let c = cut % bytes.len();
            let _ = RecordBatch::decode(&mut Reader::new(&bytes[..c]));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_batches(&bytes);
        }
    }

    #[test]
    fn duplicate_header_keys_are_kept_in_order() {
        let mut w = BatchWriter::new(100, Compression::None);
        let hs = [
            Header::new("k", b"1"),
            Header::new("k", b"2"),
            Header {
                key: "n",
                value: None,
            },
        ];
        let predicted = w.size_of(1000, Some(b"key"), Some(b"v"), &hs);
        let before = w.size();
        w.append(1000, Some(b"key"), Some(b"v"), &hs);
        assert_eq!(w.size() - before, predicted);
        w.append(1005, None, None, &[]);
        w.seal(7, 1, 10);
        let b = &decode_batches(&w.bytes().to_vec()).unwrap()[0];
        assert_eq!(
            (b.producer_id, b.producer_epoch, b.base_sequence),
            (7, 1, 10)
        );
        assert_eq!(b.last_offset_delta, 1);
        assert_eq!(b.max_timestamp, 1005);
        let h: Vec<_> = b.records[0]
            .headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        assert_eq!(
            h,
            [("k", Some(&b"1"[..])), ("k", Some(&b"2"[..])), ("n", None)]
        );
        assert_eq!(b.records[1].key, None);
        assert_eq!(b.records[1].timestamp, 1005);
        // Resealing under another producer id rewrites the header and the CRC.
        w.seal(8, 0, 0);
        let b = &decode_batches(&w.bytes().to_vec()).unwrap()[0];
        assert_eq!((b.producer_id, b.base_sequence), (8, 0));
    }

    #[test]
    fn a_batch_grown_into_many_chunks_is_one_valid_batch() {
        let mut w = BatchWriter::new(16 * 1024, Compression::None);
        let value = [9u8; 100];
        for i in 0..3000 {
            w.append(1000 + i, None, Some(&value), &[]);
        }
        let capacity = w.capacity();
        let sealed = w.seal(5, 0, 3);
        assert!(sealed.chunks().count() > 3, "{}", sealed.chunks().count());
        assert!(sealed.chunks().skip(1).all(|c| c.len() <= 64 * 1024));
        assert!(
            capacity - sealed.len() <= 64 * 1024,
            "slack of one chunk at most"
        );
        let b = &decode_batches(&sealed.to_vec()).unwrap()[0];
        assert_eq!((b.records.len(), b.base_sequence), (3000, 3));
        assert_eq!(b.records[2999].timestamp, 3999);
        w.seal(6, 1, 0);
        let b = &decode_batches(&w.bytes().to_vec()).unwrap()[0];
        assert_eq!((b.producer_id, b.records.len()), (6, 3000));
    }

    #[test]
    fn every_codec_roundtrips_and_reseals() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut w = BatchWriter::new(1000, codec);
            for i in 0..50 {
                let v = format!("value-{i}-{}", "x".repeat(i));
                w.append(
                    1000 + i as i64,
                    Some(b"key"),
                    Some(v.as_bytes()),
                    &[Header::new("h", b"1")],
                );
            }
            w.seal(1, 0, 0);
            w.seal(2, 1, 7);
            let b = &decode_batches(&w.bytes().to_vec()).unwrap()[0];
            assert_eq!(
                b.compression_bits() as i16,
                codec.attribute_bits(),
                "{codec}"
            );
            assert_eq!(
                (b.producer_id, b.producer_epoch, b.base_sequence),
                (2, 1, 7)
            );
            assert_eq!(b.records.len(), 50);
            assert_eq!(b.records[49].value.as_deref().unwrap().len(), 9 + 49);
            if codec != Compression::None {
                assert!(
                    w.bytes().len() < w.size(),
                    "{codec} did not shrink the batch"
                );
            }
        }
    }

    #[test]
    fn corrupt_crc_is_an_error() {
        let mut w = BatchWriter::new(100, Compression::None);
        w.append(1, Some(b"a"), Some(b"b"), &[]);
        let mut bytes = w.seal(-1, -1, -1).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(matches!(
            decode_batches(&bytes),
            Err(DecodeError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn known_crc_of_empty_record() {
        // A batch with one record, null key and value, all-zero header fields: the CRC
        // must match crc32c over the bytes from the attributes on (checked independently).
        let mut w = BatchWriter::new(100, Compression::None);
        w.append(0, None, None, &[]);
        let bytes = w.seal(0, 0, 0).to_vec();
        let crc = u32::from_be_bytes(bytes[17..21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&bytes[21..]));
        assert_eq!(bytes.len(), 61 + 7);
    }

    #[test]
    fn transactional_batches_carry_the_attribute_bit() {
        for codec in [Compression::None, Compression::Lz4] {
            let mut w = BatchWriter::new(100, codec);
            w.append(1, None, Some(b"v"), &[]);
            w.set_transactional(true);
            let b = decode_batches(&w.seal(3, 1, 0).to_vec()).unwrap().remove(0);
            assert!(b.is_transactional() && !b.is_control(), "{codec}");
            assert_eq!(
                b.compression_bits(),
                codec.attribute_bits() as u8,
                "{codec}"
            );
        }
    }
}
