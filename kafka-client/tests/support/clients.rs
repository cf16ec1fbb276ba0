//! Clients set up for tests against the fake broker (`fake_broker.rs`): short backoffs and
//! timeouts so error paths take milliseconds, and helpers to send, fill and read partitions.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use kafka_client::testing::protocol::ErrorCode;
use kafka_client::testing::protocol::record::BatchWriter;
use kafka_client::{Consumer, ConsumerError, Producer, ProducerRecord};

use super::fake_broker::{FakeCluster, Resp};

/// The topic the tests use.
pub const T: &str = "t";
/// How long a test waits for anything before it fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// A producer with `extra` settings over the test defaults.
pub fn producer(cluster: &FakeCluster, extra: &[(&str, &str)]) -> Producer {
    let mut props = vec![
        ("bootstrap.servers", cluster.bootstrap()),
        ("crac.register", "false".into()),
        ("linger.ms", "0".into()),
        ("retry.backoff.ms", "20".into()),
        ("reconnect.backoff.ms", "10".into()),
        ("request.timeout.ms", "1000".into()),
        ("delivery.timeout.ms", "5000".into()),
    ];
    for (k, v) in extra {
        props.retain(|(key, _)| key != k);
        props.push((k, v.to_string()));
    }
    Producer::from_properties(props).expect("producer config")
}

/// Sends `value` to partition `partition` of [`T`].
pub fn send(p: &Producer, partition: i32, value: &str) -> kafka_client::DeliveryFuture {
    p.send(
        ProducerRecord::new(T)
            .partition(partition)
            .value(value.as_bytes()),
    )
    .expect("send")
}

/// The values in partition `partition` of [`T`], in order.
pub fn values(c: &FakeCluster, partition: i32) -> Vec<String> {
    c.records(T, partition)
        .into_iter()
        .map(|v| String::from_utf8(v).unwrap())
        .collect()
}

/// The model's Produce answer with `code` for `partition` (the model has written it: a
/// retry with the same sequence is acknowledged as a duplicate).
pub fn with_partition_error(resp: Resp, partition: i32, code: ErrorCode) -> Resp {
    let Resp::Produce(mut r) = resp else {
        panic!("not a produce response")
    };
    for t in &mut r.topics {
        for p in &mut t.partitions {
            if p.index == partition {
                p.error_code = code;
                p.base_offset = -1;
                p.current_leader = None;
            }
        }
    }
    Resp::Produce(r)
}

/// A consumer (group `g`, manual commits) with `extra` settings over the test defaults.
pub fn consumer(cluster: &FakeCluster, extra: &[(&str, &str)]) -> Consumer {
    let mut props = vec![
        ("bootstrap.servers", cluster.bootstrap()),
        ("group.id", "g".into()),
        ("crac.register", "false".into()),
        ("enable.auto.commit", "false".into()),
        ("auto.offset.reset", "earliest".into()),
        ("retry.backoff.ms", "20".into()),
        ("reconnect.backoff.ms", "10".into()),
        ("fetch.max.wait.ms", "50".into()),
        ("heartbeat.interval.ms", "100".into()),
        ("session.timeout.ms", "3000".into()),
        ("request.timeout.ms", "1000".into()),
    ];
    for (k, v) in extra {
        props.retain(|(key, _)| key != k);
        props.push((k, v.to_string()));
    }
    Consumer::from_properties(props).expect("consumer config")
}

/// Appends one batch of `values` to partition `partition` of [`T`].
pub fn fill(c: &FakeCluster, partition: i32, values: &[&str]) {
    let mut w = BatchWriter::new(
        256,
        kafka_client::testing::protocol::record::Compression::None,
    );
    for v in values {
        w.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    c.append(T, partition, &w.seal(-1, -1, -1).to_vec());
}

/// Polls until `n` records came, or an error.
pub fn poll_n(consumer: &Consumer, n: usize) -> Result<Vec<String>, ConsumerError> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        if Instant::now() > deadline {
            panic!("only {out:?} within {WAIT:?}");
        }
        for r in consumer.poll(Duration::from_millis(50))?.iter() {
            out.push(String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap());
        }
    }
    Ok(out)
}

/// A rebalance listener that records its calls as `"assigned t-0"`, `"revoked t-0"`,
/// `"lost t-0"` (partitions sorted, comma-separated).
#[derive(Clone, Default)]
pub struct Events(pub std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Events {
    /// The calls so far.
    pub fn get(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn push(&self, what: &str, partitions: &[kafka_client::TopicPartition]) {
        let mut names: Vec<String> = partitions.iter().map(|p| p.to_string()).collect();
        names.sort();
        self.0
            .lock()
            .unwrap()
            .push(format!("{what} {}", names.join(",")));
    }
}

impl kafka_client::ConsumerRebalanceListener for Events {
    fn on_partitions_revoked(&mut self, _: &Consumer, p: &[kafka_client::TopicPartition]) {
        self.push("revoked", p);
    }
    fn on_partitions_assigned(&mut self, _: &Consumer, p: &[kafka_client::TopicPartition]) {
        self.push("assigned", p);
    }
    fn on_partitions_lost(&mut self, _: &Consumer, p: &[kafka_client::TopicPartition]) {
        self.push("lost", p);
    }
}

/// Polls until `done()` holds after a poll, collecting the values returned; the first error
/// ends it. Panics after [`WAIT`].
pub fn poll_until(
    consumer: &Consumer,
    mut done: impl FnMut() -> bool,
) -> Result<Vec<String>, ConsumerError> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    loop {
        for r in consumer.poll(Duration::from_millis(20))?.iter() {
            out.push(String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap());
        }
        if done() {
            return Ok(out);
        }
        assert!(
            Instant::now() < deadline,
            "not done within {WAIT:?}; got {out:?}"
        );
    }
}
