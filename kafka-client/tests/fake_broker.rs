//! Error paths against the fake broker (`support/fake_broker.rs`), the cases Java's
//! `SenderTest`, `RecordAccumulatorTest`, `TransactionManagerTest` and
//! `ConsumerCoordinatorTest` cover, and the checkpoint path when the client thread or the
//! broker is late. Each test starts its own fake cluster on 127.0.0.1 and takes well under a
//! few seconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crac_api::Context;
use kafka_client::testing::protocol::ApiKey;
use kafka_client::testing::protocol::ErrorCode;
use kafka_client::{Consumer, ConsumerError, ProducerRecord, TopicPartition};

mod support;
use support::clients::{
    T, WAIT, consumer, fill, poll_n, producer, send, values, with_partition_error,
};
use support::fake_broker::{Action, FakeCluster, Req, Resp};

// --- the fake broker itself ------------------------------------------------------------------

#[test]
fn the_fake_broker_serves_a_producer_and_logs_what_it_was_sent() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 2);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    send(&p, 1, "b").wait().unwrap();
    assert_eq!(values(&c, 0), ["a"]);
    assert_eq!(values(&c, 1), ["b"]);
    assert!(!c.seen(ApiKey::InitProducerId).is_empty());
    let produce = c.seen(ApiKey::Produce);
    let Req::Produce(first) = &produce[0].req else {
        unreachable!()
    };
    assert_eq!(first.acks, -1);
    p.close(WAIT).unwrap();
}

#[test]
fn the_bootstrap_connection_serves_the_broker_at_its_address() {
    // The metadata names broker 0 at the bootstrap address: the producer keeps the connection
    // it bootstrapped on (one TCP connect, one ApiVersions), as after every restore.
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    let all: Vec<_> = [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::InitProducerId,
        ApiKey::Produce,
    ]
    .iter()
    .flat_map(|a| c.seen(*a))
    .collect();
    assert_eq!(c.seen(ApiKey::ApiVersions).len(), 1, "{all:?}");
    assert!(all.iter().all(|s| s.conn == all[0].conn), "{all:?}");
    // And it still serves after the broker drops it: a new connection, the same records path.
    c.drop_connections();
    send(&p, 0, "b").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b"]);
    p.close(WAIT).unwrap();
}

// --- Sender / RecordAccumulator ----------------------------------------------------------------

#[test]
fn a_retriable_error_is_retried_after_the_backoff_and_written_once() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    c.on(ApiKey::Produce, 2, |_, r| {
        Action::Reply(with_partition_error(r, 0, ErrorCode::NotEnoughReplicas))
    });
    let p = producer(&c, &[("retry.backoff.ms", "150")]);
    send(&p, 0, "a").wait().unwrap();
    assert_eq!(values(&c, 0), ["a"]);
    let at: Vec<Instant> = c.seen(ApiKey::Produce).iter().map(|s| s.at).collect();
    assert_eq!(at.len(), 3);
    // Exponential: 150 ms, then 300 ms.
    assert!(
        at[1] - at[0] >= Duration::from_millis(140),
        "{:?}",
        at[1] - at[0]
    );
    assert!(
        at[2] - at[1] >= Duration::from_millis(280),
        "{:?}",
        at[2] - at[1]
    );
}

#[test]
fn not_leader_with_the_new_leader_in_the_response_goes_to_it() {
    let c = FakeCluster::start(2);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    // Leadership moves to node 1: node 0 answers NOT_LEADER_OR_FOLLOWER naming it.
    c.set_leader(T, 0, 1, 1);
    send(&p, 0, "b").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b"]);
    let produce = c.seen(ApiKey::Produce);
    assert_eq!(produce.last().unwrap().node, 1);
}

#[test]
fn not_leader_without_a_leader_in_the_response_refreshes_metadata() {
    let c = FakeCluster::start(2);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    c.set_leader(T, 0, 1, 1);
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Reply(with_partition_error(r, 0, ErrorCode::NotLeaderOrFollower))
    });
    let metadata_before = c.seen(ApiKey::Metadata).len();
    send(&p, 0, "b").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b"]);
    assert!(c.seen(ApiKey::Metadata).len() > metadata_before);
    assert_eq!(c.seen(ApiKey::Produce).last().unwrap().node, 1);
}

