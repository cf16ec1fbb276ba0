//! Leader epochs in the consumer (KIP-320) against the fake broker, which keeps a leader epoch
//! per partition, stamps it into the batches it appends and answers OffsetForLeaderEpoch from
//! them: fetches carry the current leader epoch, metadata older than what was seen is not
//! applied, and a position is validated after a leader change (a log truncated under it by an
//! unclean leader election is read again from where it diverges).

use kafka_client::testing::protocol::ApiKey;
use kafka_client::{Consumer, ConsumerError, TopicPartition};

mod support;
use support::clients::{T, WAIT, consumer, fill, poll_n, poll_until};
use support::fake_broker::{Action, FakeCluster, Req, Resp};

fn tp() -> TopicPartition {
    TopicPartition::new(T, 0)
}

/// Two nodes, partition 0 led by node 0 in epoch 0 holding "a", "b", "c" (one batch each),
/// and a consumer without a group that read them.
fn reader(extra: &[(&str, &str)]) -> (FakeCluster, Consumer) {
    let c = FakeCluster::start(2);
    c.create_topic(T, 1);
    for v in ["a", "b", "c"] {
        fill(&c, 0, &[v]);
    }
    let mut props = vec![("group.id", "")];
    props.extend_from_slice(extra);
    let consumer = consumer(&c, &props);
    consumer.assign(&[tp()]).unwrap();
    consumer.seek(&tp(), 0).unwrap();
    assert_eq!(poll_n(&consumer, 3).unwrap(), ["a", "b", "c"]);
    (c, consumer)
}

/// (node, current leader epoch) of each Fetch of partition 0.
fn fetch_epochs(c: &FakeCluster) -> Vec<(i32, i32)> {
    fetch_epochs_from(c, 0)
}

/// (node, current leader epoch) of each Fetch of partition 0 from `offset` on. Each node
/// logs what it reads on its own thread, so under load a fetch sent to the old leader before
/// the client heard of the new one can be logged after fetches to the new leader: a fetch's
/// offset, not its place in the log, says what the client knew when it sent it.
fn fetch_epochs_from(c: &FakeCluster, offset: i64) -> Vec<(i32, i32)> {
    c.seen(ApiKey::Fetch)
        .into_iter()
        .filter_map(|s| match s.req {
            Req::Fetch(f) => f
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition == 0 && p.fetch_offset >= offset)
                .map(|p| (s.node, p.current_leader_epoch)),
            _ => None,
        })
        .collect()
}

/// (current leader epoch, epoch asked about) of each OffsetForLeaderEpoch.
fn validations(c: &FakeCluster) -> Vec<(i32, i32)> {
    c.seen(ApiKey::OffsetForLeaderEpoch)
        .into_iter()
        .filter_map(|s| match s.req {
            Req::OffsetForLeaderEpoch(r) => r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| (p.current_leader_epoch, p.leader_epoch)),
            _ => None,
        })
        .collect()
}

/// The position was validated, each time as `(current leader epoch, epoch asked about)`
/// (asked again only if an answer was lost: a request timeout on a loaded machine).
fn assert_validated(c: &FakeCluster, expected: (i32, i32)) {
    let v = validations(c);
    assert!(!v.is_empty() && v.iter().all(|&x| x == expected), "{v:?}");
}

