//! A Kafka producer and consumer for Apache Kafka 4.x that take part in Coordinated Restore at
//! Checkpoint.
//!
//! Layers, from the wire up:
//! - `protocol`: a hand-written codec (primitives, headers, one module per message, record
//!   batch v2). Decoding untrusted frames never panics and never allocates beyond the bytes
//!   present.
//! - `network`: blocking TCP connections, the `NetworkClient` that owns them and every
//!   in-flight request, and `Metadata`.
//! - [`producer`]: the `Producer` API, `RecordAccumulator`, the `Sender` thread, Java's
//!   default partitioner, idempotence, delivery reports, and the checkpoint hook.
//! - [`consumer`]: the `Consumer` API, the classic group protocol (`coordinator`, `range` and
//!   `roundrobin` assignors), the `Fetcher`, the consumer's network thread, and its checkpoint
//!   hook (commit, leave the group, disconnect; rejoin as a new member after the restore).
//!
//! The crate depends on `crac-api` only; the application links an engine.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod consumer;
pub(crate) mod network;
pub mod producer;
pub(crate) mod protocol;

/// The internals the crate's own integration tests, benches and fake broker drive directly:
/// the wire codec and the connection layer. Behind the `testing` feature and not a stable
/// API; an application has no use for them.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    /// The wire codec (`crate::protocol`).
    pub mod protocol {
        pub use crate::protocol::*;
    }
    /// The connection layer (`crate::network`).
    pub mod network {
        pub use crate::network::*;
    }
    /// The consumer's decoding of fetched record batches, for the fuzz and cost tests.
    pub mod fetch_decode {
        pub use crate::consumer::batch_reader::{
            DecompressionBudget, ParsedFetch, parse_partition, parse_partition_within,
        };
    }
}

pub use consumer::{
    AutoOffsetReset, ConfigError as ConsumerConfigError, Consumer, ConsumerCheckpointError,
    ConsumerConfig, ConsumerError, ConsumerGroupMetadata, ConsumerRebalanceListener,
    ConsumerRecord, ConsumerRecords, OffsetAndMetadata, TopicPartition,
};
pub use network::security::{OAuthBearerToken, OAuthBearerTokenProvider};
pub use producer::{
    Acks, CheckpointDrainError, CheckpointTransactionPolicy, ConfigError, DeliveryFuture,
    ProduceError, Producer, ProducerConfig, ProducerMetrics, ProducerRecord, RecordMetadata,
    TimeoutError, TransactionAction, TransactionError, TransactionState, TransactionalIdPolicy,
};
// The protocol's types that the API shows: in errors, in records, in the configuration.
pub use protocol::record::{Compression, Header, OwnedHeader};
pub use protocol::{DecodeError, ErrorCode};