#[test]
fn errors_for_some_partitions_retry_those_only() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 2);
    let p = producer(&c, &[("linger.ms", "50")]);
    let a = send(&p, 0, "a");
    let b = send(&p, 1, "b");
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Reply(with_partition_error(r, 1, ErrorCode::NotEnoughReplicas))
    });
    a.wait().unwrap();
    b.wait().unwrap();
    assert_eq!(values(&c, 0), ["a"]);
    assert_eq!(values(&c, 1), ["b"]);
}

// --- unknown outcomes: never written twice ----------------------------------------------------

fn unknown_outcome(action: fn(Resp) -> Action) {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    // The broker writes the batch, then the answer is lost: the producer cannot know, retries
    // with the same sequence, and the broker acknowledges the duplicate without writing it.
    c.on(ApiKey::Produce, 1, move |_, r| action(r));
    send(&p, 0, "b").wait().unwrap();
    send(&p, 0, "c").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b", "c"]);
    assert!(c.seen(ApiKey::Produce).len() >= 4);
}

#[test]
fn a_response_cut_mid_frame_is_retried_and_written_once() {
    unknown_outcome(Action::Cut);
}

#[test]
fn a_connection_closed_with_the_request_in_flight_is_retried_and_written_once() {
    unknown_outcome(|_| Action::Close);
}

#[test]
fn a_response_later_than_the_request_timeout_is_retried_and_written_once() {
    unknown_outcome(|r| Action::Delay(Duration::from_millis(1500), Box::new(Action::Reply(r))));
}

// --- the consumer -------------------------------------------------------------------------------

#[test]
fn a_group_member_reads_and_commits_through_the_fake_broker() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill(&c, 0, &["a", "b", "c"]);
    let consumer = consumer(&c, &[]);
    consumer.subscribe([T]).unwrap();
    assert_eq!(poll_n(&consumer, 3).unwrap(), ["a", "b", "c"]);
    consumer.commit_sync().unwrap();
    assert_eq!(
        c.model(|m| m.committed.get(&(T.to_owned(), 0)).copied()),
        Some(3)
    );
    consumer.close(WAIT).unwrap();
    assert!(!c.seen(ApiKey::LeaveGroup).is_empty());
}

/// Partition 0 holding "a" and "b", and a consumer without a group, with
/// `auto.offset.reset=none`, assigned to it.
fn reset_none_reader() -> (FakeCluster, Consumer, TopicPartition) {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill(&c, 0, &["a", "b"]);
    let consumer = consumer(&c, &[("auto.offset.reset", "none"), ("group.id", "")]);
    let tp = TopicPartition::new(T, 0);
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    (c, consumer, tp)
}

#[test]
fn offset_out_of_range_with_reset_none_is_an_error_until_a_seek() {
    let (_c, consumer, tp) = reset_none_reader();
    consumer.seek(&tp, 50).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match consumer.poll(Duration::from_millis(50)) {
            Err(ConsumerError::OffsetOutOfRange { offset, .. }) => {
                assert_eq!(offset, 50);
                break;
            }
            Ok(r) => assert!(r.is_empty()),
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline);
    }
    consumer.seek(&tp, 0).unwrap();
    assert_eq!(poll_n(&consumer, 2).unwrap(), ["a", "b"]);
}

#[test]
fn a_seek_answers_the_no_offset_error_raised_before_it() {
    let (_c, consumer, tp) = reset_none_reader();
    // position() waits for the I/O thread's verdict: no offset to start from, an error queued
    // for poll(). The seek answers it: poll() reads from there and raises nothing stale.
    assert!(matches!(
        consumer.position(&tp),
        Err(ConsumerError::NoOffset(_))
    ));
    consumer.seek(&tp, 0).unwrap();
    assert_eq!(poll_n(&consumer, 2).unwrap(), ["a", "b"]);
}

