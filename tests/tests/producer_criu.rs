//! The checkpoint-aware producer under real CRIU against real Kafka brokers: a producing
//! service (`src/bin/kafka_service.rs`) is checkpointed from outside (`crac checkpoint PID`),
//! restored with `crac restore`, and everything it produced is read back by the Java console
//! consumer: every record exactly once, in order per partition.
//!
//! Needs root, `CRAC_CRIU` and Kafka's jars (scripts/test sets all three up).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::kafka::Cluster;
use crac_tests::process::{
    Proc, TempDir, alive, crac_checkpoint, crac_command, criu, must, wait_acked,
};
use crac_tests::stream::check_stream;

const SERVICE: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);

/// The three-broker cluster the tests of this file share (each uses its own topic).
fn kafka3() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(3))
}

fn service(k: &Cluster, topic: &str, img: &std::path::Path, env: &[(&str, &str)]) -> Proc {
    let mut c = Command::new(SERVICE);
    c.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_TOPIC", topic)
        .env("SVC_STATE_MB", "16")
        .env("SVC_RATE", "300");
    for (key, v) in env {
        c.env(key, v);
    }
    Proc::spawn(&format!("kafka_service {topic}"), &mut c)
}

fn crac(args: &[&str]) -> Command {
    crac_command(CRAC, args)
}

/// `crac checkpoint PID`: (exit code, stdout + stderr).
fn checkpoint(pid: i32) -> (i32, String) {
    crac_checkpoint(CRAC, pid)
}

fn restore(img: &std::path::Path, extra: &[&str], name: &str) -> Proc {
    // Lazily (memory served on demand): the default here, asked for so that a machine where
    // it silently fell back to eager would fail.
    let mut args = vec!["restore", img.to_str().unwrap(), "--lazy"];
    args.extend_from_slice(extra);
    Proc::spawn(name, &mut crac(&args))
}

/// No delivery or send error and no ERROR log line in what a process printed.
fn assert_no_errors(p: &Proc) {
    let t = p.transcript();
    for l in t.lines() {
        assert!(
            !l.starts_with("delivery_error")
                && !l.starts_with("send_error")
                && !l.contains(" ERROR ")
                && !l.contains("FENCED")
                && !l.contains("OUT_OF_ORDER"),
            "error after restore: `{l}`; full output:\n{t}"
        );
    }
}

/// Reads the topic back with the Java console consumer and checks it against `expected`
/// (instance -> seq range): every record exactly once, in order per partition. Returns the
/// ids read.
fn verify(
    k: &Cluster,
    topic: &str,
    expected: &[(&str, std::ops::Range<u64>)],
) -> BTreeSet<(String, u64)> {
    let expected: BTreeMap<String, std::ops::Range<u64>> = expected
        .iter()
        .map(|(i, r)| ((*i).to_owned(), r.clone()))
        .collect();
    let total: u64 = expected.values().map(|r| r.end - r.start).sum();
    let records = k.consume_all(topic, total as usize, T);
    let (rep, ids) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "topic {topic}: {rep}");
    assert_eq!(rep.read as u64, total, "topic {topic}: {rep}");
    ids
}

/// A `send()` that waited through a checkpoint: in a restored copy it fails as not sent
/// (`restored_while_waiting`, and the copy sends that number again); `blocked_send` where it
/// completed (a send that raced the generation change).
fn waited_through_a_checkpoint(line: &str) -> bool {
    line.starts_with("restored_while_waiting ") || line.starts_with("blocked_send ")
}

