//! librdkafka (through the `rdkafka` crate) under `scripts/bench`: the same command line,
//! payload, pacing and output as this project's `bench_producer` (the shared code is
//! `tests/src/bin/bench_producer/common.rs`), so only the client differs.
//!
//! librdkafka is used the way its own `rdkafka_performance` tool uses it: a `BaseProducer`,
//! `poll(0)` after every `produce()`, `poll(10 ms)` while its queue is full, and the waits of
//! the fixed-rate mode spent in `poll()` so that delivery callbacks run on time. The latency of
//! a record is from `send()` to its delivery callback; the send time travels as the record's
//! opaque value (no allocation per record).
//!
//! `-X` properties go to librdkafka as they are: `scripts/bench` passes the Java names that
//! librdkafka also knows (`acks`, `batch.size`, `linger.ms`, `enable.idempotence`, …).
//!
//! With `--transaction-records T` (and `-X transactional.id=…`) every `T` records are one
//! transaction: `begin_transaction()`, the sends, `commit_transaction()` (which flushes them,
//! serving their delivery callbacks, then commits).
//!
//! With `--async` it is rust-rdkafka's async producer instead, a `FutureProducer` pipelined on a
//! tokio current-thread runtime (see `asynchronous.rs`).
//!
//! `rdkafka-bench consume …` is the consumer instead (see `consumer.rs`; `consume --async`: a
//! `StreamConsumer`).

mod asynchronous;
#[path = "../../../src/bin/bench_producer/common.rs"]
mod common;
mod consumer;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Args, Commits, Histogram, Pacer};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::util::get_rdkafka_version;

const WARMUP: usize = usize::MAX;
/// The bound of each transactional call (Java's default max.block.ms is a minute too).
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

struct Context {
    start: Instant,
    latency: Histogram,
    failed: AtomicU64,
}

impl ClientContext for Context {}

impl ProducerContext for Context {
    /// Nanoseconds from `start` to the `send()` of the record; `WARMUP` for a record whose
    /// latency is not recorded.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_ns: usize) {
        if sent_ns != WARMUP {
            let now = self.start.elapsed().as_nanos() as u64;
            self.latency
                .record(Duration::from_nanos(now.saturating_sub(sent_ns as u64)));
        }
        if let Err((e, _)) = result
            && self.failed.fetch_add(1, Ordering::Relaxed) == 0
        {
            eprintln!("rdkafka-bench: delivery failed: {e}");
        }
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("consume") {
        return consumer::main(std::env::args().skip(2));
    }
    let args = Args::parse("rdkafka-bench");
    let (_, version) = get_rdkafka_version();
    eprintln!("rdkafka-bench: librdkafka {version}");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &args.bootstrap);
    for (k, v) in &args.props {
        config.set(k, v);
    }
    if args.async_api {
        return asynchronous::main(&args, &config);
    }
    let start = Instant::now();
    let producer: BaseProducer<Context> = match config.create_with_context(Context {
        start,
        latency: Histogram::default(),
        failed: AtomicU64::new(0),
    }) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rdkafka-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let payload = common::payload(args.record_size);
    let mut commits = Commits::default();
    if args.transaction_records.is_some()
        && let Err(e) = producer.init_transactions(TXN_TIMEOUT)
    {
        eprintln!("rdkafka-bench: init_transactions: {e}");
        return ExitCode::FAILURE;
    }

    let start = Instant::now();
    let pacer = Pacer::new(start, args.rate);
    for i in 0..args.records {
        if let Some(d) = pacer.wait_before(i) {
            producer.poll(d);
        }
        if args.begins_transaction(i)
            && let Err(e) = producer.begin_transaction()
        {
            eprintln!("rdkafka-bench: begin_transaction at record {i}: {e}");
            return ExitCode::FAILURE;
        }
        let sent_ns = if i < args.warmup {
            WARMUP
        } else {
            producer.context().start.elapsed().as_nanos() as usize
        };
        let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(&args.topic, sent_ns)
            .payload(payload.as_slice());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    eprintln!("rdkafka-bench: send failed at record {i}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        producer.poll(Duration::ZERO);
        if args.ends_transaction(i)
            && let Err(e) = commits.time(|| producer.commit_transaction(TXN_TIMEOUT))
        {
            eprintln!("rdkafka-bench: commit_transaction at record {i}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = producer.flush(Duration::from_secs(300)) {
        eprintln!("rdkafka-bench: flush: {e}");
        return ExitCode::FAILURE;
    }
    let seconds = start.elapsed().as_secs_f64();
    let ctx = producer.context();
    let failed = ctx.failed.load(Ordering::Relaxed);
    common::report(&args, seconds, failed, &ctx.latency);
    if args.transaction_records.is_some() {
        commits.report();
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
