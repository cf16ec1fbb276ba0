//! The transactional producer against one real Kafka broker, checked with the Java console
//! consumer in `read_committed` mode: committed transactions are read once, aborted ones
//! never; offsets sent to a transaction are committed with it and only with it; a second
//! producer with the same `transactional.id` fences the first (and aborts what it left
//! open). The tests share one broker (each uses its own topics and ids).

use std::sync::OnceLock;
use std::time::Duration;

use crac_tests::kafka::Cluster;
use kafka_client::ErrorCode;
use kafka_client::{
    Consumer, ConsumerConfig, ConsumerGroupMetadata, OffsetAndMetadata, Producer, ProducerConfig,
    ProducerRecord, TopicPartition, TransactionAction, TransactionError, TransactionState,
};

const IDLE: Duration = Duration::from_secs(6);

fn kafka() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(1))
}

fn transactional(k: &Cluster, id: &str) -> Producer {
    Producer::new(
        ProducerConfig::new(k.bootstrap())
            .unwrap()
            .crac_register(false)
            .transactional_id(id),
    )
    .unwrap()
}

fn send_values(p: &Producer, topic: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let v = format!("{prefix}{i}");
        // Each report completes before the commit returns; the commit's result covers them.
        drop(
            p.send(
                ProducerRecord::new(topic)
                    .key(v.as_bytes())
                    .value(v.as_bytes()),
            )
            .unwrap(),
        );
    }
}

fn values(records: &[crac_tests::kafka::ConsumedRecord]) -> Vec<String> {
    let mut v: Vec<String> = records.iter().filter_map(|r| r.value.clone()).collect();
    v.sort();
    v
}

#[test]
fn committed_transactions_are_read_once_and_aborted_ones_never() {
    let k = kafka();
    k.create_topic("tx-a", 3, 1);
    let p = transactional(k, "tx-a-producer");
    assert_eq!(p.transaction_state(), Some(TransactionState::Uninitialized));
    let e = p.send(ProducerRecord::new("tx-a").value(b"x")).unwrap_err();
    assert!(e.to_string().contains("init_transactions()"), "{e}");
    p.init_transactions().unwrap();
    assert_eq!(p.transaction_state(), Some(TransactionState::Ready));

    p.begin_transaction().unwrap();
    send_values(&p, "tx-a", "c1-", 100);
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, "tx-a", "ab-", 50);
    p.flush().unwrap(); // written to the log, then aborted
    p.abort_transaction().unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, "tx-a", "c2-", 100);
    p.commit_transaction().unwrap();
    // Nothing in a transaction: begin/commit without records costs no request.
    p.begin_transaction().unwrap();
    p.commit_transaction().unwrap();
    let e = p.commit_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::FixApplication, "{e}");
    p.close(Duration::from_secs(10)).unwrap();

    let committed = k.consume_committed("tx-a", 200, IDLE);
    let got = values(&committed);
    let mut want: Vec<String> = (0..100)
        .flat_map(|i| [format!("c1-{i}"), format!("c2-{i}")])
        .collect();
    want.sort();
    assert_eq!(got, want, "read_committed sees each committed record once");
    // The aborted records are in the log all the same.
    let all = k.consume_all("tx-a", 250, IDLE);
    assert_eq!(all.len(), 250);
}

