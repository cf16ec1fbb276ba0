//! `bench_consumer --async`: the consumer read as an async application reads it, through
//! `Consumer::stream()` (records taken on the task's thread, a thread of the stream's own for
//! `poll()`'s other work) awaited record by record on a tokio current-thread runtime. The twin
//! is `rdkafka-bench consume --async` (`StreamConsumer::stream()`).

use std::cell::Cell;
use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use kafka_client::Consumer;

use crate::common::{Args, with_watchdog};

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
    let n = Cell::new(0u64);
    let bytes = rt.block_on(with_watchdog(&n, async {
        let mut bytes = 0u64;
        while let Some(item) = poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await {
            // A match, not `map_err(..)?`: that builds a `Result` of another layout around
            // each 136-byte record, a copy the blocking loop (records by reference) never makes.
            let r = match item {
                Ok(r) => r,
                Err(e) => return Err(format!("stream after {} records: {e}", n.get())),
            };
            bytes += (r.key.as_ref().map_or(0, |b| b.len())
                + r.value.as_ref().map_or(0, |b| b.len())) as u64;
            n.set(n.get() + 1);
            if n.get() == args.records {
                return Ok(bytes);
            }
        }
        Err(format!("the stream ended after {} records", n.get()))
    }))?;
    let n = n.get();
    report(n, bytes);
    stream
        .consumer()
        .close(Duration::from_secs(30))
        .map_err(|e| format!("close: {e}"))
}
