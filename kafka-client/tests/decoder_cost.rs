//! What decoding costs is bounded by what was received: the inputs built to cost the most per
//! byte (`support/hostile.rs`: the review's lz4 frame of 1-byte blocks declaring 4 MiB,
//! bombs, per-member and per-block fixed costs of every codec) are decoded or refused within
//! a time proportional to their bytes and to the output bound, and random or mutated frames
//! and record batches up to ~1 MB are decoded within a time proportional to their size,
//! under an allocator with a limit (an allocation sized by a declared length aborts the
//! binary).
//!
//! The time bounds are generous (a loaded 2-core machine, a debug build of this crate): they
//! catch work out of proportion to the input, like the 1-15 s the lz4 frame cost before its
//! blocks were sized from their contents. The figures themselves come from
//! `benches/decoders.rs`.

use std::alloc::System;
use std::sync::{Arc, Once, OnceLock};
use std::time::{Duration, Instant};

use cap::Cap;
use kafka_client::testing::fetch_decode::{
    DecompressionBudget, ParsedFetch, parse_partition_within,
};
use kafka_client::testing::protocol::DecodeError;
use kafka_client::testing::protocol::compression::{self, Compression};
use kafka_client::testing::protocol::messages::fetch::IsolationLevel;
use kafka_client::testing::protocol::record::BatchWriter;
use kafka_client::{Bytes, ConsumerConfig};
use proptest::prelude::*;

mod support;
use support::hostile;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// Output bound of the property tests: bombs stop there.
const MAX_OUTPUT: usize = 8 << 20;

/// Allocations are capped at what the default decompression budget (the largest bound used
/// here) and the inputs need, with room for the test harness: 3 x budget above the start.
fn limit_allocations() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let budget = ConsumerConfig::default().max_decompressed_bytes();
        ALLOCATOR
            .set_limit(ALLOCATOR.allocated() + 3 * budget)
            .expect("limit above what is allocated");
    });
}

