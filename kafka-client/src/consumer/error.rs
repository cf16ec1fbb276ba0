//! What the consumer's calls ([`ConsumerError`]) and its checkpoint
//! ([`ConsumerCheckpointError`]) can fail with, typed, with what a user needs to act on it.

use std::sync::Arc;
use std::time::Duration;

use super::record::TopicPartition;
use crate::protocol::{DecodeError, ErrorCode};

/// Why a consumer call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// `poll()` without `subscribe()` or `assign()`, or a call about a partition that is not
    /// assigned.
    #[error("illegal state: {0}")]
    IllegalState(Arc<str>),
    /// `group.id` is needed for this (subscribe, commit, committed).
    #[error("{0} needs a group.id")]
    NoGroupId(&'static str),
    /// A partition has no committed offset and `auto.offset.reset=none`: seek first.
    #[error("no committed offset for {0} and auto.offset.reset=none: call seek()")]
    NoOffset(TopicPartition),
    /// The position is outside the log and `auto.offset.reset=none`: seek first.
    #[error(
        "offset {offset} of {partition} is out of range and auto.offset.reset=none: call seek()"
    )]
    OffsetOutOfRange {
        /// Partition.
        partition: TopicPartition,
        /// The position that was out of range.
        offset: i64,
    },
    /// The partition's log was truncated under the position (an unclean leader election lost
    /// records the consumer read or was about to read: KIP-320) and
    /// `auto.offset.reset=none`: seek (to `divergent_offset` to go on from where the new
    /// leader's log differs).
    #[error(
        "the log of {partition} was truncated at {divergent_offset}, before the position {offset} (a new leader lacks records this consumer read), and auto.offset.reset=none: call seek()"
    )]
    LogTruncation {
        /// Partition.
        partition: TopicPartition,
        /// The position.
        offset: i64,
        /// The first offset where the leader's log differs from what was read.
        divergent_offset: i64,
    },
    /// A fetched batch could not be decoded (CRC mismatch, bad compression, truncated
    /// record). The position stays at the batch: `seek()` past it to go on.
    #[error("corrupt record batch in {partition} at offset {offset}: {source}")]
    CorruptRecord {
        /// Partition.
        partition: TopicPartition,
        /// The position at which decoding failed.
        offset: i64,
        /// What was wrong.
        source: DecodeError,
    },
    /// The commit cannot succeed: this member is no longer part of the group generation the
    /// offsets belong to (its partitions were reassigned). `poll()` rejoins.
    #[error("commit failed: {0}")]
    CommitFailed(Arc<str>),
    /// The group is rebalancing: call `poll()` to finish the rebalance, then commit again.
    #[error("the group is rebalancing: call poll() to complete the rebalance, then retry")]
    RebalanceInProgress,
    /// Another member with this `group.instance.id` joined: this one is fenced.
    #[error("fenced: another consumer joined with group.instance.id={0}")]
    Fenced(Arc<str>),
    /// The broker answered with an error that retrying will not fix.
    #[error("{operation} failed: {code}{}", msg_suffix(.message))]
    Broker {
        /// Which request.
        operation: &'static str,
        /// The error code.
        code: ErrorCode,
        /// The broker's message, if any.
        message: Option<Arc<str>>,
    },
    /// The call did not complete in time.
    #[error("{operation} timed out after {} ms{}", .after.as_millis(), msg_suffix(.last_error))]
    Timeout {
        /// Which call.
        operation: &'static str,
        /// The timeout.
        after: Duration,
        /// The last error seen while retrying.
        last_error: Option<Arc<str>>,
    },
    /// The consumer is closed.
    #[error("consumer closed")]
    Closed,
    /// No broker could be reached with the security settings: an untrusted certificate, a
    /// hostname mismatch, a wrong password, a mechanism the broker does not enable. The message
    /// names the broker and the configuration key to fix. `poll()` returns it once per failure
    /// while the consumer keeps retrying (with `reconnect.backoff.max.ms`).
    #[error("{0}")]
    Security(Arc<str>),
    /// A condition the consumer cannot recover from (no common protocol version, the group
    /// refused our protocol, authorization).
    #[error("fatal consumer error: {0}")]
    Fatal(Arc<str>),
}

fn msg_suffix(m: &Option<Arc<str>>) -> String {
    match m {
        Some(m) => format!(" ({m})"),
        None => String::new(),
    }
}

impl ConsumerError {
    pub(crate) fn illegal(msg: impl Into<String>) -> Self {
        ConsumerError::IllegalState(Arc::from(msg.into()))
    }

    /// Whether the same call may succeed later.
    pub fn is_retriable(&self) -> bool {
        match self {
            ConsumerError::RebalanceInProgress | ConsumerError::Timeout { .. } => true,
            ConsumerError::Broker { code, .. } => code.is_retriable(),
            _ => false,
        }
    }
}

/// Why `before_checkpoint` refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerCheckpointError {
    /// The positions could not be committed (coordinator unreachable, member fenced, ...).
    #[error(
        "kafka consumer {client_id} (group {group}): cannot checkpoint: {detail}; the consumer goes on"
    )]
    NotCommitted {
        /// The consumer.
        client_id: String,
        /// Its group.
        group: String,
        /// What failed.
        detail: String,
    },
    /// The network thread is gone (consumer closed) or did not answer.
    #[error("kafka consumer {client_id}: network thread did not answer the checkpoint request")]
    NoNetworkThread {
        /// The consumer.
        client_id: String,
    },
}
