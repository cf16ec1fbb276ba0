//! A broker that is down: at start `send()` waits at most `max.block.ms` and says for what;
//! when the broker comes back, blocked and queued records are delivered.

use std::time::{Duration, Instant};

use crac_tests::kafka::Cluster;
use kafka_client::{ProduceError, Producer, ProducerConfig, ProducerRecord};

#[test]
fn unreachable_at_start_then_delivery_resumes() {
    let k = Cluster::start(1);
    k.create_topic("later", 2, 1);
    k.stop_broker(1);

    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .max_block(Duration::from_secs(3)),
    )
    .unwrap();
    let t = Instant::now();
    let e = producer
        .send(ProducerRecord::new("later").key(b"k").value(b"never"))
        .unwrap_err();
    let waited = t.elapsed();
    assert!(matches!(e, ProduceError::MaxBlockExceeded { .. }), "{e}");
    assert!(e.to_string().contains("metadata of topic later"), "{e}");
    assert!(
        waited >= Duration::from_secs(3),
        "returned early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "max.block.ms not respected: {waited:?}"
    );
    producer.close(Duration::from_secs(5)).unwrap();

    // A producer whose send() is blocked (metadata unknown) when the broker comes up.
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .max_block(Duration::from_secs(120)),
    )
    .unwrap();
    let p2 = producer.clone();
    let blocked = std::thread::spawn(move || {
        p2.send(ProducerRecord::new("later").key(b"k1").value(b"first"))
            .map(|r| r.wait())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!blocked.is_finished(), "send() should wait for the broker");
    k.start_broker(1);
    let md = blocked.join().unwrap().unwrap().unwrap();
    assert!(md.offset >= 0);
    let md2 = producer
        .send(ProducerRecord::new("later").key(b"k1").value(b"second"))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(md2.partition, md.partition);
    assert_eq!(md2.offset, md.offset + 1);
    producer.close(Duration::from_secs(10)).unwrap();

    // Metadata known, then the broker goes away: records queue, and are delivered once it
    // is back (within delivery.timeout.ms), exactly once.
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .request_timeout(Duration::from_secs(10)),
    )
    .unwrap();
    producer
        .send(ProducerRecord::new("later").key(b"k2").value(b"warm"))
        .unwrap()
        .wait()
        .unwrap();
    k.stop_broker(1);
    let reports: Vec<_> = (0..100)
        .map(|i| {
            let v = format!("queued-{i}");
            producer
                .send(ProducerRecord::new("later").key(b"k3").value(v.as_bytes()))
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    assert!(reports.iter().all(|r| !r.is_done()));
    k.start_broker(1);
    for r in reports {
        r.wait().unwrap();
    }
    producer.close(Duration::from_secs(10)).unwrap();
    let got = k.consume_all("later", 103, Duration::from_secs(60));
    assert_eq!(got.len(), 103);
    let queued: Vec<String> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some("k3"))
        .map(|r| r.value.clone().unwrap())
        .collect();
    let want: Vec<String> = (0..100).map(|i| format!("queued-{i}")).collect();
    assert_eq!(queued, want);
}

#[test]
fn close_with_the_broker_down_fails_what_it_cannot_deliver() {
    let k = Cluster::start(1);
    k.create_topic("closing", 1, 1);
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false),
    )
    .unwrap();
    producer
        .send(ProducerRecord::new("closing").value(b"warm"))
        .unwrap()
        .wait()
        .unwrap();
    k.stop_broker(1);
    let reports: Vec<_> = (0..10)
        .map(|_| {
            producer
                .send(ProducerRecord::new("closing").value(b"stranded"))
                .unwrap()
        })
        .collect();
    let t = Instant::now();
    let e = producer.close(Duration::from_secs(2)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(15));
    assert_eq!(e.pending_records, 10, "{e}");
    for r in reports {
        let e = r.wait().unwrap_err();
        assert!(matches!(e, ProduceError::Closed { .. }), "{e}");
    }
    assert_eq!(producer.metrics().records_failed, 10);
}
