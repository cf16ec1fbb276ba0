//! An async service on tokio, checkpointed with CRIU while it serves and produces: the subject
//! of `tests/tests/async_service.rs`.
//!
//! It serves HTTP (hyper, HTTP/1.1, `GET /` answers `instance=I sent=N consumed=M`), produces
//! a numbered stream with `send_async` (value `<instance>:<seq>`, key `k<seq % 64>`, as
//! `kafka_service` does, so `crac_tests::stream` checks it), and reads another topic with
//! `Consumer::stream()`. Its HTTP listener is an [`AsyncResource`]: closed before the image
//! (the connections it served are done: every answer closes its connection) and bound again
//! after a restore, on the port the restorer gives (`--env SVC_HTTP_PORT=…`), so copies of one
//! image serve side by side.
//!
//! Environment: `SVC_BOOTSTRAP`, `SVC_TOPIC` (produced), `SVC_IN_TOPIC` (consumed, partitions
//! `SVC_IN_PARTITIONS`, default 1, assigned from the beginning), `SVC_HTTP_PORT`,
//! `SVC_INSTANCE` (default `a`; the restorer gives each copy its own), `SVC_RATE` records/s
//! (default 200), `SVC_FINAL=N` (the restorer's: after N more records, flush, close, exit,
//! once the consumer read `SVC_CONSUME_AT_LEAST` records, default 0).
//!
//! Output, one `key=value` line each: `ready pid=… port=…`, `serving port=…` after each
//! (re)bind, `progress acked=… consumed=…` every 250 ms, `restored pid=… gen=… instance=…
//! next_seq=…`, `done last_seq=… errors=…`.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crac_api::{AsyncResource, BoxFuture, Core, Priority, ResourceError, Spawner};
use crac_criu as _;
use kafka_client::{Consumer, ProduceError, Producer, ProducerRecord, TopicPartition};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::Notify;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn env(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_owned())
}

/// A setting the restorer may override (`crac restore --env`).
fn setting(key: &str, default: &str) -> String {
    Core::management()
        .restore_var(key)
        .map(str::to_owned)
        .unwrap_or_else(|| env(key, default))
}

#[derive(Default)]
struct Counters {
    acked: AtomicU64,
    consumed: AtomicU64,
    errors: AtomicU64,
    /// The generation whose `after_restore` hooks have all run (the restorer's settings are
    /// in; the listener's hook runs last, at the application level).
    ready_gen: AtomicU64,
}

/// The HTTP listener as a checkpoint resource: stopped before, bound again after.
struct Http {
    counters: Arc<Counters>,
    seq: Arc<AtomicU64>,
    /// Tells the accept loop to stop; it answers on `stopped`.
    stop: Notify,
    stopped: Notify,
    running: Mutex<bool>,
}

impl Http {
    async fn serve(self: Arc<Self>, port: u16) {
        let listener = match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await {
            Ok(l) => l,
            Err(e) => {
                say(&format!("http_error bind port={port}: {e}"));
                return;
            }
        };
        *self.running.lock() = true;
        say(&format!("serving port={port}"));
        loop {
            tokio::select! {
                _ = self.stop.notified() => break,
                accepted = listener.accept() => {
                    if let Ok((stream, _)) = accepted {
                        tokio::spawn(self.clone().answer(stream));
                    }
                }
            }
        }
        drop(listener);
        *self.running.lock() = false;
        self.stopped.notify_one();
    }

