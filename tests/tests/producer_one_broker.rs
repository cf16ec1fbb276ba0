//! The producer against one real Kafka broker, checked with the Java console tools: 100,000
//! keyed records with headers read back exactly and partitioned as Java partitions them;
//! `acks=0/1/all`, `linger.ms=0`, large batches; records too large for the client or the broker
//! get their error. The tests share one broker (each uses its own topics).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::kafka::{Cluster, ConsumedRecord};
use kafka_client::ErrorCode;
use kafka_client::{Acks, Header, ProduceError, Producer, ProducerConfig, ProducerRecord};

fn kafka() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(1))
}

fn config(k: &Cluster) -> ProducerConfig {
    ProducerConfig::new(k.bootstrap())
        .unwrap()
        .crac_register(false)
}

/// Checks that the consumed records are exactly `values` (each once), in send order within
/// each partition. Values are `<prefix><i>`.
fn assert_exactly_once_in_order(got: &[ConsumedRecord], n: usize, prefix: &str) {
    let mut seen = vec![false; n];
    let mut last: HashMap<i32, usize> = HashMap::new();
    for r in got {
        let v = r.value.as_deref().expect("value");
        let i: usize = v
            .strip_prefix(prefix)
            .and_then(|s| s.split('.').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("unexpected value {v:?}"));
        assert!(!seen[i], "record {i} delivered twice");
        seen[i] = true;
        if let Some(&prev) = last.get(&r.partition) {
            assert!(
                prev < i,
                "partition {}: record {i} after {prev}",
                r.partition
            );
        }
        last.insert(r.partition, i);
    }
    let missing: Vec<usize> = (0..n).filter(|&i| !seen[i]).take(10).collect();
    assert!(missing.is_empty(), "missing records, e.g. {missing:?}");
    assert_eq!(got.len(), n);
}

#[test]
fn hundred_thousand_keyed_records_with_headers_read_back_by_java() {
    let k = kafka();
    k.create_topic("keyed", 6, 1);
    k.create_topic("keyed-java", 6, 1);
    let producer = Producer::new(config(k)).unwrap();
    let n = 100_000;
    let mut reports = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        let idx = i.to_string();
        // Duplicate header keys are legal in Kafka and must survive, in order.
        let headers = [
            Header::new("idx", idx.as_bytes()),
            Header::new("dup", b"first"),
            Header::new("dup", b"second"),
        ];
        let rec = ProducerRecord::new("keyed")
            .key(key.as_bytes())
            .value(value.as_bytes())
            .headers(&headers);
        reports.push(producer.send(rec).unwrap());
    }
    producer.flush().unwrap();
    let mut ours: HashMap<String, i32> = HashMap::with_capacity(n);
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (i, r) in reports.into_iter().enumerate() {
        let md = r.wait().unwrap();
        ours.insert(format!("key-{i}"), md.partition);
        offsets.entry(md.partition).or_default().push(md.offset);
    }
    // Offsets reported per partition are distinct and increasing in send order.
    for (p, o) in &offsets {
        assert!(o.windows(2).all(|w| w[0] < w[1]), "partition {p}");
    }
    producer.close(Duration::from_secs(10)).unwrap();
    assert_eq!(producer.metrics().records_sent, n as u64);

    let got = k.consume_all("keyed", n, Duration::from_secs(120));
    assert_exactly_once_in_order(&got, n, "value-");
    for r in &got {
        let key = r.key.as_deref().unwrap();
        let i = key.strip_prefix("key-").unwrap();
        assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_str()));
        assert_eq!(
            r.headers,
            vec![
                ("idx".to_owned(), Some(i.to_owned())),
                ("dup".to_owned(), Some("first".to_owned())),
                ("dup".to_owned(), Some("second".to_owned())),
            ]
        );
        assert_eq!(ours[key], r.partition, "{key}: reported partition");
        assert!(r.timestamp > 0);
    }

    // Java's console producer, same keys: the same partitions.
    let keys: Vec<String> = (0..n).map(|i| format!("key-{i}")).collect();
    let java: Vec<(Option<&str>, &str)> = keys.iter().map(|k| (Some(k.as_str()), "j")).collect();
    k.java_produce("keyed-java", &java);
    let theirs = k.consume_all("keyed-java", n, Duration::from_secs(120));
    assert_eq!(theirs.len(), n);
    let mut differ = 0;
    for r in &theirs {
        if ours[r.key.as_deref().unwrap()] != r.partition {
            differ += 1;
        }
    }
    assert_eq!(
        differ, 0,
        "keys partitioned differently from Java's producer"
    );
    let used: std::collections::BTreeSet<i32> = ours.values().copied().collect();
    assert_eq!(used.len(), 6);
}

