//! The incremental group protocols against the fake broker (`support/fake_broker.rs`): the
//! classic protocol with `cooperative-sticky` (KIP-429) as follower and as leader, `sticky`'s
//! user data, the consumer group protocol of KIP-848 (joining, reconciling, acknowledging,
//! fenced, leaving, commits with the member epoch), what a static member does before a
//! checkpoint and after a restore under another instance id, and `pause()`/`resume()`. The
//! same behaviour against real brokers and Java members, with CRIU, is in
//! `tests/tests/consumer_group_criu.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crac_api::Context;
use kafka_client::testing::protocol::messages::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicIdPartitions,
};
use kafka_client::testing::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, StickyUserData, TopicPartitions,
};
use kafka_client::testing::protocol::messages::join_group::JoinGroupResponseMember;
use kafka_client::testing::protocol::{ApiKey, ErrorCode};
use kafka_client::{Consumer, ConsumerRebalanceListener, TopicPartition};

mod support;
use support::clients::{Events, T, WAIT, consumer, fill, poll_n, poll_until};
use support::fake_broker::{Action, FakeCluster, Req, Resp, Seen};

fn cluster(partitions: usize) -> FakeCluster {
    let c = FakeCluster::start(1);
    c.create_topic(T, partitions);
    for p in 0..partitions as i32 {
        fill(&c, p, &[&format!("p{p}-0")]);
    }
    c
}

/// The subscription a JoinGroup carried (its first protocol's).
fn subscription(s: &Seen) -> ConsumerProtocolSubscription {
    let Req::JoinGroup(j) = &s.req else {
        panic!("not a JoinGroup")
    };
    ConsumerProtocolSubscription::decode(&j.protocols[0].metadata).unwrap()
}

fn owned(s: &Seen) -> Vec<i32> {
    subscription(s)
        .owned_partitions
        .iter()
        .flat_map(|t| t.partitions.clone())
        .collect()
}

fn assignment_bytes(partitions: &[i32]) -> Vec<u8> {
    ConsumerProtocolAssignment {
        assigned_partitions: vec![TopicPartitions {
            topic: T.into(),
            partitions: partitions.to_vec(),
        }],
        user_data: None,
    }
    .encode(ConsumerProtocolAssignment::VERSION)
}

/// Waits until `f` holds, polling `consumer` meanwhile.
fn poll_while(consumer: &Consumer, mut f: impl FnMut() -> bool) -> Vec<String> {
    poll_until(consumer, || !f()).unwrap()
}

/// A cooperative member that owns all four partitions of a one-member group.
fn cooperative_member(c: &FakeCluster) -> (Consumer, Events) {
    let events = Events::default();
    let consumer = consumer(
        c,
        &[("partition.assignment.strategy", "cooperative-sticky")],
    );
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    let got = poll_n(&consumer, 4).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(events.get(), ["assigned t-0,t-1,t-2,t-3"]);
    (consumer, events)
}

/// The next heartbeat answers REBALANCE_IN_PROGRESS: another member is joining.
fn rebalance_next_heartbeat(c: &FakeCluster) {
    c.on(ApiKey::Heartbeat, 1, |_, r| {
        let Resp::Heartbeat(mut h) = r else {
            unreachable!()
        };
        h.error_code = ErrorCode::RebalanceInProgress;
        Action::Reply(Resp::Heartbeat(h))
    });
}