/// The most a decode of `input` bytes that produced (or was refused at) `output` bytes may
/// take: 50 ms, plus 1 us per input byte and 400 ns per output byte (lz4's decoder is inlined
/// into this debug build; a loaded machine). Optimized, the worst inputs cost well under a
/// tenth of it (`benches/decoders.rs`).
fn allowed(input: usize, output: usize) -> Duration {
    Duration::from_millis(50) + Duration::from_nanos(input as u64 * 1000 + output as u64 * 400)
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// Decodes and checks the time bound; the output size or how far a refused one got.
fn decode_within_time(codec: Compression, input: &[u8], max: usize, what: &str) -> usize {
    let (out, took) = time(|| compression::decompress(codec, input, max));
    let produced = match &out {
        Ok(v) => {
            assert!(
                v.len() <= max,
                "{what}: {} bytes over the bound {max}",
                v.len()
            );
            v.len()
        }
        Err(DecodeError::DecompressedTooLarge { max: m, .. }) => *m,
        Err(_) => 0,
    };
    let bound = allowed(
        input.len(),
        produced.max(if out.is_err() { max } else { 0 }),
    );
    assert!(
        took <= bound,
        "{what}: {} bytes decoded in {took:?}, over {bound:?} ({:?})",
        input.len(),
        out.map(|v| v.len())
    );
    produced
}

#[test]
fn hostile_inputs_cost_what_their_bytes_allow() {
    limit_allocations();
    let budget = ConsumerConfig::default().max_decompressed_bytes();
    for h in hostile::all(120_000) {
        // With the consumer's default budget, and with a small one.
        decode_within_time(h.codec, &h.bytes, budget, h.name);
        decode_within_time(h.codec, &h.bytes, 1 << 20, h.name);
    }
}

#[test]
fn the_reviews_lz4_frame_produces_nothing_and_costs_its_bytes() {
    limit_allocations();
    let frame = hostile::lz4_tiny_blocks(20_000);
    assert!(frame.len() > 100_000);
    let budget = ConsumerConfig::default().max_decompressed_bytes();
    let (out, took) = time(|| compression::decompress(Compression::Lz4, &frame, budget));
    assert_eq!(out.unwrap(), b"");
    // Optimized it takes well under a millisecond; before, 1-15 s.
    assert!(took < Duration::from_millis(50), "{took:?}");
}

#[test]
fn bombs_stop_at_the_bound_whatever_the_input_size() {
    limit_allocations();
    for h in hostile::all(1_000_000)
        .into_iter()
        .filter(|h| h.name.contains("bomb"))
    {
        for max in [1 << 20, MAX_OUTPUT] {
            match compression::decompress(h.codec, &h.bytes, max) {
                Err(DecodeError::DecompressedTooLarge { max: m, .. }) => assert_eq!(m, max),
                other => panic!("{}: {:?}", h.name, other.map(|v| v.len())),
            }
        }
    }
}

// --- the budget of one fetch response ------------------------------------------------------

fn batch(codec: Compression, base_offset: i64, records: usize, value: &[u8]) -> Vec<u8> {
    let mut w = BatchWriter::new(1024, codec);
    for _ in 0..records {
        w.append(1_700_000_000_000, None, Some(value), &[]);
    }
    let mut b = w.seal(-1, -1, -1).to_vec();
    b[0..8].copy_from_slice(&base_offset.to_be_bytes());
    b
}

#[test]
fn one_budget_per_fetch_response_defers_what_does_not_fit_and_refuses_what_never_can() {
    limit_allocations();
    let topic: Arc<str> = Arc::from("t");
    let value = vec![b'x'; 10_000];
    // Each batch inflates to ~1 MB (100 records of 10 KB).
    let a = batch(Compression::Zstd, 0, 100, &value);
    let b = batch(Compression::Zstd, 100, 100, &value);
    let mut two = a.clone();
    two.extend_from_slice(&b);
    let parse = |data: &[u8], from, budget: &mut DecompressionBudget| {
        let data = &Bytes::copy_from_slice(data);
        parse_partition_within(
            &topic,
            0,
            from,
            data,
            IsolationLevel::ReadUncommitted,
            &[],
            budget,
        )
    };
    // 1.5 MB: the first batch fits, the second is left for the next fetch.
    let mut budget = DecompressionBudget::new(1_500_000);
    let p = parse(&two, 0, &mut budget);
    assert_eq!(
        (p.records.len(), p.next_offset, p.deferred),
        (100, 100, true)
    );
    assert!(p.error.is_none());
    assert_eq!(budget.remaining(), 0, "nothing after it is decoded");
    // A second partition of the same response: deferred at once.
    let p = parse(&b, 100, &mut budget);
    assert_eq!((p.records.len(), p.next_offset, p.deferred), (0, 100, true));
    // The next response, with a fresh budget, decodes it.
    let p = parse(&b, 100, &mut DecompressionBudget::new(1_500_000));
    assert_eq!(
        (p.records.len(), p.next_offset, p.deferred),
        (100, 200, false)
    );
    // A batch larger than the whole budget is the partition's error, not an allocation.
    let p = parse(&a, 0, &mut DecompressionBudget::new(500_000));
    assert!(!p.deferred);
    assert!(
        matches!(
            p.error,
            Some((0, DecodeError::DecompressedTooLarge { max: 500_000, .. }))
        ),
        "{:?}",
        p.error
    );
    // Uncompressed batches draw nothing from it.
    let plain = batch(Compression::None, 0, 100, &value);
    let mut budget = DecompressionBudget::new(10);
    let p = parse(&plain, 0, &mut budget);
    assert_eq!((p.records.len(), budget.remaining()), (100, 10));
}

// --- the bound of one batch: its size times fetch.max.compression.ratio ------------------

/// A batch of `codec` whose records section is `records` as given (any bytes, a bomb), with
/// a valid header and CRC.
fn batch_around(codec: Compression, records: &[u8], count: i32) -> Vec<u8> {
    let mut b = batch(codec, 0, 1, b"x");
    b.truncate(61);
    b.extend_from_slice(records);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn parse_one(data: &[u8], budget: &mut DecompressionBudget) -> (ParsedFetch, Duration) {
    let topic: Arc<str> = Arc::from("t");
    let data = &Bytes::copy_from_slice(data);
    time(|| {
        parse_partition_within(
            &topic,
            0,
            0,
            data,
            IsolationLevel::ReadUncommitted,
            &[],
            budget,
        )
    })
}

#[test]
fn bombs_in_batches_are_refused_at_their_own_bound_whatever_the_budget() {
    limit_allocations();
    let budget = ConsumerConfig::default().max_decompressed_bytes();
    for h in hostile::all(120_000) {
        let data = batch_around(h.codec, &h.bytes, i32::MAX);
        let own = compression::inflation_bound(h.bytes.len(), compression::DEFAULT_MAX_RATIO);
        assert!(own < budget);
        let mut b = DecompressionBudget::new(budget);
        let (p, took) = parse_one(&data, &mut b);
        assert!(!p.deferred, "{}", h.name);
        if h.name.contains("bomb") && !h.name.starts_with("snappy") {
            // Refused after its own 8 MiB, not after the fetch's 100 MiB, and not deferred
            // (no budget would take it).
            assert!(
                matches!(p.error, Some((0, DecodeError::InflationBound { max, .. })) if max == own),
                "{}: {:?}",
                h.name,
                p.error
            );
        }
        assert!(b.remaining() >= budget - own, "{}", h.name);
        let bound = allowed(h.bytes.len(), own);
        assert!(took <= bound, "{}: {took:?} over {bound:?}", h.name);
    }
}

#[test]
fn refused_bombs_spend_the_budget_of_their_fetch() {
    limit_allocations();
    // One response with a gzip bomb in each of 30 partitions: what the refused ones cost is
    // charged, so past the budget the rest are deferred without being decompressed.
    let budget = ConsumerConfig::default().max_decompressed_bytes();
    let bomb = hostile::gzip_bomb(120_000);
    let data = batch_around(Compression::Gzip, &bomb, i32::MAX);
    let own = compression::inflation_bound(bomb.len(), compression::DEFAULT_MAX_RATIO);
    let mut b = DecompressionBudget::new(budget);
    let (mut refused, mut deferred) = (0, 0);
    let t = Instant::now();
    for _ in 0..30 {
        let (p, _) = parse_one(&data, &mut b);
        match (p.error, p.deferred) {
            (Some((_, DecodeError::InflationBound { .. })), false) => refused += 1,
            (None, true) => deferred += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused, budget / own);
    assert_eq!(deferred, 30 - refused);
    assert_eq!(b.remaining(), 0);
    let bound = allowed(data.len() * 30, budget + own);
    assert!(t.elapsed() <= bound, "{:?} over {bound:?}", t.elapsed());
}

/// Text records like a service's (keys repeat, numbers vary): 5-10x with any codec.
fn json_records(n: usize) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            format!(
                "{{\"id\":{i},\"user\":\"user-{}\",\"amount\":{}.{:02},\"currency\":\"EUR\",\"ts\":{},\"trace\":\"{:016x}{:016x}\"}}",
                x % 100_000,
                x % 10_000,
                x % 100,
                1_700_000_000_000u64 + i * 17,
                x,
                x.rotate_left(17),
            )
            .into_bytes()
        })
        .collect()
}