#[test]
fn acks_linger_and_batch_sizes() {
    let k = kafka();
    let cases: [(&str, Acks, u64, usize, usize); 5] = [
        // (topic, acks, linger ms, batch.size, records)
        ("acks-0", Acks::None, 5, 16384, 3000),
        ("acks-1", Acks::Leader, 5, 16384, 3000),
        ("acks-all-linger-0", Acks::All, 0, 16384, 3000),
        ("large-batches", Acks::All, 50, 1 << 20, 20_000),
        ("tiny-batches", Acks::All, 0, 1, 500),
    ];
    for (topic, acks, linger, batch, n) in cases {
        k.create_topic(topic, 3, 1);
        let mut c = config(k)
            .acks(acks)
            .linger(Duration::from_millis(linger))
            .batch_size(batch);
        if acks != Acks::All {
            c = c.enable_idempotence(false);
        }
        let producer = Producer::new(c).unwrap();
        let value = vec![b'.'; 1000];
        let mut reports = Vec::new();
        for i in 0..n {
            let mut v = format!("{topic}-{i}").into_bytes();
            v.extend_from_slice(&value);
            let key = format!("k{}", i % 17);
            reports.push(
                producer
                    .send(ProducerRecord::new(topic).key(key.as_bytes()).value(&v))
                    .unwrap(),
            );
        }
        producer.flush().unwrap();
        for r in reports {
            let md = r.wait().unwrap();
            if acks == Acks::None {
                assert_eq!(md.offset, -1, "acks=0 has no offsets");
            } else {
                assert!(md.offset >= 0);
            }
        }
        let m = producer.metrics();
        assert_eq!(m.records_sent, n as u64, "{topic}");
        if topic == "large-batches" {
            // 20 MB in 1 MiB batches: far fewer requests than records.
            assert!(m.batches_sent < (n / 100) as u64, "{topic}: {m:?}");
        }
        producer.close(Duration::from_secs(10)).unwrap();
        let got = k.consume_all(topic, n, Duration::from_secs(60));
        assert_exactly_once_in_order(&got, n, &format!("{topic}-"));
    }
}

#[test]
fn records_too_large_get_their_error() {
    let k = kafka();
    // The broker accepts at most ~5 kB per batch on this topic.
    k.create_topic_with_config("small-max", 1, 1, &[("max.message.bytes", "5000")]);
    let producer = Producer::new(config(k).max_request_size(10_000)).unwrap();
    let big = vec![b'x'; 20_000];

    // Above max.request.size: refused by send() at once, nothing is queued.
    let t = Instant::now();
    let e = producer
        .send(ProducerRecord::new("small-max").value(&big))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProduceError::RecordTooLarge {
                limit: 10_000,
                limit_name: "max.request.size",
                ..
            }
        ),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(e.to_string().contains("max.request.size=10000"), "{e}");

    // Under max.request.size but above the topic's max.message.bytes: the broker's error
    // reaches the record's report (not a hang), and the producer goes on.
    let mid = vec![b'y'; 8000];
    let r = producer
        .send(ProducerRecord::new("small-max").value(&mid))
        .unwrap();
    let e = r
        .wait_timeout(Duration::from_secs(60))
        .expect("a report, not a hang")
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProduceError::Broker {
                code: ErrorCode::MessageTooLarge,
                ..
            }
        ),
        "{e}"
    );
    let ok = producer
        .send(ProducerRecord::new("small-max").value(b"small-after-big"))
        .unwrap()
        .wait_timeout(Duration::from_secs(60))
        .expect("a report")
        .unwrap();
    assert_eq!(ok.partition, 0);
    producer.close(Duration::from_secs(10)).unwrap();
    let got = k.consume_all("small-max", 1, Duration::from_secs(30));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value.as_deref(), Some("small-after-big"));
}

#[test]
fn null_keys_values_explicit_partitions_and_callbacks() {
    let k = kafka();
    k.create_topic("misc", 4, 1);
    let producer = Producer::new(config(k)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..40 {
        let v = format!("sticky-{i}");
        let tx = tx.clone();
        producer
            .send_with_callback(ProducerRecord::new("misc").value(v.as_bytes()), move |r| {
                tx.send(r).unwrap();
            })
            .unwrap();
    }
    let tomb = producer
        .send(ProducerRecord::new("misc").key(b"gone").partition(3))
        .unwrap();
    let e = producer
        .send(ProducerRecord::new("misc").value(b"x").partition(9))
        .unwrap_err();
    assert!(
        matches!(e, ProduceError::UnknownPartition { partitions: 4, .. }),
        "{e}"
    );
    let mut unkeyed_partitions = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let md = rx.recv_timeout(Duration::from_secs(60)).unwrap().unwrap();
        unkeyed_partitions.insert(md.partition);
    }
    // Sticky partitioning: 40 small records without key stay in one batch, one partition.
    assert_eq!(unkeyed_partitions.len(), 1);
    assert_eq!(tomb.wait().unwrap().partition, 3);
    producer.close(Duration::from_secs(10)).unwrap();
    let got = k.consume_all("misc", 41, Duration::from_secs(30));
    assert_eq!(got.len(), 41);
    let t = got
        .iter()
        .find(|r| r.key.as_deref() == Some("gone"))
        .unwrap();
    assert_eq!((t.partition, t.value.as_deref()), (3, None));
    assert!(got.iter().filter(|r| r.key.is_none()).count() == 40);
}

