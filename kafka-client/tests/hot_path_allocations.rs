//! `send()` does not allocate per record: a record is serialized straight into its batch, its
//! report shares the batch's result. Counted with an instrumented global allocator while
//! 20,000 records go into large batches that linger (so the I/O thread stays idle), against a
//! real broker started with `scripts/kafka/kafka` (the producer needs the topic's metadata).

use std::alloc::System;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kafka_client::{Header, Producer, ProducerConfig, ProducerRecord};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/kafka")
}

/// A one-broker cluster in a directory of its own, stopped on drop.
struct Broker {
    dir: PathBuf,
    bootstrap: String,
}

impl Broker {
    fn start() -> Broker {
        let dir = std::env::temp_dir().join(format!("kafka-client-alloc-{}", std::process::id()));
        let out = Command::new(script())
            .args(["--dir", dir.to_str().unwrap(), "start", "--brokers", "1"])
            .args(["--owner", &std::process::id().to_string()])
            .output()
            .expect("run scripts/kafka/kafka");
        assert!(out.status.success(), "kafka start: {out:?}");
        let bootstrap = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("bootstrap servers")
            .to_owned();
        Broker { dir, bootstrap }
    }

    fn create_topic(&self, name: &str) {
        let out = Command::new(script())
            .args(["tool", "topics", "--bootstrap-server", &self.bootstrap])
            .args([
                "--create",
                "--topic",
                name,
                "--partitions",
                "1",
                "--replication-factor",
                "1",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "create topic: {out:?}");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["--dir", self.dir.to_str().unwrap(), "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The batch size: just under the broker's default max.message.bytes (1 MiB + 12).
const BATCH: usize = 1_000_000;

/// The only reallocations allowed are a sent batch's large buffers (its records, its callback
/// list) shrunk to one element before they are freed (large_buffers.rs): an acknowledgement can
/// come within a measured loop, the previous phase's batches' included (the CI of 20b79d8 and
/// of 6179c2d saw one each). Each such shrink gives back at least 127 KiB; a buffer grown per
/// record would instead reallocate many times, and grow.
fn assert_no_buffer_grew(stats: &stats_alloc::Stats) {
    let shrinks = stats.reallocations as isize;
    assert!(shrinks <= 8, "{shrinks} reallocations: {stats:?}");
    assert!(
        stats.bytes_reallocated <= -shrinks * 127 * 1024,
        "a buffer grew: {stats:?}"
    );
}

#[test]
fn send_does_not_allocate_per_record() {
    let broker = Broker::start();
    broker.create_topic("alloc");
    let producer = Producer::new(
        ProducerConfig::new(&broker.bootstrap)
            .unwrap()
            .crac_register(false)
            .batch_size(BATCH)
            // Fixed-size batches: a batch that grows while it waits (batch.grow.max.bytes)
            // reallocates its buffer a few times as it doubles, which this test would count.
            .batch_grow_max_bytes(0)
            .linger(Duration::from_secs(60)),
    )
    .unwrap();
    // Warm up: metadata, producer id, the partition's first batch.
    let warm = producer
        .send(ProducerRecord::new("alloc").value(b"warm"))
        .unwrap();
    producer.flush().unwrap();
    warm.wait().unwrap();
    let key = *b"key-0000";
    let value = [b'v'; 100];
    let headers = [Header::new("h", b"1"), Header::new("h", b"2")];
    let n = 20_000;
    let mut reports = Vec::with_capacity(n);
    let region = Region::new(GLOBAL);
    for _ in 0..n {
        reports.push(
            producer
                .send(
                    ProducerRecord::new("alloc")
                        .key(&key)
                        .value(&value)
                        .headers(&headers),
                )
                .unwrap(),
        );
    }
    let stats = region.change();
    eprintln!("{n} records: {stats:?}");
    // 20,000 records of ~135 bytes fill three 1 MB batches: a few allocations per batch (its
    // buffer, the shared result, a wake-up of the I/O thread), not one per record.
    assert_no_buffer_grew(&stats);
    assert!(
        stats.allocations < 100,
        "{} allocations for {n} records",
        stats.allocations
    );
    producer.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }

    // With a callback: callbacks of one closure type sit unboxed in their batch, in room
    // reserved once per batch; nothing is boxed or grown per record.
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let region = Region::new(GLOBAL);
    for i in 0..n {
        let delivered = delivered.clone();
        producer
            .send_with_callback(
                ProducerRecord::new("alloc")
                    .key(&key)
                    .value(&value)
                    .headers(&headers),
                move |r| {
                    assert!(r.is_ok(), "record {i}: {r:?}");
                    delivered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                },
            )
            .unwrap();
    }
    let stats = region.change();
    eprintln!("{n} records with callbacks: {stats:?}");
    assert_no_buffer_grew(&stats);
    assert!(
        stats.allocations < 100,
        "{} allocations for {n} records with callbacks",
        stats.allocations
    );
    producer.flush().unwrap();
    assert_eq!(delivered.load(std::sync::atomic::Ordering::Relaxed), n);
    producer.close(Duration::from_secs(10)).unwrap();
}
