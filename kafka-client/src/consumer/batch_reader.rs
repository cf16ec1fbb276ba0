//! The batch reader: turns one partition's `records` bytes from a Fetch response into the
//! records `poll()` hands out, and says where the next fetch starts.
//!
//! Rules (the Java client's `CompletedFetch`):
//! - every complete batch moves the position to `base_offset + last_offset_delta + 1`, so gaps
//!   left by compaction and the offsets of control batches are stepped over; a trailing batch
//!   cut short by the response size limit is dropped (fetched again next time);
//! - a fetch from the middle of a batch (compressed batches are returned whole) skips the
//!   records before the position;
//! - control batches (transaction markers) are never returned; with `read_committed`, batches
//!   of aborted transactions (named in the response) are skipped up to their abort marker;
//! - LogAppendTime batches give every record the batch's max timestamp;
//! - a batch that does not decode (CRC, compression, truncation) ends the parse: the records
//!   before it are returned, then `poll()` reports the error at that offset. Nothing here
//!   panics on any input (property tests below and in `tests/consumer_fetch_fuzz.rs`);
//! - compressed batches inflate within one [`DecompressionBudget`] per fetch response
//!   (`fetch.max.decompressed.bytes`). A batch that does not fit in what is left ends its
//!   partition's parse like a cut tail, and every compressed batch after it in the response
//!   waits too: they are fetched again, the partition first, with a fresh budget. Only a batch
//!   larger than the whole budget, or than its own bound for its size (a decompression bomb:
//!   `fetch.max.compression.ratio`), is an error for its partition.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use super::record::{ConsumerRecord, TimestampType};
use crate::protocol::DecodeError;
use crate::protocol::messages::fetch::{AbortedTransaction, IsolationLevel};
use crate::protocol::primitives::{ReadType, Reader};
use crate::protocol::record::{BATCH_HEADER_SIZE, RecordBatch};

/// What one partition's fetched bytes amount to.
#[derive(Debug, Default)]
pub struct ParsedFetch {
    /// Records to return, by offset.
    pub records: VecDeque<ConsumerRecord>,
    /// Where the next fetch starts once all `records` are consumed.
    pub next_offset: i64,
    /// A batch that failed to decode, at this position.
    pub error: Option<(i64, DecodeError)>,
    /// The parse stopped at `next_offset` because the fetch response's decompression budget
    /// ran out: the rest is to be fetched again.
    pub deferred: bool,
}

/// Control record type of an abort marker (the key is `i16 version, i16 type`).
const CONTROL_ABORT: i16 = 0;

fn is_abort_marker(batch: &RecordBatch) -> bool {
    batch.is_control()
        && batch
            .records
            .first()
            .and_then(|r| r.key.as_deref())
            .is_some_and(|k| {
                let mut r = Reader::new(k);
                i16::read(&mut r).is_ok() && i16::read(&mut r).is_ok_and(|t| t == CONTROL_ABORT)
            })
}

/// The smallest encoded record (length, attributes, timestamp and offset deltas, key and
/// value lengths, header count: one byte each).
const MIN_RECORD_SIZE: usize = 7;

/// How many records the batches in `data` declare (their headers' record counts), to size the
/// output once instead of growing it batch by batch. Only a hint: capped at what `data` could
/// hold uncompressed, so forged counts reserve no more than honest records would fill.
fn declared_records(data: &[u8]) -> usize {
    let be32 = |at: usize| i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let (mut total, mut at) = (0usize, 0usize);
    while data.len() - at >= BATCH_HEADER_SIZE {
        let len = be32(at + 8);
        if len < (BATCH_HEADER_SIZE - 12) as i32 {
            break;
        }
        let Some(next) = at
            .checked_add(12 + len as usize)
            .filter(|&n| n <= data.len())
        else {
            break; // the cut-off tail: fetched again
        };
        total = total.saturating_add(be32(at + BATCH_HEADER_SIZE - 4).max(0) as usize);
        at = next;
    }
    total.min(data.len() / MIN_RECORD_SIZE)
}

/// Decompressed bytes one fetch response may still produce (`fetch.max.decompressed.bytes`),
/// and how far each batch may inflate for its size (`fetch.max.compression.ratio`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecompressionBudget {
    total: usize,
    remaining: usize,
    max_ratio: usize,
}

