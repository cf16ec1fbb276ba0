//! Consume-transform-produce: our consumer feeding our producer, checkpointed from outside
//! with `crac checkpoint PID` (`tests/tests/consumer_criu.rs`).
//!
//! Per poll batch: produce one output record per input record (same key and value, plus a
//! `src` header naming the input partition and offset), `flush()`, then `commit_sync()`. That
//! is exactly-once without transactions as long as nothing crashes, and a checkpoint is not a
//! crash: the producer's resource delivers what was sent before the image (a `send()` during
//! the checkpoint waits; in the restored copy it fails as not sent, `RestoredWhileWaiting`, and
//! the copy sends the record again: `resent …`), the consumer's resource commits
//! the positions of the batch in hand, and the restored copy finishes the batch it was working
//! on and resumes from those positions.
//!
//! With `SVC_TXN_ID` set, the same loop runs with transactions (`tests/tests/transactions_criu.rs`):
//! per poll batch, `begin_transaction()`, the output records, `send_offsets_to_transaction()`
//! with the positions and `group_metadata()`, `commit_transaction()`; the consumer reads
//! `read_committed` and its checkpoint commits nothing (`checkpoint.commit.offsets=false`).
//! An abortable error (a copy restored with records read before its image: the group
//! coordinator refuses their offsets, KIP-447) aborts the transaction, rewinds the consumer to
//! the committed offsets, and goes on; that is an `aborted …` line, not an error.
//! `SVC_TXN_ID_POLICY` is the producer's `crac.transactional.id.policy`.
//!
//! Environment: `SVC_BOOTSTRAP`, `SVC_IN`, `SVC_OUT`, `SVC_GROUP` (required); `SVC_STOP_FILE`
//! (exit when it exists); `SVC_TXN_ID`, `SVC_TXN_ID_POLICY`. Output: `ready …`,
//! `progress consumed=… produced=… errors=… gen=… commits=… aborts=…` every 250 ms,
//! `restored … txn_id=… consumed=…` after each restore, `aborted …`, `error …`, `done …`.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crac_api::{Context, Core, Priority, Resource, ResourceError};
use crac_criu as _;
use kafka_client::{
    Consumer, ConsumerConfig, ConsumerRecords, Header, OffsetAndMetadata, ProduceError, Producer,
    ProducerRecord, TopicPartition, TransactionAction, TransactionError,
};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

/// Counts the restores whose hooks have run: an application-level resource is restored last,
/// so when it counts a restore the producer has taken the restored copy's `transactional.id`
/// and the consumer rejoins (`Management::restore_count` is bumped before any hook runs).
#[derive(Default)]
struct RestoresDone(AtomicU64);

impl Resource for RestoresDone {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn name(&self) -> String {
        "ctp-restores".into()
    }
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
    let txn_id = std::env::var("SVC_TXN_ID").ok();
    let group = need("SVC_GROUP");
    let mut consumer_props = vec![
        ("bootstrap.servers", bootstrap.clone()),
        ("group.id", group),
        ("client.id", "ctp-consumer".to_owned()),
        ("auto.offset.reset", "earliest".to_owned()),
        ("enable.auto.commit", "false".to_owned()),
        ("heartbeat.interval.ms", "1000".to_owned()),
    ];
    let mut producer_props = vec![
        ("bootstrap.servers", bootstrap.clone()),
        ("client.id", "ctp-producer".to_owned()),
        ("linger.ms", "5".to_owned()),
    ];
    if let Some(id) = &txn_id {
        consumer_props.push(("isolation.level", "read_committed".to_owned()));
        consumer_props.push(("checkpoint.commit.offsets", "false".to_owned()));
        producer_props.push(("transactional.id", id.clone()));
        if let Ok(p) = std::env::var("SVC_TXN_ID_POLICY") {
            producer_props.push(("crac.transactional.id.policy", p));
        }
    }
    let consumer =
        Consumer::new(ConsumerConfig::from_properties(consumer_props).expect("consumer config"))
            .expect("consumer");
    let producer = Producer::from_properties(producer_props).expect("producer");
    if txn_id.is_some() {
        producer.init_transactions().expect("init_transactions");
    }
    consumer.subscribe([&input]).expect("subscribe");
    let restores = Arc::new(RestoresDone::default());
    Core::global_context().register_with_priority(&restores, Priority::Application);
    say(&format!("ready pid={}", std::process::id()));