#[test]
fn cooperative_follower_keeps_consuming_revokes_only_what_moves_and_rejoins() {
    let c = cluster(4);
    let (consumer, events) = cooperative_member(&c);
    let first = c.seen(ApiKey::JoinGroup).len();
    // The rebalance: another member leads and gives this one t-0 and t-1 only.
    rebalance_next_heartbeat(&c);
    c.on(ApiKey::JoinGroup, 1, |_, r| {
        let Resp::JoinGroup(mut j) = r else {
            unreachable!()
        };
        j.leader = "the-leader".into();
        j.members.clear();
        Action::Reply(Resp::JoinGroup(j))
    });
    c.on(ApiKey::SyncGroup, 1, |_, r| {
        let Resp::SyncGroup(mut s) = r else {
            unreachable!()
        };
        s.assignment = assignment_bytes(&[0, 1]);
        // Slow enough that records of partitions kept come during the rebalance.
        Action::Delay(
            Duration::from_millis(300),
            Box::new(Action::Reply(Resp::SyncGroup(s))),
        )
    });
    c.wait_for(ApiKey::JoinGroup, first + 1, WAIT);
    fill(&c, 0, &["p0-1"]);
    // Read during the rebalance (the member gave nothing up to join) and committed once it
    // ends, in the new generation.
    let mut during = Vec::new();
    while during.is_empty() {
        during.extend(poll_n(&consumer, 1).unwrap());
    }
    assert_eq!(during, ["p0-1"]);
    consumer.commit_sync().unwrap();
    poll_while(&consumer, || events.get().len() < 3);
    assert_eq!(
        events.get()[..3],
        ["assigned t-0,t-1,t-2,t-3", "revoked t-2,t-3", "assigned "],
        "only what moves is revoked; nothing is added"
    );
    let joins = c.seen(ApiKey::JoinGroup);
    let rejoin = &joins[first];
    assert_eq!(
        owned(rejoin),
        [0, 1, 2, 3],
        "it joined claiming what it owned"
    );
    assert_eq!(subscription(rejoin).generation_id, 1);
    let commit = c.seen(ApiKey::OffsetCommit).pop().unwrap();
    let Req::OffsetCommit(oc) = &commit.req else {
        unreachable!()
    };
    assert_eq!(
        oc.generation_id_or_member_epoch, 2,
        "committed in the new generation"
    );
    // Having revoked, it rejoins at once so that t-2 and t-3 reach their new owner, claiming
    // only what it kept.
    c.wait_for(ApiKey::JoinGroup, first + 2, WAIT);
    let followup = &c.seen(ApiKey::JoinGroup)[first + 1];
    assert_eq!(owned(followup), [0, 1]);
    assert_eq!(subscription(followup).generation_id, 2);
}

/// A JoinGroup answer making this member the leader of itself and one more member whose
/// subscription claims `other_owned` (generation `other_gen`).
fn with_other_member(r: Resp, seen: &Seen, other_owned: Vec<i32>, other_gen: i32) -> Resp {
    let Resp::JoinGroup(mut j) = r else {
        unreachable!()
    };
    let other = ConsumerProtocolSubscription {
        topics: vec![T.into()],
        owned_partitions: vec![TopicPartitions {
            topic: T.into(),
            partitions: other_owned,
        }],
        generation_id: other_gen,
        ..ConsumerProtocolSubscription::default()
    };
    let Req::JoinGroup(req) = &seen.req else {
        unreachable!()
    };
    j.members = vec![
        JoinGroupResponseMember {
            member_id: j.member_id.clone(),
            group_instance_id: None,
            metadata: req.protocols[0].metadata.clone(),
        },
        JoinGroupResponseMember {
            member_id: "zz-other".into(),
            group_instance_id: None,
            metadata: other.encode(ConsumerProtocolSubscription::VERSION),
        },
    ];
    Resp::JoinGroup(j)
}

/// What a leader's SyncGroup gave each member: (its own partitions, the other's).
fn sync_assignments(s: &Seen) -> (Vec<i32>, Vec<i32>) {
    let Req::SyncGroup(sg) = &s.req else {
        unreachable!()
    };
    let of = |id: &str| -> Vec<i32> {
        let a = sg.assignments.iter().find(|a| a.member_id == id).unwrap();
        ConsumerProtocolAssignment::decode(&a.assignment)
            .unwrap()
            .assigned_partitions
            .iter()
            .flat_map(|t| t.partitions.clone())
            .collect()
    };
    (of(&sg.member_id), of("zz-other"))
}

