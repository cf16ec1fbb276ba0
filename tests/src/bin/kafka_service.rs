//! A producing service with warm state, checkpointed with CRIU: the subject of
//! `tests/tests/producer_criu.rs` and of `scripts/demo`.
//!
//! It builds a table (its warm state), then produces a numbered stream to one topic at a fixed
//! rate until told to stop. Each record: key `k<seq % 64>`, value `<instance>:<seq>`, header
//! `gen` = the image generation it was sent in. The sequence counter lives in memory, so a
//! restored copy goes on from where the image was taken; clones tell themselves apart by the
//! instance name the restorer gives them (`crac restore --env SVC_INSTANCE=b`).
//!
//! Checkpoints come from outside (`crac checkpoint PID`, like `jcmd PID JDK.checkpoint`).
//! The producer's own resource (network level) drains and disconnects. With `SVC_QUIESCE=1`
//! the service also registers an application-level resource that parks its sending loop
//! before the producer drains (the org.crac pattern), so no `send()` call is cut in two by the
//! image; with `SVC_QUIESCE=0` the loop keeps calling `send()` straight through the checkpoint
//! and the producer makes it wait.
//!
//! Environment (the restorer may override `SVC_INSTANCE`, `SVC_FINAL`, `SVC_RATE`):
//! - `SVC_BOOTSTRAP`, `SVC_TOPIC`: where to produce (required).
//! - `SVC_INSTANCE` (default `a`), `SVC_STATE_MB` (default 64), `SVC_RATE` records/s (default
//!   500), `SVC_QUIESCE` (default 0), `SVC_REGISTER` (default 1: register the producer's
//!   resource; 0: `crac.register=false`), `SVC_PROPS` extra producer properties
//!   `k=v,k=v`.
//! - `SVC_FINAL=N`: after N more records, flush, close and exit (given at start or by the
//!   restorer).
//!
//! Output, one `key=value` line each: `ready …`, `progress …` every 250 ms, `restored …` after
//! each restore (`next_seq`: with `SVC_QUIESCE=1`, the first number this copy sends), `blocked_send seq=… gen_before=… gen_after=…` when a `send()` waited across a
//! checkpoint, `checkpoint_error …`, `delivery_error …`, and `done …` at the end. Logs of the
//! client (warnings and errors) go to stderr.
//!
//! For `scripts/bench`: `first_ack_of_gen gen=G unix_ns=T` the moment the first record sent in
//! image generation G is acknowledged (G=0: the cold start; G=n: after the n-th restore), to the
//! nanosecond of wall time, where the `first_ack …` lines above are seen by a loop that polls.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crac_api::{Context, Core, Priority, Resource, ResourceError};
use crac_criu as _;
use kafka_client::{Header, Producer, ProducerRecord};
use parking_lot::{Condvar, Mutex};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_owned())
}

/// The restorer's value for `key` if it gave one, else the start-time environment.
fn setting(key: &str, default: &str) -> String {
    Core::management()
        .restore_var(key)
        .map(str::to_owned)
        .unwrap_or_else(|| env_or(key, default))
}

fn parse<T: std::str::FromStr>(key: &str, v: &str) -> T {
    v.parse().unwrap_or_else(|_| {
        eprintln!("kafka_service: {key}={v} is not valid");
        std::process::exit(2)
    })
}

/// Warm state: a table that takes real work to build (as parsing or indexing would).
fn build_state(mb: usize) -> Vec<u64> {
    let n = mb * 1024 * 1024 / 8;
    let mut v = Vec::with_capacity(n);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..n {
        for _ in 0..16 {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
        }
        v.push(x.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    v
}

/// Parks the sending loop for a checkpoint (application level: before the producer drains,
/// after it has reconnected).
#[derive(Default)]
struct Quiesce {
    /// (a checkpoint asks the loop to park, the loop is parked)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
    /// The loop's sequence counter, and its value when the loop parked for the image: the
    /// first number a restored copy sends.
    seq: Arc<AtomicU64>,
    seq_at_image: AtomicU64,
}

impl Resource for Quiesce {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let mut st = self.state.lock();
        st.0 = true;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !st.1 {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                st.0 = false;
                self.cv.notify_all();
                return Err("the sending loop did not park within 30 s".into());
            }
        }
        self.seq_at_image
            .store(self.seq.load(Ordering::SeqCst), Ordering::SeqCst);
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.state.lock().0 = false;
        self.cv.notify_all();
        Ok(())
    }

    fn name(&self) -> String {
        "kafka-service-loop".into()
    }
}

