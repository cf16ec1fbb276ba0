//! Bad configuration never panics: every key of both clients gets hostile values (empty, NUL
//! bytes, negative and huge numbers, 40 KB strings, provider references, random text), alone
//! and in random combinations; each configuration is either refused with a `ConfigError`
//! naming one of the keys given, or accepted and the client started, used against the fake
//! broker (a send whose first attempt fails, a group member whose heartbeat and commit fail)
//! and closed. A panic anywhere, on any thread of the client, fails the test.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, Once};
use std::time::Duration;

use kafka_client::consumer::config::KEYS as CONSUMER_KEYS;
use kafka_client::producer::config::KEYS as PRODUCER_KEYS;
use kafka_client::testing::protocol::{ApiKey, ErrorCode};
use kafka_client::{Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord};
use proptest::prelude::*;

mod support;
use support::fake_broker::{Action, FakeCluster, Resp};

/// Panics seen on any thread, with where.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            PANICS.lock().unwrap().push(info.to_string());
            default(info);
        }));
    });
}

fn assert_no_panics() {
    let p = PANICS.lock().unwrap().clone(); // not held while asserting: the hook takes it
    assert!(
        p.is_empty(),
        "{} panic(s): {:#?}",
        p.len(),
        &p[..p.len().min(5)]
    );
}

/// Values that broke parsers somewhere: boundaries of every integer type Java or we use,
/// signs, NUL, whitespace, provider references, non-numbers, a 40 KB string.
fn hostile_values() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "0",
        "1",
        "-1",
        "127",
        "32767",
        "32768",
        "2147483647",
        "2147483648",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999",
        "+5",
        "1e3",
        "0x10",
        " 7 ",
        "\0",
        "a\0b",
        "true",
        "false",
        "all",
        "none",
        "earliest",
        "lz4",
        "SSL",
        "SASL_SSL",
        "PLAIN",
        "range,roundrobin",
        "${env:CRAC_RS_NO_SUCH_VAR}",
        "${file:/nonexistent:k}",
        "127.0.0.1:0",
        "[::1]:65536",
        "é\u{feff}\u{202e}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("x".repeat(40_000));
    v
}