#[test]
fn cooperative_leader_hands_partitions_over_in_two_rebalances() {
    let c = cluster(4);
    let (consumer, events) = cooperative_member(&c);
    let syncs = c.seen(ApiKey::SyncGroup).len();
    rebalance_next_heartbeat(&c);
    // A second member joins with nothing; then, once this one revoked, it rejoins with
    // nothing still, in the new generation.
    c.on(ApiKey::JoinGroup, 2, |seen, r| {
        Action::Reply(with_other_member(r, seen, vec![], -1))
    });
    poll_while(&consumer, || c.seen(ApiKey::SyncGroup).len() < syncs + 2);
    let all = c.seen(ApiKey::SyncGroup);
    // First: the leader keeps two and holds back the two it gives up (their owner is itself:
    // they move only once revoked).
    assert_eq!(sync_assignments(&all[syncs]), (vec![0, 1], vec![]));
    // Second: they go to the other member.
    assert_eq!(sync_assignments(&all[syncs + 1]), (vec![0, 1], vec![2, 3]));
    poll_while(&consumer, || events.get().len() < 4);
    assert_eq!(
        events.get(),
        [
            "assigned t-0,t-1,t-2,t-3",
            "revoked t-2,t-3",
            "assigned ",
            "assigned "
        ]
    );
    assert_eq!(consumer.assignment().len(), 2);
}

#[test]
fn cooperative_member_reports_lost_partitions_and_claims_none_when_it_rejoins() {
    let c = cluster(2);
    let events = Events::default();
    let consumer = consumer(
        &c,
        &[("partition.assignment.strategy", "cooperative-sticky")],
    );
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    poll_n(&consumer, 2).unwrap();
    let first = c.seen(ApiKey::JoinGroup).len();
    c.on(ApiKey::Heartbeat, 1, |_, r| {
        let Resp::Heartbeat(mut h) = r else {
            unreachable!()
        };
        h.error_code = ErrorCode::IllegalGeneration;
        Action::Reply(Resp::Heartbeat(h))
    });
    poll_while(&consumer, || events.get().len() < 3);
    assert_eq!(
        events.get(),
        ["assigned t-0,t-1", "lost t-0,t-1", "assigned t-0,t-1"]
    );
    let rejoin = &c.seen(ApiKey::JoinGroup)[first];
    assert!(owned(rejoin).is_empty());
    assert_eq!(subscription(rejoin).generation_id, -1);
}

#[test]
fn sticky_remembers_the_previous_assignment_in_its_user_data() {
    let c = cluster(2);
    let events = Events::default();
    let consumer = consumer(&c, &[("partition.assignment.strategy", "sticky")]);
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    poll_n(&consumer, 2).unwrap();
    let first = c.seen(ApiKey::JoinGroup).len();
    assert_eq!(
        subscription(&c.seen(ApiKey::JoinGroup)[first - 1]).user_data,
        None
    );
    rebalance_next_heartbeat(&c);
    poll_while(&consumer, || events.get().len() < 3);
    // Eager: everything given up before the join (and claimed in the user data instead).
    assert_eq!(
        events.get(),
        ["assigned t-0,t-1", "revoked t-0,t-1", "assigned t-0,t-1"]
    );
    let rejoin = subscription(&c.seen(ApiKey::JoinGroup)[first]);
    assert!(rejoin.owned_partitions.is_empty());
    let data = StickyUserData::decode(rejoin.user_data.as_deref().unwrap()).unwrap();
    assert_eq!(data.generation, Some(1));
    assert_eq!(data.partitions[0].partitions, [0, 1]);
}

// --- the consumer group protocol (KIP-848) -----------------------------------------------------

fn heartbeats(c: &FakeCluster) -> Vec<ConsumerGroupHeartbeatRequest> {
    c.seen(ApiKey::ConsumerGroupHeartbeat)
        .into_iter()
        .map(|s| match s.req {
            Req::ConsumerGroupHeartbeat(h) => h,
            _ => unreachable!(),
        })
        .collect()
}

