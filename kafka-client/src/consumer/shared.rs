//! The state the application thread (`poll()`, `seek()`, commits) and the consumer's network
//! thread share, under one mutex: the subscription, the assigned partitions with their
//! positions, the fetched records not yet returned, the rebalance hand-over, errors for
//! `poll()`, and the checkpoint gate.
//!
//! Positions are those of records *returned* by `poll()` (what "processed" means for a commit);
//! the network thread only fetches from them and buffers what it got.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::config::AutoOffsetReset;
use super::error::ConsumerError;
use super::record::{ConsumerRecord, OffsetAndMetadata, TopicPartition};

/// What the consumer consumes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Subscription {
    /// Nothing yet.
    #[default]
    None,
    /// Topics, with group management.
    Topics(BTreeSet<String>),
    /// Partitions given by `assign()`.
    Manual,
}

/// One assigned partition.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionState {
    /// Offset of the next record `poll()` returns; `None` until initialized (committed
    /// offset, reset, or seek).
    pub position: Option<i64>,
    /// Leader epoch of the last returned record.
    pub leader_epoch: Option<i32>,
    /// Waiting for a ListOffsets with this strategy (earliest or latest).
    pub reset: Option<AutoOffsetReset>,
    /// Not fetched until the application seeks (out of range / no offset with reset=none).
    pub blocked: bool,
    /// Not fetched until the leader confirms the position (KIP-320: the leader changed, or
    /// the position came from a committed offset with an epoch).
    pub awaiting_validation: bool,
    /// The committed offset has been asked for (network thread).
    pub committed_requested: bool,
    /// `pause()`d: not fetched, and what was fetched before is held back until `resume()`.
    pub paused: bool,
}

/// A partition's fetched records not yet returned.
#[derive(Debug)]
pub(crate) struct CompletedFetch {
    pub tp: TopicPartition,
    /// The position these records continue from: they are stale if the partition's position
    /// is anything else.
    pub position: i64,
    pub records: VecDeque<ConsumerRecord>,
    /// The position once every record is returned.
    pub next_offset: i64,
    /// Raised by `poll()` after the records (a batch that did not decode).
    pub error: Option<ConsumerError>,
}

/// How many fetched chunks of one partition may wait in the buffer. Two: the next chunk is
/// fetched while the application drains the previous one, so the broker's read, the transfer,
/// decoding and the application's work overlap instead of taking turns (Java's fetcher keeps
/// one, and waits a round trip each time a partition runs dry).
pub(crate) const MAX_CHUNKS: u8 = 2;

/// What the buffer holds of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buffered {
    /// Chunks in `State::buffer`.
    pub chunks: u8,
    /// Where the next fetch continues: the end of the last chunk; `None` when that chunk ends
    /// in an error (nothing is fetched past a batch that did not decode).
    pub next_offset: Option<i64>,
}

/// The rebalance hand-over between the network thread (which talks to the coordinator) and
/// `poll()` (which runs the application's callbacks, as Java does, on the application thread).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum RebalanceStep {
    /// Nothing to do.
    #[default]
    None,
    /// The network thread wants to (re)join: `poll()` gives up these partitions (commit if
    /// auto-commit and not lost, `on_partitions_revoked`/`lost`), then sets `JoinAllowed`.
    Revoke {
        partitions: Vec<TopicPartition>,
        lost: bool,
    },
    /// `poll()` has released the partitions: the network thread joins.
    JoinAllowed,
    /// A new assignment (a SyncGroup, or a KIP-848 heartbeat): `poll()` gives up `revoked`
    /// (still assigned until then, so that the listener can commit them), installs
    /// `assignment` (partitions kept keep their positions), then runs
    /// `on_partitions_assigned(added)`; the new partitions are fetched after that.
    Assign {
        revoked: Vec<TopicPartition>,
        assignment: Vec<TopicPartition>,
        added: Vec<TopicPartition>,
    },
    /// `poll()` installed an assignment and runs `on_partitions_assigned` with these (the
    /// added partitions): their committed offsets are looked up once it returns, so that a
    /// `seek()` in the listener comes first.
    Assigned(Vec<TopicPartition>),
}

