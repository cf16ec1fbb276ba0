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
//! - `SVC_WARM`: the warm state (`src/warm.rs`): `catalog:ITEMS` (a catalog parsed and
//!   indexed) or `fill:MB` (a filled table); default `fill:SVC_STATE_MB` (default 64).
//! - `SVC_CACHE_TOPIC=TOPIC:PARTITIONS`: also read that whole topic at start into a cache (key
//!   -> value), as a service warms a cache from the cluster; each record sent carries the
//!   cached value of its key, if any, in a `cached` header.
//! - `SVC_INSTANCE` (default `a`), `SVC_RATE` records/s (default 500), `SVC_QUIESCE` (default
//!   0), `SVC_REGISTER` (default 1: register the producer's resource; 0:
//!   `crac.register=false`), `SVC_PROPS` extra producer properties `k=v,k=v`, `SVC_KEYLESS=1`
//!   records without a key.
//! - `SVC_CONSUME=PARTITIONS`: also read `SVC_TOPIC` back on a thread of its own, with a
//!   consumer assigned to each of its PARTITIONS from their end (no group), configured by
//!   `SVC_CONSUME_PROPS` (`k=v,k=v`, e.g. another listener and its TLS settings; default the
//!   producer's bootstrap servers). Lines gain `consumed=` and `consume_errors=`; a restored
//!   copy finishes only once it read a record of its own generation's time.
//! - `SVC_FINAL=N`: after N more records, flush, close and exit (given at start or by the
//!   restorer). `SVC_FINAL_FILE=PATH`: the same, with N read from that file once a test
//!   writes it (a test that must first bring a broker back says when to finish).
//!
//! Output, one `key=value` line each: `ready …` (with `state_ms`, the time the warm state
//! took, `cache_ms` and `cache_records`, and `state_sum`, its digest), `progress …` every 250 ms, `restored …` (with `host`, the host name it sees) after
//! each restore (`next_seq`: with `SVC_QUIESCE=1`, the first number this copy sends),
//! `state_checked gen=G state_sum=…` once a restored copy's first record is acknowledged and
//! a lazy restore's pages are all in (the digest of its state, which reads every page), `blocked_send seq=… gen_before=… gen_after=…` when a `send()` waited across a
//! checkpoint (in the original), `restored_while_waiting seq=…` when, in a restored copy, a
//! `send()` the image caught waiting failed as not sent (the copy sends that number again as
//! its own instance's), `checkpoint_error …`, `delivery_error …`, and `done …` at the end. Logs of the
//! client (warnings and errors) go to stderr.
//!
//! For `scripts/bench`: `first_ack_of_gen gen=G unix_ns=T` the moment the first record sent in
//! image generation G is acknowledged (G=0: the cold start; G=n: after the n-th restore), to the
//! nanosecond of wall time, where the `first_ack …` lines above are seen by a loop that polls.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use crac_api::{Context, Core, Priority, Resource, ResourceError};

/// What the program frees is zeroed (the TLS library's parsed client key among it), so it is
/// not in the image: the opt-in a service with secrets makes.
#[global_allocator]
static ALLOC: crac_api::WipeOnFree = crac_api::WipeOnFree(std::alloc::System);
use crac_tests::warm::WarmState;
use kafka_client::{Consumer, Header, ProduceError, Producer, ProducerRecord, TopicPartition};
use parking_lot::{Condvar, Mutex};

/// `SVC_KEYLESS=1`: records without a key (the sticky partitioner places them).
static KEYLESS: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| env_or("SVC_KEYLESS", "0") == "1");

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
    v.parse()
        .unwrap_or_else(|_| fail(&format!("{key}={v} is not valid")))
}

/// `SVC_FINAL_FILE`'s count, once the file is there and complete (written then renamed).
fn final_from_file() -> Option<u64> {
    let path = std::env::var_os("SVC_FINAL_FILE")?;
    let text = std::fs::read_to_string(path).ok()?;
    Some(parse("SVC_FINAL_FILE", text.trim()))
}

fn fail(msg: &str) -> ! {
    eprintln!("kafka_service: {msg}");
    std::process::exit(2)
}