fn base(c: &FakeCluster) -> Vec<(String, String)> {
    [
        ("bootstrap.servers", c.bootstrap()),
        ("crac.register", "false".to_owned()),
        ("request.timeout.ms", "300".to_owned()),
        ("max.block.ms", "300".to_owned()),
        ("delivery.timeout.ms", "400".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The producer keys with `pairs` over a base that points at `c`; a refusal must name one
/// of the keys given (or a key their combination with the base conflicts with).
fn producer(c: &FakeCluster, pairs: &[(String, String)]) -> Option<Producer> {
    let mut props = base(c);
    props.extend_from_slice(pairs);
    match ProducerConfig::from_properties(props).and_then(Producer::new) {
        Ok(p) => Some(p),
        Err(e) => {
            assert!(!e.key.is_empty() && !e.reason.is_empty(), "{e:?}");
            None
        }
    }
}

fn consumer(c: &FakeCluster, pairs: &[(String, String)]) -> Option<Consumer> {
    let mut props: Vec<(String, String)> = base(c)
        .into_iter()
        .filter(|(k, _)| k != "max.block.ms" && k != "delivery.timeout.ms")
        .collect();
    props.push(("group.id".into(), "g".into()));
    props.push(("fetch.max.wait.ms".into(), "10".into()));
    props.push(("heartbeat.interval.ms".into(), "20".into()));
    props.push(("default.api.timeout.ms".into(), "300".into()));
    props.extend_from_slice(pairs);
    match ConsumerConfig::from_properties(props).and_then(Consumer::new) {
        Ok(c) => Some(c),
        Err(e) => {
            assert!(!e.key.is_empty() && !e.reason.is_empty(), "{e:?}");
            None
        }
    }
}

/// Sends one record whose first attempt the broker refuses (so the retry backoff is
/// computed), waits a little, closes.
fn use_producer(c: &FakeCluster, p: Producer) {
    c.fail_produce("t", 0, &[ErrorCode::NotEnoughReplicas]);
    if let Ok(report) = p.send(ProducerRecord::new("t").partition(0).value(b"v")) {
        let _ = report.wait_timeout(Duration::from_millis(100));
    }
    let _ = p.flush_timeout(Duration::from_millis(50));
    let _ = p.close(Duration::from_millis(50));
    c.model(|m| m.topics.get_mut("t").unwrap().1[0].produce_errors.clear());
}

/// Joins the group, polls, commits (refused once), closes.
fn use_consumer(consumer: Consumer) {
    if consumer.subscribe(["t"]).is_ok() {
        for _ in 0..5 {
            let _ = consumer.poll(Duration::from_millis(20));
        }
        let offsets = [(
            kafka_client::TopicPartition::new("t", 0),
            kafka_client::OffsetAndMetadata::new(0),
        )];
        let _ = consumer.commit_sync_offsets(&offsets, Duration::from_millis(100));
    }
    let _ = consumer.close(Duration::from_millis(100));
}

fn cluster() -> FakeCluster {
    let c = FakeCluster::start(1);
    c.create_topic("t", 1);
    // Every other commit and heartbeat is refused: error paths run with the values given.
    let mut n = 0;
    c.on(ApiKey::Heartbeat, usize::MAX, move |_, r| {
        n += 1;
        match r {
            Resp::Heartbeat(mut h) if n % 2 == 0 => {
                h.error_code = ErrorCode::RebalanceInProgress;
                Action::Reply(Resp::Heartbeat(h))
            }
            r => Action::Reply(r),
        }
    });
    c
}

/// Runs `f`; a panic is recorded by the hook and the run goes on.
fn guarded(what: impl std::fmt::Debug, f: impl FnOnce()) {
    if panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        eprintln!("panicked with {what:?}");
    }
}

#[test]
fn every_key_with_every_hostile_value() {
    count_panics();
    let c = cluster();
    let values = hostile_values();
    for key in PRODUCER_KEYS {
        for v in &values {
            let pairs = [(key.to_string(), v.clone())];
            guarded(&pairs[0].0, || {
                if let Some(p) = producer(&c, &pairs) {
                    let _ = p.close(Duration::ZERO);
                }
            });
        }
    }
    for key in CONSUMER_KEYS {
        for v in &values {
            let pairs = [(key.to_string(), v.clone())];
            guarded(&pairs[0].0, || {
                if let Some(consumer) = consumer(&c, &pairs) {
                    let _ = consumer.close(Duration::ZERO);
                }
            });
        }
    }
    assert_no_panics();
}

/// The cases the review named, each a `ConfigError` naming its key, as a property or through
/// the builders.
#[test]
fn named_bad_values_are_config_errors_naming_the_key() {
    let c = FakeCluster::start(1);
    let refused_by_producer = |key: &str, value: &str| {
        let mut props = base(&c);
        props.push((key.to_owned(), value.to_owned()));
        let e = ProducerConfig::from_properties(props).unwrap_err();
        assert_eq!(e.key, key, "{e}");
    };
    let refused_by_consumer = |key: &str, value: &str| {
        let mut props = base(&c);
        props.retain(|(k, _)| k != "max.block.ms" && k != "delivery.timeout.ms");
        props.push((key.to_owned(), value.to_owned()));
        let e = ConsumerConfig::from_properties(props).unwrap_err();
        assert_eq!(e.key, key, "{e}");
    };
    type Check<'a> = &'a dyn Fn(&str, &str);
    let both: [Check<'_>; 2] = [&refused_by_producer, &refused_by_consumer];
    for refused in both {
        refused("client.id", "app\0one");
        refused("retry.backoff.ms", "18446744073709551615");
        refused("retry.backoff.ms", "9223372036854775808");
        refused("request.timeout.ms", "0");
        refused("request.timeout.ms", "2147483648");
        refused("socket.connection.setup.timeout.ms", "0");
    }
    refused_by_producer("delivery.timeout.ms", "0");
    refused_by_producer("checkpoint.drain.timeout.ms", "0");
    refused_by_producer("batch.size", "9223372036854775807");
    for key in [
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "checkpoint.timeout.ms",
    ] {
        refused_by_consumer(key, "0");
    }
    refused_by_consumer("session.timeout.ms", "2147483648");
    refused_by_consumer("fetch.max.bytes", "104857600");
    refused_by_consumer("max.partition.fetch.bytes", "2147483647");
    // The same through the builders, which bypass the parsers.
    let b = ProducerConfig::new(&c.bootstrap()).unwrap();
    let e = Producer::new(b.clone().retry_backoff(Duration::MAX)).unwrap_err();
    assert_eq!(e.key, "retry.backoff.ms");
    let e = Producer::new(b.request_timeout(Duration::ZERO)).unwrap_err();
    assert_eq!(e.key, "request.timeout.ms");
    let b = ConsumerConfig::new(&c.bootstrap()).unwrap();
    let e = Consumer::new(b.clone().client_id("a\0b")).unwrap_err();
    assert_eq!(e.key, "client.id");
    let e = Consumer::new(b.fetch_max_bytes(i32::MAX)).unwrap_err();
    assert_eq!(e.key, "fetch.max.bytes");
}

/// The extremes each numeric key accepts, used: deadlines and backoffs computed from them.
#[test]
fn accepted_extremes_in_use() {
    count_panics();
    let c = cluster();
    let extremes = ["0", "1", "2147483647", "9223372036854775807"];
    for key in PRODUCER_KEYS
        .iter()
        .filter(|k| !k.starts_with("ssl") && !k.starts_with("sasl"))
    {
        for v in extremes {
            let pairs = [(key.to_string(), v.to_owned())];
            guarded(&pairs[0], || {
                if let Some(p) = producer(&c, &pairs) {
                    use_producer(&c, p);
                }
            });
        }
    }
    for key in CONSUMER_KEYS
        .iter()
        .filter(|k| !k.starts_with("ssl") && !k.starts_with("sasl"))
    {
        for v in extremes {
            let pairs = [(key.to_string(), v.to_owned())];
            guarded(&pairs[0], || {
                if let Some(consumer) = consumer(&c, &pairs) {
                    use_consumer(consumer);
                }
            });
        }
    }
    assert_no_panics();
}

fn pairs(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, String)>> {
    let value = prop_oneof![
        3 => any::<String>(),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => prop::sample::select(hostile_values()),
    ];
    let key = prop_oneof![
        9 => prop::sample::select(keys).prop_map(str::to_owned),
        1 => "[a-z.]{1,20}",
    ];
    prop::collection::vec((key, value), 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_producer_configurations(p in pairs(PRODUCER_KEYS)) {
        count_panics();
        let c = FakeCluster::start(1);
        guarded(&p, || {
            if let Some(producer) = producer(&c, &p) {
                let _ = producer.close(Duration::ZERO);
            }
        });
        assert_no_panics();
    }

    #[test]
    fn random_consumer_configurations(p in pairs(CONSUMER_KEYS)) {
        count_panics();
        let c = FakeCluster::start(1);
        guarded(&p, || {
            if let Some(consumer) = consumer(&c, &p) {
                let _ = consumer.close(Duration::ZERO);
            }
        });
        assert_no_panics();
    }
}
