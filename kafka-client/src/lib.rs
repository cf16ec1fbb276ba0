//! A Kafka producer and consumer for Apache Kafka 4.x, written the way Java's client is built
//! and configured with Java's keys, that take part in Coordinated Restore at Checkpoint: before
//! a checkpoint each client finishes or hands back its work and closes every connection, and
//! after a restore it reconnects, re-bootstraps and goes on as a new instance.
//!
//! The public API is [`Producer`] and [`Consumer`], their configurations ([`ProducerConfig`],
//! [`ConsumerConfig`], built by typed setters or from `key=value` properties) and the types
//! they take and return, all at the crate root; [`producer`], [`consumer`] and [`config`] hold
//! the rest of their items.
//!
//! Layers, from the wire up (the two lowest are private to the crate):
//! - `protocol`: a hand-written codec: primitives, headers, one module per message, record
//!   batch v2 and its compression codecs (gzip, snappy, lz4, zstd). Decoding untrusted frames
//!   never panics and never allocates beyond the bytes present, and decompression is bounded.
//!   Its types that the API shows ([`ErrorCode`], [`DecodeError`], [`Compression`],
//!   [`Header`], [`OwnedHeader`]) are exported here.
//! - `network`: the one connection layer both clients share: blocking TCP connections (plain
//!   or TLS through rustls), SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER, re-authentication
//!   per KIP-368), config providers for secrets, the `NetworkClient` that owns the connections
//!   and every in-flight request, `Metadata` (the cluster view), and `Net`, all of it as a
//!   client's I/O thread holds it, with what a checkpoint and a restore reset.
//! - [`config`]: the configuration core: the settings every client has ([`config::CommonConfig`],
//!   security included), the parsing of values and properties, [`config::ConfigError`] naming
//!   the bad key and value, and the mechanics both clients' configurations share, so that each
//!   holds only its own keys.
//! - [`producer`]: the `RecordAccumulator`, the `Sender` I/O thread, Java's default
//!   partitioner, idempotence, transactions (`init_transactions` to `commit_transaction`,
//!   `send_offsets_to_transaction`), delivery reports, metrics, and the checkpoint resource:
//!   deliver every accepted record (and end or abort the open transaction) before the image,
//!   take a fresh producer id after the restore.
//! - [`consumer`]: the consumer's one network thread, its group coordinator speaking either
//!   group protocol (`classic`: JoinGroup/SyncGroup with the `range`, `roundrobin`, `sticky`
//!   and `cooperative-sticky` assignors; `consumer`: KIP-848's ConsumerGroupHeartbeat, the
//!   broker assigning), offset commits, the fetcher with position validation after leader
//!   changes (KIP-320) and `read_committed`, and the checkpoint resource: commit, leave the
//!   group and disconnect before the image, rejoin after the restore.
//!
//! The crate depends on `crac-api` only; the application links an engine.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod admin;
mod completion;
pub use completion::Completion;
pub mod config;
pub mod consumer;
mod large_buffers;
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

pub use admin::{Admin, AdminConfig, AdminError};
pub use consumer::{
    AutoOffsetReset, ConfigError as ConsumerConfigError, Consumer, ConsumerCheckpointError,
    ConsumerConfig, ConsumerError, ConsumerGroupMetadata, ConsumerRebalanceListener,
    ConsumerRecord, ConsumerRecords, OffsetAndMetadata, RecordStream, TopicPartition,
};
pub use network::security::{OAuthBearerToken, OAuthBearerTokenProvider};
pub use producer::{
    Accepted, Acks, CheckpointDrainError, CheckpointTransactionPolicy, ConfigError, DeliveryFuture,
    FlushFuture, ProduceError, Producer, ProducerConfig, ProducerMetrics, ProducerRecord,
    RecordMetadata, SendFuture, ThreadFuture, TimeoutError, TransactionAction, TransactionError,
    TransactionFuture, TransactionState, TransactionalIdPolicy,
};
// The protocol's types that the API shows: in errors, in records, in the configuration.
pub use protocol::record::{Compression, Header, OwnedHeader};
// Records' keys and values (the `bytes` crate's, re-exported so users need not name it).
pub use bytes::Bytes;
pub use protocol::{DecodeError, ErrorCode};
