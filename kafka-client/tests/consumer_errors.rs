//! The consumer's group error paths against the fake broker (`support/fake_broker.rs`), the
//! cases Java's `ConsumerCoordinatorTest` covers: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
//! UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID answered to JoinGroup, SyncGroup, Heartbeat and
//! OffsetCommit, and the client-side session timeout when heartbeats go unanswered. Each
//! starts its own fake cluster and takes well under a second or two.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kafka_client::testing::protocol::{ApiKey, ErrorCode};
use kafka_client::{Consumer, ConsumerError};

mod support;
use support::clients::{Events, T, consumer, fill, poll_n, poll_until};
use support::fake_broker::{Action, FakeCluster, Req, Resp};

/// `resp` with `code` instead of its outcome.
fn with_error(resp: Resp, code: ErrorCode) -> Resp {
    match resp {
        Resp::Heartbeat(mut r) => {
            r.error_code = code;
            Resp::Heartbeat(r)
        }
        Resp::JoinGroup(mut r) => {
            r.error_code = code;
            r.generation_id = -1;
            r.members.clear();
            Resp::JoinGroup(r)
        }
        Resp::SyncGroup(mut r) => {
            r.error_code = code;
            r.assignment.clear();
            Resp::SyncGroup(r)
        }
        Resp::OffsetCommit(mut r) => {
            for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = code;
            }
            Resp::OffsetCommit(r)
        }
        other => panic!("no error to set in {other:?}"),
    }
}

/// Answers the next request of `api` with `code` (for JoinGroup: the next one that names a
/// member, the first of a new member being MEMBER_ID_REQUIRED anyway).
fn fail_next(c: &FakeCluster, api: ApiKey, code: ErrorCode) {
    let done = Arc::new(AtomicUsize::new(0));
    c.on(api, usize::MAX, move |seen, r| {
        let named = match &seen.req {
            Req::JoinGroup(j) => !j.member_id.is_empty(),
            _ => true,
        };
        if named && done.fetch_add(1, Ordering::SeqCst) == 0 {
            Action::Reply(with_error(r, code))
        } else {
            Action::Reply(r)
        }
    });
}

/// The member ids of the JoinGroup requests seen, in order.
fn join_member_ids(c: &FakeCluster) -> Vec<String> {
    c.seen(ApiKey::JoinGroup)
        .into_iter()
        .map(|s| match s.req {
            Req::JoinGroup(j) => j.member_id,
            _ => unreachable!(),
        })
        .collect()
}

/// A member of group `g` that read "a" from partition 0 and committed offset 1.
fn member(c: &FakeCluster, extra: &[(&str, &str)]) -> (Consumer, Events) {
    c.create_topic(T, 1);
    fill(c, 0, &["a"]);
    let events = Events::default();
    let consumer = consumer(c, extra);
    consumer
        .subscribe_with_listener([T], events.clone())
        .unwrap();
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["a"]);
    consumer.commit_sync().unwrap();
    (consumer, events)
}

/// Polls (nothing new to read meanwhile) until the listener heard `expected`, then checks
/// the member reads on from its committed offset.
fn rejoins(c: &FakeCluster, consumer: &Consumer, events: &Events, expected: &[&str]) {
    let got = poll_until(consumer, || events.get().len() >= expected.len()).unwrap();
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(events.get(), expected);
    fill(c, 0, &["b"]);
    assert_eq!(poll_n(consumer, 1).unwrap(), ["b"]);
}

const REJOINED: [&str; 3] = ["assigned t-0", "revoked t-0", "assigned t-0"];
const LOST: [&str; 3] = ["assigned t-0", "lost t-0", "assigned t-0"];

// --- JoinGroup ----------------------------------------------------------------------------------

fn join_error(code: ErrorCode) -> Vec<String> {
    let c = FakeCluster::start(1);
    fail_next(&c, ApiKey::JoinGroup, code);
    let (consumer, events) = member(&c, &[]);
    assert_eq!(events.get(), ["assigned t-0"]);
    drop(consumer);
    join_member_ids(&c)
}

#[test]
fn join_rebalance_in_progress_is_retried_with_the_same_member_id() {
    let ids = join_error(ErrorCode::RebalanceInProgress);
    assert_eq!(ids, ["", "member-1", "member-1"]);
}

