//! [`ConsumerRebalanceListener`]: the application's hooks into a rebalance, called on the
//! application thread from inside `poll()` (and `close()`, `unsubscribe()`), as in Java.

use super::Consumer;
use super::record::TopicPartition;

/// Told when partitions are taken away from this member and given to it.
///
/// The consumer is passed in, so a listener can commit (`commit_sync()` in
/// `on_partitions_revoked` stores what was processed before another member takes over) or
/// seek (`seek()` in `on_partitions_assigned` to start elsewhere than the committed offset).
///
/// After a checkpoint the member has left the group (its positions were committed first):
/// the first `poll()` after the restore calls `on_partitions_revoked` with what it owned
/// before the image, then rejoins, then calls `on_partitions_assigned`.
pub trait ConsumerRebalanceListener: Send {
    /// Before a rebalance (and on close or unsubscribe): these partitions are given up. Not
    /// called for an empty set. Commits made here still succeed.
    fn on_partitions_revoked(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// After a rebalance: these partitions are this member's now (possibly none). Fetching
    /// starts once this returns.
    fn on_partitions_assigned(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// The partitions were lost without a clean hand-over (this member was removed from the
    /// group: poll timeout, session expiry, fencing); other members may own them already, so a
    /// commit here fails. By default, `on_partitions_revoked`.
    fn on_partitions_lost(&mut self, consumer: &Consumer, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(consumer, partitions);
    }
}

/// A listener that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopListener;

impl ConsumerRebalanceListener for NoopListener {}
