//! The Kafka harness itself, against real brokers: what the Java tools write is read back byte
//! for byte, leaders move when asked, nodes stop and start, and a dropped cluster leaves nothing
//! running. The two tests run in parallel, so two clusters start side by side.

use crac_tests::kafka::{Cluster, JavaRecord};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn pid_alive(pid: &str) -> bool {
    // A zombie waiting for its reaper has an empty command line: it is not running.
    std::fs::read(format!("/proc/{}/cmdline", pid.trim())).is_ok_and(|c| !c.is_empty())
}

#[test]
fn one_broker_round_trips_records_exactly() {
    let kafka = Cluster::start(1);
    assert_eq!(kafka.bootstrap().split(',').count(), 1);
    assert!(kafka.bootstrap().starts_with("127.0.0.1:"));
    kafka.create_topic("harness", 2, 1);

    let sent = vec![
        JavaRecord::new(Some("k1"), "plain")
            .header("trace", Some("a:b:c"))
            .header("dup", Some("1"))
            .header("dup", Some("2"))
            .header("nothing", None)
            .header("empty", Some("")),
        JavaRecord::new(
            Some("k2"),
            "UTF-8: ü é 日本語 🦀, tab\there, back\\slash, \"quotes\"",
        ),
        JavaRecord::new(Some("k1"), "no headers, same key"),
        JavaRecord::new(None, "no key"),
        JavaRecord::new(Some("k3"), "null"), // the text "null", not a null value
        JavaRecord::new(Some(""), ""),       // empty, not null
        JavaRecord {
            key: Some("tombstone".into()),
            value: None,
            headers: vec![("ключ".into(), Some("значение".into()))],
        },
    ];
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    kafka.java_produce_records("harness", &sent);
    kafka.java_produce(
        "harness",
        &[(Some("k2"), "simple keyed"), (None, "simple unkeyed")],
    );

    let got = kafka.consume_all("harness", sent.len() + 2, Duration::from_secs(30));
    assert_eq!(got.len(), sent.len() + 2, "{got:#?}");
    for want in &sent {
        let matches: Vec<_> = got
            .iter()
            .filter(|r| r.key == want.key && r.value == want.value)
            .collect();
        assert_eq!(matches.len(), 1, "{want:?} in {got:#?}");
        assert_eq!(matches[0].headers, want.headers, "{want:?}");
        assert!(matches[0].timestamp >= before - 1000, "{:?}", matches[0]);
    }
    assert!(
        got.iter()
            .any(|r| r.value.as_deref() == Some("simple unkeyed") && r.key.is_none())
    );

    // Same key, same partition, in the order sent; offsets increase within each partition.
    let k1: Vec<_> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some("k1"))
        .collect();
    assert_eq!(k1[0].partition, k1[1].partition);
    assert!(k1[0].offset < k1[1].offset && k1[0].value.as_deref() == Some("plain"));
    let mut last = BTreeMap::new();
    for r in &got {
        if let Some(prev) = last.insert(r.partition, r.offset) {
            assert!(r.offset > prev, "{got:#?}");
        }
    }
    let ends = kafka.end_offsets("harness");
    assert_eq!(ends.values().sum::<i64>(), got.len() as i64, "{ends:?}");

    // Asking for fewer than the log holds still returns everything: extras are never hidden.
    let more = kafka.consume_all("harness", 3, Duration::from_secs(30));
    assert_eq!(more.len(), got.len());

    // Drop stops the JVM by pid and removes the directory.
    let dir = kafka.dir().to_owned();
    let pid = std::fs::read_to_string(dir.join("broker-1.pid")).unwrap();
    assert!(pid_alive(&pid));
    drop(kafka);
    assert!(!Path::new(&dir).exists(), "{} left behind", dir.display());
    assert!(!pid_alive(&pid), "broker pid {pid} still running");
}

#[test]
fn three_brokers_move_leaders_and_survive_a_restart() {
    let kafka = Cluster::start(3);
    assert_eq!(kafka.bootstrap().split(',').count(), 3);
    assert_eq!(kafka.running_brokers(), vec![1, 2, 3]);

    kafka.create_topic("moves", 3, 3);
    kafka.create_topic("single", 1, 1);
    let before = kafka.leaders("moves");
    assert_eq!(before.len(), 3);
    assert!(before.values().all(|l| (1..=3).contains(l)), "{before:?}");

    let after = kafka.move_leaders("moves");
    assert_eq!(kafka.leaders("moves"), after);
    for (p, old) in &before {
        assert_ne!(after[p], *old, "partition {p}: {before:?} -> {after:?}");
    }
    // Moving the one replica of a partition copies it to another broker.
    let single_before = kafka.leaders("single")[&0];
    let single_after = kafka.move_leaders("single")[&0];
    assert_ne!(single_before, single_after);
    assert_eq!(kafka.describe("single")[0].replicas, vec![single_after]);

    let keyed: Vec<(Option<&str>, &str)> =
        vec![(Some("a"), "1"), (Some("b"), "2"), (Some("c"), "3")];
    kafka.java_produce("moves", &keyed);

    // A leader goes away: its partitions get other leaders, the data stays readable.
    let victim = kafka.leaders("moves")[&0];
    kafka.stop_broker(victim);
    let running = kafka.running_brokers();
    assert!(
        !running.contains(&victim) && running.len() == 2,
        "{running:?}"
    );
    let leaders = kafka.leaders("moves");
    assert!(
        leaders.values().all(|&l| l != victim && l > 0),
        "{leaders:?}"
    );
    assert_eq!(
        kafka.consume_all("moves", 3, Duration::from_secs(30)).len(),
        3
    );

    kafka.start_broker(victim);
    assert_eq!(kafka.running_brokers(), vec![1, 2, 3]);
    kafka.java_produce("moves", &[(Some("d"), "4")]);
    let got = kafka.consume_all("moves", 4, Duration::from_secs(30));
    let mut values: Vec<_> = got.iter().filter_map(|r| r.value.clone()).collect();
    values.sort();
    assert_eq!(values, ["1", "2", "3", "4"]);
}