#[test]
fn large_batches_at_an_honest_ratio_pass_and_the_ratio_is_a_setting() {
    limit_allocations();
    let budget = ConsumerConfig::default().max_decompressed_bytes();
    // 12 MiB of text in one batch, over the 8 MiB floor: bounded by its size, and passes.
    let values = json_records(100_000);
    let size: usize = values.iter().map(Vec::len).sum();
    assert!(size > 12 << 20, "{size}");
    let mut w = BatchWriter::new(16 << 20, Compression::Zstd);
    for v in &values {
        w.append(1_700_000_000_000, None, Some(v), &[]);
    }
    let text = w.seal(-1, -1, -1).to_vec();
    assert!(text.len() > size / 64, "{} for {size}", text.len());
    let p = parse_one(&text, &mut DecompressionBudget::new(budget)).0;
    assert!(p.error.is_none(), "{:?}", p.error);
    assert_eq!(p.records.len(), values.len());
    // 12 MiB of zeros compresses a thousandfold: past 8 MiB, a bomb by default...
    let zeros = vec![0u8; 1 << 20];
    let mut w = BatchWriter::new(16 << 20, Compression::Zstd);
    for _ in 0..12 {
        w.append(1_700_000_000_000, None, Some(&zeros), &[]);
    }
    let sparse = w.seal(-1, -1, -1).to_vec();
    assert!(sparse.len() < 100_000);
    let p = parse_one(&sparse, &mut DecompressionBudget::new(budget)).0;
    assert!(
        matches!(p.error, Some((0, DecodeError::InflationBound { .. }))),
        "{:?}",
        p.error
    );
    // ...and read when fetch.max.compression.ratio allows it.
    let mut allowing = DecompressionBudget::new(budget).with_max_ratio(1_000_000);
    let p = parse_one(&sparse, &mut allowing).0;
    assert_eq!((p.records.len(), p.error.is_none()), (12, true));
}

