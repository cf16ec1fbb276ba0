//! The checkpoint-aware consumer under real CRIU against three real Kafka brokers.
//!
//! - One member of a group of three (`src/bin/kafka_consumer_service.rs`) is checkpointed
//!   mid-stream (`crac checkpoint PID`) and restored two minutes later: during the freeze the
//!   other two take its partitions (it left the group before the image), after the restore it
//!   rejoins with a new member id and processes records again, and the union of what the three
//!   processed is exactly what was produced, without a single duplicate (every member commits
//!   synchronously after each poll, the checkpoint commits what the frozen one had returned).
//! - Two clones of one image of a static member (`group.instance.id`) are both members at once,
//!   one under the id the restorer gave it (`--env KAFKA_GROUP_INSTANCE_ID=…`), one under the
//!   configured id with a per-restore suffix: nobody is fenced.
//! - A consume-transform-produce service (`src/bin/kafka_ctp_service.rs`: our consumer
//!   feeding our producer) is checkpointed and restored three times while its input grows; the
//!   output topic, read by the Java console consumer, holds every input record exactly once.
//!
//! The input stream comes from `src/bin/kafka_service.rs` (values `<instance>:<seq>`, keys
//! `k<seq % 64>`), checked with `crac_tests::stream::check_stream`.
//! Needs root, `CRAC_CRIU` and Kafka's jars (scripts/test sets all three up).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, alive, crac_checkpoint, crac_command, criu, must};
use crac_tests::service::{self, no_errors, processed, wait_until};
use crac_tests::stream::check_stream;

const CONSUMER: &str = env!("CARGO_BIN_EXE_kafka_consumer_service");
const CTP: &str = env!("CARGO_BIN_EXE_kafka_ctp_service");
const PRODUCER: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);
/// How long the checkpointed member stays frozen (the two minutes).
const FREEZE: Duration = Duration::from_secs(120);

fn kafka3() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(3))
}

fn crac(args: &[&str]) -> Command {
    crac_command(CRAC, args)
}

/// `crac checkpoint PID`: (exit code, stdout + stderr).
fn checkpoint(pid: i32) -> (i32, String) {
    crac_checkpoint(CRAC, pid)
}

fn restore(img: &Path, name: &str) -> Proc {
    restore_with(img, &[], name)
}

fn restore_with(img: &Path, extra: &[&str], name: &str) -> Proc {
    // Lazily (memory served on demand): the default here, asked for so that a machine where
    // it silently fell back to eager would fail.
    let mut args = vec!["restore", img.to_str().unwrap(), "--lazy"];
    args.extend_from_slice(extra);
    Proc::spawn(name, &mut crac(&args))
}

fn producer(k: &Cluster, topic: &str, instance: &str, rate: u32, count: u64) -> Proc {
    service::producer(PRODUCER, k, topic, instance, rate, count)
}

fn produced(p: &mut Proc) -> u64 {
    service::produced(p, T)
}

fn consumer(k: &Cluster, topic: &str, group: &str, name: &str, img: &Path, stop: &Path) -> Proc {
    consumer_with(k, topic, group, name, img, stop, "")
}

fn consumer_with(
    k: &Cluster,
    topic: &str,
    group: &str,
    name: &str,
    img: &Path,
    stop: &Path,
    props: &str,
) -> Proc {
    let g = service::ServiceGroup {
        exe: CONSUMER,
        cluster: k,
        topic,
        group,
    };
    g.member(
        name,
        img,
        stop,
        &format!("heartbeat.interval.ms=1000{props}"),
    )
}

/// The last `assigned` line with partitions.
fn last_assigned_line(transcript: &str) -> Option<String> {
    transcript
        .lines()
        .rev()
        .find(|l| l.starts_with("assigned ") && !must(l, "partitions").is_empty())
        .map(str::to_owned)
}

/// The partitions of the last `assigned` line of a transcript, with its member id.
fn last_assignment(transcript: &str) -> Option<(BTreeSet<i32>, String)> {
    let l = transcript
        .lines()
        .rev()
        .find(|l| l.starts_with("assigned "))?;
    let parts = must(l, "partitions")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    Some((parts, must(l, "member_id").to_owned()))
}