fn required(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| fail(&format!("set {key}")))
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
    consumed: AtomicU64,
    consume_errors: AtomicU64,
    acked: AtomicU64,
    errors: AtomicU64,
    first_ack_ns: AtomicU64,
    /// 1 + the newest generation whose first acknowledgement was reported (0: none yet).
    first_ack_gen: AtomicU64,
}

/// A cache filled from the cluster: every record of `topic` (its `partitions`), last value
/// per key, read with the consumer from the first offset to the end offsets found at start.
fn fill_cache(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<HashMap<Vec<u8>, Vec<u8>>, String> {
    let consumer = Consumer::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "kafka-service-cache"),
        ("crac.register", "false"),
    ])
    .map_err(|e| e.to_string())?;
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let err = |e: kafka_client::ConsumerError| format!("cache from {topic}: {e}");
    consumer.assign(&tps).map_err(err)?;
    consumer.seek_to_end(&tps).map_err(err)?;
    let ends = tps
        .iter()
        .map(|tp| consumer.position(tp))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(err)?;
    consumer.seek_to_beginning(&tps).map_err(err)?;
    let mut cache = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = tps
            .iter()
            .zip(&ends)
            .map(|(tp, &end)| consumer.position(tp).map(|p| p >= end))
            .collect::<Result<Vec<bool>, _>>()
            .map_err(err)?;
        if done.iter().all(|d| *d) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "cache from {topic}: not read to its end within 120 s"
            ));
        }
        for r in &consumer.poll(Duration::from_millis(200)).map_err(err)? {
            if let (Some(k), Some(v)) = (&r.key, &r.value) {
                cache.insert(k.to_vec(), v.to_vec());
            }
        }
    }
    consumer.close(Duration::from_secs(10)).map_err(err)?;
    Ok(cache)
}

/// A consumer reading every partition of `topic` from its end (`SVC_CONSUME`).
fn reader(topic: &str, partitions: i32, props: &[(String, String)]) -> Consumer {
    let consumer = Consumer::from_properties(props.to_vec())
        .unwrap_or_else(|e| fail(&format!("SVC_CONSUME_PROPS: {e}")));
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let started = consumer
        .assign(&tps)
        .and_then(|()| consumer.seek_to_end(&tps));
    if let Err(e) = started {
        fail(&format!("SVC_CONSUME: reading {topic}: {e}"));
    }
    consumer
}

/// The start-time settings.
struct Settings {
    bootstrap: String,
    topic: String,
    warm: String,
    cache: Option<(String, i32)>,
    quiesce: bool,
    props: Vec<(String, String)>,
    /// `SVC_CONSUME`: the topic's partition count, and the consumer's properties.
    consume: Option<(i32, Vec<(String, String)>)>,
    final_target: Option<u64>,
}

/// `k=v,k=v` as pairs (`key` names the variable in errors).
fn pairs(key: &str, list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| fail(&format!("{key} entry `{kv}` is not key=value")));
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect()
}

fn settings() -> Settings {
    let bootstrap = required("SVC_BOOTSTRAP");
    let warm = std::env::var("SVC_WARM")
        .unwrap_or_else(|_| format!("fill:{}", env_or("SVC_STATE_MB", "64")));
    let cache = std::env::var("SVC_CACHE_TOPIC").ok().map(|v| {
        let (t, n) = v
            .rsplit_once(':')
            .unwrap_or_else(|| fail(&format!("SVC_CACHE_TOPIC={v}: expected TOPIC:PARTITIONS")));
        (t.to_owned(), parse::<i32>("SVC_CACHE_TOPIC partitions", n))
    });
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
    props.extend(pairs("SVC_PROPS", &env_or("SVC_PROPS", "")));
    let consume = std::env::var("SVC_CONSUME").ok().map(|n| {
        let mut c = vec![
            ("bootstrap.servers".to_owned(), bootstrap.clone()),
            (
                "client.id".to_owned(),
                format!("kafka-service-reader-{}", std::process::id()),
            ),
        ];
        for (k, v) in pairs("SVC_CONSUME_PROPS", &env_or("SVC_CONSUME_PROPS", "")) {
            c.retain(|(key, _)| *key != k);
            c.push((k, v));
        }
        (parse::<i32>("SVC_CONSUME", &n), c)
    });
    Settings {
        bootstrap,
        topic: required("SVC_TOPIC"),
        warm,
        cache,
        quiesce: env_or("SVC_QUIESCE", "0") == "1",
        props,
        consume,
        final_target: std::env::var("SVC_FINAL")
            .ok()
            .map(|v| parse("SVC_FINAL", &v)),
    }
}