#[test]
fn fetches_carry_the_leader_epoch_and_a_new_leader_confirms_the_position() {
    let (c, consumer) = reader(&[]);
    assert!(
        fetch_epochs(&c).iter().all(|&e| e == (0, 0)),
        "{:?}",
        fetch_epochs(&c)
    );
    // A clean leader change: node 1 in epoch 1 has everything.
    c.set_leader(T, 0, 1, 1);
    fill(&c, 0, &["d"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["d"]);
    assert_validated(&c, (1, 0));
    // "d" (offset 3) came from the new leader, asked in its epoch.
    assert!(fetch_epochs_from(&c, 3).contains(&(1, 1)));
}

#[test]
fn a_log_truncated_under_the_position_is_read_again_from_where_it_diverges() {
    let (c, consumer) = reader(&[]);
    // An unclean leader election: node 1 lacks "c" and writes "d" at its offset.
    c.elect_unclean(T, 0, 2, 1, 1);
    fill(&c, 0, &["d"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["d"]);
    assert_eq!(consumer.position(&tp()).unwrap(), 3);
    assert_validated(&c, (1, 0));
}

#[test]
fn a_truncated_log_with_reset_none_is_an_error_until_a_seek() {
    let (c, consumer) = reader(&[("auto.offset.reset", "none")]);
    c.elect_unclean(T, 0, 2, 1, 1);
    fill(&c, 0, &["d"]);
    let mut seen = None;
    let _ = poll_until(&consumer, || seen.is_some()).map_err(|e| seen = Some(e));
    match seen {
        Some(ConsumerError::LogTruncation {
            offset,
            divergent_offset,
            ..
        }) => assert_eq!((offset, divergent_offset), (3, 2)),
        other => panic!("{other:?}"),
    }
    consumer.seek(&tp(), 2).unwrap();
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["d"]);
}

#[test]
fn metadata_with_an_older_leader_epoch_is_not_applied() {
    let c = FakeCluster::start(2);
    c.create_topic(T, 1);
    fill(&c, 0, &["a"]);
    let consumer = consumer(&c, &[("group.id", ""), ("metadata.max.age.ms", "50")]);
    consumer.assign(&[tp()]).unwrap();
    consumer.seek(&tp(), 0).unwrap();
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["a"]);
    c.set_leader(T, 0, 1, 1);
    fill(&c, 0, &["b"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["b"]);
    // From now on every metadata answer comes from a broker that missed the election.
    c.on(ApiKey::Metadata, usize::MAX, |_, r| {
        let Resp::Metadata(mut m) = r else {
            unreachable!()
        };
        for p in m.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.leader_id = 0;
            p.leader_epoch = 0;
        }
        Action::Reply(Resp::Metadata(m))
    });
    let refreshes = c.seen(ApiKey::Metadata).len();
    c.wait_for(ApiKey::Metadata, refreshes + 3, WAIT);
    fill(&c, 0, &["c"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["c"]);
    // Every fetch sent after "b" (offset 1) was read went to the new leader in its epoch.
    let after = fetch_epochs_from(&c, 2);
    assert!(after.iter().all(|&f| f == (1, 1)), "{after:?}");
}

#[test]
fn a_fenced_leader_epoch_refreshes_the_metadata_and_reads_on() {
    let (c, consumer) = reader(&[]);
    // Same leader, new epoch: the consumer's next fetch names the old one and is refused.
    c.set_leader(T, 0, 0, 1);
    fill(&c, 0, &["d"]);
    assert_eq!(poll_n(&consumer, 1).unwrap(), ["d"]);
    let epochs = fetch_epochs(&c);
    assert_eq!(epochs.last(), Some(&(0, 1)), "{epochs:?}");
    assert_validated(&c, (1, 0));
}

#[test]
fn a_committed_offset_with_an_epoch_is_validated_before_reading_from_it() {
    let c = FakeCluster::start(2);
    c.create_topic(T, 1);
    for v in ["a", "b", "c"] {
        fill(&c, 0, &[v]);
    }
    let first = consumer(&c, &[]);
    first.subscribe([T]).unwrap();
    assert_eq!(poll_n(&first, 3).unwrap(), ["a", "b", "c"]);
    first.commit_sync().unwrap();
    first.close(WAIT).unwrap();
    assert_eq!(
        c.model(|m| m.committed_epochs.get(&(T.to_owned(), 0)).copied()),
        Some(0)
    );
    // While the group was empty, an unclean leader election lost "c".
    c.elect_unclean(T, 0, 2, 1, 1);
    fill(&c, 0, &["d"]);
    let second = consumer(&c, &[]);
    second.subscribe([T]).unwrap();
    assert_eq!(poll_n(&second, 1).unwrap(), ["d"]);
    assert_validated(&c, (1, 0));
}
