//! The demo (`scripts/demo`): a producing service with warm state is checkpointed by CRIU while
//! it produces, the partition leaders move while it is frozen, and two copies are restored from
//! the one image; an independent consumer (Apache Kafka's Java console consumer) then checks
//! that every record arrived exactly once, in order per partition.
//!
//! Needs root, `CRAC_CRIU`, and the release builds of `kafka_service` and `crac` next to this
//! binary (scripts/demo builds them). Prints a report; exits 1 if anything was lost or
//! duplicated.
//!
//! Environment: `DEMO_STATE_MB` (default 256), `DEMO_RATE` records/s (default 1000),
//! `DEMO_RECORDS` per phase (default 3000).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, must};
use crac_tests::stream::check_stream;

const T: Duration = Duration::from_secs(300);

fn step(msg: &str) {
    eprintln!("demo: {msg}");
}

fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let p = exe.parent().expect("exe dir").join(name);
    if !p.exists() {
        eprintln!(
            "demo: {} not found; build it: cargo build --release -p crac-tests -p crac-criu",
            p.display()
        );
        std::process::exit(2);
    }
    p
}

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("demo: {key}={v} is not a number");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

/// Waits for a `progress` line with at least `n` acknowledged records.
fn wait_acked(p: &mut Proc, n: u64) {
    loop {
        let l = p.expect("progress ", T);
        if must(&l, "acked").parse::<u64>().unwrap_or(0) >= n {
            return;
        }
    }
}

fn dir_mb(dir: &std::path::Path) -> f64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum::<u64>()
        })
        .unwrap_or(0) as f64
        / (1 << 20) as f64
}

