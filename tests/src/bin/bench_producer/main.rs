//! This project's producer under `scripts/bench`: throughput mode (as fast as `send()` takes
//! records) or a fixed offered rate (`--rate`), with the delivery latency of every record from
//! `send()` to its callback. The command line and the output are those of every producer
//! benchmark binary (see `common.rs`); the librdkafka twin is `tests/peers/rdkafka-bench`.
//!
//! ```text
//! bench_producer --bootstrap 127.0.0.1:9092 --topic t --records 1000000 --record-size 100 \
//!     -X acks=all -X linger.ms=5 -X batch.size=16384 [--rate 50000]
//! ```
//!
//! With `--async` it sends with `send_async(record).accepted().await` on a tokio current-thread
//! runtime, the delivery reports awaited in a bounded window as they resolve (`common::Reports`),
//! and ends with `flush_async()`; see `asynchronous.rs`.
//!
//! With `--transaction-records T` (and `-X transactional.id=…`) every `T` records are one
//! transaction. `-X` takes any producer property (`crac.register=false` measures the producer without its
//! checkpoint resource). The CRIU engine is linked, as in a checkpoint-ready service.

mod asynchronous;
mod common;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Args, Commits, Histogram, Pacer};
use crac_criu as _;
use kafka_client::{Producer, ProducerRecord};

fn main() -> ExitCode {
    let args = Args::parse("bench_producer");
    let mut props = vec![("bootstrap.servers".to_owned(), args.bootstrap.clone())];
    props.extend(args.props.iter().cloned());
    let producer = match Producer::from_properties(props) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bench_producer: {e}");
            return ExitCode::from(2);
        }
    };
    // 'static: the callbacks borrow them without a reference count to bump per record.
    let latency: &'static Histogram = Box::leak(Box::default());
    let failed: &'static AtomicU64 = Box::leak(Box::default());
    let payload = common::payload(args.record_size);
    let mut commits = Commits::default();
    if args.transaction_records.is_some()
        && let Err(e) = producer.init_transactions()
    {
        eprintln!("bench_producer: init_transactions: {e}");
        return ExitCode::FAILURE;
    }

    let produced = if args.async_api {
        asynchronous::produce(&producer, &args, &payload, latency, failed)
    } else {
        produce(&producer, &args, &payload, latency, failed, &mut commits)
    };
    let start = match produced {
        Ok(start) => start,
        Err(e) => {
            eprintln!("bench_producer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let closed = producer.close(Duration::from_secs(30));
    let failed = failed.load(Ordering::Relaxed);
    common::report(&args, seconds, failed, latency);
    if args.transaction_records.is_some() {
        commits.report();
    }
    let m = producer.metrics();
    eprintln!(
        "bench_producer: produce requests {} ({:.1} records/request), batches {} ({:.1} records/batch), retries {}, connects {}",
        m.requests_sent,
        args.records as f64 / m.requests_sent.max(1) as f64,
        m.batches_sent,
        args.records as f64 / m.batches_sent.max(1) as f64,
        m.retries,
        m.connects
    );
    if failed > 0 || closed.is_err() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The blocking run: `send_with_callback()` for every record (the latency recorded in the
/// callback), then `flush()`. Returns when it started.
fn produce(
    producer: &Producer,
    args: &Args,
    payload: &[u8],
    latency: &'static Histogram,
    failed: &'static AtomicU64,
    commits: &mut Commits,
) -> Result<Instant, String> {
    let start = Instant::now();
    let pacer = Pacer::new(start, args.rate);
    for i in 0..args.records {
        if let Some(d) = pacer.wait_before(i) {
            std::thread::sleep(d);
        }
        if args.begins_transaction(i) {
            producer
                .begin_transaction()
                .map_err(|e| format!("begin_transaction at record {i}: {e}"))?;
        }
        let sent = Instant::now();
        let measured = i >= args.warmup;
        producer
            .send_with_callback(
                ProducerRecord::new(&args.topic).value(payload),
                move |res| {
                    if measured {
                        latency.record(sent.elapsed());
                    }
                    if let Err(e) = res
                        && failed.fetch_add(1, Ordering::Relaxed) == 0
                    {
                        eprintln!("bench_producer: delivery failed: {e}");
                    }
                },
            )
            .map_err(|e| format!("send failed at record {i}: {e}"))?;
        if args.ends_transaction(i) {
            commits
                .time(|| producer.commit_transaction())
                .map_err(|e| format!("commit_transaction at record {i}: {e}"))?;
        }
    }
    producer.flush().map_err(|e| e.to_string())?;
    Ok(start)
}