fn owned_ids(h: &ConsumerGroupHeartbeatRequest) -> Vec<i32> {
    h.topic_partitions
        .iter()
        .flatten()
        .flat_map(|t| t.partitions.clone())
        .collect()
}

fn kip848_member(c: &FakeCluster, extra: &[(&str, &str)]) -> (Consumer, Events) {
    let mut props = vec![("group.protocol", "consumer")];
    props.extend_from_slice(extra);
    // The consumer protocol refuses these keys; the test defaults set them.
    let consumer = consumer_without(c, &props, &["heartbeat.interval.ms", "session.timeout.ms"]);
    let events = Events::default();
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    (consumer, events)
}

fn consumer_without(c: &FakeCluster, extra: &[(&str, &str)], drop: &[&str]) -> Consumer {
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), c.bootstrap()),
        ("group.id".into(), "g".into()),
        ("crac.register".into(), "false".into()),
        ("enable.auto.commit".into(), "false".into()),
        ("auto.offset.reset".into(), "earliest".into()),
        ("retry.backoff.ms".into(), "20".into()),
        ("reconnect.backoff.ms".into(), "10".into()),
        ("fetch.max.wait.ms".into(), "50".into()),
        ("request.timeout.ms".into(), "1000".into()),
    ];
    props.retain(|(k, _)| !drop.contains(&k.as_str()));
    for (k, v) in extra {
        props.push(((*k).into(), (*v).into()));
    }
    Consumer::from_properties(props).expect("consumer config")
}

fn topic_id(c: &FakeCluster) -> kafka_client::testing::protocol::primitives::Uuid {
    c.model(|m| m.topics[T].0)
}

#[test]
fn consumer_protocol_joins_reconciles_and_acknowledges_at_once() {
    let c = cluster(2);
    let (consumer, events) = kip848_member(&c, &[]);
    assert_eq!(poll_n(&consumer, 2).unwrap().len(), 2);
    assert_eq!(events.get(), ["assigned t-0,t-1"]);
    poll_while(&consumer, || heartbeats(&c).len() < 2);
    let hb = heartbeats(&c);
    let join = &hb[0];
    assert_eq!(join.member_epoch, 0);
    assert_eq!(
        join.member_id.len(),
        22,
        "a client-chosen member id (KIP-1082)"
    );
    assert_eq!(
        join.subscribed_topic_names.as_deref(),
        Some(&[T.to_owned()][..])
    );
    assert_eq!(join.rebalance_timeout_ms, 300_000);
    assert_eq!(join.topic_partitions, Some(vec![]));
    // The acknowledgement names what it owns now, by topic id, in its epoch.
    let ack = &hb[1];
    assert_eq!(
        (ack.member_epoch, ack.member_id.as_str()),
        (1, join.member_id.as_str())
    );
    assert_eq!(
        ack.topic_partitions,
        Some(vec![TopicIdPartitions {
            topic_id: topic_id(&c),
            partitions: vec![0, 1]
        }])
    );
    let acked_after =
        c.seen(ApiKey::ConsumerGroupHeartbeat)[1].at - c.seen(ApiKey::ConsumerGroupHeartbeat)[0].at;
    assert!(acked_after < Duration::from_secs(2), "{acked_after:?}");
    // Commits carry the member id and epoch (OffsetCommit v9).
    consumer.commit_sync().unwrap();
    let commit = c.seen(ApiKey::OffsetCommit).pop().unwrap();
    assert!(commit.version >= 9);
    let Req::OffsetCommit(oc) = &commit.req else {
        unreachable!()
    };
    assert_eq!(
        (oc.generation_id_or_member_epoch, oc.member_id.as_str()),
        (1, join.member_id.as_str())
    );
    // Leaving: epoch -1.
    consumer.close(WAIT).unwrap();
    let last = heartbeats(&c).pop().unwrap();
    assert_eq!(
        (last.member_epoch, last.member_id),
        (-1, join.member_id.clone())
    );
}