#[test]
fn five_checkpoints_in_a_row_with_leaders_moved_lose_and_duplicate_nothing() {
    let k = kafka3();
    let topic = "five-in-a-row";
    k.create_topic(topic, 6, 3);
    let dir = TempDir::new("five");
    let img = dir.join("image");
    let mut current = service(k, topic, &img, &[]);
    let pid = current.pid();
    current.expect("first_ack", T);
    let mut acked = wait_acked(&mut current, 100, T);
    let mut blocked = Vec::new();
    let mut producer_ids = HashSet::new();
    for round in 1..=5u64 {
        let (code, text) = checkpoint(pid);
        assert_eq!(code, 0, "checkpoint {round}: {text}");
        let st = current.wait(T);
        assert!(!st.success(), "the process stops at the dump");
        assert!(!alive(pid));
        // While it is frozen, every partition gets a new leader.
        let before = k.leaders(topic);
        let after = k.move_leaders(topic);
        for (p, l) in &before {
            assert_ne!(after.get(p), Some(l), "partition {p} kept its leader");
        }
        let final_env = "SVC_FINAL=300".to_string();
        let extra: Vec<&str> = if round == 5 {
            vec!["--env", &final_env]
        } else {
            vec![]
        };
        let mut r = restore(&img, &extra, &format!("restore {round}"));
        let line = r.expect("restored ", T);
        assert_eq!(must(&line, "gen"), round.to_string(), "{line}");
        assert_eq!(must(&line, "pid"), pid.to_string());
        let ack = r.expect("first_ack_after_restore", T);
        producer_ids.insert(must(&ack, "producer_id").to_owned());
        if round < 5 {
            acked = wait_acked(&mut r, acked + 100, T);
        }
        current = r;
        blocked.extend(
            current
                .transcript()
                .lines()
                .filter(|l| waited_through_a_checkpoint(l))
                .map(|l| must(l, "seq").parse::<u64>().unwrap())
                .collect::<Vec<_>>(),
        );
        assert_no_errors(&current);
    }
    let done = current.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{done}");
    assert_eq!(must(&done, "close"), "ok", "{done}");
    let st = current.wait(T);
    assert!(st.success(), "{}", current.transcript());
    assert_no_errors(&current);
    assert_eq!(
        producer_ids.len(),
        5,
        "a new producer id after every restore"
    );

    let last: u64 = must(&done, "last_seq").parse().unwrap();
    verify(k, topic, &[("a", 0..last)]);
    // Records whose send() waited through a checkpoint were delivered once, by the restored
    // process (checked above with everything else); there must have been some to make the
    // point.
    assert!(
        !blocked.is_empty(),
        "no send() waited through a checkpoint: raise SVC_RATE"
    );
}

#[test]
fn without_the_resource_the_fd_check_names_the_kafka_sockets() {
    let k = kafka3();
    let topic = "no-resource";
    k.create_topic(topic, 3, 3);
    let dir = TempDir::new("nores");
    let img = dir.join("image");
    let mut s = service(
        k,
        topic,
        &img,
        &[("SVC_REGISTER", "0"), ("SVC_FINAL", "1500")],
    );
    let pid = s.pid();
    let acked = wait_acked(&mut s, 50, T);
    let (code, text) = checkpoint(pid);
    assert_ne!(code, 0, "{text}");
    let ports = k.ports();
    let named: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("TCP 127.0.0.1:") && l.contains("is still open"))
        .collect();
    assert!(
        named.iter().any(|l| ports
            .iter()
            .any(|p| l.contains(&format!("-> 127.0.0.1:{p} ")))),
        "the error names a socket to a broker ({ports:?}): {text}"
    );
    assert!(!img.join("inventory.img").exists(), "no image");
    assert!(alive(pid), "the service goes on");
    wait_acked(&mut s, acked + 100, T);
    let done = s.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0");
    assert!(s.wait(T).success());
    let last: u64 = must(&done, "last_seq").parse().unwrap();
    verify(k, topic, &[("a", 0..last)]);
}

