//! The producer's error paths against the fake broker (`support/fake_broker.rs`), the cases
//! Java's `SenderTest` and `TransactionManagerTest` (idempotent part) cover that the basic
//! ones in `fake_broker.rs` do not: throttling, the epoch bump of KIP-360, batches whose
//! outcome is unknown, and batches that expire while their request is in flight.

use std::time::{Duration, Instant};

use kafka_client::ProduceError;
use kafka_client::testing::protocol::ErrorCode;
use kafka_client::testing::protocol::{ApiKey, messages::ProduceResponse};

mod support;
use support::clients::{T, WAIT, producer, send, values};
use support::fake_broker::{Action, FakeCluster, Resp};

/// (producer id, epoch, base sequence) of the batches sent to partition `p`.
fn sequences(c: &FakeCluster, p: i32) -> Vec<(i64, i16, i32)> {
    c.produced_sequences(T, p)
}

fn throttled(resp: Resp, ms: i32) -> Resp {
    let Resp::Produce(r) = resp else {
        panic!("not a produce response")
    };
    Resp::Produce(ProduceResponse {
        throttle_time_ms: ms,
        ..r
    })
}

#[test]
fn a_throttled_response_holds_the_next_request_to_that_broker_back() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    c.on(ApiKey::Produce, 1, |_, r| Action::Reply(throttled(r, 600)));
    send(&p, 0, "b").wait().unwrap();
    let answered = Instant::now();
    send(&p, 0, "c").wait().unwrap();
    let produce = c.seen(ApiKey::Produce);
    assert_eq!(produce.len(), 3);
    // The broker answered "b" at once; "c" waited for the rest of the 600 ms.
    let gap = produce[2].at - produce[1].at;
    assert!(gap >= Duration::from_millis(550), "{gap:?}");
    assert!(answered.elapsed() >= Duration::from_millis(400));
    assert_eq!(values(&c, 0), ["a", "b", "c"]);
}

fn epoch_bump_after(code: ErrorCode) {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[]);
    send(&p, 0, "a").wait().unwrap();
    c.fail_produce(T, 0, &[code]);
    send(&p, 0, "b").wait().unwrap();
    send(&p, 0, "c").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b", "c"]);
    let s = sequences(&c, 0);
    let pid = s[0].0;
    // "b" refused at (epoch 0, seq 1), then sent under epoch 1 from sequence 0; one
    // producer id throughout (no second InitProducerId).
    assert_eq!(
        s,
        [(pid, 0, 0), (pid, 0, 1), (pid, 1, 0), (pid, 1, 1)],
        "{s:?}"
    );
    assert_eq!(c.seen(ApiKey::InitProducerId).len(), 1);
    let m = p.metrics();
    assert_eq!((m.producer_epoch_bumps, m.producer_id_resets), (1, 0));
}

#[test]
fn out_of_order_sequence_bumps_the_epoch_instead_of_taking_a_new_producer_id() {
    epoch_bump_after(ErrorCode::OutOfOrderSequenceNumber);
}

#[test]
fn unknown_producer_id_bumps_the_epoch_instead_of_taking_a_new_producer_id() {
    epoch_bump_after(ErrorCode::UnknownProducerId);
}

#[test]
fn out_of_order_behind_a_failed_batch_is_retried_without_a_second_bump() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    // One record per batch: growth off.
    let p = producer(&c, &[("batch.size", "100"), ("batch.grow.max.bytes", "0")]);
    send(&p, 0, "a").wait().unwrap();
    // Three batches in flight; the broker refuses the first for a gap (answering after
    // 300 ms, so the other two are out by then), and the two behind it for being out of
    // order after it.
    c.fail_produce(T, 0, &[ErrorCode::OutOfOrderSequenceNumber]);
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(300), Box::new(Action::Reply(r)))
    });
    let big = "x".repeat(60); // one record per 100-byte batch
    let reports: Vec<_> = (0..3).map(|_| send(&p, 0, &big)).collect();
    for r in reports {
        r.wait().unwrap();
    }
    assert_eq!(values(&c, 0).len(), 4);
    assert_eq!(p.metrics().producer_epoch_bumps, 1);
    let s = sequences(&c, 0);
    // "a" and the refused batch under epoch 0 (and those behind it that were out in time),
    // all three again under epoch 1.
    assert!(s.iter().filter(|x| x.1 == 0).count() >= 2, "{s:?}");
    assert_eq!(
        s.iter()
            .filter(|x| x.1 == 1)
            .map(|x| x.2)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn a_batch_whose_answer_was_lost_keeps_its_epoch_and_sequence_when_another_partition_bumps() {
    // Partition 0 on node 0, partition 1 on node 1.
    let c = FakeCluster::start(2);
    c.create_topic(T, 2);
    let p = producer(&c, &[]);
    send(&p, 0, "a0").wait().unwrap();
    send(&p, 1, "a1").wait().unwrap();
    // Node 0 writes "b0" and the answer is lost after node 1 reported that it lost the
    // producer's state (which bumps the epoch).
    c.on(ApiKey::Produce, usize::MAX, |seen, r| {
        if seen.node == 0 {
            Action::Delay(Duration::from_millis(300), Box::new(Action::Cut(r)))
        } else {
            Action::Reply(r)
        }
    });
    c.fail_produce(T, 1, &[ErrorCode::UnknownProducerId]);
    let b0 = send(&p, 0, "b0");
    let b1 = send(&p, 1, "b1");
    b1.wait().unwrap();
    c.clear_rules();
    b0.wait().unwrap();
    // Written once: the retry went with the epoch and sequence of its first attempt, and
    // the broker recognised the copy.
    assert_eq!(values(&c, 0), ["a0", "b0"]);
    assert_eq!(values(&c, 1), ["a1", "b1"]);
    let s0 = sequences(&c, 0);
    assert!(s0[1..].iter().all(|x| (x.1, x.2) == (0, 1)), "{s0:?}");
    send(&p, 0, "c0").wait().unwrap();
    assert_eq!(values(&c, 0), ["a0", "b0", "c0"]);
    assert_eq!(c.seen(ApiKey::InitProducerId).len(), 1);
}

#[test]
fn a_batch_that_may_be_written_is_not_sent_again_once_the_broker_lost_the_producer_state() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(&c, &[("retry.backoff.ms", "300")]);
    send(&p, 0, "a").wait().unwrap();
    // The broker writes "b" and the answer is cut; the retry finds the producer's state
    // gone. Sent under the new epoch, "b" would be written twice: it fails instead.
    c.on(ApiKey::Produce, 1, |_, r| Action::Cut(r));
    let b = send(&p, 0, "b");
    c.wait_for(ApiKey::Produce, 2, WAIT);
    c.fail_produce(T, 0, &[ErrorCode::UnknownProducerId]);
    match b.wait() {
        Err(ProduceError::Broker { code, message, .. }) => {
            assert_eq!(code, ErrorCode::UnknownProducerId);
            assert!(message.unwrap().contains("may have been written"));
        }
        other => panic!("{other:?}"),
    }
    send(&p, 0, "c").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b", "c"]);
    let s = sequences(&c, 0);
    assert_eq!(s.last().map(|x| (x.1, x.2)), Some((1, 0)), "{s:?}");
}

