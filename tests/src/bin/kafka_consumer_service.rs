//! A consumer group member that prints every record it processes and commits synchronously
//! after each poll: the subject of `tests/tests/consumer_criu.rs`, checkpointed from outside
//! with `crac checkpoint PID` while it consumes.
//!
//! The consumer's own CRaC resource does the checkpoint work: it commits the positions of the
//! records `poll()` returned, leaves the group (the other members take its partitions while it
//! is frozen) and disconnects; after the restore it rejoins as a new member and resumes from
//! the committed offsets. The records this process had in hand when the image was taken are
//! printed by the restored copy.
//!
//! Environment:
//! - `SVC_BOOTSTRAP`, `SVC_TOPIC`, `SVC_GROUP` (required), `SVC_NAME` (default `m`: printed
//!   on every line), `SVC_PROPS` extra consumer properties `k=v,k=v`.
//! - `SVC_STOP_FILE`: when this file exists, close the consumer (leaving the group) and exit.
//!
//! Output, one `key=value` line each: `ready …`; `assigned …` / `revoked …` from the rebalance
//! listener (with the member id); `rec name=… p=… o=… k=… v=… gen=…` per record processed;
//! `restored …` after each restore; `commit_error …` / `poll_error …`; `done …` at the end.

use std::io::Write;
use std::time::Duration;

use crac_api::Core;
use crac_criu as _;
use kafka_client::{Bytes, Consumer, ConsumerConfig, ConsumerRebalanceListener, TopicPartition};

fn say(line: &str) {
    // One write per line (a line is far below PIPE_BUF): an image taken between two lines
    // never splits one.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

fn need(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| {
        eprintln!("kafka_consumer_service: set {key}");
        std::process::exit(2)
    })
}

fn list(parts: &[TopicPartition]) -> String {
    let v: Vec<String> = parts.iter().map(|tp| tp.partition.to_string()).collect();
    v.join(",")
}

struct Listener {
    name: String,
}

impl ConsumerRebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        // Everything processed is committed already (after every poll); commit again anyway, as
        // a listener should: what was returned is what was processed.
        if let Err(e) = consumer.commit_sync() {
            say(&format!(
                "commit_error name={} where=revoke error={e}",
                self.name
            ));
        }
        say(&format!(
            "revoked name={} partitions={} gen={}",
            self.name,
            list(partitions),
            Core::management().generation()
        ));
    }

    fn on_partitions_assigned(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let g = consumer.group_metadata();
        say(&format!(
            "assigned name={} partitions={} member_id={} instance={} generation={} gen={}",
            self.name,
            list(partitions),
            g.member_id,
            g.group_instance_id.as_deref().unwrap_or("-"),
            g.generation_id,
            Core::management().generation()
        ));
    }

    fn on_partitions_lost(&mut self, _: &Consumer, partitions: &[TopicPartition]) {
        say(&format!(
            "lost name={} partitions={}",
            self.name,
            list(partitions)
        ));
    }
}

fn main() {
    crac_tests::service_logging();
    let name = std::env::var("SVC_NAME").unwrap_or_else(|_| "m".into());
    let topic = need("SVC_TOPIC");
    let stop_file = std::env::var("SVC_STOP_FILE").ok();
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), need("SVC_BOOTSTRAP")),
        ("group.id".into(), need("SVC_GROUP")),
        ("client.id".into(), format!("consumer-service-{name}")),
        ("auto.offset.reset".into(), "earliest".into()),
        ("enable.auto.commit".into(), "false".into()),
    ];
    for kv in std::env::var("SVC_PROPS")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
    {
        let Some((k, v)) = kv.split_once('=') else {
            eprintln!("kafka_consumer_service: SVC_PROPS entry `{kv}` is not key=value");
            std::process::exit(2)
        };
        props.push((k.trim().into(), v.trim().into()));
    }
    let consumer = match ConsumerConfig::from_properties(props).map(Consumer::new) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) | Err(e) => {
            eprintln!("kafka_consumer_service: {e}");
            std::process::exit(2)
        }
    };
    consumer
        .subscribe_with_listener([&topic], Listener { name: name.clone() })
        .expect("subscribe");
    say(&format!("ready name={name} pid={}", std::process::id()));

    let mut processed = 0u64;
    let mut restores_seen = 0;
    let mut errors = 0u64;
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
                "restored name={name} pid={} gen={} frozen_ms={}",
                std::process::id(),
                m.generation(),
                m.frozen_duration().unwrap_or_default().as_millis()
            ));
        }
        let records = match consumer.poll(Duration::from_millis(200)) {
            Ok(r) => r,
            Err(e) => {
                errors += 1;
                say(&format!("poll_error name={name} error={e}"));
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        for r in &records {
            let text = |b: &Option<Bytes>| {
                b.as_deref().map_or_else(
                    || "-".to_owned(),
                    |b| String::from_utf8_lossy(b).into_owned(),
                )
            };
            say(&format!(
                "rec name={name} p={} o={} k={} v={} gen={}",
                r.partition,
                r.offset,
                text(&r.key),
                text(&r.value),
                Core::management().generation()
            ));
            processed += 1;
        }
        if !records.is_empty()
            && let Err(e) = consumer.commit_sync()
        {
            errors += 1;
            say(&format!("commit_error name={name} where=loop error={e}"));
        }
    }
    let closed = consumer.close(Duration::from_secs(30));
    say(&format!(
        "done name={name} processed={processed} errors={errors} close={}",
        if closed.is_ok() { "ok" } else { "error" }
    ));
}
