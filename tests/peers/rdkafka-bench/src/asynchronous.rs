//! `rdkafka-bench --async`: rust-rdkafka's async producer, a `FutureProducer` (librdkafka's
//! delivery callbacks, on the crate's polling thread, complete a oneshot future per record), on
//! a tokio current-thread runtime, pipelined as the crate's documentation has it: `send_result()`
//! hands each record to librdkafka without waiting (in order), its `DeliveryFuture` joins a
//! window of at most `--window` reports taken in send order as they resolve
//! (`common::Reports`, the same code as this project's `bench_producer --async`), and when
//! librdkafka's queue is full (`QueueFull`) the oldest report is awaited before the record is
//! offered again (`send()` would sleep 100 ms instead). The run ends when every report has
//! resolved; `flush()` then finds nothing left.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use crate::common::{self, Args, Histogram, Pacer, Reports};

pub fn main(args: &Args, config: &ClientConfig) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rdkafka-bench: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let producer: FutureProducer = match config.create() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rdkafka-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let payload = common::payload(args.record_size);
    let (latency, failed) = (Histogram::default(), AtomicU64::new(0));
    let start = match rt.block_on(run(&producer, args, &payload, &latency, &failed)) {
        Ok(start) => start,
        Err(e) => {
            eprintln!("rdkafka-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    common::report(args, seconds, failed, &latency);
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run(
    producer: &FutureProducer,
    args: &Args,
    payload: &[u8],
    latency: &Histogram,
    failed: &AtomicU64,
) -> Result<Instant, String> {
    let mut reports =
        Reports::<DeliveryFuture>::new(args, "rdkafka-bench", latency, failed, |out| match out {
            Ok(Ok(_)) => None,
            Ok(Err((e, _))) => Some(e.to_string()),
            Err(_) => Some("the producer dropped the delivery report".into()),
        });
    let start = Instant::now();
    let pacer = Pacer::new(start, args.rate);
    for i in 0..args.records {
        if let Some(d) = pacer.wait_before(i) {
            reports.during(tokio::time::sleep(d)).await;
        }
        let sent = Instant::now();
        let mut record = FutureRecord::<(), [u8]>::to(&args.topic).payload(payload);
        let report = loop {
            match producer.send_result(record) {
                Ok(report) => break report,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    // A report resolved is a record out of the queue (or about to be: its
                    // future completes in the delivery callback, before librdkafka frees the
                    // message). None to await: every record is out but not yet freed.
                    if reports.oldest().await == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                Err((e, _)) => return Err(format!("send failed at record {i}: {e}")),
            }
        };
        reports.push(sent, i >= args.warmup, report).await;
    }
    reports.all().await;
    producer
        .flush(Duration::from_secs(300))
        .map_err(|e| format!("flush: {e}"))?;
    Ok(start)
}