/// Commits what was processed when partitions are revoked, and records the calls.
#[derive(Clone, Default)]
struct Committing(Arc<Mutex<Vec<String>>>);

impl ConsumerRebalanceListener for Committing {
    fn on_partitions_revoked(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let r = consumer.commit_sync();
        self.0
            .lock()
            .unwrap()
            .push(format!("revoked {} commit {r:?}", partitions.len()));
    }
    fn on_partitions_assigned(&mut self, _: &Consumer, partitions: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("assigned {}", partitions.len()));
    }
}

#[test]
fn consumer_protocol_revokes_commits_then_acknowledges() {
    let c = cluster(2);
    let consumer = consumer_without(
        &c,
        &[("group.protocol", "consumer")],
        &["heartbeat.interval.ms", "session.timeout.ms"],
    );
    let calls = Committing::default();
    consumer
        .subscribe_with_listener([T], calls.clone())
        .unwrap();
    poll_n(&consumer, 2).unwrap();
    let id = topic_id(&c);
    // The broker moves t-1 to another member: epoch 2, assignment t-0.
    c.model(|m| m.member_epoch = 2);
    c.on(ApiKey::ConsumerGroupHeartbeat, 1, move |_, r| {
        let Resp::ConsumerGroupHeartbeat(mut h) = r else {
            unreachable!()
        };
        h.error_code = ErrorCode::None;
        h.member_epoch = 2;
        h.assignment = Some(vec![TopicIdPartitions {
            topic_id: id,
            partitions: vec![0],
        }]);
        Action::Reply(Resp::ConsumerGroupHeartbeat(h))
    });
    poll_while(&consumer, || calls.0.lock().unwrap().len() < 3);
    assert_eq!(
        *calls.0.lock().unwrap(),
        ["assigned 2", "revoked 1 commit Ok(())", "assigned 0"]
    );
    // The commit in the listener went out before the acknowledgement, which owns t-0 only.
    let commit_at = c.seen(ApiKey::OffsetCommit).pop().unwrap().at;
    poll_while(&consumer, || {
        !heartbeats(&c)
            .iter()
            .any(|h| h.member_epoch == 2 && owned_ids(h) == [0])
    });
    let ack = c
        .seen(ApiKey::ConsumerGroupHeartbeat)
        .into_iter()
        .find(|s| matches!(&s.req, Req::ConsumerGroupHeartbeat(h) if h.member_epoch == 2 && owned_ids(h) == [0]))
        .unwrap();
    assert!(commit_at < ack.at);
    assert_eq!(consumer.assignment(), [TopicPartition::new(T, 0)]);
    // And t-0 goes on.
    fill(&c, 0, &["p0-1"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["p0-1"]);
}

#[test]
fn consumer_protocol_fenced_member_loses_its_partitions_and_joins_again() {
    let c = cluster(2);
    let (consumer, events) = kip848_member(&c, &[]);
    poll_n(&consumer, 2).unwrap();
    let before = heartbeats(&c).len();
    c.on(ApiKey::ConsumerGroupHeartbeat, 1, |_, r| {
        let Resp::ConsumerGroupHeartbeat(mut h) = r else {
            unreachable!()
        };
        h.error_code = ErrorCode::FencedMemberEpoch;
        h.assignment = None;
        Action::Reply(Resp::ConsumerGroupHeartbeat(h))
    });
    poll_while(&consumer, || events.get().len() < 3);
    assert_eq!(
        events.get(),
        ["assigned t-0,t-1", "lost t-0,t-1", "assigned t-0,t-1"]
    );
    let hb = heartbeats(&c);
    let rejoin = hb[before..].iter().find(|h| h.member_epoch == 0).unwrap();
    assert_eq!(rejoin.member_id, hb[0].member_id, "the same member id");
    assert_eq!(rejoin.topic_partitions, Some(vec![]));
}

#[test]
fn consumer_protocol_stale_epoch_commit_is_retried_with_the_new_epoch() {
    let c = cluster(1);
    let (consumer, _) = kip848_member(&c, &[]);
    poll_n(&consumer, 1).unwrap();
    c.on(ApiKey::OffsetCommit, 1, |_, r| {
        let Resp::OffsetCommit(mut oc) = r else {
            unreachable!()
        };
        for p in oc.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.error_code = ErrorCode::StaleMemberEpoch;
        }
        Action::Reply(Resp::OffsetCommit(oc))
    });
    consumer.commit_sync().unwrap();
    assert_eq!(c.seen(ApiKey::OffsetCommit).len(), 2);
}