#[test]
fn a_throttled_fetch_holds_the_next_request_to_that_broker_back() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill(&c, 0, &["a"]);
    let consumer = consumer(&c, &[("group.id", "")]);
    let tp = TopicPartition::new(T, 0);
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    consumer.seek(&tp, 0).unwrap();
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["a"]);
    // The broker answers the next fetch at once and asks for 600 ms without requests (KIP-219).
    let throttled = Arc::new(Mutex::new(None));
    let t = throttled.clone();
    c.on(ApiKey::Fetch, 1, move |seen, r| {
        let Resp::Fetch(mut f) = r else {
            unreachable!()
        };
        f.throttle_time_ms = 600;
        *t.lock().unwrap() = Some(seen.at);
        Action::Reply(Resp::Fetch(f))
    });
    fill(&c, 0, &["b"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["b"]);
    let at = throttled.lock().unwrap().expect("a fetch was throttled");
    let i = c
        .seen(ApiKey::Fetch)
        .iter()
        .position(|s| s.at == at)
        .unwrap();
    let next = c.wait_for(ApiKey::Fetch, i + 2, WAIT)[i + 1].at;
    assert!(next - at >= Duration::from_millis(550), "{:?}", next - at);
}

// --- the checkpoint path when the client thread or the broker is late -------------------------

#[test]
fn producer_runs_normally_after_a_drain_its_sender_took_too_late() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[("checkpoint.drain.timeout.ms", "200")]);
    // A delivery callback that holds the sender thread for 1.5 s.
    let hold = Arc::new(AtomicBool::new(true));
    let h = hold.clone();
    p.send_with_callback(
        ProducerRecord::new(T).partition(0).value(b"slow"),
        move |_| {
            if h.swap(false, Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1500));
            }
        },
    )
    .unwrap();
    c.wait_for(ApiKey::Produce, 1, WAIT);
    std::thread::sleep(Duration::from_millis(100)); // the callback is running
    let r = p.as_resource();
    let ctx = Context::new("test");
    let t = Instant::now();
    let err = r
        .before_checkpoint(&ctx)
        .expect_err("the sender is held up");
    assert!(
        t.elapsed() < Duration::from_millis(1400),
        "{:?}",
        t.elapsed()
    );
    assert!(err.to_string().contains("did not answer"), "{err}");
    r.after_restore(&ctx).unwrap();
    // The late drain and the restore reach the sender after the callback: it runs on.
    send(&p, 0, "after").wait().unwrap();
    p.flush_timeout(WAIT).unwrap();
    assert_eq!(values(&c, 0), ["slow", "after"]);
}

#[test]
fn producer_runs_normally_after_a_drain_acknowledged_past_its_timeout_and_grace() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(
        &c,
        &[
            ("checkpoint.drain.timeout.ms", "200"),
            ("request.timeout.ms", "3000"),
        ],
    );
    send(&p, 0, "a").wait().unwrap();
    // The broker answers the next produce after 700 ms: past the drain's 200 ms and its grace.
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(700), Box::new(Action::Reply(r)))
    });
    let late = send(&p, 0, "late");
    c.wait_for(ApiKey::Produce, 2, WAIT);
    let r = p.as_resource();
    let ctx = Context::new("test");
    let err = r
        .before_checkpoint(&ctx)
        .expect_err("not acknowledged in time");
    assert!(err.to_string().contains("not acknowledged"), "{err}");
    r.after_restore(&ctx).unwrap();
    late.wait().unwrap();
    send(&p, 0, "b").wait().unwrap();
    p.flush_timeout(WAIT).unwrap();
    assert_eq!(values(&c, 0), ["a", "late", "b"]);
}

#[test]
fn producer_reconnects_when_its_drain_finishes_after_the_checkpoint_gave_up() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[("checkpoint.drain.timeout.ms", "200")]);
    send(&p, 0, "a").wait().unwrap();
    // The record being drained is acknowledged after 100 ms, and its delivery callback then
    // holds the sender for 1 s: the drain completes after before_checkpoint stopped waiting.
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(100), Box::new(Action::Reply(r)))
    });
    let called_back = Arc::new(AtomicBool::new(false));
    let done = called_back.clone();
    p.send_with_callback(
        ProducerRecord::new(T).partition(0).value(b"slow"),
        move |_| {
            std::thread::sleep(Duration::from_millis(1000));
            done.store(true, Ordering::SeqCst);
        },
    )
    .unwrap();
    c.wait_for(ApiKey::Produce, 2, WAIT);
    let r = p.as_resource();
    let ctx = Context::new("test");
    let err = r
        .before_checkpoint(&ctx)
        .expect_err("the sender is held up");
    assert!(err.to_string().contains("did not answer"), "{err}");
    while !called_back.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // No restore yet: the sender that drained (and closed its connections) for a checkpoint
    // that gave up reconnects by itself.
    match send(&p, 0, "b").wait_timeout(WAIT) {
        Ok(r) => {
            r.unwrap();
        }
        Err(_) => panic!("the producer stayed disconnected after the checkpoint gave up"),
    }
    r.after_restore(&ctx).unwrap();
    send(&p, 0, "c").wait().unwrap();
    p.flush_timeout(WAIT).unwrap();
    assert_eq!(values(&c, 0), ["a", "slow", "b", "c"]);
}

