//! The consumer's fetch path on malformed input: a Fetch response frame is decoded and each
//! partition's bytes go through the batch reader (`testing::fetch_decode::parse_partition`),
//! which checks CRCs, inflates compressed batches (bounded), decodes records, steps over
//! control batches and aborted transactions. On random frames, on real Java batches of every
//! codec (`tests/data/`) with bytes changed, cut, inserted or with a length forged at every
//! position, the outcome is records and/or an error, never a panic, and the records it does
//! return have growing offsets at or after the fetch position.
//!
//! The process runs under an allocator with a limit (256 MiB above what the harness holds), so
//! an allocation sized by a forged count or a decompression bomb aborts the binary.

use std::alloc::System;
use std::sync::{Arc, Once};

use cap::Cap;
use kafka_client::Bytes;
use kafka_client::testing::fetch_decode::{ParsedFetch, parse_partition};
use kafka_client::testing::protocol::messages::fetch::{
    AbortedTransaction, FetchPartitionData, FetchRequest, FetchResponse, FetchableTopicResponse,
    IsolationLevel,
};
use kafka_client::testing::protocol::primitives::Uuid;
use kafka_client::testing::protocol::{ErrorCode, ResponseHeader, decode_response};
use proptest::prelude::*;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn limit_allocations() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ALLOCATOR
            .set_limit(ALLOCATOR.allocated() + (256 << 20))
            .expect("limit above what is allocated");
    });
}

const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

