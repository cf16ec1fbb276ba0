//! An async service under real CRIU against a real Kafka broker: `src/bin/async_service.rs`
//! (tokio, a hyper HTTP server, `send_async`, `Consumer::stream()`, an async checkpoint hook
//! for its listener) is checkpointed with `crac checkpoint PID` while it serves, produces and
//! consumes, and restored twice from the one image (`--pidns`, each copy told its own instance
//! name and HTTP port): both copies serve HTTP and produce, their consumers go on, and the
//! topic holds every record exactly once (Kafka's Java consumer reads it back).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, crac_checkpoint, crac_command, criu, must};
use crac_tests::stream::check_stream;

const SERVICE: &str = env!("CARGO_BIN_EXE_async_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// `GET /` of the service on `port`: its answer's body.
fn get(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned()
}

/// Waits for a `progress` line with at least `acked` records acknowledged and `consumed` read.
fn progress(p: &mut Proc, acked: u64, consumed: u64) {
    p.expect_where("progress ", T, |l| {
        must(l, "acked").parse::<u64>().unwrap_or(0) >= acked
            && must(l, "consumed").parse::<u64>().unwrap_or(0) >= consumed
    });
}

fn restore(img: &std::path::Path, instance: &str, port: u16) -> Proc {
    let (i, p) = (
        format!("SVC_INSTANCE={instance}"),
        format!("SVC_HTTP_PORT={port}"),
    );
    let args = [
        "restore",
        img.to_str().unwrap(),
        "--pidns",
        "--env",
        &i,
        "--env",
        &p,
        "--env",
        "SVC_FINAL=300",
        "--env",
        "SVC_CONSUME_AT_LEAST=70",
    ];
    Proc::spawn(&format!("copy {instance}"), &mut crac_command(CRAC, &args))
}

#[test]
fn an_async_service_checkpointed_while_serving_is_restored_twice_and_both_copies_go_on() {
    let k = Cluster::start(1);
    let (out, input) = ("async-out", "async-in");
    k.create_topic(out, 3, 1);
    k.create_topic(input, 1, 1);
    let first: Vec<String> = (0..50).map(|i| format!("in-{i}")).collect();
    let recs: Vec<(Option<&str>, &str)> = first.iter().map(|v| (None, v.as_str())).collect();
    k.java_produce(input, &recs);

    let dir = TempDir::new("async-service");
    let img = dir.join("image");
    let port = free_port();
    let mut c = Command::new(SERVICE);
    c.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", &img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_TOPIC", out)
        .env("SVC_IN_TOPIC", input)
        .env("SVC_HTTP_PORT", port.to_string())
        .env("SVC_RATE", "200")
        .stdin(std::process::Stdio::null());
    let mut orig = Proc::spawn("async_service", &mut c);
    let pid = orig.pid();
    orig.expect(&format!("serving port={port}"), T);
    progress(&mut orig, 100, 50);
    assert!(get(port).starts_with("instance=a "), "{}", get(port));

    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "checkpoint while serving: {text}");
    assert!(!orig.wait(T).success(), "the original stops at the dump");

    let (pb, pc) = (free_port(), free_port());
    let mut copies = [
        ("b", pb, restore(&img, "b", pb)),
        ("c", pc, restore(&img, "c", pc)),
    ];
    for (name, port, p) in &mut copies {
        let line = p.expect("restored ", T);
        assert_eq!(must(&line, "instance"), *name, "{line}");
        p.expect(&format!("serving port={port}"), T);
        let body = get(*port);
        assert!(body.starts_with(&format!("instance={name} ")), "{body}");
    }
    // The copies' consumers go on: records written now reach both.
    let more: Vec<String> = (50..70).map(|i| format!("in-{i}")).collect();
    let recs: Vec<(Option<&str>, &str)> = more.iter().map(|v| (None, v.as_str())).collect();
    k.java_produce(input, &recs);
    let mut last = BTreeMap::new();
    for (name, _, p) in &mut copies {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "copy {name}: {done}");
        assert_eq!(must(&done, "consumed"), "70", "copy {name} read on: {done}");
        last.insert(
            name.to_string(),
            must(&done, "last_seq").parse::<u64>().unwrap(),
        );
        assert!(p.wait(T).success(), "{}", p.transcript());
        let t = p.transcript();
        assert!(
            !t.contains("send_error") && !t.contains("delivery_error"),
            "{t}"
        );
    }

    // Every record once: the original's up to the image (x), then each copy's 300 from there
    // (SVC_FINAL counts from the image's next number).
    assert_eq!(
        last["b"], last["c"],
        "both copies go on from the image's next number"
    );
    let x = last["b"] - 300;
    let expected = BTreeMap::from([
        ("a".to_owned(), 0..x),
        ("b".to_owned(), x..last["b"]),
        ("c".to_owned(), x..last["c"]),
    ]);
    let want: u64 = expected.values().map(|r| r.end - r.start).sum();
    let records = k.consume_all(out, want as usize, T);
    let (rep, _) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.read as u64, want, "{rep}");
}