    async fn answer(self: Arc<Self>, stream: tokio::net::TcpStream) {
        let io = hyper_util::rt::TokioIo::new(stream);
        let me = self.clone();
        let svc = hyper::service::service_fn(move |_req| {
            let body = format!(
                "instance={} sent={} consumed={}\n",
                setting("SVC_INSTANCE", "a"),
                me.seq.load(Ordering::SeqCst),
                me.counters.consumed.load(Ordering::SeqCst)
            );
            async move {
                let mut resp =
                    hyper::Response::new(http_body_util::Full::new(hyper::body::Bytes::from(body)));
                resp.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(false)
            .serve_connection(io, svc)
            .await;
    }
}

impl AsyncResource for Http {
    fn before_checkpoint(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>> {
        Box::pin(async move {
            if *self.running.lock() {
                let stopped = self.stopped.notified();
                self.stop.notify_one();
                stopped.await;
            }
            Ok(())
        })
    }

    fn after_restore(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>> {
        Box::pin(async move {
            let port: u16 = setting("SVC_HTTP_PORT", "0").parse().unwrap_or(0);
            tokio::spawn(self.clone().serve(port));
            self.counters
                .ready_gen
                .store(Core::management().generation(), Ordering::SeqCst);
            Ok(())
        })
    }

    fn name(&self) -> String {
        "http-listener".into()
    }
}

/// Produces `<instance>:<seq>` at `SVC_RATE`; a send caught waiting by the image fails in a
/// restored copy (`RestoredWhileWaiting`) and the copy sends that number again.
async fn produce(
    p: Arc<Producer>,
    seq: Arc<AtomicU64>,
    counters: Arc<Counters>,
    done: Arc<Notify>,
) {
    let topic = env("SVC_TOPIC", "");
    let rate: u64 = env("SVC_RATE", "200").parse().unwrap_or(200);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut last_gen = Core::management().generation();
    let mut final_at: Option<u64> = None;
    loop {
        tick.tick().await;
        let generation = Core::management().generation();
        if generation != counters.ready_gen.load(Ordering::SeqCst) {
            // Restored, the hooks not all run yet: the restorer's settings (instance name,
            // SVC_FINAL) may not be read yet.
            continue;
        }
        if generation != last_gen {
            last_gen = generation;
            if let Some(n) = Core::management().restore_var("SVC_FINAL") {
                final_at = n
                    .parse::<u64>()
                    .ok()
                    .map(|n| seq.load(Ordering::SeqCst) + n);
            }
        }
        let n = seq.load(Ordering::SeqCst);
        if final_at.is_some_and(|f| n >= f) {
            break;
        }
        let value = format!("{}:{n}", setting("SVC_INSTANCE", "a"));
        let key = format!("k{}", n % 64);
        let rec = ProducerRecord::new(&topic)
            .key(key.as_bytes())
            .value(value.as_bytes());
        match p.send_async(rec).accepted().await {
            Ok(report) => {
                seq.store(n + 1, Ordering::SeqCst);
                let c = counters.clone();
                tokio::spawn(async move {
                    match report.await {
                        Ok(_) => c.acked.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            say(&format!("delivery_error seq={n}: {e}"));
                            c.errors.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                });
            }
            Err(ProduceError::RestoredWhileWaiting { .. }) => {
                say(&format!("restored_while_waiting seq={n}"));
            }
            Err(e) => {
                say(&format!("send_error seq={n}: {e}"));
                counters.errors.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    p.flush_async().await;
    done.notify_one();
}

/// Reads `SVC_IN_TOPIC` with the consumer's stream, counting.
async fn consume(consumer: Consumer, counters: Arc<Counters>) {
    use futures_core::Stream;
    let mut s = consumer.stream();
    loop {
        match std::future::poll_fn(|cx| std::pin::Pin::new(&mut s).poll_next(cx)).await {
            Some(Ok(_)) => {
                counters.consumed.fetch_add(1, Ordering::SeqCst);
            }
            Some(Err(e)) => say(&format!("consume_error {e}")),
            None => return,
        }
    }
}

fn main() {
    crac_tests::service_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

async fn run() {
    let bootstrap = env("SVC_BOOTSTRAP", "");
    let producer = Arc::new(
        Producer::from_properties([("bootstrap.servers", bootstrap.as_str()), ("acks", "all")])
            .expect("producer config"),
    );
    let consumer = Consumer::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "100"),
    ])
    .expect("consumer config");
    let in_topic = env("SVC_IN_TOPIC", "");
    let parts: i32 = env("SVC_IN_PARTITIONS", "1").parse().unwrap_or(1);
    let tps: Vec<TopicPartition> = (0..parts)
        .map(|p| TopicPartition::new(in_topic.as_str(), p))
        .collect();
    consumer.assign(&tps).expect("assign");

    let counters = Arc::new(Counters::default());
    let seq = Arc::new(AtomicU64::new(0));
    let http = Arc::new(Http {
        counters: counters.clone(),
        seq: seq.clone(),
        stop: Notify::new(),
        stopped: Notify::new(),
        running: Mutex::new(false),
    });
    let handle = tokio::runtime::Handle::current();
    let spawner = Spawner::new(move |f| {
        handle.spawn(f);
    });
    Core::global_context().register_async(&http, Priority::Application, &spawner);
    let port: u16 = env("SVC_HTTP_PORT", "0").parse().unwrap_or(0);
    tokio::spawn(http.clone().serve(port));
    tokio::spawn(consume(consumer, counters.clone()));
    let done = Arc::new(Notify::new());
    tokio::spawn(produce(
        producer.clone(),
        seq.clone(),
        counters.clone(),
        done.clone(),
    ));
    say(&format!("ready pid={} port={port}", std::process::id()));

    let mut last_gen = 0;
    let finished = done.notified();
    tokio::pin!(finished);
    let mut produced_all = false;
    loop {
        tokio::select! {
            _ = &mut finished, if !produced_all => produced_all = true,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        // Done once the records are out and the consumer read what the restorer said it
        // would find (`--env SVC_CONSUME_AT_LEAST=N`).
        let want: u64 = setting("SVC_CONSUME_AT_LEAST", "0").parse().unwrap_or(0);
        if produced_all && counters.consumed.load(Ordering::SeqCst) >= want {
            break;
        }
        let generation = Core::management().generation();
        if generation != last_gen {
            last_gen = generation;
            say(&format!(
                "restored pid={} gen={generation} instance={} next_seq={}",
                std::process::id(),
                setting("SVC_INSTANCE", "a"),
                seq.load(Ordering::SeqCst)
            ));
        }
        say(&format!(
            "progress acked={} consumed={} sent={}",
            counters.acked.load(Ordering::SeqCst),
            counters.consumed.load(Ordering::SeqCst),
            seq.load(Ordering::SeqCst)
        ));
    }
    let _ = producer.close_async(Duration::from_secs(30)).await;
    say(&format!(
        "done last_seq={} errors={} consumed={}",
        seq.load(Ordering::SeqCst),
        counters.errors.load(Ordering::SeqCst),
        counters.consumed.load(Ordering::SeqCst)
    ));
    std::process::exit(0);
}
