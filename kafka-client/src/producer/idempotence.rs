//! The idempotent producer's bookkeeping (the part of Java's `TransactionManager` an
//! idempotent producer uses): the producer id and epoch, and per partition the sequence
//! numbers sent, acknowledged and in flight.
//!
//! What it guarantees: a batch is only ever sent again with the producer id, epoch and
//! sequence of its first attempt, so the broker recognises a copy it already wrote. When the
//! broker reports a gap (`OUT_OF_ORDER_SEQUENCE_NUMBER` for the first unacknowledged batch) or
//! lost the producer's state (`UNKNOWN_PRODUCER_ID`), the epoch is bumped on the client, as
//! KIP-360 does for a producer without a transactional id (the broker accepts a higher epoch
//! starting at sequence 0; an InitProducerId without a transactional id would hand out a new
//! id instead): the partition's sequences restart at 0 under the new epoch once nothing of it
//! is in flight. Other partitions keep their epoch until their own batches in flight are
//! answered, then move to the new one. A batch that leaves unacknowledged (expired, failed)
//! makes its partition wait until what is in flight tells whether the broker has it; if the
//! acknowledged sequence then stops short, the partition restarts too.

use std::collections::HashMap;
use std::sync::Arc;

use super::accumulator::ProducerBatch;
pub(crate) use super::producer_id::ProducerIdAndEpoch;
use crate::protocol::ErrorCode;

/// Where the producer id stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProducerIdState {
    /// Idempotence off.
    Disabled,
    /// A fresh id is needed (start, restore, an epoch that cannot grow).
    Needed,
    Ready(ProducerIdAndEpoch),
    Fatal(Arc<str>),
}

/// Why a partition's sequences start again at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// The broker saw a gap: nothing from the first unacknowledged batch on was written, so
    /// every queued batch is sent again under the new epoch.
    Gap,
    /// The broker lost the producer's state: a batch whose earlier attempt went unanswered
    /// may have been written before that, and is failed rather than written twice.
    StateLost,
}

/// Sequence numbers of one partition.
#[derive(Debug)]
struct PartitionSequences {
    /// The id and epoch these sequences belong to.
    producer: ProducerIdAndEpoch,
    /// Sequence for the next new batch.
    next: i32,
    /// Sequence the broker expects next (everything before it is acknowledged).
    acked_next: i32,
    /// Sequence after the last batch sent.
    sent_end: i32,
    /// Batches in flight.
    in_flight: usize,
    /// Node they went to.
    node: Option<i32>,
    /// The sequence after a batch that left unacknowledged (expired or failed): whether the
    /// broker wrote it is known once nothing is in flight. No new batch is sent meanwhile.
    unresolved: Option<i32>,
    /// Sequences restart at 0 under a newer epoch once nothing is in flight.
    restart: Option<Restart>,
    /// A batch of these sequences was acknowledged. Until then one batch goes at a time: a
    /// leader with no state for the producer writes whatever sequence comes first, so a
    /// second batch that overtook a refused first one (a new leader that did not know it
    /// led yet) would leave a gap at the partition's head that no retry can fill.
    head_acked: bool,
}

impl PartitionSequences {
    fn new(producer: ProducerIdAndEpoch) -> Self {
        Self {
            producer,
            next: 0,
            acked_next: 0,
            sent_end: 0,
            in_flight: 0,
            node: None,
            unresolved: None,
            restart: None,
            head_acked: false,
        }
    }
}

/// What an `OUT_OF_ORDER_SEQUENCE_NUMBER` or `UNKNOWN_PRODUCER_ID` means for the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceVerdict {
    /// Sent again (in order, perhaps under a new epoch).
    Retry,
    /// The broker acknowledged sequences after this batch's: it can never be written in
    /// order, and retrying until `delivery.timeout.ms` would only delay the report.
    Unwritable { acked_next: i32 },
}

/// Whether sequence `a` comes before `b`, in the broker's wrapping sequence space.
fn sequence_before(a: i32, b: i32) -> bool {
    let d = (b as i64 - a as i64).rem_euclid(i32::MAX as i64 + 1);
    d > 0 && d < (1 << 30)
}

/// Sequences wrap to 0 after `i32::MAX`, as the broker expects.
pub(crate) fn next_sequence(seq: i32, count: usize) -> i32 {
    ((seq as i64 + count as i64) % (i32::MAX as i64 + 1)) as i32
}

