//! An image that moves between hosts through a registry: a producing service
//! (`src/bin/kafka_service.rs`) runs on "host A", is checkpointed there, pushed (signed) from
//! A, pulled and restored on "host B", told B's bootstrap servers with `--env`, and goes on
//! producing: every record exactly once. The hosts are network namespaces of the test's own
//! (`crac_tests::netns`), each with its own addresses and hostname; neither reaches 127.0.0.1
//! nor the other's link, and the Kafka cluster and the registry listen on each host's side of
//! its link (a listener per host: the cluster is reached from each under other addresses).
//!
//! Same kernel, same CPU, same files: what really differs between hosts, and what the image's
//! annotations check, is in docs/images.md.

use std::process::Command;
use std::time::Duration;

use crac_tests::kafka::Cluster;
use crac_tests::netns::Host;
use crac_tests::process::{Proc, TempDir, crac_checkpoint, criu, must, wait_acked};
use crac_tests::registry::{Registry, keypair};
use crac_tests::stream::check_stream;

const SERVICE: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);

fn run(c: &mut Command) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{c:?}: {text}");
    text
}

#[test]
fn a_service_checkpointed_on_one_host_produces_on_another_after_a_push_and_a_pull() {
    let a = Host::new(1, "host-a");
    let b = Host::new(2, "host-b");
    assert_eq!(a.hostname_seen(), "host-a");
    assert_eq!(b.hostname_seen(), "host-b");
    let k = Cluster::start_with_host_listeners(1, &[("HOSTA", &a.gateway), ("HOSTB", &b.gateway)]);
    let topic = "travel";
    k.create_topic(topic, 3, 1);
    let reg = Registry::start_also("hosts", &[&a.gateway, &b.gateway]);
    let dir = TempDir::new("hosts");
    let img = dir.join("image");
    let (key, trust) = keypair(dir.path(), "ci");
    let (key, trust) = (key.to_str().unwrap(), trust.to_str().unwrap());

    // On A: the service, reaching the cluster at A's addresses only.
    let mut svc = a.command(SERVICE);
    svc.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", &img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap_of("HOSTA"))
        .env("SVC_TOPIC", topic)
        .env("SVC_STATE_MB", "16")
        .env("SVC_RATE", "300")
        .env("SVC_QUIESCE", "1");
    let mut orig = Proc::spawn("kafka_service on host-a", &mut svc);
    let pid = orig.pid();
    orig.expect("first_ack", T);
    wait_acked(&mut orig, 100, T);
    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "checkpoint: {text}");
    assert!(!orig.wait(T).success(), "the original stops at the dump");

    // Pushed from A, to the registry as A reaches it.
    let push_ref = format!("{}:{}/crac/travel:v1", a.gateway, reg.plain_port());
    let mut push = a.command(CRAC);
    push.args([
        "push",
        img.to_str().unwrap(),
        &push_ref,
        "--plain-http",
        "--sign",
        key,
    ]);
    let pushed = run(&mut push);
    assert!(pushed.contains("signed by ed25519:"), "{pushed}");

    // On B: pulled from the registry as B reaches it, checked, restored, told where the
    // cluster is from here.
    let pull_ref = format!("{}:{}/crac/travel:v1", b.gateway, reg.plain_port());
    let pulled = dir.join("pulled");
    let bootstrap_b = format!("KAFKA_BOOTSTRAP_SERVERS={}", k.bootstrap_of("HOSTB"));
    let mut restore = b.command(CRAC);
    restore.env("CRAC_CRIU", criu()).args([
        "restore",
        &pull_ref,
        "--plain-http",
        "--trust",
        trust,
        "--pull-to",
        pulled.to_str().unwrap(),
        "--env",
        &bootstrap_b,
        "--env",
        "SVC_FINAL=300",
    ]);
    let mut copy = Proc::spawn("crac restore on host-b", &mut restore);
    let line = copy.expect("restored ", T);
    assert_eq!(must(&line, "host"), "host-b", "{line}");
    assert_eq!(must(&line, "pid"), pid.to_string());
    copy.expect("first_ack_after_restore", T);
    let done = copy.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{done}");
    assert!(copy.wait(T).success(), "{}", copy.transcript());
    let t = copy.transcript();
    assert!(t.contains("signed by ed25519:"), "{t}");

    // Read back at 127.0.0.1 by Kafka's Java consumer: every record once, in order.
    let last: u64 = must(&done, "last_seq").parse().unwrap();
    let records = k.consume_all(topic, last as usize, T);
    let expected = [("a".to_owned(), 0..last)].into_iter().collect();
    let (rep, _) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.read as u64, last, "{rep}");
}
