//! The consumer's checkpoint hook, run through the full CRaC protocol with the noop engine
//! (hooks run, no image) against a real broker; `consumer_criu.rs` takes real images.
//!
//! A probe resource at the file-descriptor level (called after the network level) looks at
//! the process's real TCP sockets while the checkpoint runs. The global context is
//! process-wide, so the tests of this file run one at a time.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crac_api::{CheckpointError, Context, Core, Outcome, Priority, Resource, ResourceError};
use crac_noop as _;
use crac_tests::kafka::Cluster;
use crac_tests::process::established_connections_to;
use kafka_client::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRebalanceListener, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

fn kafka() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(1))
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    assert_eq!(Core::engine_name(), Some("noop"));
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs after the consumer's `before_checkpoint` (file-descriptor level): counts the
/// connections to the brokers at that moment.
struct Probe {
    ports: HashSet<u16>,
    seen: Mutex<Option<usize>>,
}

impl Resource for Probe {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        *self.seen.lock().unwrap() = Some(established_connections_to(&self.ports));
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

fn probe(k: &Cluster) -> Arc<Probe> {
    let p = Arc::new(Probe {
        ports: k.ports(),
        seen: Mutex::new(None),
    });
    Core::global_context().register_with_priority(&p, Priority::FileDescriptors);
    p
}

fn produce(k: &Cluster, topic: &str, n: usize) {
    let p = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false),
    )
    .unwrap();
    for i in 0..n {
        let v = format!("v{i}");
        let _report = p
            .send(ProducerRecord::new(topic).value(v.as_bytes()))
            .unwrap();
    }
    p.flush().unwrap();
    p.close(Duration::from_secs(10)).unwrap();
}

/// Member ids seen by `on_partitions_assigned`, and the revocations.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl ConsumerRebalanceListener for Events {
    fn on_partitions_revoked(&mut self, _: &Consumer, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(format!("revoked {}", p.len()));
    }
    fn on_partitions_assigned(&mut self, c: &Consumer, p: &[TopicPartition]) {
        let g = c.group_metadata();
        self.0
            .lock()
            .unwrap()
            .push(format!("assigned {} {}", p.len(), g.member_id));
    }
}

fn config(k: &Cluster, group: &str) -> ConsumerConfig {
    ConsumerConfig::new(k.bootstrap())
        .unwrap()
        .group_id(group)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .heartbeat_interval(Duration::from_millis(500))
        .max_poll_records(100)
}

fn values(records: &kafka_client::ConsumerRecords) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect()
}

#[test]
fn checkpoint_commits_what_poll_returned_leaves_disconnects_and_rejoins_as_a_new_member() {
    let _s = serial();
    let k = kafka();
    let topic = "ck-hook";
    k.create_topic(topic, 3, 1);
    let n = 3000;
    produce(k, topic, n);
    let events = Events::default();
    // The application never commits: only the checkpoint does. Small fetches, so the
    // checkpoint comes while most records are still in the log.
    let consumer = Consumer::new(
        config(k, "ck-hook")
            .max_partition_fetch_bytes(2048)
            .max_poll_records(50),
    )
    .unwrap();
    consumer
        .subscribe_with_listener([topic], events.clone())
        .unwrap();
    let mut seen: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < 500 {
        assert!(Instant::now() < deadline, "read {} records", seen.len());
        seen.extend(values(&consumer.poll(Duration::from_millis(200)).unwrap()));
    }
    assert!(
        consumer.metrics().buffered_records > 0 || seen.len() < n,
        "records were fetched ahead"
    );
    let member_before = consumer.group_metadata().member_id;
    assert!(!member_before.is_empty());
    let p = probe(k);

    // The application keeps polling from another thread while the checkpoint runs.
    let stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(90);
            while got.len() + seen.len() < n && !stop.load(Ordering::SeqCst) {
                assert!(
                    Instant::now() < deadline,
                    "read {} records",
                    got.len() + seen.len()
                );
                got.extend(values(&consumer.poll(Duration::from_millis(100)).unwrap()));
                std::thread::sleep(Duration::from_millis(10));
            }
            got
        });
        std::thread::sleep(Duration::from_millis(50));
        let outcome = Core::checkpoint_restore();
        assert!(!poller.is_finished(), "the checkpoint came mid-stream");
        let got = poller.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        (outcome, got)
    });
    let (outcome, got) = outcome;
    assert!(matches!(outcome, Ok(Outcome::NoImage)), "{outcome:?}");
    assert_eq!(
        *p.seen.lock().unwrap(),
        Some(0),
        "no broker connection at image time"
    );
    seen.extend(got);

    // Every record once: fetched-but-unreturned records were dropped and read again from the
    // offsets the checkpoint committed, by a new member.
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "duplicates after the checkpoint");
    assert_eq!(seen.len(), n);
    let member_after = consumer.group_metadata().member_id;
    assert!(
        !member_after.is_empty() && member_after != member_before,
        "member before {member_before:?}, after {member_after:?}"
    );
    let ev = events.0.lock().unwrap().clone();
    assert!(
        ev.iter().any(|e| e.starts_with("revoked ")),
        "the listener heard the partitions go: {ev:?}"
    );
    assert!(ev.iter().any(|e| e.ends_with(&member_after)), "{ev:?}");
    consumer.close(Duration::from_secs(10)).unwrap();
}

