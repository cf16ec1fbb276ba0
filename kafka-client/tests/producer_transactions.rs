//! The transactional producer against the fake broker (`support/fake_broker.rs`): the order
//! of its requests, the errors Java's `TransactionManagerTest` sorts into fatal, abortable and
//! retried, calls that time out and are made again, calls the state does not allow, and what
//! a checkpoint does with an open transaction (the hooks called directly, as an engine would;
//! no image). Real brokers show the capability in `tests/tests/producer_transactions.rs` and
//! `tests/tests/transactions_criu.rs`.

use std::time::{Duration, Instant};

use crac_api::Context;
use kafka_client::testing::protocol::messages::InitProducerIdResponse;
use kafka_client::testing::protocol::messages::end_txn::EndTxnResponse;
use kafka_client::testing::protocol::{ApiKey, ErrorCode};
use kafka_client::{
    ConsumerGroupMetadata, OffsetAndMetadata, ProduceError, Producer, ProducerRecord,
    TopicPartition, TransactionAction, TransactionError, TransactionState,
};

mod support;
use support::clients::{T, WAIT, producer};
use support::fake_broker::{Action, FakeCluster, Req, Resp, Seen};

const ID: &str = "svc-1";

fn txn_producer(c: &FakeCluster, extra: &[(&str, &str)]) -> Producer {
    let mut props = vec![("transactional.id", ID)];
    props.extend_from_slice(extra);
    producer(c, &props)
}

fn send(p: &Producer, partition: i32, value: &str) {
    drop(
        p.send(
            ProducerRecord::new(T)
                .partition(partition)
                .value(value.as_bytes()),
        )
        .expect("send"),
    );
}

fn cluster() -> FakeCluster {
    let c = FakeCluster::start(2);
    c.create_topic(T, 2);
    c
}

/// Every request seen, in order, by API.
fn apis(c: &FakeCluster) -> Vec<ApiKey> {
    let mut all: Vec<Seen> = [
        ApiKey::FindCoordinator,
        ApiKey::InitProducerId,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
        ApiKey::Produce,
    ]
    .into_iter()
    .flat_map(|a| c.seen(a))
    .collect();
    all.sort_by_key(|s| s.at);
    all.iter().map(Seen::api).collect()
}

fn reply_end_txn(code: ErrorCode) -> impl FnMut(&Seen, Resp) -> Action + Send {
    move |_, _| {
        Action::Reply(Resp::EndTxn(EndTxnResponse {
            throttle_time_ms: 0,
            error_code: code,
        }))
    }
}

fn group(generation_id: i32) -> ConsumerGroupMetadata {
    ConsumerGroupMetadata {
        group_id: Some("g".into()),
        generation_id,
        member_id: "member-1".into(),
        group_instance_id: None,
    }
}

