//! This project's consumer under `scripts/bench`: joins a fresh group, reads a prefilled topic
//! from the beginning until it has `--records` records, and prints the `result …` line every
//! consumer benchmark binary prints (see `common.rs`; the librdkafka twin is `rdkafka-bench
//! consume` in `tests/peers/rdkafka-bench`, Java's is `ConsumerPerformance`).
//!
//! ```text
//! bench_consumer --bootstrap 127.0.0.1:9092 --topic t --records 1000000 --group g1 \
//!     -X enable.auto.commit=false
//! ```
//!
//! With `--async` it reads through `Consumer::stream()` on a tokio current-thread runtime
//! instead of `poll()` (see `stream.rs`).
//!
//! `-X` takes any consumer property; `auto.offset.reset=earliest` is set before them. The
//! records are dropped after their key and value lengths are added up, as Java's tool does. The
//! CRIU engine is linked and the consumer registers its checkpoint resource, as in a
//! checkpoint-ready service.

mod common;
mod stream;

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{Args, Clock, IDLE_LIMIT};
use crac_criu as _;
use kafka_client::{Consumer, ConsumerConfig, ConsumerRebalanceListener, TopicPartition};

/// Notes when the first partitions arrive.
struct Assigned(Arc<OnceLock<Instant>>);

impl ConsumerRebalanceListener for Assigned {
    fn on_partitions_assigned(&mut self, _: &Consumer, partitions: &[TopicPartition]) {
        if !partitions.is_empty() {
            let _ = self.0.set(Instant::now());
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse("bench_consumer", std::env::args().skip(1));
    let mut props = vec![
        ("bootstrap.servers".to_owned(), args.bootstrap.clone()),
        ("group.id".to_owned(), args.group.clone()),
        ("auto.offset.reset".to_owned(), "earliest".to_owned()),
    ];
    props.extend(args.props.iter().cloned());
    let mut clock = Clock::start();
    let consumer = match ConsumerConfig::from_properties(props).map(Consumer::new) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) | Err(e) => {
            eprintln!("bench_consumer: {e}");
            return ExitCode::from(2);
        }
    };
    let assigned = Arc::new(OnceLock::new());
    if let Err(e) = consumer.subscribe_with_listener([&args.topic], Assigned(assigned.clone())) {
        eprintln!("bench_consumer: subscribe: {e}");
        return ExitCode::FAILURE;
    }
    let report = |n, bytes| {
        if let Some(&at) = assigned.get() {
            clock.assigned(at);
        }
        clock.report(n, bytes);
    };
    let read = if args.async_api {
        stream::consume(consumer, &args, report)
    } else {
        consume(&consumer, &args, report).and_then(|()| {
            consumer
                .close(Duration::from_secs(30))
                .map_err(|e| format!("close: {e}"))
        })
    };
    match read {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_consumer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads with `poll()` until `args.records` records have come, then calls `report` with the
/// records and bytes read.
fn consume(consumer: &Consumer, args: &Args, report: impl FnOnce(u64, u64)) -> Result<(), String> {
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut last = Instant::now();
    while n < args.records {
        let records = consumer
            .poll(Duration::from_millis(100))
            .map_err(|e| format!("poll after {n} records: {e}"))?;
        if records.is_empty() {
            if last.elapsed() > IDLE_LIMIT {
                return Err(format!("no record for {IDLE_LIMIT:?} after {n}"));
            }
            continue;
        }
        last = Instant::now();
        for r in &records {
            n += 1;
            bytes += (r.key.as_ref().map_or(0, |b| b.len())
                + r.value.as_ref().map_or(0, |b| b.len())) as u64;
        }
    }
    report(n, bytes);
    Ok(())
}