#[test]
fn two_clones_of_one_image_produce_with_their_own_producer_ids() {
    let k = kafka3();
    let topic = "clones";
    k.create_topic(topic, 6, 3);
    let dir = TempDir::new("clones");
    let img = dir.join("image");
    let mut s = service(k, topic, &img, &[("SVC_QUIESCE", "1")]);
    let pid = s.pid();
    wait_acked(&mut s, 200, T);
    let (code, text) = checkpoint(pid);
    assert_eq!(code, 0, "{text}");
    s.wait(T);
    // The original's producer id, from its last progress line.
    let orig_id = s
        .transcript()
        .lines()
        .rev()
        .find(|l| l.starts_with("progress "))
        .map(|l| must(l, "producer_id").to_owned())
        .unwrap();

    // Two copies at once: one under the original pid, one in its own PID namespace.
    let mut b = restore(
        &img,
        &["--env", "SVC_INSTANCE=b", "--env", "SVC_FINAL=600"],
        "clone b",
    );
    let mut c = restore(
        &img,
        &[
            "--pidns",
            "--env",
            "SVC_INSTANCE=c",
            "--env",
            "SVC_FINAL=600",
        ],
        "clone c",
    );
    let mut ids = HashSet::new();
    for p in [&mut b, &mut c] {
        let line = p.expect("restored ", T);
        let ack = p.expect("first_ack_after_restore", T);
        let id = must(&ack, "producer_id").to_owned();
        assert_ne!(id, orig_id, "{line}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 2, "the clones share no producer id: {ids:?}");
    let mut starts = Vec::new();
    for p in [&mut b, &mut c] {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{done}");
        assert!(p.wait(T).success(), "{}", p.transcript());
        assert_no_errors(p);
        starts.push(must(&done, "last_seq").parse::<u64>().unwrap());
    }
    // The original's records up to the image, then each clone's from there, all exactly once.
    let restored_from: Vec<u64> = [&b, &c]
        .iter()
        .map(|p| {
            let l = p
                .transcript()
                .lines()
                .find(|l| l.starts_with("restored "))
                .map(str::to_owned)
                .unwrap();
            must(&l, "next_seq").parse().unwrap()
        })
        .collect();
    assert_eq!(
        restored_from[0], restored_from[1],
        "both clones go on from the image"
    );
    let from = restored_from[0];
    assert!(starts[0] >= from + 600 && starts[1] >= from + 600);
    verify(
        k,
        topic,
        &[
            ("a", 0..from),
            ("b", from..starts[0]),
            ("c", from..starts[1]),
        ],
    );
}

#[test]
fn a_freeze_longer_than_delivery_timeout_expires_nothing() {
    let k = kafka3();
    let topic = "long-freeze";
    k.create_topic(topic, 3, 3);
    let dir = TempDir::new("freeze");
    let img = dir.join("image");
    let props = "delivery.timeout.ms=10000,request.timeout.ms=5000,max.block.ms=10000";
    let mut s = service(k, topic, &img, &[("SVC_PROPS", props)]);
    let pid = s.pid();
    wait_acked(&mut s, 100, T);
    let (code, text) = checkpoint(pid);
    assert_eq!(code, 0, "{text}");
    s.wait(T);
    // Frozen for three times delivery.timeout.ms (and max.block.ms, for the send() that
    // waits through the checkpoint).
    std::thread::sleep(Duration::from_secs(30));
    let t = Instant::now();
    let mut r = restore(&img, &["--env", "SVC_FINAL=300"], "restore");
    let line = r.expect("restored ", T);
    let frozen: u64 = must(&line, "frozen_ms").parse().unwrap();
    assert!(frozen >= 30_000, "{line}");
    r.expect("first_ack_after_restore", T);
    let done = r.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", r.transcript());
    assert!(r.wait(T).success());
    assert_no_errors(&r);
    assert!(t.elapsed() < T);
    let blocked: Vec<u64> = r
        .transcript()
        .lines()
        .filter(|l| waited_through_a_checkpoint(l))
        .map(|l| must(l, "seq").parse().unwrap())
        .collect();
    let last: u64 = must(&done, "last_seq").parse().unwrap();
    let seen = verify(k, topic, &[("a", 0..last)]);
    for b in blocked {
        assert!(seen.contains(&("a".into(), b)));
    }
}

#[test]
fn a_broker_down_during_the_drain_fails_the_checkpoint_and_loses_nothing() {
    let k = Cluster::start(1);
    let topic = "drain-fails";
    k.create_topic(topic, 3, 1);
    let dir = TempDir::new("drainfail");
    let img = dir.join("image");
    // The service finishes only once the broker is back (a restart can take a minute on a
    // loaded machine; a close() timing out before it would be the test's doing, not the
    // producer's).
    let final_file = dir.join("final");
    let mut s = service(
        &k,
        topic,
        &img,
        &[
            ("SVC_PROPS", "checkpoint.drain.timeout.ms=3000"),
            ("SVC_FINAL_FILE", final_file.to_str().unwrap()),
        ],
    );
    let pid = s.pid();
    wait_acked(&mut s, 100, T);
    k.stop_broker(1);
    std::thread::sleep(Duration::from_millis(500));
    let (code, text) = checkpoint(pid);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("kafka-producer") && text.contains("cannot checkpoint"),
        "the error says the producer could not drain: {text}"
    );
    assert!(!img.join("inventory.img").exists(), "no image");
    assert!(alive(pid), "the service goes on");
    k.start_broker(1);
    let partial = dir.join("final.partial");
    std::fs::write(&partial, "600").unwrap();
    std::fs::rename(&partial, &final_file).unwrap();
    let done = s.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", s.transcript());
    assert!(s.wait(T).success());
    let last: u64 = must(&done, "last_seq").parse().unwrap();
    verify(&k, topic, &[("a", 0..last)]);
}

/// The partitions a clone's records went to, in the order it sent them, runs collapsed.
fn partition_runs(records: &[crac_tests::kafka::ConsumedRecord], instance: &str) -> Vec<i32> {
    let mut mine: Vec<(u64, i32)> = records
        .iter()
        .filter_map(|r| {
            let (i, seq) = r.value.as_deref()?.split_once(':')?;
            (i == instance).then(|| (seq.parse().unwrap(), r.partition))
        })
        .collect();
    mine.sort_unstable();
    let mut runs: Vec<i32> = mine.into_iter().map(|(_, p)| p).collect();
    runs.dedup();
    runs
}

#[test]
fn three_clones_of_an_unquiesced_keyless_service_send_no_record_twice() {
    // The sending loop is not quiesced: at the image one send() waits for the checkpoint to
    // end. In each restored copy that send() fails, typed (not sent), so no copy sends the
    // record the others would send too (the service then sends that number again under its
    // own instance name, as a record meant once per copy); each copy's sticky partitioner
    // draws its own generator, so their keyless records go their own ways.
    let k = kafka3();
    let topic = "clones-unquiesced";
    k.create_topic(topic, 6, 3);
    let dir = TempDir::new("clones3");
    let img = dir.join("image");
    let mut s = service(
        k,
        topic,
        &img,
        &[
            ("SVC_QUIESCE", "0"),
            ("SVC_KEYLESS", "1"),
            ("SVC_PROPS", "batch.size=1024"),
        ],
    );
    wait_acked(&mut s, 200, T);
    let (code, text) = checkpoint(s.pid());
    assert_eq!(code, 0, "{text}");
    s.wait(T);
    let names = ["b", "c", "d"];
    let mut clones: Vec<Proc> = names
        .iter()
        .map(|n| {
            let instance = format!("SVC_INSTANCE={n}");
            restore(
                &img,
                &["--pidns", "--env", &instance, "--env", "SVC_FINAL=300"],
                &format!("clone {n}"),
            )
        })
        .collect();
    let mut blocked = Vec::new();
    let mut acked = Vec::new();
    for (p, n) in clones.iter_mut().zip(names) {
        p.expect("restored ", T);
        // The waiting send() failed as not sent; the service sends it again as its own.
        let e = p.expect("restored_while_waiting ", T);
        assert_eq!(must(&e, "instance"), n, "{e}");
        blocked.push(must(&e, "seq").parse::<u64>().unwrap());
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{done}");
        acked.push(must(&done, "acked").parse::<u64>().unwrap());
        assert!(p.wait(T).success(), "{}", p.transcript());
    }
    assert!(
        blocked.iter().all(|b| *b == blocked[0]),
        "the same send() waited in every copy: {blocked:?}"
    );
    // The original had every record before the waiting one acknowledged (the drain), and the
    // acknowledgement counter is in the image: each copy acknowledged its own on top, the
    // waiting number among them under its own name.
    let from = blocked[0];
    let total = from + acked.iter().map(|a| a - from).sum::<u64>();
    let records = k.consume_all(topic, total as usize, T);
    let mut seen = HashSet::new();
    for r in &records {
        let v = r.value.clone().unwrap_or_default();
        assert!(seen.insert(v.clone()), "record {v} is in the topic twice");
    }
    assert_eq!(
        records.len() as u64,
        total,
        "every acknowledged record, once"
    );
    assert!(
        !seen.contains(&format!("a:{from}")),
        "the original's waiting record was sent by no copy"
    );
    for n in names {
        assert!(
            seen.contains(&format!("{n}:{from}")),
            "{n} sent it as its own"
        );
    }
    let runs: Vec<Vec<i32>> = names.iter().map(|n| partition_runs(&records, n)).collect();
    for r in &runs {
        assert!(r.len() >= 5, "the sticky partitioner moved on: {runs:?}");
    }
    assert!(
        runs[0] != runs[1] && runs[1] != runs[2] && runs[0] != runs[2],
        "each copy's keyless records follow their own partitions: {runs:?}"
    );
}
