//! Leader failover with three real brokers and replication factor 3: the leader of a partition
//! is stopped while the producer streams; every accepted record is delivered exactly once, in
//! order per partition (idempotence), as the Java console consumer reads it back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crac_tests::kafka::Cluster;
use kafka_client::{Header, Producer, ProducerConfig, ProducerRecord};

#[test]
fn leader_stopped_mid_stream_every_record_once_in_order() {
    let k = Cluster::start(3);
    k.create_topic_with_config("failover", 3, 3, &[("min.insync.replicas", "2")]);
    let leaders = k.leaders("failover");
    let victim = leaders[&0];

    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .linger(Duration::from_millis(2))
            .request_timeout(Duration::from_secs(15))
            .delivery_timeout(Duration::from_secs(120)),
    )
    .unwrap();
    let n = 40_000;
    let sent = AtomicUsize::new(0);
    let stopped = AtomicBool::new(false);
    let mut reports = Vec::with_capacity(n);
    std::thread::scope(|s| {
        // Mid-stream, from another thread so the stream goes on meanwhile: the leader of
        // partition 0 goes away (controlled shutdown, SIGKILL if it lingers).
        s.spawn(|| {
            while sent.load(Ordering::Relaxed) < n / 4 {
                std::thread::sleep(Duration::from_millis(5));
            }
            k.stop_broker(victim);
            stopped.store(true, Ordering::Relaxed);
        });
        for i in 0..n {
            let key = format!("key-{}", i % 300);
            let value = format!("v-{i}");
            let headers = [Header::new("i", value.as_bytes())];
            reports.push(
                producer
                    .send(
                        ProducerRecord::new("failover")
                            .key(key.as_bytes())
                            .value(value.as_bytes())
                            .headers(&headers),
                    )
                    .unwrap(),
            );
            sent.fetch_add(1, Ordering::Relaxed);
            if i % 10 == 0 && !stopped.load(Ordering::Relaxed) {
                // A steady stream, so records are in flight when the broker stops.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    assert!(stopped.load(Ordering::Relaxed));
    producer.flush().unwrap();
    let mut partition_of = HashMap::new();
    for (i, r) in reports.into_iter().enumerate() {
        let md = r
            .wait()
            .unwrap_or_else(|e| panic!("record {i} not delivered: {e}"));
        partition_of.insert(i, md.partition);
    }
    let m = producer.metrics();
    producer.close(Duration::from_secs(10)).unwrap();
    assert_eq!(m.records_sent, n as u64);
    assert_eq!(m.records_failed, 0);
    assert_ne!(k.leaders("failover")[&0], victim, "leadership moved");

    let got = k.consume_all("failover", n, Duration::from_secs(120));
    let mut seen = vec![false; n];
    let mut last: HashMap<i32, usize> = HashMap::new();
    for r in &got {
        let i: usize = r.value.as_deref().unwrap()[2..].parse().unwrap();
        assert!(!seen[i], "record {i} delivered twice");
        seen[i] = true;
        assert_eq!(partition_of[&i], r.partition);
        assert_eq!(r.headers, vec![("i".to_owned(), r.value.clone())]);
        if let Some(&prev) = last.get(&r.partition) {
            assert!(prev < i, "partition {}: {i} after {prev}", r.partition);
        }
        last.insert(r.partition, i);
    }
    assert_eq!(got.len(), n, "every record exactly once");
    eprintln!("failover: {m:?}");
    k.start_broker(victim);
}
