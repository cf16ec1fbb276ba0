//! How the producer batches under load, against the fake broker (`support/fake_broker.rs`):
//! while a broker's in-flight window is full, the batches waiting for it grow past
//! `batch.size` (up to `batch.grow.max.bytes`), so each request carries more; with growth off
//! they stay at `batch.size`, as Java's do. Every record arrives once, in order.

use std::time::Duration;

use kafka_client::testing::protocol::ApiKey;

mod support;
use support::clients::{T, producer, send, values};
use support::fake_broker::{Action, FakeCluster};

/// Sends `n` records of 200 bytes to partition 0 while the broker answers each produce
/// request 40 ms late; returns the records of each batch the broker got, and checks every
/// record arrived once, in order.
fn batches_under_a_slow_broker(extra: &[(&str, &str)], n: usize) -> Vec<usize> {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    c.on(ApiKey::Produce, usize::MAX, |_, r| {
        Action::Delay(Duration::from_millis(40), Box::new(Action::Reply(r)))
    });
    let base = [("batch.size", "16384"), ("delivery.timeout.ms", "60000")];
    let p = producer(&c, &[&base[..], extra].concat());
    let sent: Vec<String> = (0..n).map(|i| format!("{i:0>200}")).collect();
    let reports: Vec<_> = sent.iter().map(|v| send(&p, 0, v)).collect();
    for r in reports {
        r.wait().unwrap();
    }
    assert_eq!(values(&c, 0), sent, "every record once, in order");
    c.seen(ApiKey::Produce)
        .iter()
        .flat_map(|s| match &s.req {
            support::fake_broker::Req::Produce(pr) => pr.batches(),
            _ => Vec::new(),
        })
        .map(|(_, _, b)| b.records.len())
        .collect()
}

#[test]
fn batches_waiting_for_a_full_window_grow_past_batch_size() {
    let n = 5_000;
    // A 16 KiB batch holds about 75 of these records; 200,000 bytes about 930.
    let grown = batches_under_a_slow_broker(&[("batch.grow.max.bytes", "200000")], n);
    let biggest = grown.iter().copied().max().unwrap();
    assert!(biggest > 300, "records per batch: {grown:?}");
    assert!(
        biggest < 1_000,
        "bounded by batch.grow.max.bytes: {grown:?}"
    );

    let fixed = batches_under_a_slow_broker(&[("batch.grow.max.bytes", "0")], n);
    assert!(
        fixed.iter().all(|r| *r <= 80),
        "records per batch: {fixed:?}"
    );
    assert!(
        grown.len() * 4 < fixed.len(),
        "{} vs {} batches",
        grown.len(),
        fixed.len()
    );
}