#[test]
fn join_illegal_generation_joins_again_with_the_same_member_id() {
    let ids = join_error(ErrorCode::IllegalGeneration);
    assert_eq!(ids, ["", "member-1", "member-1"]);
}

#[test]
fn join_unknown_member_id_joins_again_as_a_new_member() {
    let ids = join_error(ErrorCode::UnknownMemberId);
    assert_eq!(ids, ["", "member-1", "", "member-2"]);
}

/// A static member (`group.instance.id`) that `api` answers with FENCED_INSTANCE_ID: `poll()`
/// reports it, the member's partitions (if it had any) are lost, and it does not join again.
fn fenced(c: &FakeCluster, consumer: &Consumer) {
    let mut fenced = false;
    let _ = poll_until(consumer, || fenced).or_else(|e| {
        assert!(
            matches!(e, ConsumerError::Fenced(ref id) if &**id == "i1"),
            "{e}"
        );
        fenced = true;
        Ok::<_, ConsumerError>(Vec::new())
    });
    assert!(fenced);
    let joins = c.seen(ApiKey::JoinGroup).len();
    for _ in 0..10 {
        assert!(consumer.poll(Duration::from_millis(20)).unwrap().is_empty());
    }
    assert_eq!(c.seen(ApiKey::JoinGroup).len(), joins, "joined again");
}

#[test]
fn join_fenced_instance_id_is_fatal() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fail_next(&c, ApiKey::JoinGroup, ErrorCode::FencedInstanceId);
    let consumer = consumer(&c, &[("group.instance.id", "i1")]);
    consumer.subscribe([T]).unwrap();
    fenced(&c, &consumer);
    assert!(consumer.assignment().is_empty());
}

// --- SyncGroup ----------------------------------------------------------------------------------

fn sync_error(code: ErrorCode) -> Vec<String> {
    let c = FakeCluster::start(1);
    fail_next(&c, ApiKey::SyncGroup, code);
    let (consumer, events) = member(&c, &[]);
    assert_eq!(events.get(), ["assigned t-0"]);
    drop(consumer);
    join_member_ids(&c)
}

#[test]
fn sync_rebalance_in_progress_joins_again_with_the_same_member_id() {
    let ids = sync_error(ErrorCode::RebalanceInProgress);
    assert_eq!(ids, ["", "member-1", "member-1"]);
}

#[test]
fn sync_illegal_generation_joins_again_with_the_same_member_id() {
    let ids = sync_error(ErrorCode::IllegalGeneration);
    assert_eq!(ids, ["", "member-1", "member-1"]);
}

#[test]
fn sync_unknown_member_id_joins_again_as_a_new_member() {
    let ids = sync_error(ErrorCode::UnknownMemberId);
    assert_eq!(ids, ["", "member-1", "", "member-2"]);
}

#[test]
fn sync_fenced_instance_id_is_fatal() {
    let c = FakeCluster::start(1);
    c.create_topic(T, 1);
    fail_next(&c, ApiKey::SyncGroup, ErrorCode::FencedInstanceId);
    let consumer = consumer(&c, &[("group.instance.id", "i1")]);
    consumer.subscribe([T]).unwrap();
    fenced(&c, &consumer);
    assert!(consumer.assignment().is_empty());
}

// --- Heartbeat ----------------------------------------------------------------------------------

#[test]
fn heartbeat_rebalance_in_progress_revokes_and_joins_again_with_the_same_member_id() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fail_next(&c, ApiKey::Heartbeat, ErrorCode::RebalanceInProgress);
    rejoins(&c, &consumer, &events, &REJOINED);
    assert_eq!(join_member_ids(&c), ["", "member-1", "member-1"]);
}

#[test]
fn records_fetched_before_a_rebalance_and_not_committed_are_read_again() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fill(&c, 0, &["b"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["b"]); // position 2, offset 1 committed
    fail_next(&c, ApiKey::Heartbeat, ErrorCode::RebalanceInProgress);
    // Everything the member returns is kept: the rebalance and the fetch from the committed
    // offset may all happen within one poll().
    let mut got = poll_until(&consumer, || events.get().len() == 3).unwrap();
    if got.is_empty() {
        got = poll_n(&consumer, 1).unwrap();
    }
    assert_eq!(got, ["b"]);
    assert_eq!(events.get(), REJOINED);
}

