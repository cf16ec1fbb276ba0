//! `bench_producer --async`: the producer's async API as an async application pipelines it, on
//! a tokio current-thread runtime (one thread: the task that sends is the one that takes the
//! reports). Every record is sent with `send_async(record).accepted().await`, so records go out
//! in order and a full buffer parks the task; its delivery report joins a window of at most
//! `--window` (`common::Reports`), taken as the reports resolve. After the last send,
//! `flush_async()` (as the blocking run's `flush()`: the last batches go out at once) is awaited
//! while the reports are taken; the run ends when every report has resolved. The twin is `rdkafka-bench --async`
//! (`FutureProducer`).

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use kafka_client::{DeliveryFuture, Producer, ProducerRecord};

use crate::common::{Args, Histogram, Pacer, Reports};

/// Runs the sends on a runtime of its own (built before the clock starts); returns when the
/// run started.
pub fn produce(
    producer: &Producer,
    args: &Args,
    payload: &[u8],
    latency: &Histogram,
    failed: &AtomicU64,
) -> Result<Instant, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(run(producer, args, payload, latency, failed))
}

async fn run(
    producer: &Producer,
    args: &Args,
    payload: &[u8],
    latency: &Histogram,
    failed: &AtomicU64,
) -> Result<Instant, String> {
    let mut reports =
        Reports::<DeliveryFuture>::new(args, "bench_producer", latency, failed, |out| {
            out.err().map(|e| e.to_string())
        });
    let start = Instant::now();
    let pacer = Pacer::new(start, args.rate);
    for i in 0..args.records {
        if let Some(d) = pacer.wait_before(i) {
            reports.during(tokio::time::sleep(d)).await;
        }
        let sent = Instant::now();
        let accepted = producer
            .send_async(ProducerRecord::new(&args.topic).value(payload))
            .accepted();
        let report = reports
            .during(accepted)
            .await
            .map_err(|e| format!("send failed at record {i}: {e}"))?;
        reports.push(sent, i >= args.warmup, report).await;
    }
    // As the blocking run's flush(): the last batches go out without waiting for linger.ms,
    // and the reports are taken as they resolve meanwhile.
    reports.during(producer.flush_async()).await;
    reports.all().await;
    Ok(start)
}