/// A group member (`checkpoint.timeout.ms` as given) that read "a" from partition 0.
fn member_that_read_a(c: &FakeCluster, checkpoint_timeout_ms: &str) -> Consumer {
    c.create_topic(T, 1);
    fill(c, 0, &["a"]);
    let consumer = consumer(c, &[("checkpoint.timeout.ms", checkpoint_timeout_ms)]);
    consumer.subscribe([T]).unwrap();
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["a"]);
    consumer
}

/// The member reads `value`, appended now, and commits past it (offset `committed`).
fn reads_and_commits(c: &FakeCluster, consumer: &Consumer, value: &str, committed: i64) {
    fill(c, 0, &[value]);
    assert_eq!(poll_n(consumer, 1).unwrap(), [value]);
    consumer.commit_sync().unwrap();
    assert_eq!(
        c.model(|m| m.committed.get(&(T.to_owned(), 0)).copied()),
        Some(committed)
    );
}

#[test]
fn consumer_runs_normally_after_a_checkpoint_whose_commit_came_too_late() {
    let c = FakeCluster::start(1);
    let consumer = member_that_read_a(&c, "200");
    c.on(ApiKey::OffsetCommit, 1, |_, r| {
        Action::Delay(Duration::from_millis(1500), Box::new(Action::Reply(r)))
    });
    let r = consumer.as_resource();
    let ctx = Context::new("test");
    r.before_checkpoint(&ctx).expect_err("the commit is late");
    r.after_restore(&ctx).unwrap();
    reads_and_commits(&c, &consumer, "b", 2);
}

#[test]
fn consumer_rejoins_when_its_checkpoint_commit_is_answered_after_the_checkpoint_gave_up() {
    let c = FakeCluster::start(1);
    let consumer = member_that_read_a(&c, "200");
    // Answered after 700 ms: past the 200 ms timeout and its grace (before_checkpoint gives
    // up at 400 ms), before the network thread's own limit (1.2 s). The commit succeeds, the
    // member leaves and closes its connections for a checkpoint that is already over.
    c.on(ApiKey::OffsetCommit, 1, |_, r| {
        Action::Delay(Duration::from_millis(700), Box::new(Action::Reply(r)))
    });
    let r = consumer.as_resource();
    let ctx = Context::new("test");
    let t = Instant::now();
    r.before_checkpoint(&ctx).expect_err("the commit is late");
    assert!(
        t.elapsed() < Duration::from_millis(650),
        "{:?}",
        t.elapsed()
    );
    c.wait_for(ApiKey::LeaveGroup, 1, WAIT);
    // No restore yet: the consumer rejoins by itself and reads on.
    fill(&c, 0, &["b"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["b"]);
    r.after_restore(&ctx).unwrap();
    reads_and_commits(&c, &consumer, "c", 3);
}

#[test]
fn consumer_runs_normally_after_a_checkpoint_whose_commit_was_refused() {
    let c = FakeCluster::start(1);
    let consumer = member_that_read_a(&c, "500");
    c.on(ApiKey::OffsetCommit, 1, |_, r| {
        let Resp::OffsetCommit(mut o) = r else {
            unreachable!()
        };
        for p in o.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.error_code = ErrorCode::GroupAuthorizationFailed;
        }
        Action::Reply(Resp::OffsetCommit(o))
    });
    let r = consumer.as_resource();
    let ctx = Context::new("test");
    let err = r
        .before_checkpoint(&ctx)
        .expect_err("the commit is refused");
    assert!(
        err.to_string().contains("GROUP_AUTHORIZATION_FAILED"),
        "{err}"
    );
    r.after_restore(&ctx).unwrap();
    assert!(c.seen(ApiKey::LeaveGroup).is_empty());
    reads_and_commits(&c, &consumer, "b", 2);
}
