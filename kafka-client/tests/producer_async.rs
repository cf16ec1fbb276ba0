//! The async producer against the fake broker (`support/fake_broker.rs`), on real tokio
//! runtimes: `send_async` awaits a full buffer by parking its task (a 1 ms ticker on the same
//! current-thread runtime keeps ticking), records sent one accepted after the other arrive in
//! order, a future dropped before its record was accepted sends nothing, and `flush_async` /
//! `close_async` complete without blocking the runtime.

use std::sync::Arc;
use std::time::Duration;

use kafka_client::ProducerRecord;
use kafka_client::testing::protocol::ApiKey;
use parking_lot::Mutex;

mod support;
use support::clients::{T, producer, values};
use support::fake_broker::{Action, FakeCluster};
use support::ticker::Ticker;

/// The tests of this file one at a time: the ticker measures its thread's scheduling, which
/// the other tests' threads would disturb on two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn send_async_awaits_a_full_buffer_without_blocking_the_runtime() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    // Every produce request answered 100 ms late: a 64 KiB buffer fills many times over.
    c.on(ApiKey::Produce, usize::MAX, |_, r| {
        Action::Delay(Duration::from_millis(100), Box::new(Action::Reply(r)))
    });
    let p = producer(
        &c,
        &[
            ("buffer.memory", "65536"),
            ("batch.size", "16384"),
            ("batch.grow.max.bytes", "0"),
            ("max.block.ms", "60000"),
            ("delivery.timeout.ms", "60000"),
        ],
    );
    let sent: Vec<String> = (0..2_000).map(|i| format!("{i:0>200}")).collect();
    let rt = current_thread();
    let gap = rt.block_on(async {
        let tick = Ticker::start();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tick.reset();
        let mut reports = Vec::new();
        for v in &sent {
            let rec = ProducerRecord::new(T).partition(0).value(v.as_bytes());
            // In order: each record accepted before the next is sent.
            reports.push(p.send_async(rec).accepted().await.unwrap());
        }
        for r in reports {
            r.await.unwrap();
        }
        p.flush_async().await;
        tick.stop()
    });
    assert_eq!(values(&c, 0), sent, "every record once, in order");
    assert!(
        gap < Duration::from_millis(20),
        "the runtime's only thread was held {gap:?} while sends waited for buffer space"
    );
    assert!(
        c.seen(ApiKey::Produce).len() >= 20,
        "the buffer filled and emptied many times"
    );
}

#[test]
fn a_send_dropped_before_its_record_is_accepted_sends_nothing() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    // The first produce request is held until the test lets it go: the buffer stays full.
    let release = Arc::new(Mutex::new(false));
    let r2 = release.clone();
    c.on(ApiKey::Produce, usize::MAX, move |_, r| {
        let mut waited = Duration::ZERO;
        while !*r2.lock() && waited < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
            waited += Duration::from_millis(5);
        }
        Action::Reply(r)
    });
    let p = producer(
        &c,
        &[
            ("buffer.memory", "40000"),
            ("batch.size", "16384"),
            ("batch.grow.max.bytes", "0"),
            ("delivery.timeout.ms", "60000"),
        ],
    );
    let filler: Vec<String> = (0..400).map(|i| format!("{i:0>200}")).collect();
    let rt = current_thread();
    rt.block_on(async {
        let mut reports = Vec::new();
        for v in &filler {
            let rec = ProducerRecord::new(T).partition(0).value(v.as_bytes());
            let f = p.send_async(rec);
            match tokio::time::timeout(Duration::from_millis(50), f.accepted()).await {
                Ok(r) => reports.push(r.unwrap()),
                Err(_) => break, // the buffer is full: this one was dropped, never accepted
            }
        }
        assert!(reports.len() < filler.len(), "the buffer must fill");
        let accepted = reports.len();
        // One more, dropped while it waits: it must never reach the broker.
        let dropped = ProducerRecord::new(T).partition(0).value(b"dropped");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), p.send_async(dropped))
                .await
                .is_err()
        );
        *release.lock() = true;
        for r in reports {
            r.await.unwrap();
        }
        p.flush_async().await;
        p.close_async(Duration::from_secs(10)).await.unwrap();
        let got = values(&c, 0);
        assert_eq!(
            got,
            filler[..accepted].to_vec(),
            "the accepted ones, once, in order"
        );
    });
}

#[test]
fn sends_from_many_tasks_of_a_multi_thread_runtime_all_arrive() {
    let _serial = SERIAL.lock();
    let c = FakeCluster::start(1);
    c.create_topic(T, 3);
    let p = Arc::new(producer(&c, &[("buffer.memory", "100000")]));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..8 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..250 {
                    let v = format!("{t}-{i:0>100}");
                    let rec = ProducerRecord::new(T).partition(t % 3).value(v.as_bytes());
                    p.send_async(rec).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let total: usize = (0..3).map(|part| values(&c, part).len()).sum();
    assert_eq!(total, 8 * 250);
}