#[test]
fn a_static_member_comes_back_with_its_own_group_instance_id() {
    let _s = serial();
    let k = kafka();
    let topic = "ck-static";
    k.create_topic(topic, 2, 1);
    produce(k, topic, 10);
    let consumer = Consumer::new(config(k, "ck-static").group_instance_id("worker-1")).unwrap();
    consumer.subscribe([topic]).unwrap();
    let mut n = 0;
    while n < 10 {
        n += consumer.poll(Duration::from_millis(200)).unwrap().len();
    }
    let before = consumer.group_metadata();
    assert_eq!(before.group_instance_id.as_deref(), Some("worker-1"));
    assert!(matches!(Core::checkpoint_restore(), Ok(Outcome::NoImage)));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        consumer.poll(Duration::from_millis(200)).unwrap();
        // group_metadata() changes when poll() delivers the new assignment.
        let g = consumer.group_metadata();
        if g.generation_id >= 0
            && g.member_id != before.member_id
            && !consumer.assignment().is_empty()
        {
            let id = g.group_instance_id.unwrap();
            assert!(id.starts_with("worker-1-crac"), "{id}");
            assert_ne!(g.member_id, before.member_id);
            break;
        }
        assert!(Instant::now() < deadline, "no rejoin: {g:?}");
    }
    consumer.close(Duration::from_secs(10)).unwrap();
}

#[test]
fn an_unreachable_coordinator_fails_the_checkpoint_and_the_consumer_goes_on() {
    let _s = serial();
    let k = Cluster::start(1);
    let topic = "ck-down";
    k.create_topic(topic, 3, 1);
    let n = 2000;
    produce(&k, topic, n);
    let consumer = Consumer::new(
        config(&k, "ck-down")
            .checkpoint_timeout(Duration::from_secs(3))
            .client_id("down-consumer"),
    )
    .unwrap();
    consumer.subscribe([topic]).unwrap();
    let mut seen: Vec<String> = Vec::new();
    while seen.len() < 500 {
        let r = consumer.poll(Duration::from_millis(200)).unwrap();
        seen.extend(values(&r));
        consumer.commit_sync().unwrap();
    }
    k.stop_broker(1);
    let err = match Core::checkpoint_restore() {
        Err(e @ CheckpointError::Resources { outcome: None, .. }) => e,
        other => panic!("the checkpoint must fail before the image: {other:?}"),
    };
    let text = err.to_string();
    let failure = err
        .failures()
        .iter()
        .map(|f| f.to_string())
        .find(|f| f.contains("kafka-consumer[down-consumer]"))
        .unwrap_or_else(|| panic!("the consumer's failure is named: {text}"));
    assert!(
        failure.contains("cannot checkpoint") && failure.contains("commit"),
        "{failure}"
    );
    eprintln!("the checkpoint failed as it should: {failure}");
    k.start_broker(1);
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < n {
        assert!(
            Instant::now() < deadline,
            "read {} of {n} after the failed checkpoint",
            seen.len()
        );
        match consumer.poll(Duration::from_millis(200)) {
            Ok(r) => {
                seen.extend(values(&r));
                let _ = consumer.commit_sync();
            }
            Err(e) => panic!("poll after the failed checkpoint: {e}"),
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!((unique.len(), seen.len()), (n, n));
    consumer.close(Duration::from_secs(10)).unwrap();
}

#[test]
fn an_unregistered_consumer_keeps_its_connections() {
    let _s = serial();
    let k = kafka();
    let topic = "ck-unregistered";
    k.create_topic(topic, 1, 1);
    produce(k, topic, 5);
    let consumer = Consumer::new(config(k, "ck-unreg").crac_register(false)).unwrap();
    consumer.subscribe([topic]).unwrap();
    let mut n = 0;
    while n < 5 {
        n += consumer.poll(Duration::from_millis(200)).unwrap().len();
    }
    let p = probe(k);
    assert!(matches!(Core::checkpoint_restore(), Ok(Outcome::NoImage)));
    assert!(p.seen.lock().unwrap().is_some_and(|c| c > 0));
    consumer.close(Duration::from_secs(10)).unwrap();
}