#[test]
fn a_batch_in_flight_expires_at_the_delivery_timeout() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    let p = producer(
        &c,
        &[
            ("request.timeout.ms", "1500"),
            ("delivery.timeout.ms", "1500"),
        ],
    );
    send(&p, 0, "a").wait().unwrap();
    // "b" is refused after 1 s, then its retry is never answered: it expires at 1.5 s while
    // in flight, not when that request times out (2.5 s).
    c.fail_produce(T, 0, &[ErrorCode::NotEnoughReplicas]);
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(1000), Box::new(Action::Reply(r)))
    });
    c.on(ApiKey::Produce, 1, |_, _| Action::Hold);
    let sent = Instant::now();
    let b = send(&p, 0, "b");
    let e = b.wait().expect_err("expired");
    let took = sent.elapsed();
    assert!(matches!(e, ProduceError::DeliveryTimeout { .. }), "{e}");
    assert!(took < Duration::from_millis(2200), "{took:?}");
    // The held request times out later; the producer goes on (after an epoch bump, since
    // it cannot know whether "b" was written: here it was).
    send(&p, 0, "c").wait().unwrap();
    assert_eq!(values(&c, 0), ["a", "b", "c"]);
}

/// Sends `n` one-record batches (`batch.size` 100) to partition 0 with values "0…", "1…", …
fn send_batches(p: &kafka_client::Producer, n: usize) -> Vec<kafka_client::DeliveryFuture> {
    (0..n)
        .map(|i| send(p, 0, &format!("{i}{}", "x".repeat(60))))
        .collect()
}

#[test]
fn a_refused_first_batch_of_a_partition_is_not_overtaken_by_the_next() {
    // A leader that did not know yet that it led refuses the first batch (answering after
    // 300 ms); a broker with no state for the producer would take any batch sent meanwhile,
    // and the first batch could then never be written (a gap at the partition's head).
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    // One record per batch: growth off.
    let p = producer(&c, &[("batch.size", "100"), ("batch.grow.max.bytes", "0")]);
    c.fail_produce(T, 0, &[ErrorCode::NotLeaderOrFollower]);
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(300), Box::new(Action::Reply(r)))
    });
    for r in send_batches(&p, 3) {
        r.wait().unwrap();
    }
    let firsts: Vec<u8> = values(&c, 0).iter().map(|v| v.as_bytes()[0]).collect();
    assert_eq!(firsts, b"012");
    let s = sequences(&c, 0);
    assert_eq!(s.iter().map(|x| x.2).collect::<Vec<_>>(), [0, 0, 1, 2]);
    assert_eq!(p.metrics().producer_epoch_bumps, 0);
}

#[test]
fn a_batch_behind_sequences_the_broker_wrote_fails_at_once() {
    // The broker dropped the producer's state (idle past `producer.id.expiration.ms`), then
    // refused "0…" as not leader while "1…", sent behind it, was taken with its sequence:
    // "0…" can never be written in order. It fails with that said, not after 5 s of retries.
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    // One record per batch: growth off.
    let p = producer(&c, &[("batch.size", "100"), ("batch.grow.max.bytes", "0")]);
    send(&p, 0, "a").wait().unwrap();
    c.forget_producers(T, 0);
    c.fail_produce(T, 0, &[ErrorCode::NotLeaderOrFollower]);
    c.on(ApiKey::Produce, 1, |_, r| {
        Action::Delay(Duration::from_millis(300), Box::new(Action::Reply(r)))
    });
    let mut reports = send_batches(&p, 2).into_iter();
    let (first, second) = (reports.next().unwrap(), reports.next().unwrap());
    second.wait().unwrap();
    match first.wait() {
        Err(ProduceError::Broker { code, message, .. }) => {
            assert_eq!(code, ErrorCode::OutOfOrderSequenceNumber);
            let m = message.unwrap();
            assert!(m.contains("can no longer be written"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // The partition goes on under the same epoch.
    send(&p, 0, "c").wait().unwrap();
    let v = values(&c, 0);
    assert_eq!(v.first().map(String::as_str), Some("a"));
    assert_eq!(v.last().map(String::as_str), Some("c"));
    assert_eq!(v.len(), 3);
    assert_eq!(p.metrics().producer_epoch_bumps, 0);
}