/// What the sending loop and the monitor share.
struct Service {
    started: Instant,
    topic: String,
    producer: Producer,
    consumer: Option<Consumer>,
    warm: WarmState,
    cache: HashMap<Vec<u8>, Vec<u8>>,
    quiesce: Arc<Quiesce>,
    seq: Arc<AtomicU64>,
    stats: Arc<Stats>,
    stop: AtomicBool,
}

impl Service {
    /// Sends record `n`; its delivery callback counts it and reports the first ack of each
    /// image generation.
    fn send(&self, n: u64) {
        let instance = setting("SVC_INSTANCE", "a");
        let key = format!("k{}", n % 64);
        let value = format!("{instance}:{n}");
        let gen_before = Core::management().generation();
        let gen_header = gen_before.to_string();
        let answer = self.warm.answer(n);
        let cached = self.cache.get(key.as_bytes()).map(Vec::as_slice);
        let mut headers = vec![
            Header::new("gen", gen_header.as_bytes()),
            Header::new("answer", answer.as_bytes()),
        ];
        if let Some(c) = cached {
            headers.push(Header::new("cached", c));
        }
        let t = Instant::now();
        let st = self.stats.clone();
        let started = self.started;
        let what = value.clone();
        let mut record = ProducerRecord::new(&self.topic)
            .value(value.as_bytes())
            .headers(&headers);
        if !*KEYLESS {
            record = record.key(key.as_bytes());
        }
        let r = self
            .producer
            .send_with_callback(record, move |res| match res {
                Ok(_) => {
                    if st.acked.fetch_add(1, Ordering::SeqCst) == 0 {
                        st.first_ack_ns
                            .store(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
                    }
                    if st.first_ack_gen.fetch_max(gen_before + 1, Ordering::SeqCst) <= gen_before {
                        let unix_ns = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_nanos();
                        say(&format!(
                            "first_ack_of_gen gen={gen_before} unix_ns={unix_ns}"
                        ));
                    }
                }
                Err(e) => {
                    st.errors.fetch_add(1, Ordering::SeqCst);
                    say(&format!("delivery_error value={what} error={e}"));
                }
            });
        let gen_after = Core::management().generation();
        match r {
            Ok(()) => {
                self.stats.sent.fetch_add(1, Ordering::SeqCst);
                if gen_after != gen_before {
                    say(&format!(
                        "blocked_send seq={n} gen_before={gen_before} gen_after={gen_after} waited_ms={}",
                        t.elapsed().as_millis()
                    ));
                }
            }
            Err(ProduceError::RestoredWhileWaiting { waited }) => {
                // This copy's send() was waiting when the image was taken: the record was not
                // sent, here or in any other copy. Its value names this copy's instance, so it
                // is meant once per copy: send it again, as this copy's.
                say(&format!(
                    "restored_while_waiting seq={n} waited_ms={} instance={}",
                    waited.as_millis(),
                    setting("SVC_INSTANCE", "a")
                ));
                self.send(n);
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::SeqCst);
                say(&format!("send_error seq={n} error={e}"));
            }
        }
    }