#[test]
fn a_member_frozen_for_two_minutes_hands_over_its_partitions_and_rejoins_without_duplicates() {
    let k = kafka3();
    let topic = "freeze-group";
    let group = "freeze-readers";
    k.create_topic(topic, 6, 3);
    let dir = TempDir::new("consumer-freeze");
    let stop = dir.join("stop");
    // Long enough to keep records coming through the freeze.
    let mut prod_a = producer(k, topic, "a", 100, 16_000);
    let mut a = consumer(k, topic, group, "A", &dir.join("img-a"), &stop);
    let mut b = consumer(k, topic, group, "B", &dir.join("img-b"), &stop);
    let mut c = consumer(k, topic, group, "C", &dir.join("img-c"), &stop);
    let pid = a.pid();

    // Mid-stream: each member has partitions and A has processed records.
    wait_until("three members with partitions and records", T, || {
        [&a, &b, &c]
            .iter()
            .all(|p| last_assignment(&p.transcript()).is_some_and(|(parts, _)| parts.len() == 2))
            && processed(&a.transcript()).len() >= 100
    });
    let (a_parts, a_member) = last_assignment(&a.transcript()).unwrap();

    let (code, text) = checkpoint(pid);
    assert_eq!(code, 0, "checkpoint: {text}");
    let frozen_at = Instant::now();
    let st = a.wait(T);
    assert!(!st.success(), "the process stops at the dump");
    assert!(!alive(pid));
    let before_image = processed(&a.transcript());
    let a_last: BTreeMap<i32, i64> = before_image
        .iter()
        .map(|r| (r.partition, r.offset))
        .collect();

    // During the freeze the other two own all six partitions and read A's as well.
    wait_until(
        "B and C to take A's partitions",
        Duration::from_secs(60),
        || {
            let mut all = BTreeSet::new();
            for p in [&b, &c] {
                if let Some((parts, _)) = last_assignment(&p.transcript()) {
                    all.extend(parts);
                }
            }
            all.len() == 6
        },
    );
    wait_until(
        "B and C to read A's partitions past where A stopped",
        Duration::from_secs(60),
        || {
            [&b, &c].iter().any(|p| {
                processed(&p.transcript()).iter().any(|r| {
                    a_parts.contains(&r.partition)
                        && a_last.get(&r.partition).is_none_or(|&o| r.offset > o)
                })
            })
        },
    );
    let left = FREEZE.saturating_sub(frozen_at.elapsed());
    std::thread::sleep(left);

    let mut restored = restore(&dir.join("img-a"), "restored A");
    let line = restored.expect("restored ", T);
    assert_eq!(must(&line, "gen"), "1", "{line}");
    assert!(
        must(&line, "frozen_ms").parse::<u64>().unwrap() >= FREEZE.as_millis() as u64 - 1000,
        "{line}"
    );
    // It rejoins as a new member and gets partitions back.
    let rejoined = loop {
        let l = restored.expect("assigned ", Duration::from_secs(90));
        if !must(&l, "partitions").is_empty() {
            break l;
        }
    };
    let new_member = must(&rejoined, "member_id");
    assert_ne!(
        new_member, a_member,
        "a restored member must not reuse its member id"
    );
    assert!(!new_member.is_empty());
    // More input, so the restored member has records of its own to process.
    let mut prod_b = producer(k, topic, "b", 300, 900);
    let last_a = produced(&mut prod_a);
    let last_b = produced(&mut prod_b);
    let total = (last_a + last_b) as usize;
    wait_until("every record processed", T, || {
        [&b, &c, &restored]
            .iter()
            .map(|p| processed(&p.transcript()).len())
            .sum::<usize>()
            + before_image.len()
            >= total
    });
    std::thread::sleep(Duration::from_secs(3)); // a duplicate would show up now
    std::fs::write(&stop, b"").unwrap();
    for p in [&mut b, &mut c, &mut restored] {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
        assert!(p.wait(T).success(), "{}", p.transcript());
        no_errors(p);
    }
    no_errors(&a);
    let after_restore = processed(&restored.transcript());
    assert!(
        !after_restore.is_empty(),
        "the restored member processed nothing: {}",
        restored.transcript()
    );

    let mut all = before_image.clone();
    all.extend(after_restore.iter().cloned());
    all.extend(processed(&b.transcript()));
    all.extend(processed(&c.transcript()));
    let mut positions = HashSet::new();
    for r in &all {
        assert!(
            positions.insert((r.partition, r.offset)),
            "partition {} offset {} processed twice",
            r.partition,
            r.offset
        );
    }
    let expected = BTreeMap::from([("a".to_owned(), 0..last_a), ("b".to_owned(), 0..last_b)]);
    let (rep, _) = check_stream(&all, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(all.len(), total, "{rep}");
    eprintln!(
        "freeze: {total} records, A {} before the image + {} after the restore, B {}, C {}",
        before_image.len(),
        after_restore.len(),
        processed(&b.transcript()).len(),
        processed(&c.transcript()).len()
    );
}

#[test]
fn consume_transform_produce_checkpointed_three_times_outputs_each_record_once() {
    let k = kafka3();
    let (input, output, group) = ("ctp-in", "ctp-out", "ctp");
    k.create_topic(input, 6, 3);
    k.create_topic(output, 6, 3);
    let dir = TempDir::new("ctp");
    let img = dir.join("image");
    let stop = dir.join("stop");
    let mut prod = producer(k, input, "a", 300, 9000);
    let mut cmd = Command::new(CTP);
    cmd.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", &img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_IN", input)
        .env("SVC_OUT", output)
        .env("SVC_GROUP", group)
        .env("SVC_STOP_FILE", &stop);
    let mut current = Proc::spawn("ctp", &mut cmd);
    let pid = current.pid();
    let consumed = |p: &mut Proc, at_least: u64| -> u64 {
        loop {
            let l = p.expect("progress ", T);
            assert_eq!(must(&l, "errors"), "0", "{}", p.transcript());
            let n: u64 = must(&l, "consumed").parse().unwrap();
            if n >= at_least {
                return n;
            }
        }
    };
    let mut seen = consumed(&mut current, 300);
    for round in 1..=3u64 {
        let (code, text) = checkpoint(pid);
        assert_eq!(code, 0, "checkpoint {round}: {text}");
        assert!(!current.wait(T).success());
        no_errors(&current);
        std::thread::sleep(Duration::from_secs(2)); // input accumulates meanwhile
        let mut r = restore(&img, &format!("ctp restore {round}"));
        let line = r.expect("restored ", T);
        assert_eq!(must(&line, "gen"), round.to_string(), "{line}");
        // The restored copy counts on from the image: more than before means it went on.
        seen = consumed(&mut r, seen + 300);
        current = r;
    }
    let last = produced(&mut prod);
    consumed(&mut current, last);
    std::fs::write(&stop, b"").unwrap();
    let done = current.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", current.transcript());
    assert_eq!(must(&done, "produced"), must(&done, "consumed"));
    assert!(current.wait(T).success(), "{}", current.transcript());
    no_errors(&current);

    let records = k.consume_all(output, last as usize, T);
    let (rep, _) = check_stream(&records, &BTreeMap::from([("a".to_owned(), 0..last)]));
    assert!(rep.is_clean(), "{output}: {rep}");
    assert_eq!(rep.read as u64, last, "{rep}");
}

