//! The consumer as an async `Stream`, against the fake broker (`support/fake_broker.rs`), on a
//! current-thread tokio runtime: every record once and in order per partition, the runtime
//! never held up while the stream awaits records (a 1 ms ticker keeps ticking), a `next()`
//! dropped while it waits loses nothing, and a stream dropped between items gives back what it
//! fetched: committing what it yielded and starting again loses and repeats nothing.

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use kafka_client::testing::protocol::ApiKey;
use kafka_client::{RecordStream, TopicPartition};
use parking_lot::Mutex;

mod support;
use support::clients::{T, consumer, fill};
use support::fake_broker::FakeCluster;
use support::ticker::Ticker;

/// The tests one at a time: the ticker measures its thread's scheduling.
static SERIAL: Mutex<()> = Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The stream's next item's value (the test's records all have one).
async fn next(s: &mut RecordStream) -> String {
    let r = poll_fn(|cx| Pin::new(&mut *s).poll_next(cx))
        .await
        .expect("the stream goes on")
        .expect("a record");
    format!(
        "{}:{}",
        r.partition,
        String::from_utf8(r.value.unwrap().to_vec()).unwrap()
    )
}

fn values(partition: i32, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{partition}:v{i}")).collect()
}

fn fill_values(c: &FakeCluster, partition: i32, range: std::ops::Range<usize>) {
    let vals: Vec<String> = range.map(|i| format!("v{i}")).collect();
    for chunk in vals.chunks(50) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        fill(c, partition, &refs);
    }
}

#[test]
fn a_stream_yields_every_record_once_in_order_without_holding_up_its_runtime() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 2);
    fill_values(&c, 0, 0..300);
    fill_values(&c, 1, 0..300);
    let con = consumer(&c, &[("max.poll.records", "64")]);
    con.assign(&[TopicPartition::new(T, 0), TopicPartition::new(T, 1)])
        .unwrap();
    let gap = runtime().block_on(async {
        let mut s = con.stream();
        let mut got = Vec::new();
        for _ in 0..600 {
            got.push(next(&mut s).await);
        }
        for p in 0..2 {
            let mine: Vec<String> = got
                .iter()
                .filter(|v| v.starts_with(&format!("{p}:")))
                .cloned()
                .collect();
            assert_eq!(mine, values(p, 0..300), "partition {p}: once, in order");
        }
        // Nothing more for now: the stream waits, the runtime ticks on.
        let tick = Ticker::start();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tick.reset();
        let waited = tokio::time::timeout(Duration::from_millis(300), next(&mut s)).await;
        assert!(waited.is_err(), "no record to yield: {waited:?}");
        // Measured while the stream waited; the fill below is the test's own blocking call.
        let gap = tick.stop();
        // That dropped `next()` lost nothing: a record arriving now is the next one.
        fill(&c, 0, &["late"]);
        assert_eq!(next(&mut s).await, "0:late");
        gap
    });
    assert!(
        gap < Duration::from_millis(20),
        "the runtime's only thread was held {gap:?} while the stream awaited records"
    );
}

#[test]
fn a_stream_dropped_between_items_loses_and_repeats_nothing() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill_values(&c, 0, 0..400);
    let tp = TopicPartition::new(T, 0);
    let first = runtime().block_on(async {
        let con = consumer(&c, &[("max.poll.records", "100")]);
        con.assign(std::slice::from_ref(&tp)).unwrap();
        let mut s = con.stream();
        let mut got = Vec::new();
        // Fewer than one poll's worth: the rest of the batch is fetched and not yielded.
        for _ in 0..37 {
            got.push(next(&mut s).await);
        }
        s.commit().await.unwrap();
        got
    });
    assert_eq!(first, values(0, 0..37));
    // The next consumer of the group starts after what was yielded and committed.
    let rest = runtime().block_on(async {
        let con = consumer(&c, &[]);
        con.assign(std::slice::from_ref(&tp)).unwrap();
        let mut s = con.stream();
        let mut got = Vec::new();
        for _ in 37..400 {
            got.push(next(&mut s).await);
        }
        got
    });
    assert_eq!(rest, values(0, 37..400), "nothing lost, nothing repeated");
}

#[test]
fn a_stream_awaiting_records_longer_than_max_poll_interval_stays_in_its_group() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill_values(&c, 0, 0..3);
    let con = consumer(&c, &[("max.poll.interval.ms", "300")]);
    con.subscribe([T]).unwrap();
    runtime().block_on(async {
        let mut s = con.stream();
        for i in 0..3 {
            assert_eq!(next(&mut s).await, format!("0:v{i}"));
        }
        // Awaiting the stream is being in poll(): the member does not leave its group while
        // its task waits (as a poll() that waits does not), however long nothing comes.
        let waited = tokio::time::timeout(Duration::from_millis(1500), next(&mut s)).await;
        assert!(waited.is_err(), "no record to yield: {waited:?}");
        fill(&c, 0, &["late"]);
        assert_eq!(next(&mut s).await, "0:late");
        // Checked before the stream (and with it the consumer, which leaves) is dropped.
        assert!(
            c.seen(ApiKey::LeaveGroup).is_empty(),
            "the member left its group while its stream awaited records"
        );
        // The first JoinGroup is answered MEMBER_ID_REQUIRED (KIP-394), the second joins.
        assert_eq!(c.seen(ApiKey::SyncGroup).len(), 1, "one join: no rebalance");
    });
}

#[test]
fn a_consumer_closed_by_a_future_leaves_its_group_and_its_stream_ends_without_holding_up_its_runtime()
 {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fill_values(&c, 0, 0..3);
    let con = consumer(&c, &[]);
    con.subscribe([T]).unwrap();
    let gap = runtime().block_on(async {
        let mut s = con.stream();
        for i in 0..3 {
            assert_eq!(next(&mut s).await, format!("0:v{i}"));
        }
        let tick = Ticker::start();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tick.reset();
        // The close leaves the group (a round trip to the coordinator) and joins the I/O
        // thread: on a thread of its own, while this one ticks.
        s.consumer()
            .close_async(Duration::from_secs(10))
            .await
            .expect("closed");
        let gap = tick.stop();
        assert_eq!(
            c.seen(ApiKey::LeaveGroup).len(),
            1,
            "the member left its group"
        );
        let end = tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| Pin::new(&mut s).poll_next(cx)),
        )
        .await
        .expect("the stream of a closed consumer ends");
        assert!(end.is_none(), "{end:?}");
        gap
    });
    assert!(
        gap < Duration::from_millis(20),
        "the runtime's only thread was held {gap:?} while the consumer closed"
    );
}