#[test]
fn a_transaction_adds_its_partitions_before_writing_and_ends_after_every_answer() {
    let c = cluster();
    let p = txn_producer(&c, &[("transaction.timeout.ms", "12345")]);
    p.init_transactions().unwrap();
    let find = c.seen(ApiKey::FindCoordinator);
    let Req::FindCoordinator(f) = &find[0].req else {
        unreachable!()
    };
    assert_eq!(
        (f.key_type, f.coordinator_keys.as_slice()),
        (1, [ID.to_owned()].as_slice())
    );
    let Req::InitProducerId(init) = &c.seen(ApiKey::InitProducerId)[0].req else {
        unreachable!()
    };
    assert_eq!(init.transactional_id.as_deref(), Some(ID));
    assert_eq!(init.transaction_timeout_ms, 12345);

    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    send(&p, 1, "b");
    p.send_offsets_to_transaction(
        &[(TopicPartition::new("in", 0), OffsetAndMetadata::new(42))],
        &group(0),
    )
    .unwrap();
    p.commit_transaction().unwrap();
    let order = apis(&c);
    let first_produce = order.iter().position(|a| *a == ApiKey::Produce).unwrap();
    let add = order
        .iter()
        .position(|a| *a == ApiKey::AddPartitionsToTxn)
        .unwrap();
    assert!(
        add < first_produce,
        "partitions added before the records: {order:?}"
    );
    assert_eq!(*order.last().unwrap(), ApiKey::EndTxn, "{order:?}");
    let offsets = order
        .iter()
        .position(|a| *a == ApiKey::TxnOffsetCommit)
        .unwrap();
    let add_offsets = order
        .iter()
        .position(|a| *a == ApiKey::AddOffsetsToTxn)
        .unwrap();
    assert!(add_offsets < offsets, "{order:?}");
    // The group's coordinator was looked up for the offsets.
    let keys: Vec<i8> = c
        .seen(ApiKey::FindCoordinator)
        .iter()
        .map(|s| match &s.req {
            Req::FindCoordinator(f) => f.key_type,
            _ => unreachable!(),
        })
        .collect();
    assert!(keys.contains(&0), "{keys:?}");
    for s in c.seen(ApiKey::Produce) {
        let Req::Produce(pr) = &s.req else {
            unreachable!()
        };
        assert_eq!(pr.transactional_id.as_deref(), Some(ID));
        assert!(s.version <= 11, "transactions v1 stop at Produce v11");
        assert!(pr.batches().iter().all(|(_, _, b)| b.is_transactional()));
    }
    let Req::EndTxn(end) = &c.seen(ApiKey::EndTxn)[0].req else {
        unreachable!()
    };
    assert!(end.committed);
    c.model(|m| {
        assert_eq!(m.transactions[ID].commits, 1);
        assert_eq!(m.committed.get(&("in".to_owned(), 0)), Some(&42));
    });
    // A transaction with nothing in it ends without a request.
    let ends = c.seen(ApiKey::EndTxn).len();
    p.begin_transaction().unwrap();
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.abort_transaction().unwrap();
    assert_eq!(c.seen(ApiKey::EndTxn).len(), ends);
    p.close(WAIT).unwrap();
}

