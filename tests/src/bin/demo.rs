//! The demo (`scripts/demo`): a producing service with warm state (a catalog parsed and
//! indexed, and a cache filled from the cluster) is checkpointed by CRIU while it produces, the
//! partition leaders move while it is frozen, then one copy is restored alone and two clones
//! after it; then the image travels: pushed (signed, compressed) to an OCI registry on
//! 127.0.0.1 and a fourth copy restored straight from it (`crac restore REF`, its signature
//! checked, the image pulled); an independent consumer (Apache Kafka's Java console consumer) checks that every
//! record arrived exactly once, in order per partition.
//!
//! Needs root, `CRAC_CRIU`, and the release builds of `kafka_service` and `crac` next to this
//! binary (scripts/demo builds them). Prints a report; exits 1 if anything was lost or
//! duplicated, or if a restored copy did not answer sooner than a cold start.
//!
//! Environment: `DEMO_ITEMS` catalog items (default 1000000), `DEMO_CACHE_RECORDS` records
//! of the cache topic (default 200000), `DEMO_RATE` records/s (default 1000), `DEMO_RECORDS`
//! per phase (default 3000), `DEMO_JSON=FILE` also writes the figures as JSON.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, must};
use crac_tests::registry::Registry;
use crac_tests::stream::check_stream;
use kafka_client::{Producer, ProducerRecord};

const T: Duration = Duration::from_secs(300);
const TOPIC: &str = "demo-events";
const CACHE_TOPIC: &str = "demo-prices";
const PARTITIONS: i32 = 6;

fn step(msg: &str) {
    eprintln!("demo: {msg}");
}

fn die(msg: &str) -> ! {
    eprintln!("demo: {msg}");
    std::process::exit(2)
}

fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(&format!("current exe: {e}")));
    let p = exe.with_file_name(name);
    if !p.exists() {
        die(&format!(
            "{} not found; build it: cargo build --release -p crac-tests -p crac-cli",
            p.display()
        ));
    }
    p
}

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| die(&format!("{key}={v} is not a number")))
        })
        .unwrap_or(default)
}

fn ms_between(from: SystemTime, unix_ns_line: &str) -> f64 {
    let at = UNIX_EPOCH + Duration::from_nanos(must(unix_ns_line, "unix_ns").parse().unwrap());
    at.duration_since(from).unwrap_or_default().as_secs_f64() * 1e3
}

fn dir_mb(dir: &Path) -> f64 {
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

/// CRIU's own time for a run: the timestamp of the last line of its log, in ms.
fn criu_log_ms(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        let inner = l.strip_prefix('(')?.split(')').next()?;
        inner.trim().parse::<f64>().ok().map(|s| s * 1e3)
    })
}

/// Fills the cache topic with `n` price records (keys `k0…`, so the service's keys find
/// theirs) with our own producer.
fn fill_prices(bootstrap: &str, n: u64) {
    let producer = Producer::from_properties([
        ("bootstrap.servers", bootstrap),
        ("linger.ms", "20"),
        ("batch.size", "262144"),
    ])
    .unwrap_or_else(|e| die(&format!("producer: {e}")));
    for i in 0..n {
        let key = format!("k{}", i % (n / 2).max(1));
        let value = format!("price={}.{:02} currency=EUR rev={i}", 5 + i % 995, i % 100);
        if let Err(e) = producer.send(
            ProducerRecord::new(CACHE_TOPIC)
                .key(key.as_bytes())
                .value(value.as_bytes()),
        ) {
            die(&format!("filling {CACHE_TOPIC}: {e}"));
        }
    }
    if let Err(e) = producer.flush_timeout(Duration::from_secs(120)) {
        die(&format!("filling {CACHE_TOPIC}: {e}"));
    }
    let _ = producer.close(Duration::from_secs(10));
}

/// How a copy was restored, for the report.
fn restore_mode(c: &Copy) -> String {
    if c.mode == "lazy" {
        format!(
            "lazy (pages served on demand; every page in memory {:.0} ms after `crac restore` started)",
            c.all_pages_ms
        )
    } else {
        "eager (every page read before the process runs)".to_owned()
    }
}

/// One restored copy, and what it reported.
struct Copy {
    name: String,
    started: SystemTime,
    proc: Proc,
    restore_ms: f64,
    /// "lazy" (pages served on demand) or "eager", as `crac restore` said.
    mode: &'static str,
    /// Lazy: `crac restore` started → every page in memory.
    all_pages_ms: f64,
    first_ack_ms: f64,
    next_seq: u64,
    last_seq: u64,
    producer_id: String,
    state_sum: String,
    errors: u64,
}

