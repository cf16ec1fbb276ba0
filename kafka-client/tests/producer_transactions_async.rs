//! The transactional producer's calls as futures, against the fake broker
//! (`support/fake_broker.rs`), on a current-thread tokio runtime: a whole transaction whose
//! coordinator answers late keeps a 1 ms ticker on the same thread ticking; a commit future
//! dropped before its outcome leaves the commit going and the same call made again waits for
//! it; a begin awaits a checkpoint's end by parking its task. The blocking calls and the
//! futures run the same steps (`producer/transaction/calls.rs`); `producer_transactions.rs`
//! covers the error rules through the blocking calls.

use std::time::Duration;

use crac_api::Context;
use kafka_client::testing::protocol::ApiKey;
use kafka_client::{
    ConsumerGroupMetadata, OffsetAndMetadata, Producer, ProducerRecord, TopicPartition,
    TransactionError,
};
use parking_lot::Mutex;

mod support;
use support::clients::{T, WAIT, producer, values};
use support::fake_broker::{Action, FakeCluster};
use support::ticker::Ticker;

/// One test at a time: the ticker measures its thread's scheduling.
static SERIAL: Mutex<()> = Mutex::new(());

const ID: &str = "svc-async";

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn setup() -> (FakeCluster, Producer) {
    let c = FakeCluster::start(2);
    c.create_topic(T, 2);
    let p = producer(&c, &[("transactional.id", ID)]);
    (c, p)
}

fn late(api: ApiKey, c: &FakeCluster, ms: u64) {
    c.on(api, usize::MAX, move |_, r| {
        Action::Delay(Duration::from_millis(ms), Box::new(Action::Reply(r)))
    });
}

fn record(partition: i32, value: &str) -> ProducerRecord<'_> {
    ProducerRecord::new(T)
        .partition(partition)
        .value(value.as_bytes())
}

#[test]
fn a_transaction_awaited_call_by_call_never_blocks_the_runtime() {
    let _serial = SERIAL.lock();
    let (c, p) = setup();
    // Every coordinator answer comes 150 ms late: each call waits that long at least.
    for api in [
        ApiKey::InitProducerId,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
    ] {
        late(api, &c, 150);
    }
    let group = ConsumerGroupMetadata {
        group_id: Some("g".into()),
        generation_id: 0,
        member_id: "member-1".into(),
        group_instance_id: None,
    };
    let rt = current_thread();
    let gap = rt.block_on(async {
        let tick = Ticker::start();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tick.reset();
        p.init_transactions_async().await.unwrap();
        for (round, value) in ["a", "b"].into_iter().enumerate() {
            p.begin_transaction_async().await.unwrap();
            // In the transaction once accepted (its partition's metadata may be awaited).
            let report = p
                .send_async(record(round as i32, value))
                .accepted()
                .await
                .unwrap();
            p.send_offsets_to_transaction_async(
                &[(TopicPartition::new("in", 0), OffsetAndMetadata::new(7))],
                &group,
            )
            .await
            .unwrap();
            if value == "a" {
                p.commit_transaction_async().await.unwrap();
                report.await.unwrap();
            } else {
                // Acknowledged before the abort or failed by it, as in Java.
                p.abort_transaction_async().await.unwrap();
                drop(report);
            }
        }
        tick.stop()
    });
    assert_eq!(values(&c, 0), ["a"]);
    c.model(|m| {
        assert_eq!(m.transactions[ID].commits, 1);
        assert_eq!(m.transactions[ID].aborts, 1);
    });
    assert!(
        gap < Duration::from_millis(20),
        "the runtime's only thread was held {gap:?} while the calls waited"
    );
    p.close(WAIT).unwrap();
}

#[test]
fn a_commit_future_dropped_early_goes_on_and_the_same_call_waits_for_it() {
    let _serial = SERIAL.lock();
    let (c, p) = setup();
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    drop(p.send(record(0, "a")).unwrap());
    late(ApiKey::EndTxn, &c, 500);
    let rt = current_thread();
    rt.block_on(async {
        // Given up after 50 ms: the future is dropped, its commit goes on.
        let cut = tokio::time::timeout(Duration::from_millis(50), p.commit_transaction_async());
        assert!(cut.await.is_err(), "the commit cannot be over in 50 ms");
        // Another call meanwhile is told to make the same one again.
        let e = p.abort_transaction_async().await.unwrap_err();
        assert!(
            matches!(e, TransactionError::InvalidState { .. })
                && e.to_string().contains("commit_transaction() timed out"),
            "{e}"
        );
        p.commit_transaction_async().await.unwrap();
    });
    assert_eq!(c.seen(ApiKey::EndTxn).len(), 1, "one commit, awaited twice");
    assert_eq!(values(&c, 0), ["a"]);
    p.close(WAIT).unwrap();
}

#[test]
fn a_begin_awaits_the_end_of_a_checkpoint_by_parking_its_task() {
    let _serial = SERIAL.lock();
    let (c, p) = setup();
    p.init_transactions().unwrap();
    // The checkpoint's hooks as an engine calls them: no transaction begins until after.
    let ctx = Context::new("test");
    let txn = p.transaction_resource().unwrap();
    txn.before_checkpoint(&ctx).unwrap();
    p.as_resource().before_checkpoint(&ctx).unwrap();
    let rt = current_thread();
    let (gap, inits_before) = rt.block_on(async {
        let tick = Ticker::start();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tick.reset();
        let begin = tokio::spawn({
            let p = p.clone();
            async move { p.begin_transaction_async().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!begin.is_finished(), "begin waits for the checkpoint's end");
        // Measured while the begin waited; the hooks below are the engine's blocking calls.
        let gap = tick.stop();
        let inits = c.seen(ApiKey::InitProducerId).len();
        // A restore: the copy takes its producer id again, then the begin goes on.
        let ctx = Context::new("test");
        p.as_resource().after_restore(&ctx).unwrap();
        txn.after_restore(&ctx).unwrap();
        begin.await.unwrap().unwrap();
        (gap, inits)
    });
    assert_eq!(c.seen(ApiKey::InitProducerId).len(), inits_before + 1);
    assert!(
        gap < Duration::from_millis(20),
        "the runtime was held {gap:?}"
    );
    drop(p.send(record(1, "b")).unwrap());
    p.commit_transaction().unwrap();
    assert_eq!(values(&c, 1), ["b"]);
    p.close(WAIT).unwrap();
}

#[test]
fn a_send_accepted_only_after_its_transaction_ended_fails_and_sends_nothing() {
    let _serial = SERIAL.lock();
    let (c, p) = setup();
    p.init_transactions().unwrap();
    let rt = current_thread();
    rt.block_on(async {
        p.begin_transaction_async().await.unwrap();
        // The topic's metadata is not known yet: the record waits to be accepted.
        let early = p.send_async(record(0, "late"));
        assert!(!early.is_accepted());
        p.commit_transaction_async().await.unwrap();
        p.begin_transaction_async().await.unwrap();
        // Polled now, it would land in the next transaction: refused instead.
        let e = early.await.unwrap_err();
        assert!(e.to_string().contains("accepted()"), "{e}");
        drop(p.send_async(record(0, "next")).accepted().await.unwrap());
    });
    p.commit_transaction().unwrap();
    assert_eq!(values(&c, 0), ["next"], "the refused record was never sent");
    p.close(WAIT).unwrap();
}