impl RebalanceStep {
    /// The step from the `current` assignment to `assignment`.
    pub fn assign(
        current: &BTreeMap<TopicPartition, PartitionState>,
        assignment: Vec<TopicPartition>,
    ) -> Self {
        let next: BTreeSet<&TopicPartition> = assignment.iter().collect();
        let revoked = current
            .keys()
            .filter(|tp| !next.contains(tp))
            .cloned()
            .collect();
        let mut added: Vec<TopicPartition> = next
            .into_iter()
            .filter(|tp| !current.contains_key(*tp))
            .cloned()
            .collect();
        added.dedup();
        Self::Assign {
            revoked,
            assignment,
            added,
        }
    }
}

/// A member id with its generation (or KIP-848 member epoch) and `group.instance.id`: who
/// the member is, as the coordinator's membership publishes it (its state machine stays on
/// the network thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Membership {
    pub member_id: String,
    pub generation_id: i32,
    pub group_instance_id: Option<String>,
}

impl Membership {
    /// Not a member (yet).
    pub fn none(group_instance_id: Option<String>) -> Self {
        Self {
            member_id: String::new(),
            generation_id: -1,
            group_instance_id,
        }
    }
}

/// Outcome of an asynchronous commit, for its callback on the application thread.
pub(crate) type AsyncCommitDone = (u64, Result<(), ConsumerError>);

/// The shared state.
#[derive(Debug)]
pub(crate) struct State {
    pub subscription: Subscription,
    /// Bumped by `subscribe()`: the network thread rejoins when it changes.
    pub subscription_version: u64,
    pub assignment: BTreeMap<TopicPartition, PartitionState>,
    pub buffer: VecDeque<CompletedFetch>,
    /// Partitions with a `CompletedFetch` in `buffer`: how many, and where the next fetch
    /// continues ([`State::fetch_offset`]).
    pub buffered: HashMap<TopicPartition, Buffered>,
    pub rebalance: RebalanceStep,
    pub errors: VecDeque<ConsumerError>,
    pub async_commits_done: Vec<AsyncCommitDone>,
    /// Set by `before_checkpoint`: `poll()` returns nothing and the network thread fetches
    /// nothing until the restore (or the checkpoint fails).
    pub checkpointing: bool,
    /// Bumped when a checkpoint gave the assignment up: a commit the application issued
    /// before it and that was not sent yet is superseded by the checkpoint's own commit.
    pub checkpoint_epoch: u64,
    pub closed: bool,
    /// When the application last called `poll()`, and whether it is inside it now.
    pub last_poll: Instant,
    pub in_poll: bool,
    /// Group membership now (written by the network thread whenever it changes).
    pub membership: Membership,
    /// The membership an assignment came with, set with [`RebalanceStep::Assigned`].
    pub assigned_membership: Membership,
    /// What `group_metadata()` returns: the membership of the last assignment `poll()`
    /// delivered (Java's `groupMetadata()`, updated when a join completes inside `poll()`).
    /// It identifies the member that read the records `poll()` returned, so a transaction
    /// committing their offsets is refused once that member is gone (KIP-447): after a
    /// rebalance, or in a copy restored from a checkpoint image (the member left the group
    /// before the image).
    pub polled_membership: Membership,
    /// Counters.
    pub records_returned: u64,
    pub rebalances: u64,
}

impl State {
    pub fn new(group_instance_id: Option<String>) -> Self {
        Self {
            subscription: Subscription::None,
            subscription_version: 0,
            assignment: BTreeMap::new(),
            buffer: VecDeque::new(),
            buffered: HashMap::new(),
            rebalance: RebalanceStep::None,
            errors: VecDeque::new(),
            async_commits_done: Vec::new(),
            checkpointing: false,
            checkpoint_epoch: 0,
            closed: false,
            last_poll: Instant::now(),
            in_poll: false,
            membership: Membership::none(group_instance_id.clone()),
            assigned_membership: Membership::none(group_instance_id.clone()),
            polled_membership: Membership::none(group_instance_id),
            records_returned: 0,
            rebalances: 0,
        }
    }

    /// Drops the fetched records of `tp` (seek, revocation).
    pub fn drop_buffered(&mut self, tp: &TopicPartition) {
        if self.buffered.remove(tp).is_some() {
            self.buffer.retain(|c| c.tp != *tp);
        }
    }

    /// Drops the queued errors that asked the application for a position of `tp` (no
    /// committed offset, out of range, a truncated log): a seek has answered them. A seek
    /// right after `assign()` would otherwise meet the I/O thread's `NoOffset` raised between
    /// the two calls.
    pub fn drop_position_errors(&mut self, tp: &TopicPartition) {
        self.errors.retain(|e| match e {
            ConsumerError::NoOffset(p)
            | ConsumerError::OffsetOutOfRange { partition: p, .. }
            | ConsumerError::LogTruncation { partition: p, .. } => p != tp,
            _ => true,
        });
    }