impl DecompressionBudget {
    /// A fresh budget of `total` bytes, batches bounded at the default ratio
    /// ([`DEFAULT_MAX_RATIO`](crate::protocol::compression::DEFAULT_MAX_RATIO)).
    pub fn new(total: usize) -> Self {
        Self {
            total,
            remaining: total,
            max_ratio: crate::protocol::compression::DEFAULT_MAX_RATIO,
        }
    }

    /// Bounds each batch at `ratio` times its compressed size (at least 8 MiB).
    pub fn with_max_ratio(mut self, ratio: usize) -> Self {
        self.max_ratio = ratio;
        self
    }

    /// Bytes left.
    #[cfg(any(test, feature = "testing"))]
    pub fn remaining(&self) -> usize {
        self.remaining
    }
}

/// Parses the `records` of one partition fetched at `fetch_offset`. `aborted` is the
/// response's aborted-transaction list (read_committed). Compressed batches may inflate to
/// [`MAX_DECOMPRESSED_BATCH`](crate::protocol::record::MAX_DECOMPRESSED_BATCH) each.
#[cfg(any(test, feature = "testing"))]
pub fn parse_partition(
    topic: &Arc<str>,
    partition: i32,
    fetch_offset: i64,
    data: &[u8],
    isolation: IsolationLevel,
    aborted: &[AbortedTransaction],
) -> ParsedFetch {
    let mut budget = DecompressionBudget::new(crate::protocol::record::MAX_DECOMPRESSED_BATCH);
    parse_partition_within(
        topic,
        partition,
        fetch_offset,
        &Bytes::copy_from_slice(data),
        isolation,
        aborted,
        &mut budget,
    )
}