#[test]
fn fencing_is_fatal_and_every_later_call_says_to_close_the_producer() {
    let c = cluster();
    let p = txn_producer(&c, &[]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    c.on(ApiKey::EndTxn, 1, reply_end_txn(ErrorCode::ProducerFenced));
    let e = p.commit_transaction().unwrap_err();
    assert!(
        matches!(
            e,
            TransactionError::Fenced {
                code: ErrorCode::ProducerFenced,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.action(), TransactionAction::CloseProducer);
    assert!(e.to_string().contains("KAFKA_TRANSACTIONAL_ID"), "{e}");
    assert_eq!(p.transaction_state(), Some(TransactionState::FatalError));
    for e in [
        p.begin_transaction().unwrap_err(),
        p.abort_transaction().unwrap_err(),
    ] {
        assert_eq!(e.action(), TransactionAction::CloseProducer, "{e}");
    }
    let e = p.send(ProducerRecord::new(T).value(b"x")).unwrap_err();
    assert!(
        matches!(&e, ProduceError::Transaction(t) if t.is_fatal()),
        "{e}"
    );
    p.close(WAIT).unwrap();
}

#[test]
fn an_older_epoch_or_a_refused_transactional_id_is_fatal() {
    // A second instance took the id over: the first one's AddPartitionsToTxn is refused.
    let c = cluster();
    let first = txn_producer(&c, &[]);
    first.init_transactions().unwrap();
    let second = txn_producer(&c, &[]);
    second.init_transactions().unwrap();
    first.begin_transaction().unwrap();
    send(&first, 0, "zombie");
    let e = first.commit_transaction().unwrap_err();
    assert!(matches!(e, TransactionError::Fenced { .. }), "{e}");
    second.begin_transaction().unwrap();
    send(&second, 0, "live");
    second.commit_transaction().unwrap();
    assert_eq!(support::clients::values(&c, 0), ["live"]);

    let c = cluster();
    c.on(ApiKey::InitProducerId, 1, |_, _| {
        Action::Reply(Resp::InitProducerId(InitProducerIdResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::TransactionalIdAuthorizationFailed,
            producer_id: -1,
            producer_epoch: -1,
        }))
    });
    let p = txn_producer(&c, &[]);
    let e = p.init_transactions().unwrap_err();
    assert_eq!(e.action(), TransactionAction::CloseProducer, "{e}");
    assert!(e.to_string().contains("not authorized"), "{e}");
}

#[test]
fn a_failed_record_makes_the_transaction_abortable_and_the_abort_takes_a_new_epoch() {
    let c = cluster();
    let p = txn_producer(&c, &[]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    p.flush().unwrap();
    // The broker refuses the next batch of partition 0 (after it had the first).
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Reply(support::clients::with_partition_error(
            r,
            0,
            ErrorCode::InvalidRecord,
        ))
    });
    send(&p, 0, "bad");
    let e = p.commit_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::AbortAndRetry, "{e}");
    assert!(matches!(e, TransactionError::Abortable { .. }), "{e}");
    assert_eq!(
        p.transaction_state(),
        Some(TransactionState::AbortableError)
    );
    let e = p.send(ProducerRecord::new(T).value(b"x")).unwrap_err();
    assert!(
        matches!(&e, ProduceError::Transaction(t) if t.action() == TransactionAction::AbortAndRetry),
        "{e}"
    );
    p.abort_transaction().unwrap();
    // EndTxn(abort), then the same producer id with the next epoch (KIP-360).
    let Req::EndTxn(end) = &c.seen(ApiKey::EndTxn)[0].req else {
        unreachable!()
    };
    assert!(!end.committed);
    let inits = c.seen(ApiKey::InitProducerId);
    assert_eq!(inits.len(), 2);
    let (Req::InitProducerId(i0), Req::InitProducerId(i1)) = (&inits[0].req, &inits[1].req) else {
        unreachable!()
    };
    assert_eq!(i0.producer_id, -1);
    let pid = c.model(|m| m.transactions[ID].producer_id);
    assert_eq!((i1.producer_id, i1.producer_epoch), (pid, 0));
    // The next transaction writes under epoch 1 from sequence 0.
    p.begin_transaction().unwrap();
    let report = p
        .send(ProducerRecord::new(T).partition(0).value(b"c"))
        .unwrap();
    p.commit_transaction().unwrap();
    report.wait().unwrap();
    let seqs = c.produced_sequences(T, 0);
    assert_eq!(*seqs.last().unwrap(), (pid, 1, 0), "{seqs:?}");
    assert_eq!(p.metrics().producer_epoch_bumps, 1);
}

#[test]
fn moved_coordinators_and_concurrent_transactions_are_retried() {
    let c = cluster();
    let mut first = true;
    c.on(ApiKey::InitProducerId, 1, move |_, r| {
        assert!(std::mem::take(&mut first));
        let Resp::InitProducerId(mut r) = r else {
            unreachable!()
        };
        r.error_code = ErrorCode::ConcurrentTransactions;
        Action::Reply(Resp::InitProducerId(r))
    });
    let p = txn_producer(&c, &[]);
    p.init_transactions().unwrap();
    assert_eq!(c.seen(ApiKey::InitProducerId).len(), 2);
    p.begin_transaction().unwrap();
    send(&p, 1, "x");
    c.on(ApiKey::EndTxn, 1, reply_end_txn(ErrorCode::NotCoordinator));
    let finds = c.seen(ApiKey::FindCoordinator).len();
    p.commit_transaction().unwrap();
    assert_eq!(c.seen(ApiKey::EndTxn).len(), 2);
    assert!(
        c.seen(ApiKey::FindCoordinator).len() > finds,
        "the coordinator was looked up again"
    );
    // (The model applied the first EndTxn too: a script replaces only its answer.)
    let Req::EndTxn(end) = &c.seen(ApiKey::EndTxn)[1].req else {
        unreachable!()
    };
    assert!(end.committed);
}