#[test]
fn consumer_protocol_refuses_the_classic_keys_and_needs_the_api() {
    let c = FakeCluster::start(1);
    let e = Consumer::from_properties([
        ("bootstrap.servers", c.bootstrap().as_str()),
        ("group.id", "g"),
        ("group.protocol", "consumer"),
        ("session.timeout.ms", "10000"),
    ])
    .unwrap_err();
    assert_eq!(e.key, "session.timeout.ms");
    // A broker without ConsumerGroupHeartbeat: poll() says what is needed.
    c.model(|m| m.versions.remove(&ApiKey::ConsumerGroupHeartbeat.code()));
    c.create_topic(T, 1);
    let (consumer, _) = kip848_member(&c, &[]);
    let deadline = Instant::now() + WAIT;
    let err = loop {
        match consumer.poll(Duration::from_millis(50)) {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "no error"),
        }
    };
    assert!(err.to_string().contains("Kafka 4.0"), "{err}");
}

// --- static members and checkpoints -------------------------------------------------------------

/// A checkpoint (the resource's hooks, no image) of a static member `s1`, `frozen` run while
/// it is "frozen", and its restore: the instance id changes (no restorer gave one), so the copy
/// releases `s1` first.
fn checkpoint_and_restore(consumer: &Consumer, frozen: impl FnOnce()) {
    let r = consumer.as_resource();
    let ctx = Context::new("test");
    r.before_checkpoint(&ctx).unwrap();
    frozen();
    r.after_restore(&ctx).unwrap();
}