#[test]
fn heartbeat_illegal_generation_loses_the_partitions_and_joins_again() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fail_next(&c, ApiKey::Heartbeat, ErrorCode::IllegalGeneration);
    rejoins(&c, &consumer, &events, &LOST);
    assert_eq!(join_member_ids(&c), ["", "member-1", "member-1"]);
}

#[test]
fn heartbeat_unknown_member_id_loses_the_partitions_and_joins_as_a_new_member() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fail_next(&c, ApiKey::Heartbeat, ErrorCode::UnknownMemberId);
    rejoins(&c, &consumer, &events, &LOST);
    assert_eq!(join_member_ids(&c), ["", "member-1", "", "member-2"]);
}

#[test]
fn heartbeat_fenced_instance_id_loses_the_partitions_and_is_fatal() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[("group.instance.id", "i1")]);
    fail_next(&c, ApiKey::Heartbeat, ErrorCode::FencedInstanceId);
    fill(&c, 0, &["b"]);
    fenced(&c, &consumer);
    assert_eq!(events.get(), ["assigned t-0", "lost t-0"]);
    assert!(consumer.assignment().is_empty());
}

// --- OffsetCommit -------------------------------------------------------------------------------

#[test]
fn commit_rebalance_in_progress_fails_the_commit_and_the_member_rejoins() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fail_next(&c, ApiKey::OffsetCommit, ErrorCode::RebalanceInProgress);
    let e = consumer.commit_sync().unwrap_err();
    assert!(matches!(e, ConsumerError::RebalanceInProgress), "{e}");
    rejoins(&c, &consumer, &events, &REJOINED);
    consumer.commit_sync().unwrap();
    assert_eq!(join_member_ids(&c), ["", "member-1", "member-1"]);
}

fn commit_generation_error(code: ErrorCode, ids: &[&str]) {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[]);
    fail_next(&c, ApiKey::OffsetCommit, code);
    let e = consumer.commit_sync().unwrap_err();
    assert!(matches!(e, ConsumerError::CommitFailed(_)), "{e}");
    rejoins(&c, &consumer, &events, &LOST);
    consumer.commit_sync().unwrap();
    assert_eq!(join_member_ids(&c), ids);
}

#[test]
fn commit_illegal_generation_fails_the_commit_and_loses_the_partitions() {
    commit_generation_error(ErrorCode::IllegalGeneration, &["", "member-1", "member-1"]);
}

#[test]
fn commit_unknown_member_id_fails_the_commit_and_loses_the_partitions() {
    commit_generation_error(
        ErrorCode::UnknownMemberId,
        &["", "member-1", "", "member-2"],
    );
}

#[test]
fn commit_fenced_instance_id_fails_the_commit_and_is_fatal() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(&c, &[("group.instance.id", "i1")]);
    fail_next(&c, ApiKey::OffsetCommit, ErrorCode::FencedInstanceId);
    let e = consumer.commit_sync().unwrap_err();
    assert!(matches!(e, ConsumerError::Fenced(_)), "{e}");
    fenced(&c, &consumer);
    assert_eq!(events.get(), ["assigned t-0", "lost t-0"]);
}

// --- session timeout ----------------------------------------------------------------------------

#[test]
fn unanswered_heartbeats_for_the_session_timeout_lose_the_partitions_and_rejoin() {
    let c = FakeCluster::start(1);
    let (consumer, events) = member(
        &c,
        &[
            ("session.timeout.ms", "1000"),
            ("request.timeout.ms", "800"),
        ],
    );
    c.on(ApiKey::Heartbeat, usize::MAX, |_, _| Action::Hold);
    let got = poll_until(&consumer, || events.get().len() >= 2).unwrap();
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(events.get()[1], "lost t-0");
    c.clear_rules();
    rejoins(&c, &consumer, &events, &LOST);
    // A new member: the coordinator removed the old one.
    assert_eq!(join_member_ids(&c), ["", "member-1", "", "member-2"]);
}