type Key = (Arc<str>, i32);

/// Producer id, epoch and sequences, owned by the sender thread.
#[derive(Debug)]
pub(crate) struct Idempotence {
    pub pid: ProducerIdState,
    partitions: HashMap<Key, PartitionSequences>,
    /// An epoch bump was asked for (applied by [`maybe_bump`](Self::maybe_bump)).
    bump_requested: bool,
    /// A transactional producer's epoch belongs to its transaction coordinator: never bumped
    /// here. A partition that must restart waits, and the transaction must be aborted, after
    /// which the coordinator hands out the next epoch and [`clear`](Self::clear) restarts
    /// every partition.
    transactional: bool,
}

/// What [`Idempotence::due_restarts`] found: partitions whose sequences restart now.
pub(crate) type Restarts = Vec<(Arc<str>, i32, Restart)>;

impl Idempotence {
    pub fn new(enabled: bool) -> Self {
        Self {
            pid: if enabled {
                ProducerIdState::Needed
            } else {
                ProducerIdState::Disabled
            },
            partitions: HashMap::new(),
            bump_requested: false,
            transactional: false,
        }
    }

    /// For a transactional producer (see the field).
    pub fn transactional() -> Self {
        Self {
            transactional: true,
            ..Self::new(true)
        }
    }

    pub fn enabled(&self) -> bool {
        self.pid != ProducerIdState::Disabled
    }

    /// The id and epoch new batches get, once there is one.
    pub fn current(&self) -> Option<ProducerIdAndEpoch> {
        match self.pid {
            ProducerIdState::Ready(p) => Some(p),
            _ => None,
        }
    }

    /// Forgets every sequence (after a restore: a new id, nothing queued has a sequence).
    pub fn clear(&mut self) {
        self.partitions.clear();
        self.bump_requested = false;
        if self.enabled() && !matches!(self.pid, ProducerIdState::Fatal(_)) {
            self.pid = ProducerIdState::Needed;
        }
    }

    /// Whether `batch` may go to `node` now without breaking its partition's order. A
    /// partition whose sequences belong to an older epoch moves to the current one here, when
    /// nothing of it is in flight and `batch` is new (queued retries, which keep their
    /// sequence, come first in a partition's queue).
    pub fn can_send(&mut self, batch: &ProducerBatch, node: i32) -> bool {
        let Some(current) = self.current() else {
            return !self.enabled();
        };
        let Some(s) = self
            .partitions
            .get_mut(&(batch.topic.clone(), batch.partition))
        else {
            return true;
        };
        if s.restart.is_some() {
            return false;
        }
        match batch.sequence {
            Some(seq) => {
                // A retry goes as its partition's next batch in sequence order, on the
                // connection the batches before it are in flight on.
                s.in_flight == 0 || (s.node == Some(node) && seq == s.sent_end)
            }
            None => {
                if s.unresolved.is_some() {
                    return false;
                }
                if s.producer != current {
                    if s.in_flight > 0 {
                        return false;
                    }
                    *s = PartitionSequences::new(current);
                }
                s.in_flight == 0 || (s.node == Some(node) && s.head_acked)
            }
        }
    }

    /// Gives a batch about to be sent its sequence (a retry keeps its own) and counts it in
    /// flight. Returns what to seal it with.
    pub fn assign(&mut self, batch: &mut ProducerBatch, node: i32) -> (ProducerIdAndEpoch, i32) {
        let current = self.current().expect("can_send let it through");
        let s = self
            .partitions
            .entry((batch.topic.clone(), batch.partition))
            .or_insert_with(|| PartitionSequences::new(current));
        let (producer, seq) = match (batch.producer, batch.sequence) {
            (Some(p), Some(seq)) => (p, seq),
            _ => {
                let seq = s.next;
                s.next = next_sequence(seq, batch.record_count());
                batch.producer = Some(s.producer);
                batch.sequence = Some(seq);
                (s.producer, seq)
            }
        };
        s.in_flight += 1;
        s.node = Some(node);
        s.sent_end = next_sequence(seq, batch.record_count());
        (producer, seq)
    }

    fn entry_of(&mut self, batch: &ProducerBatch) -> Option<&mut PartitionSequences> {
        let producer = batch.producer?;
        self.partitions
            .get_mut(&(batch.topic.clone(), batch.partition))
            .filter(|s| s.producer == producer)
    }