// --- property tests: random and mutated input up to ~1 MB -----------------------------------

/// A fast deterministic filler (xorshift), so a megabyte of input costs nothing to make.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Text-like records that compress as real ones do.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [
        b"{\"id\":",
        b"\"user-",
        b"\",\"amount\":",
        b"EUR",
        b"},\n",
        b"ok",
        b"tags",
        b"0123",
    ];
    let n = noise(seed, len / 4 + 1);
    let mut out = Vec::with_capacity(len + 16);
    for b in n {
        out.extend_from_slice(words[(b & 7) as usize]);
        if out.len() >= len {
            break;
        }
    }
    out.truncate(len);
    out
}

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Byte edits: set, delete a range, insert, or repeat a range (which repeats blocks, frames
/// and members).
fn mutate(mut f: Vec<u8>, edits: &[(usize, usize, u8, u8)]) -> Vec<u8> {
    for &(at, len, byte, op) in edits {
        if f.is_empty() {
            break;
        }
        let i = at % f.len();
        let n = (len % 4096).min(f.len() - i);
        match op % 4 {
            0 => f[i] = byte,
            1 => {
                f.drain(i..i + n);
            }
            2 => f.insert(i, byte),
            _ => {
                if f.len() + n <= 1_200_000 {
                    let chunk = f[i..i + n].to_vec();
                    f.splice(i..i, chunk);
                }
            }
        }
    }
    f
}

fn edits() -> impl Strategy<Value = Vec<(usize, usize, u8, u8)>> {
    proptest::collection::vec(
        (any::<usize>(), any::<usize>(), any::<u8>(), any::<u8>()),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_frames_up_to_a_megabyte(seed: u64, len in 0usize..1_000_000, codec in 0usize..4) {
        limit_allocations();
        decode_within_time(CODECS[codec], &noise(seed, len), MAX_OUTPUT, "random");
    }

    #[test]
    fn mutated_frames_up_to_a_megabyte(
        seed: u64,
        len in 0usize..1_000_000,
        codec in 0usize..4,
        edits in edits(),
    ) {
        limit_allocations();
        let codec = CODECS[codec];
        let mut c = Vec::new();
        compression::compress(codec, &text(seed, len), &mut c).unwrap();
        decode_within_time(codec, &mutate(c, &edits), MAX_OUTPUT, "mutated");
    }

    #[test]
    fn mutated_hostile_frames(which: prop::sample::Index, edits in edits()) {
        limit_allocations();
        static ALL: OnceLock<Vec<hostile::Hostile>> = OnceLock::new();
        let all = ALL.get_or_init(|| hostile::all(200_000));
        let h = &all[which.index(all.len())];
        decode_within_time(h.codec, &mutate(h.bytes.clone(), &edits), MAX_OUTPUT, h.name);
    }

    #[test]
    fn mutated_batches_up_to_a_megabyte(
        seed: u64,
        records in 1usize..2000,
        size in 1usize..500,
        codec in 0usize..5,
        edits in edits(),
    ) {
        limit_allocations();
        let codec = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][codec];
        let mut w = BatchWriter::new(1024, codec);
        let values = text(seed, records * size);
        for v in values.chunks(size) {
            w.append(1_700_000_000_000, Some(b"k"), Some(v), &[]);
        }
        let data = Bytes::from(mutate(w.seal(1, 0, 0).to_vec(), &edits));
        let topic: Arc<str> = Arc::from("t");
        let mut budget = DecompressionBudget::new(MAX_OUTPUT);
        let (p, took) = time(|| parse_partition_within(
            &topic, 0, 0, &data, IsolationLevel::ReadUncommitted, &[], &mut budget,
        ));
        let inflated = MAX_OUTPUT - budget.remaining();
        let bound = allowed(data.len(), inflated) + Duration::from_nanos(p.records.len() as u64 * 2000);
        prop_assert!(took <= bound, "{} bytes, {} records in {:?}", data.len(), p.records.len(), took);
    }
}
