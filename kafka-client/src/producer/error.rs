//! What can go wrong with a record ([`ProduceError`]), a `flush()`/`close()`
//! ([`TimeoutError`]) or a checkpoint ([`CheckpointDrainError`]), typed, with what a user
//! needs to act on it.

use std::sync::Arc;
use std::time::Duration;

use super::transaction::error::TransactionError;
use crate::protocol::ErrorCode;

/// Why a record was not delivered (or not accepted). Cloned to every record of a failed
/// batch, so strings are shared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// The serialized record is larger than a limit (`max.request.size` or `buffer.memory`).
    #[error("record of {size} bytes exceeds {limit_name}={limit}")]
    RecordTooLarge {
        /// Its serialized size.
        size: usize,
        /// The limit.
        limit: usize,
        /// Which setting.
        limit_name: &'static str,
    },
    /// `send()` waited `max.block.ms` without being able to accept the record.
    #[error("send() blocked for max.block.ms={} ms waiting for {waiting_for}", .waited.as_millis())]
    MaxBlockExceeded {
        /// How long it waited.
        waited: Duration,
        /// For what: topic metadata, buffer memory, the end of a checkpoint.
        waiting_for: Arc<str>,
    },
    /// `send()` was waiting (for the end of a checkpoint, topic metadata or buffer memory)
    /// when a checkpoint image was taken, and this process is a copy restored from that image:
    /// the record was not sent. Every copy of the image gets this error for the same record,
    /// so none of them duplicates it; the original, when it runs on (leave-running or aborted
    /// checkpoint), sends it. Send it again from a copy only if it is meant once per copy. To
    /// never see this, stop the sending loop in an application-level resource before the
    /// checkpoint (the org.crac quiesce pattern; see `docs/uniqueness.md`).
    #[error(
        "record not sent: this process is a copy restored from a checkpoint image taken while \
         send() waited ({} ms); every copy gets this error for the record, the original sends it",
        .waited.as_millis()
    )]
    RestoredWhileWaiting {
        /// How long it waited, from its first wait to the restore.
        waited: Duration,
    },
    /// The record was not acknowledged within `delivery.timeout.ms`.
    #[error("record for {topic}-{partition} expired after delivery.timeout.ms={} ms{}", .after.as_millis(), last_error_suffix(.last_error))]
    DeliveryTimeout {
        /// Topic.
        topic: Arc<str>,
        /// Partition.
        partition: i32,
        /// The timeout.
        after: Duration,
        /// The last error seen while retrying, if any.
        last_error: Option<Arc<str>>,
    },
    /// The broker refused the batch with a non-retriable error (or retries ran out).
    #[error("broker rejected records for {topic}-{partition}: {code}{}", last_error_suffix(.message))]
    Broker {
        /// Topic.
        topic: Arc<str>,
        /// Partition.
        partition: i32,
        /// The error code.
        code: ErrorCode,
        /// The broker's message, if it gave one.
        message: Option<Arc<str>>,
    },
    /// The explicit partition does not exist.
    #[error("partition {partition} of topic {topic} does not exist (it has {partitions})")]
    UnknownPartition {
        /// Topic.
        topic: Arc<str>,
        /// Requested partition.
        partition: i32,
        /// Partition count.
        partitions: usize,
    },
    /// The topic cannot be produced to (e.g. authorization failure or invalid name).
    #[error("topic {topic}: {code}")]
    Topic {
        /// Topic.
        topic: Arc<str>,
        /// Error from the metadata.
        code: ErrorCode,
    },
    /// The producer is closed (or was closed before the record could be delivered).
    #[error("producer closed{}", last_error_suffix(.reason))]
    Closed {
        /// Why, when it was forced.
        reason: Option<Arc<str>>,
    },
    /// No broker could be reached with the security settings: an untrusted certificate, a
    /// hostname mismatch, a wrong password, a mechanism the broker does not enable. The message
    /// names the broker and the configuration key to fix.
    #[error("{0}")]
    Security(Arc<str>),
    /// A condition the producer cannot recover from by retrying (fenced, no common protocol
    /// version with the broker).
    #[error("fatal producer error: {0}")]
    Fatal(Arc<str>),
    /// A transactional producer refused the record (no transaction open, the transaction
    /// must be aborted, the producer was fenced), or the record's transaction was aborted
    /// before it was sent ([`TransactionError::Aborted`]). [`TransactionError::action`] says
    /// what to do.
    #[error("{0}")]
    Transaction(TransactionError),
}

fn last_error_suffix(e: &Option<Arc<str>>) -> String {
    match e {
        Some(e) => format!(" ({e})"),
        None => String::new(),
    }
}

impl ProduceError {
    /// Whether retrying the same record later could succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ProduceError::MaxBlockExceeded { .. } | ProduceError::DeliveryTimeout { .. } => true,
            ProduceError::Broker { code, .. } => code.is_retriable(),
            _ => false,
        }
    }
}

/// `flush()` or `close()` did not finish in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} timed out after {} ms with {pending_records} record(s) not yet delivered", .after.as_millis())]
pub struct TimeoutError {
    /// `flush` or `close`.
    pub operation: &'static str,
    /// The timeout.
    pub after: Duration,
    /// Records still pending.
    pub pending_records: usize,
}

/// Why `before_checkpoint` refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointDrainError {
    /// Records were still unacknowledged at `checkpoint.drain.timeout.ms`.
    #[error("kafka producer {client_id}: cannot checkpoint: {detail}")]
    NotDrained {
        /// The producer.
        client_id: String,
        /// What was left.
        detail: String,
    },
    /// The sender thread is gone (producer closed) or did not answer.
    #[error("kafka producer {client_id}: sender thread did not answer the checkpoint request")]
    NoSender {
        /// The producer.
        client_id: String,
    },
    /// The open transaction did not end in time (`checkpoint.transaction.policy=wait`), or
    /// its abort did not finish.
    #[error("kafka producer {client_id}: cannot checkpoint: {detail}")]
    TransactionOpen {
        /// The producer.
        client_id: String,
        /// What was left.
        detail: String,
    },
}