    /// Queues a fetched chunk for `poll()`.
    pub fn push_fetch(&mut self, cf: CompletedFetch) {
        let next_offset = cf
            .error
            .is_none()
            .then_some(cf.next_offset.max(cf.position));
        let b = self.buffered.entry(cf.tp.clone()).or_insert(Buffered {
            chunks: 0,
            next_offset: None,
        });
        b.chunks += 1;
        b.next_offset = next_offset;
        self.buffer.push_back(cf);
    }

    /// The offset to fetch `tp` from now, if it should be fetched: assigned, not blocked, with
    /// a position, no checkpoint running, and room for one more chunk (which continues where
    /// the buffered one ends).
    pub fn fetch_offset(&self, tp: &TopicPartition) -> Option<i64> {
        if self.checkpointing {
            return None;
        }
        let st = self
            .assignment
            .get(tp)
            .filter(|st| !st.blocked && !st.awaiting_validation && !st.paused)?;
        let position = st.position?;
        match self.buffered.get(tp) {
            None => Some(position),
            Some(b) if b.chunks < MAX_CHUNKS => b.next_offset,
            Some(_) => None,
        }
    }

    /// Drops every fetched record (checkpoint, revocation of everything).
    pub fn clear_buffer(&mut self) {
        self.buffer.clear();
        self.buffered.clear();
    }

    /// Replaces the assignment; positions of partitions kept are kept.
    pub fn set_assignment(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let mut next = BTreeMap::new();
        for tp in partitions {
            let st = self.assignment.remove(&tp).unwrap_or_default();
            next.insert(tp, st);
        }
        for tp in self.assignment.keys().cloned().collect::<Vec<_>>() {
            self.drop_buffered(&tp);
        }
        self.assignment = next;
    }

    /// The positions of records returned by `poll()`: what a commit of "everything
    /// processed" stores.
    pub fn consumed_offsets(&self) -> Vec<(TopicPartition, OffsetAndMetadata)> {
        self.assignment
            .iter()
            .filter_map(|(tp, st)| {
                st.position.map(|offset| {
                    (
                        tp.clone(),
                        OffsetAndMetadata {
                            offset,
                            leader_epoch: st.leader_epoch,
                            metadata: String::new(),
                        },
                    )
                })
            })
            .collect()
    }

    /// Whether records of `tp` fetched from `position` may be buffered: no checkpoint running,
    /// the partition assigned, and `position` where its next chunk must start (its position,
    /// or the end of the chunk already buffered) with room for it.
    pub fn accepts_fetch(&self, tp: &TopicPartition, position: i64) -> bool {
        self.fetch_offset(tp) == Some(position)
    }

    /// Takes up to `max` records from the buffer, advancing positions. Returns the records
    /// and an error met after them, if any. With `runs`, notes each partition's records in a
    /// row (the stream's books: what it yielded is known from how far it read the batch).
    pub fn drain(
        &mut self,
        max: usize,
        mut runs: Option<&mut Vec<Run>>,
    ) -> (Vec<ConsumerRecord>, Option<ConsumerError>) {
        let buffered: usize = self.buffer.iter().map(|cf| cf.records.len()).sum();
        let mut out = Vec::with_capacity(buffered.min(max));
        while out.len() < max {
            // Chunks of paused partitions wait where they are (returned after `resume()`).
            let Some(i) = self
                .buffer
                .iter()
                .position(|cf| !self.assignment.get(&cf.tp).is_some_and(|st| st.paused))
            else {
                break;
            };
            let cf = &mut self.buffer[i];
            let current = self.assignment.get(&cf.tp).is_some_and(|st| {
                st.position == Some(cf.position) && !st.blocked && !st.awaiting_validation
            });
            if !current {
                let cf = self.buffer.remove(i).expect("index found");
                unbuffer(&mut self.buffered, &cf.tp);
                continue;
            }
            let take = (max - out.len()).min(cf.records.len());
            let mut last = None;
            for r in cf.records.drain(..take) {
                last = Some((r.offset, r.leader_epoch));
                out.push(r);
            }
            let st = self.assignment.get_mut(&cf.tp).expect("checked current");
            if let Some((offset, epoch)) = last {
                if let Some(runs) = runs.as_deref_mut() {
                    runs.push(Run {
                        end: out.len(),
                        tp: cf.tp.clone(),
                        after_last: offset + 1,
                    });
                }
                cf.position = offset + 1;
                st.position = Some(cf.position);
                if epoch.is_some() {
                    st.leader_epoch = epoch;
                }
            }
            if cf.records.is_empty() {
                let cf = self.buffer.remove(i).expect("index found");
                unbuffer(&mut self.buffered, &cf.tp);
                if let Some(e) = cf.error {
                    // Stay at the bad batch; the error is raised after the records before it.
                    if out.is_empty() {
                        return (out, Some(e));
                    }
                    self.errors.push_back(e);
                    break;
                }
                if cf.next_offset > cf.position {
                    st.position = Some(cf.next_offset);
                }
            }
        }
        self.records_returned += out.len() as u64;
        (out, None)
    }
}