#[test]
fn classic_static_member_leaves_only_for_now_and_a_copy_under_another_id_releases_it() {
    let c = cluster(1);
    let events = Events::default();
    let consumer = consumer(&c, &[("group.instance.id", "s1")]);
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    poll_n(&consumer, 1).unwrap();
    let member = consumer.group_metadata().member_id;
    checkpoint_and_restore(&consumer, || {
        assert!(
            c.seen(ApiKey::LeaveGroup).is_empty(),
            "a static member does not leave before the image"
        );
    });
    fill(&c, 0, &["p0-1"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["p0-1"]);
    // The copy's first LeaveGroup removes the image's member for good, then it joins as
    // itself.
    let leave = c.seen(ApiKey::LeaveGroup);
    let Req::LeaveGroup(l) = &leave[0].req else {
        unreachable!()
    };
    assert_eq!(l.members[0].member_id, member);
    assert_eq!(l.members[0].group_instance_id.as_deref(), Some("s1"));
    let join = c.seen(ApiKey::JoinGroup).pop().unwrap();
    assert!(leave[0].at < join.at);
    let Req::JoinGroup(j) = &join.req else {
        unreachable!()
    };
    let new_id = j.group_instance_id.clone().unwrap();
    assert!(new_id.starts_with("s1-crac"), "{new_id}");
    assert_eq!(consumer.group_metadata().group_instance_id, Some(new_id));
}

#[test]
fn consumer_protocol_static_member_leaves_with_minus_two_and_a_copy_releases_it_with_minus_one() {
    let c = cluster(1);
    let (consumer, _) = kip848_member(&c, &[("group.instance.id", "s1")]);
    poll_n(&consumer, 1).unwrap();
    let member = heartbeats(&c)[0].member_id.clone();
    checkpoint_and_restore(&consumer, || {
        let last = heartbeats(&c).pop().unwrap();
        assert_eq!(
            (last.member_epoch, last.instance_id.as_deref()),
            (-2, Some("s1")),
            "a temporary leave"
        );
    });
    fill(&c, 0, &["p0-1"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["p0-1"]);
    let hb = heartbeats(&c);
    let i = hb.iter().position(|h| h.member_epoch == -1).unwrap();
    assert_eq!(hb[i].member_id, member);
    assert_eq!(hb[i].instance_id.as_deref(), Some("s1"));
    let rejoin = hb[i + 1..].iter().find(|h| h.member_epoch == 0).unwrap();
    assert_ne!(rejoin.member_id, member, "a restored copy is a new member");
    assert!(
        rejoin
            .instance_id
            .as_deref()
            .unwrap()
            .starts_with("s1-crac")
    );
}

// --- pause and resume ---------------------------------------------------------------------------

#[test]
fn paused_partitions_are_not_fetched_until_resumed() {
    let c = cluster(2);
    let consumer = consumer(&c, &[]);
    consumer.subscribe([T]).unwrap();
    assert_eq!(poll_n(&consumer, 2).unwrap().len(), 2);
    let t0 = TopicPartition::new(T, 0);
    consumer.pause(std::slice::from_ref(&t0)).unwrap();
    assert_eq!(consumer.paused(), std::slice::from_ref(&t0));
    assert!(consumer.pause(&[TopicPartition::new(T, 9)]).is_err());
    fill(&c, 0, &["p0-1"]);
    fill(&c, 1, &["p1-1"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["p1-1"]);
    let fetches = c.seen(ApiKey::Fetch).len();
    let quiet = poll_until(&consumer, || c.seen(ApiKey::Fetch).len() > fetches + 3).unwrap();
    assert!(quiet.is_empty(), "{quiet:?}");
    for s in &c.seen(ApiKey::Fetch)[fetches + 1..] {
        let Req::Fetch(f) = &s.req else {
            unreachable!()
        };
        assert!(
            f.topics
                .iter()
                .all(|t| t.partitions.iter().all(|p| p.partition != 0)),
            "a paused partition was fetched"
        );
    }
    consumer.resume(&[t0]).unwrap();
    assert!(consumer.paused().is_empty());
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["p0-1"]);
}

#[test]
fn consumer_protocol_group_metadata_follows_an_epoch_bump_without_reassignment() {
    let c = cluster(1);
    let (consumer, _) = kip848_member(&c, &[]);
    poll_n(&consumer, 1).unwrap();
    assert_eq!(consumer.group_metadata().generation_id, 1);
    // The broker bumps the member's epoch, its partitions unchanged (no assignment sent).
    c.model(|m| m.member_epoch = 2);
    c.on(ApiKey::ConsumerGroupHeartbeat, 1, |seen, _| {
        let Req::ConsumerGroupHeartbeat(h) = &seen.req else {
            unreachable!()
        };
        Action::Reply(Resp::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::None,
                error_message: None,
                member_id: Some(h.member_id.clone()),
                member_epoch: 2,
                heartbeat_interval_ms: 100,
                assignment: None,
            },
        ))
    });
    poll_while(&consumer, || {
        heartbeats(&c).iter().all(|h| h.member_epoch != 2)
    });
    // What a transaction sends its offsets with carries the epoch the coordinator checks.
    let m = consumer.group_metadata();
    assert_eq!(m.generation_id, 2, "{m:?}");
    consumer.commit_sync().unwrap();
    let Req::OffsetCommit(oc) = c.seen(ApiKey::OffsetCommit).pop().unwrap().req else {
        unreachable!()
    };
    assert_eq!(oc.generation_id_or_member_epoch, 2);
}
