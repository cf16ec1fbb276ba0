//! The producer's checkpoint hook, run through the full CRaC protocol with the noop engine
//! (hooks run, no image) against a real broker. A probe resource at the file-descriptor level
//! (called after the network level) looks at the process's real TCP sockets: when it runs, the
//! producer must have delivered everything and closed every broker connection.
//!
//! The global context is process-wide, so the tests of this file run one at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crac_api::{CheckpointError, Context, Core, Outcome, Priority, Resource, ResourceError};
use crac_noop as _;
use crac_tests::kafka::Cluster;
use crac_tests::process::established_connections_to;
use kafka_client::{DeliveryFuture, ProduceError, Producer, ProducerConfig, ProducerRecord};

fn kafka() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(1))
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // Only the noop engine is linked here: these tests exercise the hook, not CRIU
    // (producer_criu.rs does that).
    assert_eq!(Core::engine_name(), Some("noop"));
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `send()` started while the checkpoint runs: how long it waited, what it returned.
type DuringSend = std::thread::JoinHandle<(Duration, Result<DeliveryFuture, ProduceError>)>;

/// Runs after the producer's `before_checkpoint` (file-descriptor level) and records what it
/// sees; optionally starts a `send()` while the checkpoint is in progress.
struct Probe {
    ports: HashSet<u16>,
    producer: Producer,
    send_during: bool,
    seen: Mutex<Option<(usize, usize)>>,
    during: Mutex<Option<DuringSend>>,
}

impl Resource for Probe {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        *self.seen.lock().unwrap() = Some((
            established_connections_to(&self.ports),
            self.producer.pending_records(),
        ));
        if self.send_during {
            let p = self.producer.clone();
            // Timed from here, not from when the thread gets a CPU (late on a loaded machine):
            // the thread is still running after the sleep below, so it waited at least that.
            let t = Instant::now();
            let h = std::thread::spawn(move || {
                let r = p.send(
                    ProducerRecord::new("ckpt")
                        .key(b"during")
                        .value(b"sent-during-checkpoint"),
                );
                (t.elapsed(), r)
            });
            // Give it time to reach the gate; it must still be waiting when the image would
            // be taken.
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                !h.is_finished(),
                "send() returned while the checkpoint was running"
            );
            *self.during.lock().unwrap() = Some(h);
        }
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

fn probe(k: &Cluster, producer: &Producer, send_during: bool) -> Arc<Probe> {
    let p = Arc::new(Probe {
        ports: k.ports(),
        producer: producer.clone(),
        send_during,
        seen: Mutex::new(None),
        during: Mutex::new(None),
    });
    Core::global_context().register_with_priority(&p, Priority::FileDescriptors);
    p
}

#[test]
fn checkpoint_delivers_everything_closes_connections_and_resumes() {
    let _g = serial();
    let k = kafka();
    k.create_topic("ckpt", 3, 1);
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            // Records would sit in the accumulator for 10 s: the drain must send them now.
            .linger(std::time::Duration::from_secs(10))
            .batch_size(1 << 20),
    )
    .unwrap();
    producer
        .send(ProducerRecord::new("ckpt").key(b"warm").value(b"warm-up"))
        .unwrap()
        .wait()
        .unwrap();
    let pid_before = producer.metrics().producer_id;
    assert!(pid_before >= 0);
    let n = 1000;
    let reports: Vec<_> = (0..n)
        .map(|i| {
            let v = format!("before-{i}");
            producer
                .send(ProducerRecord::new("ckpt").key(b"k").value(v.as_bytes()))
                .unwrap()
        })
        .collect();
    assert!(producer.pending_records() > 0);
    assert!(established_connections_to(&k.ports()) > 0);
    let probe = probe(k, &producer, true);

    let t = Instant::now();
    let outcome = Core::checkpoint_restore().expect("checkpoint");
    assert!(matches!(outcome, Outcome::NoImage), "{outcome:?}");
    assert!(
        t.elapsed() < Duration::from_secs(9),
        "drain waited for linger.ms"
    );

    let (conns, pending) = probe.seen.lock().unwrap().expect("probe ran");
    assert_eq!(pending, 0, "unacknowledged records at image time");
    assert_eq!(conns, 0, "broker connections open at image time");
    for r in reports {
        r.wait_timeout(Duration::ZERO)
            .expect("delivered before the image")
            .unwrap();
    }
    // The record sent during the checkpoint went through after the restore.
    let (waited, r) = probe.during.lock().unwrap().take().unwrap().join().unwrap();
    assert!(waited >= Duration::from_millis(500));
    let md = r.unwrap().wait().unwrap();
    assert!(md.offset >= 0);
    let pid_after = producer.metrics().producer_id;
    assert_ne!(
        pid_after, pid_before,
        "a restored producer takes a new producer id"
    );
    producer
        .send(ProducerRecord::new("ckpt").key(b"k").value(b"after"))
        .unwrap()
        .wait()
        .unwrap();
    drop(probe);
    producer.close(Duration::from_secs(10)).unwrap();

    let got = k.consume_all("ckpt", n + 3, Duration::from_secs(60));
    assert_eq!(got.len(), n + 3, "every record exactly once");
    let values: Vec<&str> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some("k"))
        .map(|r| r.value.as_deref().unwrap())
        .collect();
    let mut want: Vec<String> = (0..n).map(|i| format!("before-{i}")).collect();
    want.push("after".into());
    assert_eq!(values, want);
    assert_eq!(
        got.iter()
            .filter(|r| r.key.as_deref() == Some("during"))
            .count(),
        1
    );
}