    /// A batch sent came back (answered or not).
    pub fn release(&mut self, batch: &ProducerBatch) {
        if let Some(s) = self.entry_of(batch) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }

    /// The broker acknowledged a batch.
    pub fn acked(&mut self, batch: &ProducerBatch) {
        let Some(seq) = batch.sequence else { return };
        if let Some(s) = self.entry_of(batch) {
            s.acked_next = next_sequence(seq, batch.record_count());
            s.head_acked = true;
            if s.unresolved.is_some_and(|u| s.acked_next >= u) {
                // A batch at or after the unresolved one made it: so did everything before.
                s.unresolved = None;
            }
        }
    }

    /// A batch with a sequence leaves without an acknowledgement (expired, failed, given up
    /// while in flight): whether the broker has it is known once its partition is settled.
    pub fn left_unacked(&mut self, batch: &ProducerBatch) {
        let Some(seq) = batch.sequence else { return };
        if let Some(s) = self.entry_of(batch) {
            let end = next_sequence(seq, batch.record_count());
            s.unresolved = Some(s.unresolved.map_or(end, |u| u.max(end)));
        }
    }

    /// OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a batch: whether it asks for
    /// a new epoch, as Java's `TransactionManager.canRetry` decides, or can never be written.
    pub fn on_sequence_error(&mut self, batch: &ProducerBatch, code: ErrorCode) -> SequenceVerdict {
        let Some(seq) = batch.sequence else {
            return SequenceVerdict::Retry;
        };
        let Some(s) = self.entry_of(batch) else {
            return SequenceVerdict::Retry;
        };
        if code == ErrorCode::OutOfOrderSequenceNumber && sequence_before(seq, s.acked_next) {
            // A copy the broker had would be answered as a duplicate: this one is not there,
            // and the partition's log has moved past it.
            return SequenceVerdict::Unwritable {
                acked_next: s.acked_next,
            };
        }
        let first = match s.unresolved {
            None => seq == s.acked_next,
            Some(u) => seq == u,
        };
        let why = match code {
            ErrorCode::UnknownProducerId => Restart::StateLost,
            // Otherwise the batch was refused behind an earlier one that failed: it is
            // retried in order once that one is resolved.
            _ if first => Restart::Gap,
            _ => return SequenceVerdict::Retry,
        };
        let key = (batch.topic.clone(), batch.partition);
        self.request_restart(&key, why);
        SequenceVerdict::Retry
    }

    fn request_restart(&mut self, key: &Key, why: Restart) {
        let current = self.current();
        let Some(s) = self.partitions.get_mut(key) else {
            return;
        };
        if s.restart != Some(Restart::StateLost) {
            s.restart = Some(why);
        }
        tracing::info!(topic = %key.0, partition = key.1, ?why, "partition's sequences restart under a new epoch");
        if Some(s.producer) == current && !self.transactional {
            self.bump_requested = true;
        }
    }

    /// Applies a requested epoch bump. Returns the new id and epoch if it bumped; an epoch
    /// at its maximum asks for a new producer id instead.
    pub fn maybe_bump(&mut self) -> Option<ProducerIdState> {
        if !self.bump_requested {
            return None;
        }
        let ProducerIdState::Ready(p) = self.pid else {
            return None; // bumped when the id is there (a new id restarts everything anyway)
        };
        self.bump_requested = false;
        self.pid = match p.epoch.checked_add(1) {
            Some(epoch) => ProducerIdState::Ready(ProducerIdAndEpoch { id: p.id, epoch }),
            None => ProducerIdState::Needed,
        };
        Some(self.pid.clone())
    }