/// Records of one partition, in a row, up to index `end` of the batch they were drained into.
#[derive(Debug)]
pub(crate) struct Run {
    pub end: usize,
    pub tp: TopicPartition,
    /// The offset after the run's last record.
    pub after_last: i64,
}

/// A chunk of `tp` left the buffer.
fn unbuffer(buffered: &mut HashMap<TopicPartition, Buffered>, tp: &TopicPartition) {
    if let Some(b) = buffered.get_mut(tp) {
        b.chunks = b.chunks.saturating_sub(1);
        if b.chunks == 0 {
            buffered.remove(tp);
        }
    }
}

/// The state with its condition variable (the application waits on it in `poll()`).
#[derive(Debug)]
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub cv: Condvar,
    /// A stream's task waiting for what `notify` announces (`Consumer::poll_now`).
    pub waker: Mutex<Option<std::task::Waker>>,
}

impl Shared {
    pub fn new(group_instance_id: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::new(group_instance_id)),
            cv: Condvar::new(),
            waker: Mutex::new(None),
        })
    }

    /// Wakes the application (new records, a rebalance step, an error, a position).
    pub fn notify(&self) {
        self.cv.notify_all();
        let waker = self.waker.lock().take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tp: &TopicPartition, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            leader_epoch: Some(1),
            ..ConsumerRecord::bare(tp.topic.clone(), tp.partition, offset)
        }
    }

    fn fetched(tp: &TopicPartition, from: i64, n: i64, next: i64) -> CompletedFetch {
        CompletedFetch {
            tp: tp.clone(),
            position: from,
            records: (from..from + n).map(|o| rec(tp, o)).collect(),
            next_offset: next,
            error: None,
        }
    }

    #[test]
    fn drain_advances_positions_and_drops_stale_data() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = State::new(None);
        s.set_assignment([a.clone(), b.clone()]);
        s.assignment.get_mut(&a).unwrap().position = Some(10);
        s.assignment.get_mut(&b).unwrap().position = Some(0);
        assert!(s.accepts_fetch(&a, 10) && !s.accepts_fetch(&a, 9));
        s.push_fetch(fetched(&a, 10, 3, 20)); // a gap after 12: next fetch at 20
        s.push_fetch(fetched(&b, 5, 2, 7)); // stale: b is at 0
        let (r, e) = s.drain(2, None);
        assert!(e.is_none());
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), [10, 11]);
        assert_eq!(s.assignment[&a].position, Some(12));
        let (r, _) = s.drain(10, None);
        assert_eq!(r.len(), 1);
        assert_eq!(s.assignment[&a].position, Some(20));
        assert_eq!(s.assignment[&b].position, Some(0), "stale data dropped");
        assert!(s.buffer.is_empty() && s.buffered.is_empty());
        assert_eq!(s.consumed_offsets().len(), 2);
        assert_eq!(s.records_returned, 3);
    }

    #[test]
    fn drain_notes_each_partitions_run_of_records() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = State::new(None);
        s.set_assignment([a.clone(), b.clone()]);
        s.assignment.get_mut(&a).unwrap().position = Some(0);
        s.assignment.get_mut(&b).unwrap().position = Some(7);
        s.push_fetch(fetched(&a, 0, 3, 3));
        s.push_fetch(fetched(&b, 7, 2, 9));
        let mut runs = Vec::new();
        let (r, _) = s.drain(4, Some(&mut runs));
        let runs: Vec<_> = runs
            .iter()
            .map(|r| (r.end, r.tp.partition, r.after_last))
            .collect();
        assert_eq!(runs, [(3, 0, 3), (4, 1, 8)], "b's run read in part");
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn paused_partitions_are_not_fetched_and_their_records_wait() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = State::new(None);
        s.set_assignment([a.clone(), b.clone()]);
        s.assignment.get_mut(&a).unwrap().position = Some(0);
        s.assignment.get_mut(&b).unwrap().position = Some(0);
        s.push_fetch(fetched(&a, 0, 2, 2));
        s.push_fetch(fetched(&b, 0, 2, 2));
        s.assignment.get_mut(&a).unwrap().paused = true;
        assert_eq!(
            s.fetch_offset(&a),
            None,
            "a paused partition is not fetched"
        );
        let (r, _) = s.drain(10, None);
        assert!(r.iter().all(|r| r.partition == 1) && r.len() == 2);
        assert_eq!(s.buffer.len(), 1, "a's records wait");
        assert_eq!(s.assignment[&a].position, Some(0));
        s.assignment.get_mut(&a).unwrap().paused = false;
        let (r, _) = s.drain(10, None);
        assert_eq!(
            r.iter()
                .map(|r| (r.partition, r.offset))
                .collect::<Vec<_>>(),
            [(0, 0), (0, 1)]
        );
    }

    #[test]
    fn an_assignment_step_says_what_is_revoked_and_added() {
        let tp = |p| TopicPartition::new("t", p);
        let mut s = State::new(None);
        s.set_assignment([tp(0), tp(1)]);
        let step = RebalanceStep::assign(&s.assignment, vec![tp(1), tp(2), tp(2)]);
        assert_eq!(
            step,
            RebalanceStep::Assign {
                revoked: vec![tp(0)],
                assignment: vec![tp(1), tp(2), tp(2)],
                added: vec![tp(2)],
            }
        );
    }

    #[test]
    fn an_error_comes_after_the_records_before_it() {
        let a = TopicPartition::new("t", 0);
        let mut s = State::new(None);
        s.set_assignment([a.clone()]);
        s.assignment.get_mut(&a).unwrap().position = Some(0);
        let mut cf = fetched(&a, 0, 2, 2);
        cf.error = Some(ConsumerError::illegal("bad"));
        s.push_fetch(cf);
        assert_eq!(s.fetch_offset(&a), None, "nothing fetched past a bad batch");
        let (r, e) = s.drain(10, None);
        assert_eq!(r.len(), 2);
        assert!(e.is_none());
        assert_eq!(s.errors.len(), 1);
        assert_eq!(s.assignment[&a].position, Some(2), "stays at the bad batch");
    }

    #[test]
    fn the_next_chunk_is_fetched_while_one_is_drained() {
        let a = TopicPartition::new("t", 0);
        let mut s = State::new(None);
        s.set_assignment([a.clone()]);
        s.assignment.get_mut(&a).unwrap().position = Some(0);
        assert_eq!(s.fetch_offset(&a), Some(0));
        s.push_fetch(fetched(&a, 0, 5, 5));
        // The second chunk continues where the first ends, before poll() took anything.
        assert_eq!(s.fetch_offset(&a), Some(5));
        assert!(s.accepts_fetch(&a, 5) && !s.accepts_fetch(&a, 0));
        s.push_fetch(fetched(&a, 5, 5, 12)); // ends in a gap: the next fetch starts at 12
        assert_eq!(s.fetch_offset(&a), None, "two chunks at most");
        let (r, _) = s.drain(3, None);
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(
            s.fetch_offset(&a),
            None,
            "the first chunk is not drained yet"
        );
        let (r, _) = s.drain(3, None);
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(
            s.fetch_offset(&a),
            Some(12),
            "room again, after the second chunk"
        );
        let (r, _) = s.drain(10, None);
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), [6, 7, 8, 9]);
        assert_eq!(s.assignment[&a].position, Some(12));
        assert!(s.buffered.is_empty());
        assert_eq!(s.fetch_offset(&a), Some(12));
        // A seek drops both chunks and fetches from the new position.
        s.push_fetch(fetched(&a, 12, 2, 14));
        s.push_fetch(fetched(&a, 14, 2, 16));
        s.drop_buffered(&a);
        s.assignment.get_mut(&a).unwrap().position = Some(3);
        assert_eq!(s.fetch_offset(&a), Some(3));
        assert!(s.buffer.is_empty());
    }
}