#[test]
fn drain_that_cannot_finish_aborts_the_checkpoint_and_loses_nothing() {
    let _g = serial();
    let k = kafka();
    k.create_topic("ckpt-down", 2, 1);
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .checkpoint_drain_timeout(Duration::from_secs(3))
            .request_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    producer
        .send(ProducerRecord::new("ckpt-down").key(b"w").value(b"warm"))
        .unwrap()
        .wait()
        .unwrap();
    k.stop_broker(1);
    let reports: Vec<_> = (0..50)
        .map(|i| {
            let v = format!("pending-{i}");
            producer
                .send(
                    ProducerRecord::new("ckpt-down")
                        .key(b"p")
                        .value(v.as_bytes()),
                )
                .unwrap()
        })
        .collect();
    let err = Core::checkpoint_restore().expect_err("the drain cannot finish");
    let CheckpointError::Resources {
        outcome: None,
        failures,
    } = &err
    else {
        panic!("unexpected: {err}");
    };
    assert_eq!(failures.len(), 1, "{err}");
    let msg = failures[0].to_string();
    assert!(failures[0].resource.contains("kafka-producer"), "{msg}");
    assert!(
        msg.contains("50 record(s) not acknowledged within checkpoint.drain.timeout.ms=3000"),
        "{msg}"
    );

    // The producer goes on: accepts records, and delivers everything once the broker is back.
    let more = producer
        .send(
            ProducerRecord::new("ckpt-down")
                .key(b"p")
                .value(b"after-abort"),
        )
        .unwrap();
    k.start_broker(1);
    for r in reports {
        r.wait().unwrap();
    }
    more.wait().unwrap();
    producer.close(Duration::from_secs(10)).unwrap();
    let got = k.consume_all("ckpt-down", 52, Duration::from_secs(60));
    assert_eq!(got.len(), 52);
    let values: Vec<&str> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some("p"))
        .map(|r| r.value.as_deref().unwrap())
        .collect();
    let mut want: Vec<String> = (0..50).map(|i| format!("pending-{i}")).collect();
    want.push("after-abort".into());
    assert_eq!(values, want);
}

#[test]
fn unregistered_producer_keeps_its_connections() {
    let _g = serial();
    let k = kafka();
    k.create_topic("ckpt-off", 1, 1);
    let producer = Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false),
    )
    .unwrap();
    producer
        .send(ProducerRecord::new("ckpt-off").value(b"x"))
        .unwrap()
        .wait()
        .unwrap();
    let probe = probe(k, &producer, false);
    Core::checkpoint_restore().unwrap();
    let (conns, _) = probe.seen.lock().unwrap().unwrap();
    // Without the resource the sockets stay open: with CRIU, the fd check would refuse them.
    assert!(conns > 0);
    drop(probe);
    producer.close(Duration::from_secs(10)).unwrap();
}
