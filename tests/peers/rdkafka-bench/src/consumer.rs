//! `rdkafka-bench consume …`: librdkafka's consumer under `scripts/bench`, the twin of this
//! project's `bench_consumer` (same command line, measurement and `result …` line: the shared
//! code is `tests/src/bin/bench_consumer/common.rs`).
//!
//! librdkafka is used the way the `rdkafka` crate's users use it: a `BaseConsumer` subscribed
//! in a group, `poll()` returning one message at a time (librdkafka's fetcher threads prefetch
//! into its queue in the background). The assignment time comes from the crate's
//! `post_rebalance` callback, which runs inside `poll()` as Java's listener does.
//!
//! `consume --async` is rust-rdkafka's async consumer instead: a `StreamConsumer` on a tokio
//! current-thread runtime, one `stream()` awaited message by message (`recv()` is the same,
//! with a stream made per message), the twin of `bench_consumer --async`.

#[path = "../../../src/bin/bench_consumer/common.rs"]
mod common;

use std::cell::Cell;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Args, Clock, IDLE_LIMIT, with_watchdog};
use futures_util::StreamExt;
use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::util::get_rdkafka_version;

struct Context {
    assigned: OnceLock<Instant>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance
            && tpl.count() > 0
        {
            let _ = self.assigned.set(Instant::now());
        }
    }
}

pub fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = Args::parse("rdkafka-bench consume", args);
    let (_, version) = get_rdkafka_version();
    eprintln!("rdkafka-bench consume: librdkafka {version}");
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", &args.group)
        .set("auto.offset.reset", "earliest");
    for (k, v) in &args.props {
        config.set(k, v);
    }
    if args.async_api {
        return stream(&args, &config);
    }
    let mut clock = Clock::start();
    let consumer: BaseConsumer<Context> = match subscribed(&config, &args.topic) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (mut n, mut bytes) = (0u64, 0u64);
    // Since when poll() has returned nothing (no clock read per message).
    let mut idle_since: Option<Instant> = None;
    while n < args.records {
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if idle_since.get_or_insert_with(Instant::now).elapsed() > IDLE_LIMIT {
                    eprintln!("rdkafka-bench consume: no record for {IDLE_LIMIT:?} after {n}");
                    return ExitCode::FAILURE;
                }
            }
            Some(Ok(m)) => {
                idle_since = None;
                n += 1;
                bytes += (m.key_len() + m.payload_len()) as u64;
            }
            Some(Err(e)) => {
                eprintln!("rdkafka-bench consume: poll after {n} records: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(&at) = consumer.context().assigned.get() {
        clock.assigned(at);
    }
    clock.report(n, bytes);
    drop(consumer); // closes: leaves the group, as the others' close() does
    ExitCode::SUCCESS
}

/// A consumer of kind `C` (base or stream) made from `config` and subscribed to `topic`; on
/// failure, the message printed and the exit code to end with (2: bad configuration).
fn subscribed<C>(config: &ClientConfig, topic: &str) -> Result<C, ExitCode>
where
    C: FromClientConfigAndContext<Context> + Consumer<Context>,
{
    let consumer: C = config
        .create_with_context(Context {
            assigned: OnceLock::new(),
        })
        .map_err(|e| {
            eprintln!("rdkafka-bench consume: {e}");
            ExitCode::from(2)
        })?;
    consumer.subscribe(&[topic]).map_err(|e| {
        eprintln!("rdkafka-bench consume: subscribe: {e}");
        ExitCode::FAILURE
    })?;
    Ok(consumer)
}

/// `consume --async`: a `StreamConsumer` read through its `stream()`.
fn stream(args: &Args, config: &ClientConfig) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rdkafka-bench consume: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The consumer spawns its wake-up task on the runtime it is created in.
    let _runtime = rt.enter();
    let mut clock = Clock::start();
    let consumer: StreamConsumer<Context> = match subscribed(config, &args.topic) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut messages = consumer.stream();
    let mut bytes = 0u64;
    let count = Cell::new(0u64);
    let read = rt.block_on(with_watchdog(&count, async {
        while let Some(item) = messages.next().await {
            // A match, as bench_consumer's stream loop reads its items (no `Result` rebuilt
            // around each one).
            let m = match item {
                Ok(m) => m,
                Err(e) => return Err(format!("stream after {} records: {e}", count.get())),
            };
            bytes += (m.key_len() + m.payload_len()) as u64;
            count.set(count.get() + 1);
            if count.get() == args.records {
                return Ok(());
            }
        }
        Err(format!("the stream ended after {} records", count.get()))
    }));
    let n = count.get();
    if let Err(e) = read {
        eprintln!("rdkafka-bench consume: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(&at) = consumer.context().assigned.get() {
        clock.assigned(at);
    }
    clock.report(n, bytes);
    drop(messages);
    drop(consumer); // closes: leaves the group, as the others' close() does
    ExitCode::SUCCESS
}