#[test]
fn offsets_sent_to_a_transaction_are_committed_with_it_only() {
    let k = kafka();
    k.create_topic("tx-in", 2, 1);
    k.create_topic("tx-out", 2, 1);
    let input: Vec<String> = (0..20).map(|i| format!("in-{i}")).collect();
    let input: Vec<(Option<&str>, &str)> = input.iter().map(|v| (None, v.as_str())).collect();
    k.java_produce("tx-in", &input);
    let consumer = Consumer::new(
        ConsumerConfig::from_properties([
            ("bootstrap.servers", k.bootstrap()),
            ("group.id", "tx-readers"),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("crac.register", "false"),
        ])
        .unwrap(),
    )
    .unwrap();
    consumer.subscribe(["tx-in"]).unwrap();
    let mut read = Vec::new();
    while read.len() < 20 {
        read.extend(consumer.poll(Duration::from_millis(500)).unwrap());
    }
    let p = transactional(k, "tx-offsets");
    p.init_transactions().unwrap();
    let offsets = |upto: i64| -> Vec<(TopicPartition, OffsetAndMetadata)> {
        [0, 1]
            .iter()
            .map(|&part| {
                let n = read
                    .iter()
                    .filter(|r| r.partition == part && r.offset < upto)
                    .map(|r| r.offset + 1)
                    .max()
                    .unwrap_or(0);
                (
                    TopicPartition::new("tx-in", part),
                    OffsetAndMetadata::new(n),
                )
            })
            .collect()
    };
    // Aborted: the group's offsets stay where they were.
    p.begin_transaction().unwrap();
    send_values(&p, "tx-out", "o-", 5);
    p.send_offsets_to_transaction(&offsets(3), &consumer.group_metadata())
        .unwrap();
    p.abort_transaction().unwrap();
    let tps = [
        TopicPartition::new("tx-in", 0),
        TopicPartition::new("tx-in", 1),
    ];
    let committed = consumer.committed(&tps, Duration::from_secs(10)).unwrap();
    assert!(
        committed.iter().all(|(_, o)| o.is_none()),
        "an aborted transaction commits no offset: {committed:?}"
    );
    // Committed: they move with the transaction.
    p.begin_transaction().unwrap();
    send_values(&p, "tx-out", "o-", 5);
    p.send_offsets_to_transaction(&offsets(i64::MAX), &consumer.group_metadata())
        .unwrap();
    p.commit_transaction().unwrap();
    let committed = consumer.committed(&tps, Duration::from_secs(10)).unwrap();
    for (tp, o) in &committed {
        let want = read.iter().filter(|r| r.partition == tp.partition).count() as i64;
        assert_eq!(o.as_ref().map(|o| o.offset), Some(want), "{tp}");
    }
    // A member the group does not know (KIP-447) cannot commit: the transaction must abort.
    p.begin_transaction().unwrap();
    let stranger = ConsumerGroupMetadata {
        group_id: Some("tx-readers".into()),
        generation_id: 999,
        member_id: "not-a-member".into(),
        group_instance_id: None,
    };
    let e = p
        .send_offsets_to_transaction(&offsets(i64::MAX), &stranger)
        .unwrap_err();
    assert_eq!(e.action(), TransactionAction::AbortAndRetry, "{e}");
    assert!(
        matches!(
            e.code(),
            None | Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration)
        ),
        "{e}"
    );
    assert_eq!(
        p.transaction_state(),
        Some(TransactionState::AbortableError)
    );
    let e = p.commit_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::AbortAndRetry, "{e}");
    p.abort_transaction().unwrap();
    p.close(Duration::from_secs(10)).unwrap();
    consumer.close(Duration::from_secs(10)).unwrap();
    assert_eq!(k.consume_committed("tx-out", 5, IDLE).len(), 5);
}

#[test]
fn a_second_producer_with_the_same_id_fences_the_first() {
    let k = kafka();
    k.create_topic("tx-fence", 2, 1);
    let first = transactional(k, "tx-fenced");
    first.init_transactions().unwrap();
    first.begin_transaction().unwrap();
    send_values(&first, "tx-fence", "zombie-", 10);
    first.flush().unwrap();
    // The new instance: its init aborts what the first left open, and fences it.
    let second = transactional(k, "tx-fenced");
    second.init_transactions().unwrap();
    let e = first.commit_transaction().unwrap_err();
    assert!(
        matches!(e, TransactionError::Fenced { .. }),
        "commit of the zombie: {e}"
    );
    assert_eq!(e.action(), TransactionAction::CloseProducer);
    assert_eq!(
        first.transaction_state(),
        Some(TransactionState::FatalError)
    );
    let e = first.begin_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::CloseProducer, "{e}");
    let e = first
        .send(ProducerRecord::new("tx-fence").value(b"late"))
        .unwrap_err();
    assert!(e.to_string().contains("fenced"), "{e}");
    first.close(Duration::from_secs(10)).unwrap();

    second.begin_transaction().unwrap();
    send_values(&second, "tx-fence", "live-", 10);
    second.commit_transaction().unwrap();
    second.close(Duration::from_secs(10)).unwrap();
    let got = values(&k.consume_committed("tx-fence", 10, IDLE));
    assert!(got.iter().all(|v| v.starts_with("live-")), "{got:?}");
    assert_eq!(got.len(), 10);
}