/// Starts `crac restore --pidns` of the image (a directory or a registry reference, with
/// `extra` arguments) for copy `name`, which sends `per_phase` records and ends.
fn restore(crac: &Path, criu: &str, img: &str, extra: &[&str], name: &str, per_phase: u64) -> Copy {
    let mut c = Command::new(crac);
    c.arg("restore")
        .arg(img)
        .arg("--pidns")
        .args(extra)
        .args(["--env", &format!("SVC_INSTANCE={name}")])
        .args(["--env", &format!("SVC_FINAL={per_phase}")])
        .env("CRAC_CRIU", criu);
    let started = SystemTime::now();
    Copy {
        name: name.to_owned(),
        started,
        proc: Proc::spawn(&format!("copy {name}"), &mut c),
        restore_ms: f64::NAN,
        mode: "eager",
        all_pages_ms: f64::NAN,
        first_ack_ms: f64::NAN,
        next_seq: 0,
        last_seq: 0,
        producer_id: String::new(),
        state_sum: String::new(),
        errors: 0,
    }
}

impl Copy {
    /// Waits for the restore to be over and the copy's first acknowledged record. The lines
    /// come from different threads (crac, the monitor, the delivery callback) in any order.
    fn await_first_ack(&mut self) {
        let line = self.proc.expect("stderr: crac: restored pid", T);
        // "restored pid P [(pid N in its own PID namespace)] from DIR in T ms (lazy: …|eager: …)"
        self.restore_ms = line
            .split(" in ")
            .filter_map(|s| s.split(" ms").next()?.trim().parse().ok())
            .last()
            .unwrap_or(f64::NAN);
        if line.contains(" ms (lazy") {
            self.mode = "lazy";
        }
        let r = self.proc.expect("restored ", T);
        self.next_seq = must(&r, "next_seq").parse().unwrap();
        let f = self.proc.expect("first_ack_of_gen gen=1 ", T);
        self.first_ack_ms = ms_between(self.started, &f);
        let a = self.proc.expect("first_ack_after_restore", T);
        self.producer_id = must(&a, "producer_id").to_owned();
        let c = self.proc.expect("state_checked gen=1 ", T);
        self.state_sum = must(&c, "state_sum").to_owned();
        if self.mode == "lazy" {
            let l = self.proc.expect("stderr: crac: all pages in memory ", T);
            self.all_pages_ms = l
                .split("all pages in memory ")
                .nth(1)
                .and_then(|t| t.split(" ms").next()?.parse().ok())
                .unwrap_or(f64::NAN);
        }
    }

    /// Waits for the copy to finish its records and end.
    fn await_done(&mut self) {
        let done = self.proc.expect("done ", T);
        self.errors = must(&done, "errors").parse().unwrap_or(1);
        self.last_seq = must(&done, "last_seq").parse().unwrap();
        let st = self.proc.wait(T);
        if !st.success() {
            self.errors += 1;
        }
    }
}

/// What the run measured.
struct Figures {
    items: u64,
    cache_records: String,
    cache_read: u64,
    state_ms: String,
    cache_ms: String,
    image_mb: f64,
    cold_first_ack_ms: f64,
    checkpoint_ms: f64,
    dump_ms: f64,
    /// CRIU's own account of the dump: where the frozen time went.
    dump_stats: String,
    /// Config and layers as the registry stores them.
    registry_mb: f64,
    push_ms: f64,
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "null".into()
    }
}

