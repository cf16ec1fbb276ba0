//! Exactly-once across checkpoints with transactions, under real CRIU against three real
//! Kafka brokers, read back by a `read_committed` Java console consumer.
//!
//! The service is `src/bin/kafka_ctp_service.rs` in its transactional mode: per poll batch one
//! transaction holding the output records and the input offsets (`send_offsets_to_transaction`
//! with the consumer's `group_metadata()`); its consumer reads `read_committed` and commits
//! nothing at a checkpoint. At a checkpoint the open transaction commits first
//! (`checkpoint.transaction.policy=wait`), then the consumer leaves its group; records a copy
//! read before its image are refused by the group coordinator once it is restored (their
//! member is gone, KIP-447): it aborts them, and they are read again from the committed
//! offsets by whichever copy owns their partition.
//!
//! - One service checkpointed and restored three times while its input grows.
//! - Two clones of one image running at once, each under its own `transactional.id` (one named
//!   by the restorer with `KAFKA_TRANSACTIONAL_ID`, one made unique by
//!   `crac.transactional.id.policy=unique`), sharing the input partitions as members of one
//!   group: neither fences the other, and together they output each input record once.
//!
//! The input stream comes from `src/bin/kafka_service.rs` (values `<instance>:<seq>`), checked
//! with `crac_tests::stream::check_stream`. Needs root, `CRAC_CRIU` and Kafka's jars.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, crac_checkpoint, crac_command, criu, must};
use crac_tests::stream::check_stream;

const CTP: &str = env!("CARGO_BIN_EXE_kafka_ctp_service");
const PRODUCER: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);
/// How long the Java consumer waits for a record beyond the expected ones (a duplicate).
const IDLE: Duration = Duration::from_secs(10);

fn kafka3() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(3))
}

fn restore(img: &Path, extra: &[&str], name: &str) -> Proc {
    let mut args = vec!["restore", img.to_str().unwrap()];
    args.extend_from_slice(extra);
    Proc::spawn(name, &mut crac_command(CRAC, &args))
}

/// The input stream: `kafka_service` producing `<instance>:<seq>` at `rate` records/s until
/// `count` were sent.
fn input(k: &Cluster, topic: &str, rate: u32, count: u64) -> Proc {
    let mut c = Command::new(PRODUCER);
    c.env_remove("CRAC_CHECKPOINT_TO")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_TOPIC", topic)
        .env("SVC_INSTANCE", "a")
        .env("SVC_STATE_MB", "1")
        .env("SVC_RATE", rate.to_string())
        .env("SVC_FINAL", count.to_string())
        .env("SVC_REGISTER", "0")
        .env("CRAC_CHECKPOINT_SIGNAL", "0");
    Proc::spawn("input", &mut c)
}

/// Waits for the input's `done` line: how many records it sent.
fn input_done(p: &mut Proc) -> u64 {
    let done = p.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
    assert!(p.wait(T).success(), "{}", p.transcript());
    must(&done, "last_seq").parse().unwrap()
}

struct Topics<'a> {
    input: &'a str,
    output: &'a str,
    group: &'a str,
}

fn service(k: &Cluster, t: &Topics<'_>, txn_id: &str, policy: &str, dir: &TempDir) -> Proc {
    let mut cmd = Command::new(CTP);
    cmd.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", dir.join("image"))
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_IN", t.input)
        .env("SVC_OUT", t.output)
        .env("SVC_GROUP", t.group)
        .env("SVC_TXN_ID", txn_id)
        .env("SVC_TXN_ID_POLICY", policy)
        .env("SVC_STOP_FILE", dir.join("stop"));
    Proc::spawn("ctp", &mut cmd)
}

/// Waits for a `progress` line with at least `at_least` input records committed; returns the
/// count. No line may report an error.
fn committed(p: &mut Proc, at_least: u64) -> u64 {
    let l = p.expect_where("progress ", T, |l| {
        must(l, "consumed").parse::<u64>().unwrap() >= at_least || must(l, "errors") != "0"
    });
    assert_eq!(must(&l, "errors"), "0", "{}", p.transcript());
    must(&l, "consumed").parse().unwrap()
}

fn no_errors(p: &Proc) {
    let t = p.transcript();
    for l in t.lines() {
        assert!(
            !l.starts_with("error ") && !l.contains(" ERROR ") && !l.contains("fenced"),
            "`{l}` in:\n{t}"
        );
    }
}

/// Stops the service and checks its end: no error, every transaction closed cleanly.
fn stop(p: &mut Proc, dir: &TempDir) -> String {
    std::fs::write(dir.join("stop"), b"").unwrap();
    let done = p.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
    assert!(p.wait(T).success(), "{}", p.transcript());
    no_errors(p);
    done
}

/// The output as a `read_committed` Java consumer reads it: each of the `last` input
/// records exactly once, in order within each partition.
fn assert_output_exactly_once(k: &Cluster, output: &str, last: u64) {
    let records = k.consume_committed(output, last as usize, IDLE);
    let (rep, _) = check_stream(&records, &BTreeMap::from([("a".to_owned(), 0..last)]));
    assert!(rep.is_clean(), "{output}: {rep}");
    assert_eq!(rep.read as u64, last, "{rep}");
}