/// [`parse_partition`] with the fetch response's budget for decompressed bytes, which the
/// partition's compressed batches draw from. The records' keys and values are slices of
/// `data` (or of a compressed batch's decompressed records): no allocation per record.
pub fn parse_partition_within(
    topic: &Arc<str>,
    partition: i32,
    fetch_offset: i64,
    data: &Bytes,
    isolation: IsolationLevel,
    aborted: &[AbortedTransaction],
    budget: &mut DecompressionBudget,
) -> ParsedFetch {
    let mut out = ParsedFetch {
        records: VecDeque::with_capacity(declared_records(data)),
        next_offset: fetch_offset,
        error: None,
        deferred: false,
    };
    // The records' topic name gets a reference count of its own: the application thread drops
    // these records while this thread clones the shared name into the next ones, and one
    // counter for both made every record's drop wait for the other core's cache line.
    let topic: &Arc<str> = &Arc::from(&**topic);
    let read_committed = isolation == IsolationLevel::ReadCommitted;
    // Aborted transactions by first offset, consumed as batches pass them (Java's queue).
    let mut pending: Vec<AbortedTransaction> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut r = Reader::new(data);
    while r.remaining() >= 12 {
        // A batch whose declared length runs past the data is the cut-off tail: fetch it again.
        let mut peek = r.clone();
        let len = peek
            .take(8)
            .and_then(|_| i32::read(&mut peek))
            .unwrap_or(-1);
        if len >= 0 && len as usize > peek.remaining() {
            break;
        }
        let fresh = budget.remaining == budget.total;
        let batch = match RecordBatch::decode_bounded(
            &mut r,
            data,
            &mut budget.remaining,
            budget.max_ratio,
        ) {
            Ok(b) => b,
            Err(DecodeError::DecompressedTooLarge { .. }) if !fresh => {
                // It may fit in a fresh budget: fetched again, and nothing compressed after
                // it in this response is decoded (which would only repeat the work).
                budget.remaining = 0;
                out.deferred = true;
                break;
            }
            Err(e) => {
                out.error = Some((out.next_offset, e));
                break;
            }
        };
        let last = batch
            .base_offset
            .saturating_add(i64::from(batch.last_offset_delta));
        if last < out.next_offset {
            continue; // entirely before the position (fetched from mid-log, or a repeat)
        }
        let after = last.saturating_add(1);
        if read_committed && batch.producer_id >= 0 {
            while pending.last().is_some_and(|a| a.first_offset <= last) {
                let a = pending.pop().expect("checked");
                aborted_producers.insert(a.producer_id);
            }
            if is_abort_marker(&batch) {
                aborted_producers.remove(&batch.producer_id);
            } else if batch.is_transactional() && aborted_producers.contains(&batch.producer_id) {
                out.next_offset = after;
                continue;
            }
        }
        if batch.is_control() {
            out.next_offset = after;
            continue;
        }
        let log_append = batch.is_log_append_time();
        let epoch = (batch.partition_leader_epoch >= 0).then_some(batch.partition_leader_epoch);
        let mut next = out.next_offset;
        for rec in batch.records {
            // Offsets only grow: anything else (a record before the position, or a forged
            // delta) is not handed out.
            if rec.offset < next {
                continue;
            }
            next = rec.offset.saturating_add(1);
            out.records.push_back(ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset: rec.offset,
                timestamp: if log_append {
                    batch.max_timestamp
                } else {
                    rec.timestamp
                },
                timestamp_type: if log_append {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                },
                key: rec.key,
                value: rec.value,
                headers: rec.headers,
                leader_epoch: epoch,
            });
        }
        out.next_offset = after.max(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record::{OwnedHeader, Record};
    use proptest::prelude::*;

    fn rec(offset: i64, v: &str) -> Record {
        Record {
            offset,
            timestamp: 1000 + offset,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![
                OwnedHeader {
                    key: "h".into(),
                    value: Some(Bytes::from_static(b"1")),
                },
                OwnedHeader {
                    key: "h".into(),
                    value: None,
                },
            ],
        }
    }

    fn batch(base: i64, n: usize) -> RecordBatch {
        RecordBatch {
            base_offset: base,
            partition_leader_epoch: 3,
            attributes: 0,
            last_offset_delta: n as i32 - 1,
            base_timestamp: 1000 + base,
            max_timestamp: 1000 + base + n as i64 - 1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records: (0..n)
                .map(|i| rec(base + i as i64, &format!("v{}", base + i as i64)))
                .collect(),
        }
    }

    fn txn(mut b: RecordBatch, pid: i64) -> RecordBatch {
        b.attributes |= 0x10;
        b.producer_id = pid;
        b.producer_epoch = 0;
        b
    }

    fn marker(offset: i64, pid: i64, abort: bool) -> RecordBatch {
        let mut key = Vec::new();
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&(if abort { 0i16 } else { 1 }).to_be_bytes());
        let mut b = txn(batch(offset, 1), pid);
        b.attributes |= 0x20;
        b.records[0].key = Some(key.into());
        b
    }

    fn values(p: &ParsedFetch) -> Vec<String> {
        p.records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect()
    }

    fn t() -> Arc<str> {
        Arc::from("t")
    }

    /// Keys and values are slices of the fetched bytes (uncompressed) or of one decompressed
    /// buffer per batch, not an allocation each.
    #[test]
    fn records_share_their_batch_buffer() {
        use crate::protocol::record::{BatchWriter, Compression};
        for codec in [Compression::None, Compression::Gzip] {
            let mut w = BatchWriter::new(1024, codec);
            for i in 0..20u8 {
                w.append(1000, Some(&[i; 3]), Some(&[i; 10]), &[]);
            }
            let data = Bytes::from(w.seal(1, 0, 0).to_vec());
            let mut budget = DecompressionBudget::new(1 << 20);
            let p = parse_partition_within(
                &t(),
                0,
                0,
                &data,
                IsolationLevel::ReadUncommitted,
                &[],
                &mut budget,
            );
            assert_eq!(p.records.len(), 20, "{codec:?}");
            let at = |r: &ConsumerRecord| r.value.as_ref().unwrap().as_ptr() as usize;
            let (first, last) = (at(&p.records[0]), at(&p.records[19]));
            if codec == Compression::None {
                let range = data.as_ptr_range();
                assert!(
                    range.contains(&(first as *const u8)) && range.contains(&(last as *const u8))
                );
            }
            // One buffer: each record (length, attributes, two deltas, key length, 3-byte key,
            // value length, 10-byte value, header count) is 20 bytes after the last, no
            // allocator's gaps between.
            let gaps: Vec<usize> = p
                .records
                .iter()
                .map(at)
                .collect::<Vec<_>>()
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect();
            assert!(gaps.iter().all(|&g| g == 20), "{codec:?}: {gaps:?}");
            assert_eq!(p.records[7].key.as_deref(), Some(&[7u8; 3][..]));
            assert_eq!(p.records[7].value.as_deref(), Some(&[7u8; 10][..]));
        }
    }

    #[test]
    fn positions_step_over_gaps_and_partial_tails() {
        let mut data = batch(0, 3).encode();
        // Compaction removed offsets 3..10: the next batch starts at 10.
        data.extend(batch(10, 2).encode());
        let tail = batch(12, 5).encode();
        data.extend(&tail[..tail.len() - 7]);
        let p = parse_partition(&t(), 0, 0, &data, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(values(&p), ["v0", "v1", "v2", "v10", "v11"]);
        assert_eq!(p.next_offset, 12, "the cut batch is fetched again");
        assert!(p.error.is_none());
        assert_eq!(p.records[0].headers.len(), 2, "duplicate header keys kept");
        assert_eq!(p.records[4].leader_epoch, Some(3));
        // From the middle of a batch.
        let p = parse_partition(&t(), 0, 1, &data, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(values(&p)[0], "v1");
    }

    #[test]
    fn control_batches_and_aborted_transactions() {
        let mut data = txn(batch(0, 2), 7).encode(); // aborted
        data.extend(txn(batch(2, 2), 8).encode()); // committed
        data.extend(marker(4, 7, true).encode());
        data.extend(marker(5, 8, false).encode());
        data.extend(batch(6, 1).encode());
        let aborted = [AbortedTransaction {
            producer_id: 7,
            first_offset: 0,
        }];
        let p = parse_partition(&t(), 0, 0, &data, IsolationLevel::ReadCommitted, &aborted);
        assert_eq!(values(&p), ["v2", "v3", "v6"]);
        assert_eq!(p.next_offset, 7);
        let p = parse_partition(&t(), 0, 0, &data, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(
            values(&p),
            ["v0", "v1", "v2", "v3", "v6"],
            "markers are never returned"
        );
        // Only control batches: the position still moves on.
        let only = marker(9, 8, false).encode();
        let p = parse_partition(&t(), 0, 9, &only, IsolationLevel::ReadCommitted, &[]);
        assert!(p.records.is_empty());
        assert_eq!(p.next_offset, 10);
    }

    #[test]
    fn declared_records_sizes_the_output_within_what_the_data_can_hold() {
        let mut data = batch(0, 3).encode();
        data.extend(batch(10, 2).encode());
        assert_eq!(declared_records(&data), 5);
        let tail = batch(12, 5).encode();
        data.extend(&tail[..tail.len() - 7]);
        assert_eq!(declared_records(&data), 5, "a cut batch is not counted");
        assert_eq!(declared_records(&data[..40]), 0);
        // A forged count reserves no more than the bytes could hold uncompressed.
        let mut forged = batch(0, 1).encode();
        forged[BATCH_HEADER_SIZE - 4..BATCH_HEADER_SIZE].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(declared_records(&forged), forged.len() / MIN_RECORD_SIZE);
        let p = parse_partition(&t(), 0, 0, &data, IsolationLevel::ReadUncommitted, &[]);
        assert!(p.records.capacity() >= 5);
    }

    #[test]
    fn a_corrupt_batch_returns_what_came_before_and_the_error() {
        let mut data = batch(0, 2).encode();
        let mut bad = batch(2, 2).encode();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        data.extend(bad);
        let p = parse_partition(&t(), 0, 0, &data, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(values(&p), ["v0", "v1"]);
        assert!(matches!(
            p.error,
            Some((2, DecodeError::CrcMismatch { .. }))
        ));
    }

    #[test]
    fn log_append_time() {
        let mut b = batch(0, 2);
        b.attributes |= 0x08;
        let p = parse_partition(
            &t(),
            0,
            0,
            &b.encode(),
            IsolationLevel::ReadUncommitted,
            &[],
        );
        assert!(
            p.records
                .iter()
                .all(|r| r.timestamp == 1001 && r.timestamp_type == TimestampType::LogAppendTime)
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                offset in any::<i64>(), committed in any::<bool>()) {
            let iso = if committed { IsolationLevel::ReadCommitted } else { IsolationLevel::ReadUncommitted };
            let aborted = [AbortedTransaction { producer_id: 1, first_offset: offset }];
            let p = parse_partition(&t(), 0, offset, &bytes, iso, &aborted);
            prop_assert!(p.next_offset >= offset);
        }

        #[test]
        fn mutated_batches_never_panic_and_offsets_grow(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            start in 0i64..8,
        ) {
            let mut data = batch(0, 4).encode();
            data.extend(txn(batch(4, 3), 5).encode());
            data.extend(marker(7, 5, true).encode());
            for (i, b) in flips {
                let i = i % data.len();
                data[i] = b;
            }
            let aborted = [AbortedTransaction { producer_id: 5, first_offset: 4 }];
            let p = parse_partition(&t(), 0, start, &data, IsolationLevel::ReadCommitted, &aborted);
            let mut prev = start - 1;
            for r in &p.records {
                prop_assert!(r.offset > prev);
                prev = r.offset;
            }
            prop_assert!(p.next_offset > prev);
        }
    }
}