    /// Sends at `SVC_RATE` until told to stop, parking for checkpoints when quiesced.
    fn sending_loop(&self) {
        let mut next = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            self.quiesce.checkpoint_gate();
            let rate: f64 = parse("SVC_RATE", &setting("SVC_RATE", "500"));
            self.send(self.seq.fetch_add(1, Ordering::SeqCst));
            next += Duration::from_secs_f64(1.0 / rate.max(1.0));
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else if now - next > Duration::from_secs(1) {
                next = now; // after a pause, do not burst to catch up
            }
        }
    }

    /// Reads the topic back until told to stop (`SVC_CONSUME`), counting what it reads.
    fn reading_loop(&self, consumer: &Consumer) {
        while !self.stop.load(Ordering::SeqCst) {
            match consumer.poll(Duration::from_millis(200)) {
                Ok(records) => {
                    self.stats
                        .consumed
                        .fetch_add(records.len() as u64, Ordering::SeqCst);
                }
                Err(e) => {
                    self.stats.consume_errors.fetch_add(1, Ordering::SeqCst);
                    say(&format!("consume_error error={e}"));
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Prints progress and what happened at each restore, until `final_target` more records
    /// have been sent in the current phase.
    fn monitor(&self, quiesce_on: bool, mut final_target: Option<u64>) {
        let mut reported_first_ack = false;
        let mut restores_seen = 0;
        let mut restored_at = Instant::now();
        let mut acked_at_restore = 0;
        let mut first_ack_after_restore = false;
        let mut consumed_at_restore = 0;
        let mut phase_start_sent = 0;
        loop {
            std::thread::sleep(Duration::from_millis(25));
            let m = Core::management();
            let acked = self.stats.acked.load(Ordering::SeqCst);
            if !reported_first_ack && acked > 0 {
                reported_first_ack = true;
                say(&format!(
                    "first_ack ms_since_start={}",
                    self.stats.first_ack_ns.load(Ordering::SeqCst) / 1_000_000
                ));
            }
            if m.restore_count() != restores_seen {
                restores_seen = m.restore_count();
                restored_at = Instant::now();
                acked_at_restore = acked;
                consumed_at_restore = self.stats.consumed.load(Ordering::SeqCst);
                first_ack_after_restore = false;
                phase_start_sent = self.stats.sent.load(Ordering::SeqCst);
                if let Some(v) = m.restore_var("SVC_FINAL") {
                    final_target = Some(parse("SVC_FINAL", v));
                }
                let next_seq = if quiesce_on {
                    self.quiesce.seq_at_image.load(Ordering::SeqCst)
                } else {
                    self.seq.load(Ordering::SeqCst)
                };
                say(&format!(
                    "restored pid={} gen={} frozen_ms={} producer_id={} instance={} next_seq={next_seq} cache_records={} consumed={consumed_at_restore} host={}",
                    std::process::id(),
                    m.generation(),
                    m.frozen_duration().unwrap_or_default().as_millis(),
                    self.producer.metrics().producer_id,
                    setting("SVC_INSTANCE", "a"),
                    self.cache.len(),
                    hostname()
                ));
            }
            if restores_seen > 0 && !first_ack_after_restore && acked > acked_at_restore {
                first_ack_after_restore = true;
                say(&format!(
                    "first_ack_after_restore ms={} producer_id={}",
                    restored_at.elapsed().as_millis(),
                    self.producer.metrics().producer_id
                ));
                // The digest reads every page of the state: taken once the first record is
                // acknowledged and a lazy restore's background load is over (a sweep before
                // would compete with the page daemon and the producer, and read its pages
                // on demand instead of checking what the load brought in).
                let t = Instant::now();
                if let Err(e) = crac_criu::wait_own_memory_in(Duration::from_secs(300)) {
                    fail(&format!("state check after the restore: {e}"));
                }
                let waited_ms = t.elapsed().as_millis();
                let sum = self.warm.digest();
                say(&format!(
                    "state_checked gen={} state_sum={sum:x} load_wait_ms={waited_ms} digest_ms={} ms_after_restore={}",
                    m.generation(),
                    t.elapsed().as_millis() - waited_ms,
                    restored_at.elapsed().as_millis()
                ));
            }
            let pm = self.producer.metrics();
            let consumed = self.stats.consumed.load(Ordering::SeqCst);
            say(&format!(
                "progress sent={} acked={} errors={} gen={} producer_id={} queued={} consumed={consumed} consume_errors={}",
                self.stats.sent.load(Ordering::SeqCst),
                acked,
                self.stats.errors.load(Ordering::SeqCst),
                m.generation(),
                pm.producer_id,
                pm.records_queued,
                self.stats.consume_errors.load(Ordering::SeqCst)
            ));
            if final_target.is_none()
                && let Some(n) = final_from_file()
            {
                final_target = Some(n);
                phase_start_sent = self.stats.sent.load(Ordering::SeqCst);
            }
            // A restored copy finishes only once it reported its first acknowledged record
            // (sends catching up on the frozen time can reach the target before any ack) and,
            // when it reads, once it read a record.
            let read_since = self.consumer.is_none() || consumed > consumed_at_restore;
            if let Some(n) = final_target
                && self.stats.sent.load(Ordering::SeqCst) >= phase_start_sent + n
                && (restores_seen == 0 || (first_ack_after_restore && read_since))
            {
                return;
            }
            // Pace the progress lines: one every ~250 ms.
            std::thread::sleep(Duration::from_millis(225));
        }
    }
}

fn main() {
    let started = Instant::now();
    crac_tests::service_logging();
    let cfg = settings();

    let t = Instant::now();
    let warm = WarmState::build(&cfg.warm).unwrap_or_else(|e| fail(&e));
    let state_ms = t.elapsed().as_millis();
    let t = Instant::now();
    let cache = match &cfg.cache {
        Some((topic, n)) => fill_cache(&cfg.bootstrap, topic, *n).unwrap_or_else(|e| fail(&e)),
        None => HashMap::new(),
    };
    let cache_ms = t.elapsed().as_millis();

    let producer =
        Producer::from_properties(cfg.props.clone()).unwrap_or_else(|e| fail(&e.to_string()));
    let consumer = cfg
        .consume
        .as_ref()
        .map(|(n, props)| reader(&cfg.topic, *n, props));
    let seq = Arc::new(AtomicU64::new(0));
    let quiesce = Arc::new(Quiesce {
        seq: seq.clone(),
        ..Quiesce::default()
    });
    if cfg.quiesce {
        Core::global_context().register_with_priority(&quiesce, Priority::Application);
    }
    let svc = Service {
        started,
        topic: cfg.topic.clone(),
        producer,
        consumer,
        warm,
        cache,
        quiesce,
        seq,
        stats: Arc::new(Stats {
            sent: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            consume_errors: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_ack_ns: AtomicU64::new(0),
            first_ack_gen: AtomicU64::new(0),
        }),
        stop: AtomicBool::new(false),
    };

    std::thread::scope(|s| {
        say(&format!(
            "ready pid={} warm={} state_ms={state_ms} cache_ms={cache_ms} cache_records={} state_sum={:x}",
            std::process::id(),
            cfg.warm,
            svc.cache.len(),
            svc.warm.digest(),
        ));
        s.spawn(|| svc.sending_loop());
        if let Some(c) = &svc.consumer {
            s.spawn(|| svc.reading_loop(c));
        }
        svc.monitor(cfg.quiesce, cfg.final_target);
        svc.stop.store(true, Ordering::SeqCst);
    });

    let closed = svc.producer.close(Duration::from_secs(60));
    let reader_closed = match &svc.consumer {
        Some(c) => c.close(Duration::from_secs(30)).is_ok(),
        None => true,
    };
    let st = &svc.stats;
    say(&format!(
        "done sent={} acked={} errors={} last_seq={} close={} consumed={} consume_errors={}",
        st.sent.load(Ordering::SeqCst),
        st.acked.load(Ordering::SeqCst),
        st.errors.load(Ordering::SeqCst),
        svc.seq.load(Ordering::SeqCst),
        if closed.is_ok() && reader_closed {
            "ok"
        } else {
            "timeout"
        },
        st.consumed.load(Ordering::SeqCst),
        st.consume_errors.load(Ordering::SeqCst)
    ));
    let ok = closed.is_ok() && reader_closed && st.errors.load(Ordering::SeqCst) == 0;
    std::process::exit(if ok { 0 } else { 1 });
}

/// The host name this process sees now (another one after a restore on another host).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}
