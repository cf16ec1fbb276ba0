//! The admin client against the fake broker (`support/fake_broker.rs`): the error paths real
//! brokers make hard to reach on purpose. A leader that moved is looked up again, an unknown
//! topic fails only its own item, an unreachable cluster times out with the reason, the
//! checkpoint hooks close the connections and hold calls until the restore. Real brokers show
//! every call in `tests/tests/admin.rs`.

use std::time::{Duration, Instant};

use crac_api::Context;
use kafka_client::admin::{OffsetSpec, Options};
use kafka_client::testing::protocol::ApiKey;
use kafka_client::testing::protocol::messages::list_offsets::ListOffsetsResponse;
use kafka_client::{Admin, AdminError, ErrorCode, TopicPartition};

mod support;
use support::clients::{T, WAIT, producer, send};
use support::fake_broker::{Action, FakeCluster, Resp};

fn admin(bootstrap: &str, extra: &[(&str, &str)]) -> Admin {
    let mut props = vec![
        ("bootstrap.servers", bootstrap.to_owned()),
        ("crac.register", "false".into()),
        ("retry.backoff.ms", "20".into()),
        ("reconnect.backoff.ms", "10".into()),
        ("request.timeout.ms", "2000".into()),
        ("default.api.timeout.ms", "10000".into()),
    ];
    for (k, v) in extra {
        props.retain(|(key, _)| key != k);
        props.push((k, (*v).to_owned()));
    }
    Admin::from_properties(props).expect("admin config")
}

fn cluster() -> FakeCluster {
    let c = FakeCluster::start(2);
    c.create_topic(T, 2);
    c
}

#[test]
fn list_offsets_asks_the_leader_again_after_not_leader() {
    let c = cluster();
    let p = producer(&c, &[]);
    for _ in 0..3 {
        send(&p, 0, "x").wait().unwrap();
    }
    // The first answer says the broker no longer leads the partition.
    c.on(ApiKey::ListOffsets, 1, |_, r| {
        let Resp::ListOffsets(mut l) = r else {
            unreachable!()
        };
        for t in &mut l.topics {
            for p in &mut t.partitions {
                p.error_code = ErrorCode::NotLeaderOrFollower;
            }
        }
        Action::Reply(Resp::ListOffsets(ListOffsetsResponse { ..l }))
    });
    let a = admin(&c.bootstrap(), &[]);
    let tp = TopicPartition::new(T, 0);
    let got = a
        .list_offsets(
            &[
                (tp.clone(), OffsetSpec::Latest),
                (TopicPartition::new(T, 1), OffsetSpec::Earliest),
            ],
            false,
            &Options::default(),
        )
        .unwrap();
    assert_eq!(got[&tp].as_ref().unwrap().offset, 3);
    assert_eq!(got[&TopicPartition::new(T, 1)].as_ref().unwrap().offset, 0);
    assert!(c.seen(ApiKey::ListOffsets).len() >= 2, "asked again");
    // A partition that does not exist fails alone, at once.
    let got = a
        .list_offsets(
            &[
                (tp.clone(), OffsetSpec::Latest),
                (TopicPartition::new("nope", 0), OffsetSpec::Latest),
            ],
            false,
            &Options::default(),
        )
        .unwrap();
    assert!(got[&tp].is_ok());
    let e = got[&TopicPartition::new("nope", 0)].as_ref().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownTopicOrPartition), "{e}");
    p.close(WAIT).unwrap();
}

#[test]
fn an_unknown_topic_fails_only_its_own_item() {
    let c = cluster();
    let a = admin(&c.bootstrap(), &[]);
    let got = a
        .describe_topics(&[T, "nope"], &Options::default())
        .unwrap();
    let t = got[T].as_ref().unwrap();
    assert_eq!(t.partitions.len(), 2);
    assert!(t.partitions.iter().all(|p| p.leader.is_some()));
    let e = got["nope"].as_ref().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownTopicOrPartition), "{e}");
    let listed = a.list_topics(false, &Options::default()).unwrap();
    assert!(listed.contains_key(T), "{listed:?}");
    let cluster = a.describe_cluster(&Options::default()).unwrap();
    assert_eq!(cluster.brokers.len(), 2);
}

#[test]
fn an_unreachable_cluster_times_out_with_the_reason() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = admin(&format!("127.0.0.1:{port}"), &[]);
    let started = Instant::now();
    let e = a
        .describe_cluster(&Options::timeout(Duration::from_millis(500)))
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let AdminError::Timeout { after, last, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*after, Duration::from_millis(500));
    assert!(
        last.as_deref()
            .is_some_and(|l| l.contains(&port.to_string())),
        "{e}"
    );
}

#[test]
fn a_group_s_offsets_are_altered_and_listed_through_its_coordinator() {
    let c = cluster();
    let a = admin(&c.bootstrap(), &[]);
    let (p0, p1) = (TopicPartition::new(T, 0), TopicPartition::new(T, 1));
    let done = a
        .alter_group_offsets(
            "g",
            &[(p0.clone(), 5), (p1.clone(), 7)],
            &Options::default(),
        )
        .unwrap();
    assert!(done.values().all(Result::is_ok), "{done:?}");
    let got = a
        .list_group_offsets("g", None, &Options::default())
        .unwrap();
    assert_eq!(got[&p0].offset, 5);
    assert_eq!(got[&p1].offset, 7);
    let got = a
        .list_group_offsets("g", Some(std::slice::from_ref(&p1)), &Options::default())
        .unwrap();
    assert_eq!(got.keys().collect::<Vec<_>>(), [&p1]);
    let e = a
        .alter_group_offsets("g", &[(p0, -3)], &Options::default())
        .unwrap_err();
    assert!(matches!(e, AdminError::InvalidArgument { .. }), "{e}");
}

#[test]
fn a_checkpoint_closes_the_connections_and_holds_calls_until_the_restore() {
    let c = cluster();
    let a = admin(&c.bootstrap(), &[]);
    a.describe_cluster(&Options::default()).unwrap();
    assert!(c.open_connections() > 0);
    let ctx = Context::new("test");
    let r = a.as_resource();
    r.before_checkpoint(&ctx).unwrap();
    let deadline = Instant::now() + WAIT;
    while c.open_connections() > 0 {
        assert!(Instant::now() < deadline, "connections still open");
        std::thread::sleep(Duration::from_millis(10));
    }
    let call = {
        let a = a.clone();
        std::thread::spawn(move || a.describe_cluster(&Options::default()))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !call.is_finished(),
        "the call waits for the checkpoint's end"
    );
    assert_eq!(c.open_connections(), 0, "nothing connects meanwhile");
    r.after_restore(&ctx).unwrap();
    assert_eq!(call.join().unwrap().unwrap().brokers.len(), 2);
    a.close();
    let e = a.describe_cluster(&Options::default()).unwrap_err();
    assert!(matches!(e, AdminError::Closed { .. }), "{e}");
}