fn main() -> ExitCode {
    let service = sibling("kafka_service");
    let crac = sibling("crac");
    let criu = std::env::var("CRAC_CRIU")
        .unwrap_or_else(|_| die("set CRAC_CRIU=$(scripts/install-criu | tail -n1)"));
    let items = env_num("DEMO_ITEMS", 1_000_000);
    let cache_records = env_num("DEMO_CACHE_RECORDS", 200_000);
    let rate = env_num("DEMO_RATE", 1000);
    let per_phase = env_num("DEMO_RECORDS", 3000);

    step("starting a 3-broker Apache Kafka cluster on 127.0.0.1");
    let kafka = Cluster::start(3);
    kafka.create_topic(TOPIC, PARTITIONS, 3);
    kafka.create_topic(CACHE_TOPIC, PARTITIONS, 3);
    step(&format!(
        "cluster up: {}; writing {cache_records} price records to {CACHE_TOPIC}",
        kafka.bootstrap()
    ));
    fill_prices(kafka.bootstrap(), cache_records);

    let dir = TempDir::new("demo");
    let img = dir.join("image");
    let mut cmd = Command::new(&service);
    cmd.env("CRAC_CRIU", &criu)
        .env("CRAC_CHECKPOINT_TO", &img)
        .env("SVC_BOOTSTRAP", kafka.bootstrap())
        .env("SVC_TOPIC", TOPIC)
        .env("SVC_WARM", format!("catalog:{items}"))
        .env("SVC_CACHE_TOPIC", format!("{CACHE_TOPIC}:{PARTITIONS}"))
        .env("SVC_RATE", rate.to_string())
        .env("SVC_QUIESCE", "1");

    step(&format!(
        "cold start: the service parses and indexes a catalog of {items} items and reads \
         {CACHE_TOPIC} into a cache, then produces {rate} records/s"
    ));
    let t0 = SystemTime::now();
    let mut orig = Proc::spawn("service", &mut cmd);
    let pid = orig.pid();
    let ready = orig.expect("ready ", T);
    let cold_first_ack_ms = ms_between(t0, &orig.expect("first_ack_of_gen gen=0 ", T));
    let mut fig = Figures {
        items,
        cache_records: must(&ready, "cache_records").to_owned(),
        cache_read: cache_records,
        state_ms: must(&ready, "state_ms").to_owned(),
        cache_ms: must(&ready, "cache_ms").to_owned(),
        image_mb: 0.0,
        cold_first_ack_ms,
        checkpoint_ms: 0.0,
        dump_ms: f64::NAN,
        dump_stats: String::new(),
        registry_mb: f64::NAN,
        push_ms: f64::NAN,
    };
    let orig_sum = must(&ready, "state_sum").to_owned();
    step(&format!(
        "pid {pid}: catalog built in {} ms, {} prices cached from {cache_records} records in {} \
         ms, first record acknowledged {cold_first_ack_ms:.0} ms after start",
        fig.state_ms, fig.cache_records, fig.cache_ms
    ));
    orig.expect_where("progress ", T, |l| {
        must(l, "acked").parse::<u64>().unwrap_or(0) >= per_phase
    });

    step(&format!(
        "checkpoint: `crac checkpoint {pid}` while it produces"
    ));
    let t = Instant::now();
    let out = Command::new(&crac)
        .args(["checkpoint", &pid.to_string()])
        .env("CRAC_CRIU", &criu)
        .output()
        .unwrap_or_else(|e| die(&format!("run crac: {e}")));
    if !out.status.success() {
        eprintln!(
            "demo: checkpoint failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return ExitCode::FAILURE;
    }
    orig.wait(T);
    fig.checkpoint_ms = t.elapsed().as_secs_f64() * 1e3;
    fig.dump_ms = criu_log_ms(&img.join("dump.log")).unwrap_or(f64::NAN);
    fig.dump_stats = crac_criu::safe_dir::Dir::open(&img)
        .ok()
        .and_then(|d| crac_criu::criu::stats::DumpStats::read(&d))
        .map_or_else(|| "no stats-dump".to_owned(), |s| s.summary());
    fig.image_mb = dir_mb(&img);
    step(&format!(
        "image of {:.0} MB written in {:.0} ms (CRIU's dump {:.0} ms, the process {}); the \
         process is gone",
        fig.image_mb, fig.checkpoint_ms, fig.dump_ms, fig.dump_stats
    ));

    let before = kafka.leaders(TOPIC);
    let after = kafka.move_leaders(TOPIC);
    step(&format!(
        "while it is frozen, partition leaders moved: {before:?} -> {after:?}"
    ));

    step("restore: copy b alone, each copy in its own PID namespace");
    let img_s = img.to_str().unwrap_or_else(|| die("image path not UTF-8"));
    let mut b = restore(&crac, &criu, img_s, &[], "b", per_phase);
    b.await_first_ack();
    step(&format!(
        "copy b: restored in {:.0} ms, first record acknowledged {:.0} ms after `crac restore` \
         started",
        b.restore_ms, b.first_ack_ms
    ));
    step("clones: copies c and d restored together from the same image");
    let mut clones = [
        restore(&crac, &criu, img_s, &[], "c", per_phase),
        restore(&crac, &criu, img_s, &[], "d", per_phase),
    ];
    for c in &mut clones {
        c.await_first_ack();
    }
    let mut copies = vec![b];
    copies.extend(clones);
    let Some(e) = travel(&crac, &criu, &img, &dir, &mut fig, per_phase) else {
        return ExitCode::FAILURE;
    };
    copies.push(e);
    for c in &mut copies {
        c.await_done();
    }

    step("reading the topic back with the Java console consumer");
    let mut expected = BTreeMap::from([("a".to_owned(), 0..copies[0].next_seq)]);
    for c in &copies {
        expected.insert(c.name.clone(), c.next_seq..c.last_seq);
    }
    let sent: u64 = expected.values().map(|r| r.end - r.start).sum();
    let records = kafka.consume_all(TOPIC, sent as usize, T);
    let (rep, _) = check_stream(&records, &expected);

    let errors: u64 = copies.iter().map(|c| c.errors).sum();
    let mut ids: Vec<&str> = copies.iter().map(|c| c.producer_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    let distinct_ids = ids.len() == copies.len();
    let same_state = copies.iter().all(|c| c.state_sum == orig_sum);
    let faster = copies[0].first_ack_ms < fig.cold_first_ack_ms;
    report(&fig, &copies, sent, &rep, errors, same_state);
    if let Ok(path) = std::env::var("DEMO_JSON") {
        write_json(&path, &fig, &copies, sent, &rep, errors);
    }
    let ok = rep.is_clean() && errors == 0 && distinct_ids && same_state && faster;
    if ok {
        println!(
            "\nOK: every record exactly once, in order per partition; the restored copy \
             answered {:.1}x sooner than a cold start.",
            fig.cold_first_ack_ms / copies[0].first_ack_ms
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "\nFAILED: {rep}; delivery errors {errors}; distinct producer ids {distinct_ids}; \
             warm state intact {same_state}; restore before cold start {faster}"
        );
        ExitCode::FAILURE
    }
}

/// The image travels: pushed, signed with a key made for the demo, to a registry started on
/// 127.0.0.1, and copy `e` restored from it (`crac restore REF`: the signature checked, the
/// image pulled, then restored). `None` when the push failed (said on stderr).
fn travel(
    crac: &Path,
    criu: &str,
    img: &Path,
    dir: &TempDir,
    fig: &mut Figures,
    per_phase: u64,
) -> Option<Copy> {
    step("the image travels: an OCI registry on 127.0.0.1 (Debian's docker-registry)");
    let registry = Registry::start("demo");
    let key = dir.join("signing.pem");
    let trust = dir.join("trusted");
    let openssl = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(())
            .or_else(|| die(&format!("openssl {args:?} failed")))
    };
    let (k, t) = (key.to_str()?, trust.to_str()?);
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", k]);
    std::fs::create_dir_all(&trust).ok()?;
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&key, private).ok()?;
    openssl(&[
        "pkey",
        "-pubout",
        "-in",
        k,
        "-out",
        &format!("{t}/demo.pub"),
    ]);
    let reference = format!("{}/crac/demo-service:v1", registry.plain());
    let started = Instant::now();
    let out = Command::new(crac)
        .args([
            "push",
            img.to_str()?,
            &reference,
            "--plain-http",
            "--sign",
            k,
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "demo: push failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    fig.push_ms = started.elapsed().as_secs_f64() * 1e3;
    let said = String::from_utf8_lossy(&out.stderr);
    fig.registry_mb = said
        .split(" MB of image as ")
        .nth(1)
        .and_then(|r| r.split(" MB").next()?.parse().ok())
        .unwrap_or(f64::NAN);
    step(&format!(
        "pushed signed to {reference}: {:.0} MB in the registry ({:.1}x smaller than on disk) \
         in {:.0} ms; copy e restored from there",
        fig.registry_mb,
        fig.image_mb / fig.registry_mb,
        fig.push_ms
    ));
    let pulled = dir.join("pulled");
    let extra = ["--plain-http", "--trust", t, "--pull-to", pulled.to_str()?];
    let mut e = restore(crac, criu, &reference, &extra, "e", per_phase);
    e.await_first_ack();
    // The copy runs from its pulled image now: the registry is stopped (its storage deleted).
    drop(registry);
    Some(e)
}

fn report(
    fig: &Figures,
    copies: &[Copy],
    sent: u64,
    rep: &crac_tests::stream::StreamReport,
    errors: u64,
    same_state: bool,
) {
    let b = &copies[0];
    let clones = &copies[1..3];
    let e = &copies[3];
    let each = |f: &dyn Fn(&Copy) -> f64| {
        clones
            .iter()
            .map(|c| format!("{:.0}", f(c)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!();
    println!(
        "crac-rs demo: a Kafka producer with warm state, checkpointed with CRIU, restored 4 times (once from a registry)"
    );
    println!();
    println!("| | |");
    println!("|---|---:|");
    println!(
        "| warm state | a catalog of {} items parsed and indexed ({} ms); a cache of {} prices filled from {} records read from the cluster ({} ms) |",
        fig.items, fig.state_ms, fig.cache_records, fig.cache_read, fig.cache_ms
    );
    println!("| image | {:.0} MB |", fig.image_mb);
    println!(
        "| cold start → first acknowledged record | {:.0} ms |",
        fig.cold_first_ack_ms
    );
    println!(
        "| checkpoint (`crac checkpoint`: request → image written) | {:.0} ms |",
        fig.checkpoint_ms
    );
    println!(
        "| of which CRIU's dump | {:.0} ms: the process {} |",
        fig.dump_ms, fig.dump_stats
    );
    println!(
        "| copy b, restored alone: CRIU restore (`crac restore` → process running) | {:.0} ms |",
        b.restore_ms
    );
    println!("| restore mode | {} |", restore_mode(b));
    println!(
        "| copy b: `crac restore` started → first acknowledged record | {:.0} ms |",
        b.first_ack_ms
    );
    println!(
        "| **cold start / restore, time to first ack** | **{:.1}×** |",
        fig.cold_first_ack_ms / b.first_ack_ms
    );
    println!(
        "| clones c / d, restored together: CRIU restore | {} ms |",
        each(&|c| c.restore_ms)
    );
    println!(
        "| clones c / d: `crac restore` started → first acknowledged record | {} ms |",
        each(&|c| c.first_ack_ms)
    );
    println!(
        "| image in the registry (`crac push --sign`: zstd layers, ed25519 signature) | {:.0} MB ({:.1}× smaller), pushed in {:.0} ms |",
        fig.registry_mb,
        fig.image_mb / fig.registry_mb,
        fig.push_ms
    );
    println!(
        "| copy e: `crac restore REF` started → first acknowledged record (signature checked, image pulled, restored) | {:.0} ms |",
        e.first_ack_ms
    );
    println!("| records sent (original + 4 copies) | {sent} |");
    println!(
        "| records verified by the Java console consumer | {} |",
        rep.distinct
    );
    println!(
        "| lost / duplicated / out of order within a partition | {} / {} / {} |",
        rep.lost.len(),
        rep.duplicates.len(),
        rep.out_of_order.len()
    );
    println!("| delivery errors after restore | {errors} |");
    println!(
        "| producer ids of the copies | {} |",
        copies
            .iter()
            .map(|c| c.producer_id.as_str())
            .collect::<Vec<_>>()
            .join(" / ")
    );
    println!(
        "| warm state after restore equal to the original's | {} |",
        if same_state { "yes" } else { "NO" }
    );
}

fn write_json(
    path: &str,
    fig: &Figures,
    copies: &[Copy],
    sent: u64,
    rep: &crac_tests::stream::StreamReport,
    errors: u64,
) {
    let copies_json: Vec<String> = copies
        .iter()
        .map(|c| {
            format!(
                "{{\"name\":\"{}\",\"restore_ms\":{},\"first_ack_ms\":{}}}",
                c.name,
                json_num(c.restore_ms),
                json_num(c.first_ack_ms)
            )
        })
        .collect();
    let text = format!(
        "{{\"items\":{},\"state_ms\":{},\"cache_ms\":{},\"image_mb\":{},\"cold_first_ack_ms\":{},\
         \"checkpoint_ms\":{},\"dump_ms\":{},\"copies\":[{}],\"sent\":{sent},\"verified\":{},\
         \"lost\":{},\"duplicated\":{},\"out_of_order\":{},\"errors\":{errors}}}\n",
        fig.items,
        fig.state_ms,
        fig.cache_ms,
        json_num(fig.image_mb),
        json_num(fig.cold_first_ack_ms),
        json_num(fig.checkpoint_ms),
        json_num(fig.dump_ms),
        copies_json.join(","),
        rep.distinct,
        rep.lost.len(),
        rep.duplicates.len(),
        rep.out_of_order.len()
    );
    if let Err(e) = std::fs::write(path, text) {
        eprintln!("demo: DEMO_JSON={path}: {e}");
    }
}
