//! `bench_consumer --async`: the consumer read as an async application reads it, through
//! `Consumer::stream()` (records taken on the task's thread, a thread of the stream's own for
//! `poll()`'s other work) awaited record by record on a tokio current-thread runtime. The twin
//! is `rdkafka-bench consume --async` (`StreamConsumer::stream()`).

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use kafka_client::Consumer;

use crate::common::{Args, IDLE_LIMIT, next_or_idle};

/// Reads `args.records` records from the consumer's stream, calls `report` with the records and
/// bytes read, then closes the consumer.
pub fn consume(
    consumer: Consumer,
    args: &Args,
    report: impl FnOnce(u64, u64),
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let mut stream = consumer.stream();
    let (mut n, mut bytes) = (0u64, 0u64);
    rt.block_on(async {
        while n < args.records {
            match next_or_idle(|cx| Pin::new(&mut stream).poll_next(cx)).await {
                Some(Some(Ok(r))) => {
                    n += 1;
                    bytes += (r.key.as_ref().map_or(0, |b| b.len())
                        + r.value.as_ref().map_or(0, |b| b.len()))
                        as u64;
                }
                Some(Some(Err(e))) => return Err(format!("stream after {n} records: {e}")),
                Some(None) => return Err(format!("the stream ended after {n} records")),
                None => return Err(format!("no record for {IDLE_LIMIT:?} after {n}")),
            }
        }
        Ok(())
    })?;
    report(n, bytes);
    stream
        .consumer()
        .close(Duration::from_secs(30))
        .map_err(|e| format!("close: {e}"))
}