    let errors = Arc::new(AtomicU64::new(0));
    let (mut consumed, mut produced) = (0u64, 0u64);
    let (mut commits, mut aborts) = (0u64, 0u64);
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
        let restored = restores.0.load(Ordering::SeqCst);
        if restored != restores_seen {
            restores_seen = restored;
            say(&format!(
                "restored pid={} gen={} frozen_ms={} txn_id={} consumed={consumed}",
                std::process::id(),
                m.generation(),
                m.frozen_duration().unwrap_or_default().as_millis(),
                producer.transactional_id().unwrap_or_else(|| "-".into())
            ));
        }
        if last_progress.elapsed() >= Duration::from_millis(250) {
            last_progress = Instant::now();
            say(&format!(
                "progress consumed={consumed} produced={produced} errors={} gen={} commits={commits} aborts={aborts}",
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
        if txn_id.is_some() {
            match transact(&producer, &consumer, &output, &records) {
                Ok(()) => {
                    commits += 1;
                    consumed += records.len() as u64;
                    produced += records.len() as u64;
                }
                Err(e) if e.action() == TransactionAction::AbortAndRetry => {
                    aborts += 1;
                    say(&format!("aborted records={} reason={e}", records.len()));
                    if let Err(e) = producer.abort_transaction() {
                        errors.fetch_add(1, Ordering::SeqCst);
                        say(&format!("error where=abort error={e}"));
                    }
                    rewind(&consumer, &errors);
                }
                Err(e) => {
                    errors.fetch_add(1, Ordering::SeqCst);
                    say(&format!("error where=transaction error={e}"));
                    if e.is_fatal() {
                        break;
                    }
                }
            }
            continue;
        }
        for r in &records {
            match send_output(&producer, &output, r, &errors) {
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
    // (A transactional producer aborts a transaction still open at close.)
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

/// Sends the output record of `r`, reporting a failed delivery as an error. A `send()` that
/// was waiting when the image was taken fails in the restored copy as not sent
/// (`RestoredWhileWaiting`): this service is checkpointed in stop mode, so the copy is the
/// only one to carry the batch on and sends the record again (an original left running would
/// have sent it itself, and a copy then must not).
fn send_output(
    producer: &Producer,
    output: &str,
    r: &kafka_client::ConsumerRecord,
    errors: &Arc<AtomicU64>,
) -> Result<(), ProduceError> {
    let src = format!("{}:{}", r.partition, r.offset);
    let headers = [Header::new("src", src.as_bytes())];
    loop {
        let errs = errors.clone();
        let what = src.clone();
        let sent = producer.send_with_callback(output_record(output, r, &headers), move |res| {
            if let Err(e) = res {
                errs.fetch_add(1, Ordering::SeqCst);
                say(&format!("error where=delivery src={what} error={e}"));
            }
        });
        match sent {
            Err(ProduceError::RestoredWhileWaiting { waited }) => say(&format!(
                "resent src={src} (send() waited {} ms when the image was taken)",
                waited.as_millis()
            )),
            other => return other,
        }
    }
}

/// The output record of an input record: same key and value, and a `src` header.
fn output_record<'a>(
    output: &'a str,
    r: &'a kafka_client::ConsumerRecord,
    headers: &'a [Header<'a>],
) -> ProducerRecord<'a> {
    let mut rec = ProducerRecord::new(output).headers(headers);
    if let Some(k) = &r.key {
        rec = rec.key(k);
    }
    if let Some(v) = &r.value {
        rec = rec.value(v);
    }
    rec
}

/// One poll batch in one transaction: its output records and its input offsets commit
/// together or not at all.
fn transact(
    producer: &Producer,
    consumer: &Consumer,
    output: &str,
    records: &ConsumerRecords,
) -> Result<(), TransactionError> {
    producer.begin_transaction()?;
    let mut next: Vec<(TopicPartition, OffsetAndMetadata)> = Vec::new();
    for r in records {
        let src = format!("{}:{}", r.partition, r.offset);
        let headers = [Header::new("src", src.as_bytes())];
        // A record's own failure makes the commit fail (abortable): its report is not needed.
        match producer.send(output_record(output, r, &headers)) {
            Ok(report) => drop(report),
            Err(ProduceError::Transaction(e)) => return Err(e),
            Err(e) => {
                return Err(TransactionError::Abortable {
                    transactional_id: producer.transactional_id().unwrap_or_default().into(),
                    reason: e.to_string().into(),
                    code: None,
                });
            }
        }
        let tp = TopicPartition::new(r.topic.clone(), r.partition);
        let offset = OffsetAndMetadata::new(r.offset + 1);
        match next.iter_mut().find(|(t, _)| *t == tp) {
            Some((_, o)) => *o = offset,
            None => next.push((tp, offset)),
        }
    }
    producer.send_offsets_to_transaction(&next, &consumer.group_metadata())?;
    producer.commit_transaction()
}

/// After an abort: the consumer goes back to the committed offsets of its partitions.
fn rewind(consumer: &Consumer, errors: &AtomicU64) {
    let assigned = consumer.assignment();
    if assigned.is_empty() {
        return; // a rebalance (or a restore) under way: positions come from the commits
    }
    match consumer.committed(&assigned, Duration::from_secs(30)) {
        Ok(committed) => {
            for (tp, o) in committed {
                let _ = match o {
                    Some(o) => consumer.seek(&tp, o.offset),
                    None => consumer.seek_to_beginning(std::slice::from_ref(&tp)),
                };
            }
        }
        Err(e) => {
            errors.fetch_add(1, Ordering::SeqCst);
            say(&format!("error where=rewind error={e}"));
        }
    }
}