/// The `aborted` lines (records read before an image and refused after the restore).
fn aborts(p: &Proc) -> Vec<String> {
    p.transcript()
        .lines()
        .filter(|l| l.starts_with("aborted "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn transactional_ctp_checkpointed_three_times_outputs_each_record_once() {
    let k = kafka3();
    let t = Topics {
        input: "txn-ctp-in",
        output: "txn-ctp-out",
        group: "txn-ctp",
    };
    k.create_topic(t.input, 6, 3);
    k.create_topic(t.output, 6, 3);
    let dir = TempDir::new("txn-ctp");
    let mut src = input(k, t.input, 300, 9000);
    let mut current = service(k, &t, "txn-ctp", "keep", &dir);
    let pid = current.pid();
    let mut seen = committed(&mut current, 300);
    let mut aborted = Vec::new();
    for round in 1..=3u64 {
        let (code, text) = crac_checkpoint(CRAC, pid);
        assert_eq!(code, 0, "checkpoint {round}: {text}");
        assert!(!current.wait(T).success(), "the process stops at the dump");
        no_errors(&current);
        std::thread::sleep(Duration::from_secs(2)); // input accumulates meanwhile
        let mut r = restore(&dir.join("image"), &[], &format!("ctp restore {round}"));
        let line = r.expect("restored ", T);
        assert_eq!(must(&line, "gen"), round.to_string(), "{line}");
        // Policy keep: the restored copy goes on under the configured id.
        assert_eq!(must(&line, "txn_id"), "txn-ctp", "{line}");
        // Counts continue from the image: more than before means it commits again.
        seen = committed(&mut r, seen + 300);
        aborted.extend(aborts(&r));
        current = r;
    }
    let last = input_done(&mut src);
    committed(&mut current, last);
    let done = stop(&mut current, &dir);
    // Every input record committed once along the line of restores.
    assert_eq!(must(&done, "consumed"), last.to_string(), "{done}");
    assert_output_exactly_once(k, t.output, last);
    eprintln!(
        "three restores: {last} records, {} transaction(s) aborted after restores: {aborted:?}",
        aborted.len()
    );
}

#[test]
fn two_clones_of_a_transactional_image_share_the_input_and_output_each_record_once() {
    let k = kafka3();
    let t = Topics {
        input: "txn-clones-in",
        output: "txn-clones-out",
        group: "txn-clones",
    };
    k.create_topic(t.input, 6, 3);
    k.create_topic(t.output, 6, 3);
    let dir = TempDir::new("txn-clones");
    let mut src = input(k, t.input, 250, 7500);
    let mut orig = service(k, &t, "txn-clone", "unique", &dir);
    let pid = orig.pid();
    committed(&mut orig, 300);
    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "checkpoint: {text}");
    assert!(!orig.wait(T).success());
    no_errors(&orig);

    // Two copies at once: one named by the restorer, one in its own PID namespace named by
    // the producer (configured id + a suffix unique to the restore).
    let mut a = restore(
        &dir.join("image"),
        &["--env", "KAFKA_TRANSACTIONAL_ID=txn-clone-a"],
        "clone a",
    );
    let mut b = restore(&dir.join("image"), &["--pidns"], "clone b");
    let la = a.expect("restored ", T);
    let lb = b.expect("restored ", T);
    assert_eq!(must(&la, "txn_id"), "txn-clone-a", "{la}");
    assert!(must(&lb, "txn_id").starts_with("txn-clone-crac1-"), "{lb}");
    // What the image had committed (records read and not committed before it are aborted
    // by whichever copy holds them, then read again).
    let at_image: u64 = must(&la, "consumed").parse().unwrap();
    assert_eq!(must(&lb, "consumed"), at_image.to_string(), "{lb}");
    // Both commit transactions of their own while the input flows: neither fences the other.
    committed(&mut a, at_image + 100);
    committed(&mut b, at_image + 100);
    let last = input_done(&mut src);
    let deadline = Instant::now() + T;
    while committed_last(&a) + committed_last(&b) - at_image < last {
        assert!(
            Instant::now() < deadline,
            "the clones committed {} and {} (image {at_image}) of {last}",
            committed_last(&a),
            committed_last(&b)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let da = stop(&mut a, &dir);
    let db = stop(&mut b, &dir);
    let na: u64 = must(&da, "consumed").parse().unwrap();
    let nb: u64 = must(&db, "consumed").parse().unwrap();
    assert_eq!(
        na + nb - at_image,
        last,
        "every input record committed once by one clone or the other: {da} / {db}"
    );
    assert_output_exactly_once(k, t.output, last);
    eprintln!(
        "two clones: {last} records, {at_image} before the image, clone a {} and clone b {} after it; aborted: {:?} {:?}",
        na - at_image,
        nb - at_image,
        aborts(&a),
        aborts(&b)
    );
}

/// The committed count of the last `progress` line printed so far.
fn committed_last(p: &Proc) -> u64 {
    p.transcript()
        .lines()
        .rev()
        .find(|l| l.starts_with("progress "))
        .map_or(0, |l| must(l, "consumed").parse().unwrap())
}