fn golden(codec: &str) -> Vec<u8> {
    let p = format!(
        "{}/tests/data/java-4.4.0-{codec}.batch",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Two Java batches back to back, as a fetch returns them.
fn records_section(codec: &str) -> Vec<u8> {
    let b = golden(codec);
    let mut second = b.clone();
    // The second batch continues where the first ends.
    let base = i64::from_be_bytes(b[0..8].try_into().unwrap());
    let delta = i32::from_be_bytes(b[23..27].try_into().unwrap());
    second[0..8].copy_from_slice(&(base + delta as i64 + 1).to_be_bytes());
    let mut out = b;
    out.extend(second);
    out
}

/// A whole Fetch response frame (header included) of version `v` carrying `records`.
fn frame(v: i16, records: &[u8]) -> Vec<u8> {
    let ids = FetchRequest::uses_topic_ids(v);
    let resp = FetchResponse {
        throttle_time_ms: 0,
        error_code: ErrorCode::None,
        session_id: 0,
        responses: vec![FetchableTopicResponse {
            topic: if ids { String::new() } else { "t".into() },
            topic_id: if ids { Uuid([7; 16]) } else { Uuid::default() },
            partitions: vec![FetchPartitionData {
                partition_index: 0,
                error_code: ErrorCode::None,
                high_watermark: 1000,
                last_stable_offset: 1000,
                log_start_offset: 0,
                diverging_epoch: None,
                current_leader: None,
                aborted_transactions: Some(vec![AbortedTransaction {
                    producer_id: 0,
                    first_offset: 5,
                }]),
                preferred_read_replica: -1,
                records: Some(Bytes::copy_from_slice(records)),
            }],
        }],
        node_endpoints: Vec::new(),
    };
    let mut out = Vec::new();
    ResponseHeader { correlation_id: 1 }.encode(if v >= 12 { 1 } else { 0 }, &mut out);
    resp.encode(v, &mut out);
    out
}

fn check(p: &ParsedFetch, from: i64) {
    let mut prev = from - 1;
    for r in &p.records {
        assert!(r.offset > prev, "offsets grow: {} after {prev}", r.offset);
        prev = r.offset;
    }
    assert!(p.next_offset >= from);
    assert!(p.next_offset > prev);
}

/// Decodes a frame and reads every partition's records, as the consumer's fetcher does;
/// returns how many records a read_uncommitted consumer gets (`None`: the frame is refused).
fn fetch_path(bytes: &[u8], v: i16, from: i64) -> Option<usize> {
    let resp = decode_response::<FetchRequest>(bytes, v, 1).ok()?;
    let mut n = 0;
    let topic: Arc<str> = Arc::from("t");
    for t in resp.responses {
        for p in t.partitions {
            let aborted = p.aborted_transactions.unwrap_or_default();
            for iso in [
                IsolationLevel::ReadUncommitted,
                IsolationLevel::ReadCommitted,
            ] {
                let parsed = parse_partition(
                    &topic,
                    p.partition_index,
                    from,
                    p.records.as_deref().unwrap_or(&[]),
                    iso,
                    &aborted,
                );
                check(&parsed, from);
                if iso == IsolationLevel::ReadUncommitted {
                    n += parsed.records.len();
                }
            }
        }
    }
    Some(n)
}

#[test]
fn java_batches_of_every_codec_read_back_whole_and_cut() {
    limit_allocations();
    for codec in CODECS {
        let data = records_section(codec);
        let topic: Arc<str> = Arc::from("t");
        let all = parse_partition(&topic, 0, 0, &data, IsolationLevel::ReadUncommitted, &[]);
        assert!(all.error.is_none(), "{codec}: {:?}", all.error);
        assert!(all.records.len() > 20, "{codec}: {}", all.records.len());
        check(&all, 0);
        for r in &all.records {
            let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
            assert!(v.starts_with(&format!("java {codec} record")), "{v}");
        }
        // Every cut: the complete batches before it, nothing of the cut one.
        for cut in 0..data.len() {
            let p = parse_partition(
                &topic,
                0,
                0,
                &data[..cut],
                IsolationLevel::ReadUncommitted,
                &[],
            );
            assert!(p.error.is_none(), "{codec} cut at {cut}: {:?}", p.error);
            check(&p, 0);
        }
        // From the middle of the first batch: what comes before the position is skipped.
        let mid = all.records[3].offset;
        let p = parse_partition(&topic, 0, mid, &data, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(p.records.front().map(|r| r.offset), Some(mid));
        assert_eq!(p.next_offset, all.next_offset);
        for v in [4, 12, 13, 17] {
            assert_eq!(
                fetch_path(&frame(v, &data), v, 0),
                Some(all.records.len()),
                "{codec} v{v}"
            );
        }
    }
}

#[test]
fn forged_lengths_at_every_position_never_panic() {
    limit_allocations();
    let topic: Arc<str> = Arc::from("t");
    for codec in CODECS {
        let data = records_section(codec);
        for pos in 0..data.len().saturating_sub(4) {
            for forged in [0x7fff_ffffu32, 0xffff_ffff, 0x8000_0000, 0x0100_0000, 61, 0] {
                let mut d = data.clone();
                d[pos..pos + 4].copy_from_slice(&forged.to_be_bytes());
                let p = parse_partition(&topic, 0, 0, &d, IsolationLevel::ReadCommitted, &[]);
                check(&p, 0);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), v in 4i16..=17) {
        limit_allocations();
        fetch_path(&bytes, v, 0);
    }

    #[test]
    fn mutated_java_batches_never_panic(
        codec in 0usize..4,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
        insert in proptest::option::of((any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16))),
        from in 0i64..40,
    ) {
        limit_allocations();
        let mut data = records_section(CODECS[codec]);
        for (i, b) in flips {
            let i = i % data.len();
            data[i] = b;
        }
        if let Some((at, bytes)) = insert {
            let at = at % data.len();
            data.splice(at..at, bytes);
        }
        data.truncate(cut % (data.len() + 1));
        let topic: Arc<str> = Arc::from("t");
        let p = parse_partition(&topic, 0, from, &data, IsolationLevel::ReadCommitted, &[AbortedTransaction { producer_id: 0, first_offset: 3 }]);
        check(&p, from);
        fetch_path(&frame(17, &data), 17, from);
        fetch_path(&frame(12, &data), 12, from);
    }

    #[test]
    fn mutated_frames_never_panic(
        codec in 0usize..4,
        v in prop_oneof![Just(4i16), Just(11), Just(12), Just(13), Just(17)],
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        limit_allocations();
        let mut f = frame(v, &records_section(CODECS[codec]));
        for (i, b) in flips {
            let i = i % f.len();
            f[i] = b;
        }
        fetch_path(&f, v, 0);
    }
}