fn main() -> ExitCode {
    let service = sibling("kafka_service");
    let crac = sibling("crac");
    let criu = std::env::var("CRAC_CRIU").unwrap_or_else(|_| {
        eprintln!("demo: set CRAC_CRIU=$(scripts/install-criu | tail -n1)");
        std::process::exit(2)
    });
    let state_mb = env_num("DEMO_STATE_MB", 256);
    let rate = env_num("DEMO_RATE", 1000);
    let per_phase = env_num("DEMO_RECORDS", 3000);
    let topic = "demo-events";

    step("starting a 3-broker Apache Kafka cluster on 127.0.0.1");
    let kafka = Cluster::start(3);
    kafka.create_topic(topic, 6, 3);
    step(&format!("cluster up: {}", kafka.bootstrap()));

    let dir = TempDir::new("demo");
    let img = dir.join("image");
    let service_cmd = |extra: &[(&str, &str)]| {
        let mut c = Command::new(&service);
        c.env("CRAC_CRIU", &criu)
            .env("CRAC_CHECKPOINT_TO", &img)
            .env("SVC_BOOTSTRAP", kafka.bootstrap())
            .env("SVC_TOPIC", topic)
            .env("SVC_STATE_MB", state_mb.to_string())
            .env("SVC_RATE", rate.to_string())
            .env("SVC_QUIESCE", "1");
        for (k, v) in extra {
            c.env(k, v);
        }
        c
    };

    step(&format!(
        "cold start: the service builds {state_mb} MB of warm state, then produces {rate} records/s"
    ));
    let mut orig = Proc::spawn("service", &mut service_cmd(&[]));
    let pid = orig.pid();
    let ready = orig.expect("ready ", T);
    let cold_first_ack: u64 = must(&orig.expect("first_ack ", T), "ms_since_start")
        .parse()
        .unwrap();
    step(&format!(
        "pid {pid}: state built in {} ms, first record acknowledged {cold_first_ack} ms after start",
        must(&ready, "state_ms")
    ));
    wait_acked(&mut orig, per_phase);

    step(&format!(
        "checkpoint: `crac checkpoint {pid}` while it produces"
    ));
    let t = Instant::now();
    let out = Command::new(&crac)
        .args(["checkpoint", &pid.to_string()])
        .env("CRAC_CRIU", &criu)
        .output()
        .expect("run crac");
    let checkpoint_ms = t.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        eprintln!(
            "demo: checkpoint failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return ExitCode::FAILURE;
    }
    orig.wait(T);
    let image_mb = dir_mb(&img);
    step(&format!(
        "image of {image_mb:.0} MB written in {checkpoint_ms:.0} ms; the process is gone"
    ));

    let before = kafka.leaders(topic);
    let after = kafka.move_leaders(topic);
    step(&format!(
        "while it is frozen, partition leaders moved: {before:?} -> {after:?}"
    ));

    step("restore: copy b under the original pid, copy c in its own PID namespace");
    let restore = |name: &str, pidns: bool| {
        let mut args = vec!["restore".to_owned(), img.display().to_string()];
        if pidns {
            args.push("--pidns".into());
        }
        for kv in [
            format!("SVC_INSTANCE={name}"),
            format!("SVC_FINAL={per_phase}"),
        ] {
            args.push("--env".into());
            args.push(kv);
        }
        let mut c = Command::new(&crac);
        c.args(&args).env("CRAC_CRIU", &criu);
        (
            SystemTime::now(),
            Proc::spawn(&format!("copy {name}"), &mut c),
        )
    };
    let (tb, mut b) = restore("b", false);
    let (tc, mut c) = restore("c", true);
    let mut restore_ms = Vec::new();
    let mut first_ack_ms = Vec::new();
    let mut producer_ids = Vec::new();
    let mut next_seq = Vec::new();
    let mut last_seq = Vec::new();
    for (t0, p) in [(tb, &mut b), (tc, &mut c)] {
        let line = p.expect("stderr: crac: restored pid", T);
        let took: f64 = line
            .split(" in ")
            .last()
            .and_then(|s| s.trim_end_matches(" ms").parse().ok())
            .unwrap_or(f64::NAN);
        restore_ms.push(took);
        let r = p.expect("restored ", T);
        next_seq.push(must(&r, "next_seq").parse::<u64>().unwrap());
        // The service stamps its first acknowledgement after the restore with wall time.
        let f = p.expect("first_ack_of_gen gen=1 ", T);
        let at = UNIX_EPOCH + Duration::from_nanos(must(&f, "unix_ns").parse().unwrap());
        first_ack_ms.push(at.duration_since(t0).unwrap_or_default().as_secs_f64() * 1e3);
        let a = p.expect("first_ack_after_restore", T);
        producer_ids.push(must(&a, "producer_id").to_owned());
    }
    step(&format!(
        "restored in {:.0} / {:.0} ms; producer ids {} / {}",
        restore_ms[0], restore_ms[1], producer_ids[0], producer_ids[1]
    ));
    let mut errors = 0u64;
    for p in [&mut b, &mut c] {
        let done = p.expect("done ", T);
        errors += must(&done, "errors").parse::<u64>().unwrap_or(1);
        last_seq.push(must(&done, "last_seq").parse::<u64>().unwrap());
        p.wait(T);
    }

    step("reading the topic back with the Java console consumer");
    let from = next_seq[0];
    let expected: BTreeMap<String, std::ops::Range<u64>> = BTreeMap::from([
        ("a".to_owned(), 0..from),
        ("b".to_owned(), from..last_seq[0]),
        ("c".to_owned(), next_seq[1]..last_seq[1]),
    ]);
    let sent: u64 = expected.values().map(|r| r.end - r.start).sum();
    let records = kafka.consume_all(topic, sent as usize, T);
    let (rep, _) = check_stream(&records, &expected);

    let ok = rep.is_clean() && errors == 0 && producer_ids[0] != producer_ids[1];
    println!();
    println!("crac-rs demo: a Kafka producer checkpointed with CRIU, restored twice");
    println!("| | |");
    println!("|---|---:|");
    println!("| records sent (original + 2 copies) | {sent} |");
    println!(
        "| records verified by the Java console consumer | {} |",
        rep.distinct
    );
    println!("| lost | {} |", rep.lost.len());
    println!("| duplicated | {} |", rep.duplicates.len());
    println!(
        "| out of order within a partition | {} |",
        rep.out_of_order.len()
    );
    println!("| delivery errors after restore | {errors} |");
    println!(
        "| producer ids of the two copies | {} / {} |",
        producer_ids[0], producer_ids[1]
    );
    println!("| warm state | {state_mb} MB |");
    println!("| image | {image_mb:.0} MB |");
    println!("| checkpoint (`crac checkpoint`, drain + dump) | {checkpoint_ms:.0} ms |");
    println!(
        "| restore (`criu restore`) | {:.0} / {:.0} ms |",
        restore_ms[0], restore_ms[1]
    );
    println!(
        "| restore start to first acknowledged record | {:.0} / {:.0} ms |",
        first_ack_ms[0], first_ack_ms[1]
    );
    println!("| cold start to first acknowledged record | {cold_first_ack} ms |");
    println!(
        "| cold start / restore (time to first ack) | {:.1}× |",
        cold_first_ack as f64 / first_ack_ms[0].max(first_ack_ms[1])
    );
    if ok {
        println!("\nOK: every record exactly once, in order per partition.");
        ExitCode::SUCCESS
    } else {
        println!("\nFAILED: {rep}");
        ExitCode::FAILURE
    }
}