#[test]
fn properties_config_and_awaitable_reports() {
    let k = kafka();
    k.create_topic("props", 2, 1);
    let producer = Producer::from_properties([
        ("bootstrap.servers", k.bootstrap()),
        ("acks", "all"),
        ("linger.ms", "0"),
        ("client.id", "props-test"),
        ("crac.register", "false"),
    ])
    .unwrap();
    assert_eq!(producer.config().common.client_id, "props-test");
    let report = producer
        .send(ProducerRecord::new("props").key(b"a").value(b"awaited"))
        .unwrap();
    // Await it with a minimal executor: the report is a plain Future with a stored Waker.
    let md = block_on(report).unwrap();
    assert!(md.offset >= 0);
    // A name Kafka refuses: the metadata error comes back at once, not after max.block.ms.
    let t = Instant::now();
    let e = producer
        .send(ProducerRecord::new("no spaces allowed!").value(b"x"))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProduceError::Topic {
                code: ErrorCode::InvalidTopic,
                ..
            }
        ),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    producer.close(Duration::from_secs(10)).unwrap();
    let e = producer
        .send(ProducerRecord::new("props").value(b"late"))
        .unwrap_err();
    assert!(matches!(e, ProduceError::Closed { .. }), "{e}");
    let e = Producer::from_properties([("bootstrap.servers", k.bootstrap()), ("acks", "2")])
        .unwrap_err();
    assert_eq!((e.key.as_str(), e.value.as_str()), ("acks", "2"));
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_secs(1));
    }
}

#[test]
fn every_compression_codec_read_back_by_java() {
    let k = kafka();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        k.create_topic(&topic, 2, 1);
        let producer = Producer::from_properties([
            ("bootstrap.servers", k.bootstrap()),
            ("compression.type", codec),
            ("linger.ms", "20"),
            ("crac.register", "false"),
        ])
        .unwrap();
        let n = 2000;
        let reports: Vec<_> = (0..n)
            .map(|i| {
                let v = format!("{codec}-{i}.{}", "abc".repeat(30));
                let h = format!("h{i}");
                producer
                    .send(
                        ProducerRecord::new(&topic)
                            .key(format!("k{}", i % 7).as_bytes())
                            .value(v.as_bytes())
                            .headers(&[Header::new("h", h.as_bytes())]),
                    )
                    .unwrap()
            })
            .collect();
        for r in reports {
            r.wait().unwrap();
        }
        let m = producer.metrics();
        producer.close(Duration::from_secs(10)).unwrap();
        // Compressed on the wire: far fewer bytes than the ~200 kB of values.
        assert!(
            m.bytes_sent < 100_000,
            "{codec}: {} bytes sent",
            m.bytes_sent
        );
        let got = k.consume_all(&topic, n, Duration::from_secs(60));
        assert_exactly_once_in_order(&got, n, &format!("{codec}-"));
        for r in &got {
            let i = r.value.as_deref().unwrap()[codec.len() + 1..]
                .split('.')
                .next()
                .unwrap()
                .to_owned();
            assert_eq!(r.headers, vec![("h".to_owned(), Some(format!("h{i}")))]);
        }
    }
}

#[test]
fn partitions_added_are_used_after_metadata_max_age() {
    let k = kafka();
    k.create_topic("grows", 2, 1);
    let producer = Producer::new(
        config(k)
            .metadata_max_age(Duration::from_secs(1))
            .linger(Duration::ZERO),
    )
    .unwrap();
    let send_keys = |tag: &str| -> std::collections::BTreeSet<i32> {
        (0..200)
            .map(|i| {
                let key = format!("key-{i}");
                let value = format!("{tag}-{i}");
                producer
                    .send(
                        ProducerRecord::new("grows")
                            .key(key.as_bytes())
                            .value(value.as_bytes()),
                    )
                    .unwrap()
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|r| r.wait().unwrap().partition)
            .collect()
    };
    assert_eq!(send_keys("before"), [0, 1].into());
    let out = k.java_tool(
        "topics",
        &[
            "--bootstrap-server",
            k.bootstrap(),
            "--alter",
            "--topic",
            "grows",
            "--partitions",
            "4",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    // No error tells the producer; its periodic refresh (metadata.max.age.ms) does.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let used = send_keys("after");
        if used == [0, 1, 2, 3].into() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new partitions never used: {used:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(producer.metrics().metadata_refreshes >= 2);
    producer.close(Duration::from_secs(10)).unwrap();
}