    /// Partitions whose sequences restart now (nothing in flight, a newer epoch there), with
    /// why; their state starts over under the current epoch. The caller rewrites their queued
    /// batches ([`RecordAccumulator::restart_sequences`](super::accumulator::RecordAccumulator::restart_sequences)).
    /// Before that, unresolved partitions that are settled (nothing in flight, no queued
    /// batch with a sequence: `has_queued_sequences` says) are resolved.
    pub fn due_restarts(&mut self, has_queued_sequences: impl Fn(&str, i32) -> bool) -> Restarts {
        let mut gaps = Vec::new();
        for (key, s) in &mut self.partitions {
            let Some(u) = s.unresolved else { continue };
            if s.in_flight > 0 || s.restart.is_some() || has_queued_sequences(&key.0, key.1) {
                continue;
            }
            if s.acked_next == s.next {
                // Everything sent was acknowledged after all.
                s.unresolved = None;
            } else {
                tracing::info!(topic = %key.0, partition = key.1, acked_next = s.acked_next, unresolved = u, next = s.next, "sequences left unacknowledged");
                gaps.push(key.clone());
            }
        }
        for key in gaps {
            self.request_restart(&key, Restart::Gap);
        }
        let Some(current) = self.current() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, s) in &mut self.partitions {
            let Some(why) = s.restart else { continue };
            if s.in_flight > 0 || s.producer == current {
                continue;
            }
            *s = PartitionSequences::new(current);
            out.push((key.0.clone(), key.1, why));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::accumulator::tests::batch;

    const P0: ProducerIdAndEpoch = ProducerIdAndEpoch { id: 7, epoch: 0 };

    fn ready() -> Idempotence {
        let mut i = Idempotence::new(true);
        i.pid = ProducerIdState::Ready(P0);
        i
    }

    fn send(i: &mut Idempotence, b: &mut ProducerBatch) -> (ProducerIdAndEpoch, i32) {
        assert!(i.can_send(b, 1), "{b:?}");
        i.assign(b, 1)
    }

    /// Sends and acknowledges a one-record batch of ("t", 0), so that batches may follow
    /// each other without waiting (the partition's sequences 1 and on).
    fn started() -> Idempotence {
        let mut i = ready();
        let mut h = batch("t", 0, 1);
        assert_eq!(send(&mut i, &mut h), (P0, 0));
        i.release(&h);
        i.acked(&h);
        i
    }

    #[test]
    fn sequences_follow_record_counts_and_retries_keep_theirs() {
        let mut i = started();
        let (mut a, mut b) = (batch("t", 0, 3), batch("t", 0, 2));
        assert_eq!(send(&mut i, &mut a), (P0, 1));
        assert_eq!(send(&mut i, &mut b), (P0, 4));
        i.release(&a);
        // a is retried while b is in flight: only once b is back (it is not b's successor).
        assert!(!i.can_send(&a, 1));
        i.release(&b);
        assert_eq!(send(&mut i, &mut a), (P0, 1));
        i.release(&a);
        i.acked(&a);
        assert_eq!(send(&mut i, &mut b), (P0, 4));
    }

    #[test]
    fn the_first_batch_of_a_partition_goes_alone_until_acknowledged() {
        let mut i = ready();
        let (mut a, mut b) = (batch("t", 0, 1), batch("t", 0, 1));
        send(&mut i, &mut a);
        assert!(
            !i.can_send(&b, 1),
            "a leader without state would take b before a"
        );
        i.release(&a);
        assert!(i.can_send(&b, 1), "nothing in flight");
        // Refused (a leader that did not know it led yet): a goes again, still alone.
        assert_eq!(send(&mut i, &mut a), (P0, 0));
        assert!(!i.can_send(&b, 1));
        i.release(&a);
        i.acked(&a);
        assert_eq!(send(&mut i, &mut b), (P0, 1));
        let mut c = batch("t", 0, 1);
        assert_eq!(
            send(&mut i, &mut c),
            (P0, 2),
            "pipelined once the head is written"
        );
    }

    #[test]
    fn a_batch_behind_an_acknowledged_sequence_can_never_be_written() {
        let mut i = started();
        let (mut a, mut b) = (batch("t", 0, 2), batch("t", 0, 1));
        send(&mut i, &mut a);
        send(&mut i, &mut b);
        i.release(&b);
        i.acked(&b);
        i.release(&a);
        assert_eq!(
            i.on_sequence_error(&a, ErrorCode::OutOfOrderSequenceNumber),
            SequenceVerdict::Unwritable { acked_next: 4 }
        );
        assert!(
            i.maybe_bump().is_none(),
            "the epoch stays: later batches are written"
        );
        assert!(sequence_before(i32::MAX, 0), "sequences wrap");
        assert!(!sequence_before(0, i32::MAX));
    }

    #[test]
    fn a_gap_at_the_first_unacknowledged_batch_bumps_the_epoch_and_restarts_at_zero() {
        let mut i = started();
        let (mut a, mut b) = (batch("t", 0, 1), batch("t", 0, 1));
        send(&mut i, &mut a);
        send(&mut i, &mut b);
        i.release(&b);
        i.on_sequence_error(&b, ErrorCode::OutOfOrderSequenceNumber);
        assert!(
            i.maybe_bump().is_none(),
            "b is not the first outstanding batch"
        );
        i.release(&a);
        i.on_sequence_error(&a, ErrorCode::OutOfOrderSequenceNumber);
        let bumped = ProducerIdAndEpoch { id: 7, epoch: 1 };
        assert_eq!(i.maybe_bump(), Some(ProducerIdState::Ready(bumped)));
        assert!(!i.can_send(&a, 1), "waits for the restart");
        let r = i.due_restarts(|_, _| true);
        assert_eq!(r, vec![(Arc::from("t"), 0, Restart::Gap)]);
        for x in [&mut a, &mut b] {
            x.sequence = None;
            x.producer = None;
        }
        assert_eq!(send(&mut i, &mut a), (bumped, 0));
        i.release(&a);
        i.acked(&a);
        assert_eq!(send(&mut i, &mut b), (bumped, 1));
    }

    #[test]
    fn other_partitions_keep_their_epoch_until_their_batches_in_flight_are_back() {
        let mut i = ready();
        let (mut a, mut q1, mut q2) = (batch("t", 0, 1), batch("t", 1, 1), batch("t", 1, 1));
        send(&mut i, &mut a);
        send(&mut i, &mut q1);
        i.release(&a);
        i.on_sequence_error(&a, ErrorCode::UnknownProducerId);
        i.maybe_bump().unwrap();
        // q1 (old epoch) is in flight: a new batch of that partition waits.
        assert!(!i.can_send(&q2, 1));
        i.release(&q1);
        i.acked(&q1);
        let bumped = ProducerIdAndEpoch { id: 7, epoch: 1 };
        assert_eq!(send(&mut i, &mut q2), (bumped, 0));
        let r = i.due_restarts(|_, _| false);
        assert_eq!(r, vec![(Arc::from("t"), 0, Restart::StateLost)]);
    }

    #[test]
    fn an_unacknowledged_batch_holds_its_partition_until_resolved() {
        let mut i = started();
        let (mut a, mut b, mut c) = (batch("t", 0, 1), batch("t", 0, 1), batch("t", 0, 1));
        send(&mut i, &mut a);
        send(&mut i, &mut b);
        i.left_unacked(&a); // expired in flight
        assert!(!i.can_send(&c, 1));
        i.release(&a);
        i.release(&b);
        i.acked(&b); // b made it, so a did
        assert!(i.due_restarts(|_, _| false).is_empty());
        assert_eq!(send(&mut i, &mut c), (P0, 3));

        // Now the last batch goes unanswered and is given up: a restart, on a new epoch.
        i.release(&c);
        i.left_unacked(&c);
        assert!(i.due_restarts(|_, _| false).is_empty(), "bump first");
        i.maybe_bump().unwrap();
        let r = i.due_restarts(|_, _| false);
        assert_eq!(r, vec![(Arc::from("t"), 0, Restart::Gap)]);
    }

    #[test]
    fn a_transactional_producer_never_bumps_its_epoch_itself() {
        let mut i = Idempotence::transactional();
        i.pid = ProducerIdState::Ready(P0);
        let (mut a, b) = (batch("t", 0, 1), batch("t", 0, 1));
        send(&mut i, &mut a);
        i.release(&a);
        i.on_sequence_error(&a, ErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(i.maybe_bump(), None);
        assert!(i.due_restarts(|_, _| false).is_empty());
        assert!(
            !i.can_send(&b, 1),
            "the partition waits for the coordinator's epoch"
        );
        i.clear();
        let next = ProducerIdAndEpoch { id: 7, epoch: 1 };
        i.pid = ProducerIdState::Ready(next);
        let mut b = b;
        assert_eq!(send(&mut i, &mut b), (next, 0));
    }

    #[test]
    fn an_epoch_at_its_maximum_asks_for_a_new_id() {
        let mut i = Idempotence::new(true);
        i.pid = ProducerIdState::Ready(ProducerIdAndEpoch {
            id: 1,
            epoch: i16::MAX,
        });
        let mut a = batch("t", 0, 1);
        send(&mut i, &mut a);
        i.release(&a);
        i.on_sequence_error(&a, ErrorCode::OutOfOrderSequenceNumber);
        assert_eq!(i.maybe_bump(), Some(ProducerIdState::Needed));
    }
}
