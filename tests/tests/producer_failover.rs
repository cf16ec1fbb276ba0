//! Leadership changes with three real brokers and replication factor 3, while the producer
//! streams: the leader of a partition is stopped, then every partition's leader is moved by a
//! preferred-leader election; a topic is produced to the moment it exists while its leaders
//! move. Every accepted record is delivered exactly once, in order per
//! partition (idempotence, 5 requests in flight), as the Java console consumer reads it back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crac_tests::kafka::Cluster;
use kafka_client::{Header, Producer, ProducerConfig, ProducerMetrics, ProducerRecord};

/// Streams `n` keyed records to `topic`; once `disturb_after` are sent, `disturb` runs on
/// another thread while the stream goes on; the second half waits for it to finish. Then checks the topic holds every record exactly once, in
/// send order per partition, in the partition its report named.
fn stream_through(
    k: &Cluster,
    topic: &str,
    n: usize,
    disturb_after: usize,
    disturb: impl FnOnce() + Send,
) -> ProducerMetrics {
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .linger(Duration::from_millis(2))
            .request_timeout(Duration::from_secs(15))
            .delivery_timeout(Duration::from_secs(120)),
    )
    .unwrap();
    let sent = AtomicUsize::new(0);
    let disturbed = AtomicBool::new(false);
    let mut reports = Vec::with_capacity(n);
    std::thread::scope(|s| {
        s.spawn(|| {
            while sent.load(Ordering::Relaxed) < disturb_after {
                std::thread::sleep(Duration::from_millis(5));
            }
            disturb();
            disturbed.store(true, Ordering::Relaxed);
        });
        for i in 0..n {
            if i == n / 2 {
                // The second half goes out after the change, to leaders the producer's
                // metadata does not know yet.
                while !disturbed.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let key = format!("key-{}", i % 300);
            let value = format!("v-{i}");
            let headers = [Header::new("i", value.as_bytes())];
            reports.push(
                producer
                    .send(
                        ProducerRecord::new(topic)
                            .key(key.as_bytes())
                            .value(value.as_bytes())
                            .headers(&headers),
                    )
                    .unwrap(),
            );
            sent.fetch_add(1, Ordering::Relaxed);
            if i % 10 == 0 && !disturbed.load(Ordering::Relaxed) {
                // A steady stream, so records are in flight when leadership changes.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    producer.flush().unwrap();
    let mut partition_of = HashMap::new();
    for (i, r) in reports.into_iter().enumerate() {
        let md = r
            .wait()
            .unwrap_or_else(|e| panic!("{topic}: record {i} not delivered: {e}"));
        partition_of.insert(i, md.partition);
    }
    let m = producer.metrics();
    producer.close(Duration::from_secs(10)).unwrap();
    assert_eq!(m.records_sent, n as u64);
    assert_eq!(m.records_failed, 0);

    let got = k.consume_all(topic, n, Duration::from_secs(120));
    let mut seen = vec![false; n];
    let mut last: HashMap<i32, usize> = HashMap::new();
    for r in &got {
        let i: usize = r.value.as_deref().unwrap()[2..].parse().unwrap();
        assert!(!seen[i], "{topic}: record {i} delivered twice");
        seen[i] = true;
        assert_eq!(partition_of[&i], r.partition);
        assert_eq!(r.headers, vec![("i".to_owned(), r.value.clone())]);
        if let Some(&prev) = last.get(&r.partition) {
            assert!(
                prev < i,
                "{topic} partition {}: {i} after {prev}",
                r.partition
            );
        }
        last.insert(r.partition, i);
    }
    assert_eq!(got.len(), n, "{topic}: every record exactly once");
    eprintln!("{topic}: {m:?}");
    m
}

#[test]
fn leadership_changes_mid_stream_every_record_once_in_order() {
    let k = Cluster::start(3);

    // 1. The leader of partition 0 is stopped (controlled shutdown, SIGKILL if it lingers).
    k.create_topic_with_config("failover", 3, 3, &[("min.insync.replicas", "2")]);
    let victim = k.leaders("failover")[&0];
    stream_through(&k, "failover", 40_000, 10_000, || k.stop_broker(victim));
    assert_ne!(k.leaders("failover")[&0], victim, "leadership moved");
    k.start_broker(victim);

    // 2. Every partition gets another leader while the brokers stay up: the old leaders
    //    answer NOT_LEADER_OR_FOLLOWER and the producer follows the metadata.
    k.create_topic("moved", 3, 3);
    let before = k.leaders("moved");
    let m = stream_through(&k, "moved", 30_000, 7_500, || {
        k.move_leaders("moved");
    });
    let after = k.leaders("moved");
    assert!(
        before.iter().all(|(p, l)| after[p] != *l),
        "{before:?} -> {after:?}"
    );
    assert!(m.metadata_refreshes >= 2, "{m:?}");

    // 3. A topic produced to the moment it exists, its leaders moved while the first batches
    //    are out: a partition's first batch, refused by a leader that does not know yet that
    //    it leads, is not overtaken by the next (a gap at the partition's head that no retry
    //    fills), and every record is written once.
    k.create_topic("fresh", 3, 3);
    let before = k.leaders("fresh");
    stream_through(&k, "fresh", 20_000, 1, || {
        k.move_leaders("fresh");
    });
    let after = k.leaders("fresh");
    assert!(
        before.iter().all(|(p, l)| after[p] != *l),
        "{before:?} -> {after:?}"
    );
}