#[test]
fn two_clones_of_a_static_member_are_both_members_with_their_own_instance_ids() {
    let k = kafka3();
    let topic = "static-clones";
    let group = "static-readers";
    k.create_topic(topic, 4, 3);
    let dir = TempDir::new("consumer-clones");
    let img = dir.join("image");
    let stop = dir.join("stop");
    let mut prod = producer(k, topic, "a", 200, 1000);
    let mut orig = consumer_with(
        k,
        topic,
        group,
        "S",
        &img,
        &stop,
        ",group.instance.id=static-1",
    );
    let pid = orig.pid();
    wait_until("the static member to read", T, || {
        processed(&orig.transcript()).len() >= 50
    });
    let first = last_assigned_line(&orig.transcript()).unwrap();
    assert_eq!(must(&first, "instance"), "static-1", "{first}");
    let (code, text) = checkpoint(pid);
    assert_eq!(code, 0, "checkpoint: {text}");
    assert!(!orig.wait(T).success());

    // Two copies at once: one named by the restorer, one in its own PID namespace named by
    // the consumer (configured id + a per-restore suffix).
    let mut named = restore_with(
        &img,
        &["--env", "KAFKA_GROUP_INSTANCE_ID=worker-b"],
        "clone named by the restorer",
    );
    let mut suffixed = restore_with(&img, &["--pidns"], "clone in a PID namespace");
    wait_until("both clones to hold two partitions each", T, || {
        [&named, &suffixed]
            .iter()
            .all(|p| last_assignment(&p.transcript()).is_some_and(|(parts, _)| parts.len() == 2))
    });
    let a = last_assigned_line(&named.transcript()).unwrap();
    let b = last_assigned_line(&suffixed.transcript()).unwrap();
    assert_eq!(must(&a, "instance"), "worker-b", "{a}");
    let sfx = must(&b, "instance");
    assert!(sfx.starts_with("static-1-crac1-"), "{b}");
    let ids: HashSet<&str> = [
        must(&first, "member_id"),
        must(&a, "member_id"),
        must(&b, "member_id"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        ids.len(),
        3,
        "three distinct member ids: {first} / {a} / {b}"
    );
    // Both keep consuming side by side until the input ends (neither fenced the other).
    produced(&mut prod);
    std::fs::write(&stop, b"").unwrap();
    for p in [&mut named, &mut suffixed] {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
        assert!(p.wait(T).success(), "{}", p.transcript());
        no_errors(p);
        assert!(
            !p.transcript().contains("FENCED"),
            "a clone was fenced: {}",
            p.transcript()
        );
    }
}