impl Quiesce {
    /// Called by the loop between sends: parks while a checkpoint runs.
    fn checkpoint_gate(&self) {
        let mut st = self.state.lock();
        if !st.0 {
            return;
        }
        st.1 = true;
        self.cv.notify_all();
        while st.0 {
            self.cv.wait(&mut st);
        }
        st.1 = false;
    }
}

struct Stats {
    sent: AtomicU64,
    acked: AtomicU64,
    errors: AtomicU64,
    first_ack_ns: AtomicU64,
    /// 1 + the newest generation whose first acknowledgement was reported (0: none yet).
    first_ack_gen: AtomicU64,
}

fn main() {
    let started = Instant::now();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SVC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();

    let bootstrap = std::env::var("SVC_BOOTSTRAP").unwrap_or_else(|_| {
        eprintln!("kafka_service: set SVC_BOOTSTRAP");
        std::process::exit(2)
    });
    let topic = std::env::var("SVC_TOPIC").unwrap_or_else(|_| {
        eprintln!("kafka_service: set SVC_TOPIC");
        std::process::exit(2)
    });
    let state_mb: usize = parse("SVC_STATE_MB", &env_or("SVC_STATE_MB", "64"));
    let quiesce_on = env_or("SVC_QUIESCE", "0") == "1";

    let t = Instant::now();
    let state = build_state(state_mb);
    let state_ms = t.elapsed().as_millis();

    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), bootstrap.clone()),
        (
            "client.id".into(),
            format!("kafka-service-{}", std::process::id()),
        ),
    ];
    if env_or("SVC_REGISTER", "1") == "0" {
        props.push(("crac.register".into(), "false".into()));
    }
    for kv in env_or("SVC_PROPS", "").split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or_else(|| {
            eprintln!("kafka_service: SVC_PROPS entry `{kv}` is not key=value");
            std::process::exit(2)
        });
        props.push((k.trim().into(), v.trim().into()));
    }
    let producer = match Producer::from_properties(props) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kafka_service: {e}");
            std::process::exit(2)
        }
    };

    let seq = Arc::new(AtomicU64::new(0));
    let quiesce = Arc::new(Quiesce {
        seq: seq.clone(),
        ..Quiesce::default()
    });
    if quiesce_on {
        Core::global_context().register_with_priority(&quiesce, Priority::Application);
    }

    let stats = Arc::new(Stats {
        sent: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_ack_ns: AtomicU64::new(0),
        first_ack_gen: AtomicU64::new(0),
    });
    let stop = AtomicBool::new(false);
    let mut final_target: Option<u64> = std::env::var("SVC_FINAL")
        .ok()
        .map(|v| parse("SVC_FINAL", &v));

    std::thread::scope(|s| {
        // The sending loop.
        s.spawn(|| {
            let mut next = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                quiesce.checkpoint_gate();
                let rate: f64 = parse("SVC_RATE", &setting("SVC_RATE", "500"));
                let instance = setting("SVC_INSTANCE", "a");
                let n = seq.fetch_add(1, Ordering::SeqCst);
                let key = format!("k{}", n % 64);
                let value = format!("{instance}:{n}");
                let gen_before = Core::management().generation();
                let gen_header = gen_before.to_string();
                let headers = [Header::new("gen", gen_header.as_bytes())];
                let t = Instant::now();
                let st = stats.clone();
                let what = value.clone();
                let r = producer.send_with_callback(
                    ProducerRecord::new(&topic)
                        .key(key.as_bytes())
                        .value(value.as_bytes())
                        .headers(&headers),
                    move |res| match res {
                        Ok(_) => {
                            if st.acked.fetch_add(1, Ordering::SeqCst) == 0 {
                                st.first_ack_ns
                                    .store(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
                            }
                            if st.first_ack_gen.fetch_max(gen_before + 1, Ordering::SeqCst)
                                <= gen_before
                            {
                                let unix_ns = std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .unwrap_or_default()
                                    .as_nanos();
                                say(&format!("first_ack_of_gen gen={gen_before} unix_ns={unix_ns}"));
                            }
                        }
                        Err(e) => {
                            st.errors.fetch_add(1, Ordering::SeqCst);
                            say(&format!("delivery_error value={what} error={e}"));
                        }
                    },
                );
                let gen_after = Core::management().generation();
                match r {
                    Ok(()) => {
                        stats.sent.fetch_add(1, Ordering::SeqCst);
                        if gen_after != gen_before {
                            say(&format!(
                                "blocked_send seq={n} gen_before={gen_before} gen_after={gen_after} waited_ms={}",
                                t.elapsed().as_millis()
                            ));
                        }
                    }
                    Err(e) => {
                        stats.errors.fetch_add(1, Ordering::SeqCst);
                        say(&format!("send_error seq={n} error={e}"));
                    }
                }
                next += Duration::from_secs_f64(1.0 / rate.max(1.0));
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else if now - next > Duration::from_secs(1) {
                    next = now; // after a pause, do not burst to catch up
                }
            }
        });

        say(&format!(
            "ready pid={} state_mb={state_mb} state_ms={state_ms} state_sum={:x}",
            std::process::id(),
            state.iter().fold(0u64, |a, &b| a ^ b)
        ));
        let mut reported_first_ack = false;
        let mut restores_seen = 0;
        let mut restored_at = Instant::now();
        let mut acked_at_restore = 0;
        let mut first_ack_after_restore = false;
        let mut phase_start_sent = 0;
        loop {
            std::thread::sleep(Duration::from_millis(25));
            let m = Core::management();
            let acked = stats.acked.load(Ordering::SeqCst);
            if !reported_first_ack && acked > 0 {
                reported_first_ack = true;
                say(&format!(
                    "first_ack ms_since_start={}",
                    stats.first_ack_ns.load(Ordering::SeqCst) / 1_000_000
                ));
            }
            if m.restore_count() != restores_seen {
                restores_seen = m.restore_count();
                restored_at = Instant::now();
                acked_at_restore = acked;
                first_ack_after_restore = false;
                phase_start_sent = stats.sent.load(Ordering::SeqCst);
                if let Some(v) = m.restore_var("SVC_FINAL") {
                    final_target = Some(parse("SVC_FINAL", v));
                }
                let next_seq = if quiesce_on {
                    quiesce.seq_at_image.load(Ordering::SeqCst)
                } else {
                    seq.load(Ordering::SeqCst)
                };
                say(&format!(
                    "restored pid={} gen={} frozen_ms={} producer_id={} instance={} next_seq={next_seq} state_sum={:x}",
                    std::process::id(),
                    m.generation(),
                    m.frozen_duration().unwrap_or_default().as_millis(),
                    producer.metrics().producer_id,
                    setting("SVC_INSTANCE", "a"),
                    state.iter().fold(0u64, |a, &b| a ^ b)
                ));
            }
            if restores_seen > 0 && !first_ack_after_restore && acked > acked_at_restore {
                first_ack_after_restore = true;
                say(&format!(
                    "first_ack_after_restore ms={} producer_id={}",
                    restored_at.elapsed().as_millis(),
                    producer.metrics().producer_id
                ));
            }
            let pm = producer.metrics();
            say(&format!(
                "progress sent={} acked={} errors={} gen={} producer_id={} queued={}",
                stats.sent.load(Ordering::SeqCst),
                acked,
                stats.errors.load(Ordering::SeqCst),
                m.generation(),
                pm.producer_id,
                pm.records_queued
            ));
            if let Some(n) = final_target
                && stats.sent.load(Ordering::SeqCst) >= phase_start_sent + n
            {
                break;
            }
            // Pace the progress lines: one every ~250 ms.
            std::thread::sleep(Duration::from_millis(225));
        }
        stop.store(true, Ordering::SeqCst);
    });

    let closed = producer.close(Duration::from_secs(60));
    say(&format!(
        "done sent={} acked={} errors={} last_seq={} close={}",
        stats.sent.load(Ordering::SeqCst),
        stats.acked.load(Ordering::SeqCst),
        stats.errors.load(Ordering::SeqCst),
        seq.load(Ordering::SeqCst),
        if closed.is_ok() { "ok" } else { "timeout" }
    ));
    let ok = closed.is_ok() && stats.errors.load(Ordering::SeqCst) == 0;
    std::process::exit(if ok { 0 } else { 1 });
}
