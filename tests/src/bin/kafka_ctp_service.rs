//! Consume-transform-produce: our consumer feeding our producer, checkpointed from outside
//! with `crac checkpoint PID` (`tests/tests/consumer_criu.rs`).
//!
//! Per poll batch: produce one output record per input record (same key and value, plus a
//! `src` header naming the input partition and offset), `flush()`, then `commit_sync()`. That
//! is exactly-once without transactions as long as nothing crashes, and a checkpoint is not a
//! crash: the producer's resource delivers what was sent before the image (a `send()` during
//! the checkpoint waits and is delivered by the restored copy), the consumer's resource commits
//! the positions of the batch in hand, and the restored copy finishes the batch it was working
//! on and resumes from those positions.
//!
//! Environment: `SVC_BOOTSTRAP`, `SVC_IN`, `SVC_OUT`, `SVC_GROUP` (required); `SVC_STOP_FILE`
//! (exit when it exists). Output: `ready …`, `progress consumed=… produced=… errors=… gen=…`
//! every 250 ms, `restored …` after each restore, `error …`, `done …`.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crac_api::Core;
use crac_criu as _;
use kafka_client::{Consumer, ConsumerConfig, Header, Producer, ProducerRecord};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

fn need(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| {
        eprintln!("kafka_ctp_service: set {key}");
        std::process::exit(2)
    })
}

fn main() {
    crac_tests::service_logging();
    let bootstrap = need("SVC_BOOTSTRAP");
    let input = need("SVC_IN");
    let output = need("SVC_OUT");
    let stop_file = std::env::var("SVC_STOP_FILE").ok();
    let consumer = Consumer::new(
        ConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("group.id", need("SVC_GROUP").as_str()),
            ("client.id", "ctp-consumer"),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("heartbeat.interval.ms", "1000"),
        ])
        .expect("consumer config"),
    )
    .expect("consumer");
    let producer = Producer::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "ctp-producer"),
        ("linger.ms", "5"),
    ])
    .expect("producer");
    consumer.subscribe([&input]).expect("subscribe");
    say(&format!("ready pid={}", std::process::id()));

    let errors = Arc::new(AtomicU64::new(0));
    let (mut consumed, mut produced) = (0u64, 0u64);
    let mut restores_seen = 0;
    let mut last_progress = Instant::now();
    loop {
        if stop_file
            .as_deref()
            .is_some_and(|f| std::path::Path::new(f).exists())
        {
            break;
        }
        let m = Core::management();
        if m.restore_count() != restores_seen {
            restores_seen = m.restore_count();
            say(&format!(
                "restored pid={} gen={} frozen_ms={}",
                std::process::id(),
                m.generation(),
                m.frozen_duration().unwrap_or_default().as_millis()
            ));
        }
        if last_progress.elapsed() >= Duration::from_millis(250) {
            last_progress = Instant::now();
            say(&format!(
                "progress consumed={consumed} produced={produced} errors={} gen={}",
                errors.load(Ordering::SeqCst),
                m.generation()
            ));
        }
        let records = match consumer.poll(Duration::from_millis(200)) {
            Ok(r) => r,
            Err(e) => {
                errors.fetch_add(1, Ordering::SeqCst);
                say(&format!("error where=poll error={e}"));
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        for r in &records {
            let src = format!("{}:{}", r.partition, r.offset);
            let headers = [Header::new("src", src.as_bytes())];
            let mut rec = ProducerRecord::new(&output).headers(&headers);
            if let Some(k) = &r.key {
                rec = rec.key(k);
            }
            if let Some(v) = &r.value {
                rec = rec.value(v);
            }
            let errs = errors.clone();
            let what = src.clone();
            let sent = producer.send_with_callback(rec, move |res| {
                if let Err(e) = res {
                    errs.fetch_add(1, Ordering::SeqCst);
                    say(&format!("error where=delivery src={what} error={e}"));
                }
            });
            match sent {
                Ok(()) => produced += 1,
                Err(e) => {
                    errors.fetch_add(1, Ordering::SeqCst);
                    say(&format!("error where=send error={e}"));
                }
            }
        }
        consumed += records.len() as u64;
        if let Err(e) = producer.flush() {
            errors.fetch_add(1, Ordering::SeqCst);
            say(&format!("error where=flush error={e}"));
        }
        if let Err(e) = consumer.commit_sync() {
            errors.fetch_add(1, Ordering::SeqCst);
            say(&format!("error where=commit error={e}"));
        }
    }
    let c = consumer.close(Duration::from_secs(30));
    let p = producer.close(Duration::from_secs(30));
    say(&format!(
        "done consumed={consumed} produced={produced} errors={} close={}",
        errors.load(Ordering::SeqCst),
        if c.is_ok() && p.is_ok() {
            "ok"
        } else {
            "error"
        }
    ));
}
