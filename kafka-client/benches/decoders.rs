//! What decoding a fetched batch costs: per codec, the throughput on ordinary records beside
//! the inputs built to cost the most per byte (`tests/support/hostile.rs`), each decoded the
//! way the consumer decodes it: within the consumer's default decompression budget and the
//! batch's own bound for its size (`fetch.max.compression.ratio`).
//!
//! ```text
//! cargo bench -p kafka-client --bench decoders
//! BENCH_LEN=1000000 BENCH_BUDGET=104857600 BENCH_RATIO=64 cargo bench -p kafka-client --bench decoders
//! ```
//!
//! `BENCH_LEN` is the size of each hostile input (default 120000, the review's lz4 frame);
//! `BENCH_BUDGET` the decompressed bytes a decode may produce (default: the consumer's
//! `fetch.max.decompressed.bytes` default); `BENCH_RATIO` the batch's bound per compressed
//! byte (default: `fetch.max.compression.ratio`'s; a huge value shows the budget alone).
//! Medians of at least 5 runs and 0.3 s; a markdown table on stdout.

use std::hint::black_box;
use std::time::{Duration, Instant};

use kafka_client::testing::protocol::compression::{self, Compression};

#[path = "../tests/support/hostile.rs"]
mod hostile;

/// Median time of one call of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < 5 || (start.elapsed() < Duration::from_millis(300) && runs.len() < 1000) {
        let t = Instant::now();
        f();
        runs.push(t.elapsed());
    }
    runs.sort();
    runs[runs.len() / 2]
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Records as a service writes them: JSON-ish text with varying numbers, about 200 bytes each.
fn ordinary_records(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    let mut i: u64 = 0;
    while out.len() < len {
        i += 1;
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        out.extend_from_slice(
            format!(
                "{{\"id\":{i},\"user\":\"user-{}\",\"amount\":{}.{:02},\"currency\":\"EUR\",\"ts\":{},\"tags\":[\"a{}\",\"b{}\"]}}\n",
                x % 100_000,
                x % 10_000,
                x % 100,
                1_700_000_000_000u64 + i * 17,
                x % 7,
                x % 13,
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

fn mb_per_s(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e6
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let len = env_usize("BENCH_LEN", 120_000);
    let budget = env_usize(
        "BENCH_BUDGET",
        kafka_client::ConsumerConfig::default().max_decompressed_bytes(),
    );
    let ratio = env_usize("BENCH_RATIO", compression::DEFAULT_MAX_RATIO);
    println!(
        "budget {budget} decompressed bytes, batches bounded at {ratio}x their size (at least {} bytes); hostile inputs of ~{len} bytes\n",
        compression::MIN_INFLATION_BOUND
    );
    println!("| codec | input | input bytes | output | median time | input MB/s | output MB/s |");
    println!("|---|---|---:|---|---:|---:|---:|");
    let plain = ordinary_records(1 << 20);
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut c = Vec::new();
        compression::compress(codec, &plain, &mut c).unwrap();
        let t = median(|| {
            black_box(compression::decompress(codec, black_box(&c), budget).unwrap());
        });
        println!(
            "| {codec} | ordinary records (1 MiB, JSON text) | {} | {} bytes | {:.2} ms | {:.0} | {:.0} |",
            c.len(),
            plain.len(),
            t.as_secs_f64() * 1e3,
            mb_per_s(c.len(), t),
            mb_per_s(plain.len(), t),
        );
    }
    for h in hostile::all(len) {
        // The bound the consumer gives this batch.
        let budget = budget.min(compression::inflation_bound(h.bytes.len(), ratio));
        // Bytes produced, or, for a refused input, the bound it was refused at; the first
        // call's time apart (fresh pages: the allocator has not held that much yet).
        let t = Instant::now();
        let produced = match compression::decompress(h.codec, &h.bytes, budget) {
            Ok(v) => v.len(),
            Err(_) => budget,
        };
        let first = t.elapsed();
        let t = median(|| {
            let _ = black_box(compression::decompress(
                h.codec,
                black_box(&h.bytes),
                budget,
            ));
        });
        let out = match compression::decompress(h.codec, &h.bytes, budget) {
            Ok(v) => format!("{} bytes", v.len()),
            Err(e) => format!("refused: {e}"),
        };
        println!(
            "| {} | {} | {} | {out} | {:.2} ms ({:.2} ms first) | {:.0} | {:.0} |",
            h.codec,
            h.name,
            h.bytes.len(),
            t.as_secs_f64() * 1e3,
            first.as_secs_f64() * 1e3,
            mb_per_s(h.bytes.len(), t),
            mb_per_s(produced, t),
        );
    }
}
