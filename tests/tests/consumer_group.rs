//! Our consumer in a real consumer group against a real Kafka broker: the Java producer writes
//! 200,000 records compressed with zstd (and, in a second run, lz4); a group of three of our
//! consumers reads them while one member leaves and another joins, and every record is read
//! exactly once (each partition offset once, each value once), with a synchronous commit after
//! every poll and the listener committing before partitions are given up. The zstd run uses
//! the `range` assignor, the lz4 run `roundrobin`.
//!
//! A third test puts a Java console consumer and ours in one group, each side leading once.
//!
//! The consumers run as threads of this test (no CRIU here: `consumer_criu.rs` checkpoints
//! them). Needs Kafka's jars (scripts/test installs them).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crac_tests::java_member::console_consumer;
use crac_tests::kafka::{Cluster, JavaRecord, kafka_script};
use kafka_client::consumer::AssignorKind;
use kafka_client::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRebalanceListener, TopicPartition,
};
use kafka_client::{Bytes, OffsetAndMetadata};

const RECORDS: usize = 200_000;
const PARTITIONS: i32 = 6;

fn kafka() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(1))
}

/// The Java console producer writes `value-0` .. `value-{n-1}` compressed with `codec` (its
/// `--compression-codec` option: it ignores a `compression.type` property), with extra
/// producer properties.
fn java_produce_with(k: &Cluster, topic: &str, codec: &str, n: usize, props: &[&str]) {
    let mut cmd = Command::new(kafka_script());
    cmd.args([
        "tool",
        "console-producer",
        "--bootstrap-server",
        k.bootstrap(),
        "--topic",
        topic,
        "--compression-codec",
        codec,
        "--request-required-acks",
        "all",
        "--request-timeout-ms",
        "60000",
        "--message-send-max-retries",
        "50",
        "--batch-size",
        "65536",
        "--command-property",
        "linger.ms=20",
    ]);
    for p in props {
        cmd.args(["--command-property", p]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the console producer");
    {
        let mut stdin = child.stdin.take().unwrap();
        let mut text = String::with_capacity(n * 14);
        for i in 0..n {
            text.push_str("value-");
            text.push_str(&i.to_string());
            text.push('\n');
        }
        stdin.write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "console producer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`java_produce_with`] with no extra properties.
fn java_produce(k: &Cluster, topic: &str, codec: &str, n: usize) {
    java_produce_with(k, topic, codec, n, &[]);
}

/// End offsets per partition, from `kafka-get-offsets`.
fn end_offsets(k: &Cluster, topic: &str) -> BTreeMap<i32, i64> {
    let out = k.java_tool(
        "get-offsets",
        &["--bootstrap-server", k.bootstrap(), "--topic", topic],
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.rsplitn(3, ':');
            let end = f.next()?.parse().ok()?;
            let p = f.next()?.parse().ok()?;
            Some((p, end))
        })
        .collect()
}

/// What one member read: (member, partition, offset, value).
type Seen = Arc<Mutex<Vec<(usize, i32, i64, String)>>>;

/// Assignments received: (member, partitions).
type Assigned = Arc<Mutex<Vec<(usize, Vec<TopicPartition>)>>>;

/// Commits what was processed before partitions are given up, and logs the hand-overs.
struct Listener {
    member: usize,
    assigned: Assigned,
}

impl ConsumerRebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        consumer
            .commit_sync()
            .unwrap_or_else(|e| panic!("member {}: commit on revoke: {e}", self.member));
        let _ = partitions;
    }

    fn on_partitions_assigned(&mut self, _: &Consumer, partitions: &[TopicPartition]) {
        self.assigned
            .lock()
            .unwrap()
            .push((self.member, partitions.to_vec()));
    }
}

struct Member {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<usize>,
}

#[allow(clippy::too_many_arguments)]
fn start_member(
    k: &Cluster,
    assignor: AssignorKind,
    group: &str,
    topic: &str,
    member: usize,
    seen: Seen,
    total: Arc<AtomicUsize>,
    assigned: Assigned,
) -> Member {
    let config = ConsumerConfig::new(k.bootstrap())
        .unwrap()
        .group_id(group)
        .client_id(format!("member-{member}"))
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .heartbeat_interval(Duration::from_millis(300))
        .max_poll_records(250)
        .assignors(&[assignor])
        .crac_register(false);
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let topic = topic.to_owned();
    let thread = thread::spawn(move || {
        let consumer = Consumer::new(config).unwrap();
        consumer
            .subscribe_with_listener([&topic], Listener { member, assigned })
            .unwrap();
        let mut mine = 0;
        while !st.load(Ordering::SeqCst) {
            let records = consumer
                .poll(Duration::from_millis(100))
                .unwrap_or_else(|e| panic!("member {member}: poll: {e}"));
            if records.is_empty() {
                continue;
            }
            let mut batch = Vec::with_capacity(records.len());
            for r in &records {
                let v = String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap();
                batch.push((member, r.partition, r.offset, v));
            }
            mine += batch.len();
            total.fetch_add(batch.len(), Ordering::SeqCst);
            seen.lock().unwrap().extend(batch);
            consumer
                .commit_sync()
                .unwrap_or_else(|e| panic!("member {member}: commit: {e}"));
            // Paced, so the group changes while the topic is still being read.
            thread::sleep(Duration::from_millis(5));
        }
        consumer.close(Duration::from_secs(30)).unwrap();
        mine
    });
    Member { stop, thread }
}

fn wait_for(total: &AtomicUsize, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while total.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "{what}: only {} records read",
            total.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn group_reads_every_record_once(codec: &str, assignor: AssignorKind) {
    let k = kafka();
    let topic = format!("group-{codec}");
    let group = format!("readers-{codec}");
    k.create_topic(&topic, PARTITIONS, 1);
    java_produce(k, &topic, codec, RECORDS);
    let ends = end_offsets(k, &topic);
    assert_eq!(
        ends.values().sum::<i64>(),
        RECORDS as i64,
        "the topic holds what Java wrote: {ends:?}"
    );

    let t = Instant::now();
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let total = Arc::new(AtomicUsize::new(0));
    let assigned = Arc::new(Mutex::new(Vec::new()));
    let start = |m| {
        start_member(
            k,
            assignor,
            &group,
            &topic,
            m,
            seen.clone(),
            total.clone(),
            assigned.clone(),
        )
    };
    let mut members: Vec<Member> = (0..3).map(start).collect();
    // Member 0 leaves a fifth of the way in; member 3 joins at half.
    wait_for(&total, RECORDS / 5, "before the leave");
    let leaving = members.remove(0);
    leaving.stop.store(true, Ordering::SeqCst);
    let read_by_leaver = leaving.thread.join().expect("member 0");
    wait_for(&total, RECORDS / 2, "before the join");
    members.push(start(3));
    wait_for(&total, RECORDS, "reading everything");
    // Anything extra (a duplicate) would arrive now.
    thread::sleep(Duration::from_secs(2));
    let mut per_member = vec![read_by_leaver];
    for m in &members {
        m.stop.store(true, Ordering::SeqCst);
    }
    for m in members {
        per_member.push(m.thread.join().expect("member"));
    }
    let elapsed = t.elapsed();

    let seen = seen.lock().unwrap();
    let mut offsets = HashSet::with_capacity(RECORDS);
    let mut values = HashSet::with_capacity(RECORDS);
    let mut dup = Vec::new();
    for (m, p, o, v) in seen.iter() {
        if !offsets.insert((*p, *o)) || !values.insert(v.clone()) {
            dup.push((*m, *p, *o, v.clone()));
        }
    }
    assert!(
        dup.is_empty(),
        "{} records read twice, e.g. {:?}",
        dup.len(),
        &dup[..dup.len().min(5)]
    );
    for (p, end) in &ends {
        for o in 0..*end {
            assert!(
                offsets.contains(&(*p, o)),
                "partition {p} offset {o} never read"
            );
        }
    }
    for i in 0..RECORDS {
        assert!(
            values.contains(&format!("value-{i}")),
            "value-{i} never read"
        );
    }
    assert_eq!(seen.len(), RECORDS);
    // The group really changed: the late member got partitions and read some of them.
    let assigned = assigned.lock().unwrap();
    assert!(
        assigned.iter().any(|(m, p)| *m == 3 && !p.is_empty()),
        "member 3 got no partitions: {assigned:?}"
    );
    assert!(
        per_member[0] > 0 && *per_member.last().unwrap() > 0,
        "{per_member:?}"
    );
    eprintln!(
        "{codec}, {assignor}: {RECORDS} records read once by members {per_member:?} in {:.1} s ({} assignments)",
        elapsed.as_secs_f64(),
        assigned.len()
    );
}

#[test]
fn zstd_records_are_read_exactly_once_across_a_leave_and_a_join() {
    group_reads_every_record_once("zstd", AssignorKind::Range);
}

#[test]
fn lz4_records_are_read_exactly_once_across_a_leave_and_a_join_with_roundrobin() {
    group_reads_every_record_once("lz4", AssignorKind::RoundRobin);
}

/// A Java console consumer (classic protocol, Java's default assignors `[range,
/// cooperative-sticky]`) and ours in one group: our member leads and assigns to the Java member,
/// then, ours gone, the Java member leads and assigns to a new member of ours. Both sides read
/// their records; together, every record.
#[test]
fn java_and_our_consumers_share_one_group_either_leading() {
    let k = kafka();
    let topic = "mixed-group";
    let group = "mixed-readers";
    k.create_topic(topic, 4, 1);
    let n = 4000;
    // Spread over every partition (keyless records from the sticky partitioner can fill one or
    // two partitions only, and the Java member could be given the empty ones).
    java_produce_with(
        k,
        topic,
        "none",
        n,
        &["partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"],
    );
    let ends = end_offsets(k, topic);
    assert!(
        ends.len() == 4 && ends.values().all(|&e| e > 0),
        "every partition should hold records: {ends:?}"
    );
    let ours = |name: &str, max_poll: usize| {
        let c = Consumer::new(
            ConsumerConfig::new(k.bootstrap())
                .unwrap()
                .group_id(group)
                .client_id(name)
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .enable_auto_commit(false)
                .heartbeat_interval(Duration::from_millis(300))
                .max_poll_records(max_poll)
                .crac_register(false),
        )
        .unwrap();
        c.subscribe([topic]).unwrap();
        c
    };
    let mut values: HashSet<String> = HashSet::new();
    let read = |c: &Consumer, values: &mut HashSet<String>, until: &dyn Fn(&Consumer) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !until(c) {
            assert!(Instant::now() < deadline, "{:?}", c.group_metadata());
            for r in &c.poll(Duration::from_millis(100)).unwrap() {
                values.insert(String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap());
            }
            c.commit_sync().unwrap();
            thread::sleep(Duration::from_millis(50));
        }
    };
    // Ours first: it leads, reading slowly (one record per poll, under 20 a second), so that
    // however long the JVM takes to start and join, most records are left for the Java member.
    let first = ours("ours-1", 1);
    read(&first, &mut values, &|c| c.assignment().len() == 4);
    let java = console_consumer(k, topic, group)
        .args([
            // Idle time before it gives up: generous, because on a loaded 2-core machine the JVM
            // can take well over 15 s to start, join and get its first records.
            "--timeout-ms",
            "45000",
            "--command-property",
            "group.protocol=classic",
            "--command-property",
            "max.poll.records=20",
            "--command-property",
            "heartbeat.interval.ms=300",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Java console consumer");
    // The Java member joins: our leader gives it half the partitions.
    read(&first, &mut values, &|c| c.assignment().len() == 2);
    let led_by_ours = first.assignment();
    first.close(Duration::from_secs(30)).unwrap();
    // Now the Java member leads (the only one left); ours joins and gets partitions from it.
    let second = ours("ours-2", 500);
    read(&second, &mut values, &|c| c.assignment().len() == 2);
    let from_java_leader = second.assignment();
    read(&second, &mut values, &|c| {
        c.assignment()
            .iter()
            .all(|tp| c.position(tp).ok() == ends.get(&tp.partition).copied())
    });
    second.close(Duration::from_secs(30)).unwrap();
    let out = java.wait_with_output().unwrap();
    let java_values: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        !java_values.is_empty(),
        "the Java member read nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    values.extend(java_values.iter().cloned());
    for i in 0..n {
        assert!(
            values.contains(&format!("value-{i}")),
            "value-{i} never read"
        );
    }
    eprintln!(
        "mixed: ours led {led_by_ours:?}; the Java leader gave ours {from_java_leader:?}; Java read {}",
        java_values.len()
    );
}

/// Records written by Java come back field for field as the Java console consumer shows them:
/// partition, offset, timestamp, key, value (null too), headers in order with duplicate keys
/// and null values kept. `assign()` without a `group.id`, from the earliest offset.
#[test]
fn java_records_read_back_field_for_field_by_an_assigned_consumer() {
    let k = kafka();
    let topic = "fields";
    k.create_topic(topic, 2, 1);
    let sent = vec![
        JavaRecord::new(Some("k1"), "v1")
            .header("h", Some("a"))
            .header("h", Some("b"))
            .header("h", None),
        JavaRecord {
            key: Some("k2".into()),
            value: None,
            headers: vec![("x".into(), Some(String::new()))],
        },
        JavaRecord::new(None, "v3 ünïcode"),
        JavaRecord::new(Some("k1"), "v4"),
    ];
    k.java_produce_records(topic, &sent);
    let java = k.consume_all(topic, sent.len(), Duration::from_secs(60));
    let consumer = Consumer::new(
        ConsumerConfig::new(k.bootstrap())
            .unwrap()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .crac_register(false),
    )
    .unwrap();
    consumer
        .assign(&[TopicPartition::new(topic, 0), TopicPartition::new(topic, 1)])
        .unwrap();
    let mut ours = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ours.len() < sent.len() {
        assert!(Instant::now() < deadline, "read {ours:?}");
        ours.extend(consumer.poll(Duration::from_millis(200)).unwrap());
    }
    let text = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8(b.to_vec()).unwrap());
    let mut ours: Vec<_> = ours
        .iter()
        .map(|r| {
            (
                r.partition,
                r.offset,
                r.timestamp,
                text(&r.key),
                text(&r.value),
                r.headers
                    .iter()
                    .map(|h| (h.key.clone(), text(&h.value)))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let mut theirs: Vec<_> = java
        .into_iter()
        .map(|r| {
            (
                r.partition,
                r.offset,
                r.timestamp,
                r.key,
                r.value,
                r.headers,
            )
        })
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    assert!(
        consumer.commit_sync().is_err(),
        "no group.id: nothing to commit to"
    );
    consumer.close(Duration::from_secs(10)).unwrap();
}

/// The rest of the API against the broker: `position`, `commit_async` (its callback runs in a
/// later `poll()`), explicit offsets, `committed`, `seek`, `seek_to_beginning`, and a new member
/// of the group starting from the last commit.
#[test]
fn positions_commits_and_seeks() {
    let k = kafka();
    let topic = "api-calls";
    k.create_topic(topic, 1, 1);
    java_produce(k, topic, "none", 100);
    let tp = TopicPartition::new(topic, 0);
    let config = || {
        ConsumerConfig::new(k.bootstrap())
            .unwrap()
            .group_id("api-calls")
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .enable_auto_commit(false)
            .max_poll_records(10)
            .crac_register(false)
    };
    let c = Consumer::new(config()).unwrap();
    c.subscribe([topic]).unwrap();
    let mut offsets = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while offsets.len() < 30 {
        assert!(Instant::now() < deadline);
        offsets.extend(
            c.poll(Duration::from_millis(200))
                .unwrap()
                .iter()
                .map(|r| r.offset),
        );
    }
    assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    let pos = c.position(&tp).unwrap();
    assert_eq!(
        pos,
        offsets.len() as i64,
        "the position follows what poll() returned"
    );
    let done = Arc::new(Mutex::new(None));
    let d = done.clone();
    c.commit_async(move |r| *d.lock().unwrap() = Some(r))
        .unwrap();
    while done.lock().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the async commit's callback never ran"
        );
        let _ = c.poll(Duration::from_millis(50)).unwrap();
    }
    assert_eq!(done.lock().unwrap().clone().unwrap(), Ok(()));
    let committed = c
        .committed(std::slice::from_ref(&tp), Duration::from_secs(30))
        .unwrap();
    assert_eq!(committed[0].1.as_ref().map(|o| o.offset), Some(pos));
    c.commit_sync_offsets(
        &[(tp.clone(), OffsetAndMetadata::new(5))],
        Duration::from_secs(30),
    )
    .unwrap();
    let committed = c
        .committed(std::slice::from_ref(&tp), Duration::from_secs(30))
        .unwrap();
    assert_eq!(committed[0].1.as_ref().map(|o| o.offset), Some(5));
    let first = |c: &Consumer| loop {
        let r = c.poll(Duration::from_millis(200)).unwrap();
        if let Some(r) = r.iter().next() {
            return r.offset;
        }
        assert!(Instant::now() < deadline);
    };
    c.seek(&tp, 90).unwrap();
    assert_eq!(first(&c), 90);
    c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(first(&c), 0);
    c.close(Duration::from_secs(10)).unwrap();
    // A new member resumes from the last commit.
    let d = Consumer::new(config()).unwrap();
    d.subscribe([topic]).unwrap();
    assert_eq!(first(&d), 5);
    d.close(Duration::from_secs(10)).unwrap();
}