#[test]
fn offsets_of_another_generation_make_the_transaction_abortable() {
    let c = cluster();
    let p = txn_producer(&c, &[]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    let e = p
        .send_offsets_to_transaction(
            &[(TopicPartition::new("in", 0), OffsetAndMetadata::new(1))],
            &group(77),
        )
        .unwrap_err();
    assert_eq!(e.action(), TransactionAction::AbortAndRetry, "{e}");
    assert!(e.to_string().contains("consumer group moved on"), "{e}");
    p.abort_transaction().unwrap();
    c.model(|m| {
        assert!(m.committed.is_empty());
        assert_eq!(m.transactions[ID].aborts, 1);
    });
}

#[test]
fn a_call_that_timed_out_goes_on_and_is_waited_for_again() {
    let c = cluster();
    let p = txn_producer(
        &c,
        &[("max.block.ms", "500"), ("request.timeout.ms", "4000")],
    );
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    c.on(ApiKey::EndTxn, 1, |_, r| {
        Action::Delay(Duration::from_millis(1500), Box::new(Action::Reply(r)))
    });
    let e = p.commit_transaction().unwrap_err();
    assert!(matches!(e, TransactionError::Timeout { .. }), "{e}");
    assert_eq!(e.action(), TransactionAction::RetryCall);
    // Another call meanwhile is told to make the same one again.
    let e = p.abort_transaction().unwrap_err();
    assert!(
        e.to_string().contains("commit_transaction() timed out"),
        "{e}"
    );
    let deadline = Instant::now() + WAIT;
    loop {
        match p.commit_transaction() {
            Ok(()) => break,
            Err(TransactionError::Timeout { .. }) if Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        c.seen(ApiKey::EndTxn).len(),
        1,
        "one commit, waited for twice"
    );
    p.close(WAIT).unwrap();
}

#[test]
fn calls_the_state_does_not_allow_name_the_call_to_make() {
    let c = cluster();
    let p = txn_producer(&c, &[]);
    let e = p.begin_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::FixApplication);
    assert!(e.to_string().contains("init_transactions()"), "{e}");
    p.init_transactions().unwrap();
    let e = p.init_transactions().unwrap_err();
    assert_eq!(e.action(), TransactionAction::FixApplication, "{e}");
    let e = p.send(ProducerRecord::new(T).value(b"x")).unwrap_err();
    assert!(e.to_string().contains("begin_transaction()"), "{e}");
    let e = p.abort_transaction().unwrap_err();
    assert!(e.to_string().contains("no transaction is open"), "{e}");
    p.begin_transaction().unwrap();
    let e = p.begin_transaction().unwrap_err();
    assert!(e.to_string().contains("commit or abort it first"), "{e}");
    p.abort_transaction().unwrap();
    // Without transactional.id.
    let plain = producer(&c, &[]);
    let e = plain.begin_transaction().unwrap_err();
    assert!(
        matches!(e, TransactionError::NotTransactional { .. }),
        "{e}"
    );
    assert_eq!(plain.transaction_state(), None);
    // An aborted transaction's unsent records get their own error.
    let p2 = txn_producer(
        &c,
        &[
            ("linger.ms", "60000"),
            ("delivery.timeout.ms", "120000"),
            ("batch.size", "100000"),
        ],
    );
    p2.init_transactions().unwrap();
    p2.begin_transaction().unwrap();
    let report = p2
        .send(ProducerRecord::new(T).partition(0).value(b"never"))
        .unwrap();
    p2.abort_transaction().unwrap();
    let e = report.wait().unwrap_err();
    assert!(
        matches!(
            &e,
            ProduceError::Transaction(TransactionError::Aborted { .. })
        ),
        "{e}"
    );
}

// --- checkpoint ------------------------------------------------------------------------------

/// A checkpoint of `p` as an engine runs it (the transaction's resource, then the producer's),
/// in another thread; returns its outcome.
fn checkpoint(p: &Producer) -> std::thread::JoinHandle<Result<(), String>> {
    let txn = p.transaction_resource().unwrap();
    let prod = p.as_resource();
    std::thread::spawn(move || {
        let ctx = Context::new("test");
        txn.before_checkpoint(&ctx).map_err(|e| e.to_string())?;
        prod.before_checkpoint(&ctx).map_err(|e| e.to_string())
    })
}

fn restore(p: &Producer) {
    let ctx = Context::new("test");
    p.as_resource().after_restore(&ctx).unwrap();
    p.transaction_resource()
        .unwrap()
        .after_restore(&ctx)
        .unwrap();
}

#[test]
fn the_wait_policy_lets_the_open_transaction_commit_and_no_other_begin_before_the_restore() {
    let c = cluster();
    let p = txn_producer(&c, &[]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    let ck = checkpoint(&p);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !ck.is_finished(),
        "the checkpoint waits for the open transaction"
    );
    send(&p, 1, "b"); // the open transaction goes on
    p.commit_transaction().unwrap();
    ck.join().unwrap().unwrap();
    // The next transaction begins only after the restore.
    let begin = {
        let p = p.clone();
        std::thread::spawn(move || p.begin_transaction())
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!begin.is_finished(), "begin waits for the restore");
    let inits = c.seen(ApiKey::InitProducerId).len();
    restore(&p);
    begin.join().unwrap().unwrap();
    // The restored producer took its producer id again (keep: the same transactional.id).
    assert_eq!(c.seen(ApiKey::InitProducerId).len(), inits + 1);
    assert_eq!(p.transactional_id().as_deref(), Some(ID));
    send(&p, 0, "c");
    p.commit_transaction().unwrap();
    assert_eq!(support::clients::values(&c, 0), ["a", "c"]);
    c.model(|m| assert_eq!(m.transactions[ID].commits, 2));
}

#[test]
fn a_transaction_still_open_at_the_drain_timeout_fails_the_checkpoint_and_goes_on() {
    let c = cluster();
    let p = txn_producer(&c, &[("checkpoint.drain.timeout.ms", "400")]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    let e = checkpoint(&p).join().unwrap().unwrap_err();
    assert!(
        e.contains("still open") && e.contains("checkpoint.transaction.policy=abort"),
        "{e}"
    );
    // No image: the gate is open again and the transaction commits.
    restore(&p);
    p.commit_transaction().unwrap();
    p.begin_transaction().unwrap();
    p.commit_transaction().unwrap();
}

#[test]
fn the_abort_policy_aborts_the_open_transaction_and_the_application_hears_it_as_abortable() {
    let c = cluster();
    let p = txn_producer(
        &c,
        &[
            ("checkpoint.transaction.policy", "abort"),
            ("crac.transactional.id.policy", "unique"),
        ],
    );
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send(&p, 0, "a");
    p.flush().unwrap();
    checkpoint(&p).join().unwrap().unwrap();
    let Req::EndTxn(end) = &c.seen(ApiKey::EndTxn)[0].req else {
        unreachable!()
    };
    assert!(!end.committed, "aborted before the image");
    restore(&p);
    // The application's next call on its transaction says to abort and retry.
    let e = p.send(ProducerRecord::new(T).value(b"x")).unwrap_err();
    assert!(e.to_string().contains("checkpoint aborted it"), "{e}");
    let e = p.commit_transaction().unwrap_err();
    assert_eq!(e.action(), TransactionAction::AbortAndRetry, "{e}");
    p.abort_transaction().unwrap();
    assert_eq!(c.seen(ApiKey::EndTxn).len(), 1, "aborted once");
    // The restored copy runs under an id of its own (policy unique).
    let id = p.transactional_id().unwrap();
    assert!(id.starts_with("svc-1-crac0-"), "{id}");
    let inits = c.seen(ApiKey::InitProducerId);
    let Req::InitProducerId(init) = &inits.last().unwrap().req else {
        unreachable!()
    };
    assert_eq!(init.transactional_id.as_deref(), Some(id.as_str()));
    p.begin_transaction().unwrap();
    send(&p, 0, "b");
    p.commit_transaction().unwrap();
    assert_eq!(support::clients::values(&c, 0), ["a", "b"]);
    c.model(|m| {
        assert_eq!(m.transactions[ID].aborts, 1);
        assert_eq!(m.transactions[id.as_str()].commits, 1);
    });
}
