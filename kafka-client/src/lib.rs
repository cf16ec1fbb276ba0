//! A Kafka producer and consumer for Apache Kafka 4.x that take part in Coordinated Restore at
//! Checkpoint.
//!
//! Layers, from the wire up:
//! - [`protocol`]: a hand-written codec (primitives, headers, one module per message, record
//!   batch v2). Decoding untrusted frames never panics and never allocates beyond the bytes
//!   present.
//! - [`network`]: blocking TCP connections, the `NetworkClient` that owns them and every
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
pub mod error;
pub mod network;
pub mod producer;
pub mod protocol;

pub use consumer::checkpoint_error::ConsumerCheckpointError;
pub use consumer::{
    AutoOffsetReset, ConfigError as ConsumerConfigError, Consumer, ConsumerConfig, ConsumerError,
    ConsumerGroupMetadata, ConsumerRebalanceListener, ConsumerRecord, ConsumerRecords,
    OffsetAndMetadata, TopicPartition,
};
pub use error::{ProduceError, TimeoutError};
pub use network::security::{OAuthBearerToken, OAuthBearerTokenProvider};
pub use producer::checkpoint_error::CheckpointDrainError;
pub use producer::{
    Acks, CheckpointTransactionPolicy, ConfigError, DeliveryFuture, Producer, ProducerConfig,
    ProducerMetrics, ProducerRecord, RecordMetadata, TransactionAction, TransactionError,
    TransactionState, TransactionalIdPolicy,
};
pub use protocol::record::Header;
