//! Broker connections, one layer for the producer and the consumer: [`connection`] (one
//! blocking TCP connection and its reader thread), [`client`] (`NetworkClient`: every
//! connection, in-flight requests, backoff, timeouts), [`metadata`] (`Metadata`: the cluster
//! view, bootstrap and refresh), [`net`] (`Net`: the three together as a client's I/O thread
//! owns them) and the checkpoint state both clients keep.

pub(crate) mod checkpoint;
pub mod client;
pub mod connection;
pub mod metadata;
pub mod net;

use std::net::SocketAddr;
use std::time::Instant;

pub use client::{Completion, NetworkClient, NetworkConfig};
pub use metadata::{Cluster, Metadata, PartitionInfo, TopicInfo};
pub use net::{MetadataContext, Net};

use crate::protocol::{DecodeError, ErrorCode};

/// What the reader threads (and the producer's API) tell the thread that owns the
/// connections. One channel carries all of it, so that thread sleeps in one place.
#[derive(Debug)]
pub enum Event {
    /// A response frame (body after the size prefix).
    Response {
        /// Node it came from.
        node_id: i32,
        /// Connection it came on.
        conn_id: u64,
        /// Its correlation id (first 4 bytes of the body).
        correlation_id: i32,
        /// The frame.
        body: Vec<u8>,
        /// When it was read.
        received: Instant,
    },
    /// The connection ended (EOF, reset, bad frame).
    Disconnected {
        /// Node.
        node_id: i32,
        /// Connection.
        conn_id: u64,
        /// Why.
        reason: String,
    },
    /// Something for the owner to look at (a new batch, a command); carries nothing itself.
    Wakeup,
}

/// A network failure, with the peer it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// Host name resolution failed.
    #[error("cannot resolve {host}: {reason}")]
    Resolve {
        /// The host:port.
        host: String,
        /// Resolver's message.
        reason: String,
    },
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Reading or writing failed.
    #[error("I/O error with {addr}: {source}")]
    Io {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// A response could not be decoded.
    #[error("malformed {api} response from {addr}: {source}")]
    Decode {
        /// Address.
        addr: SocketAddr,
        /// Which API.
        api: &'static str,
        /// Cause.
        source: DecodeError,
    },
    /// ApiVersions failed.
    #[error("API version negotiation with {addr} failed: {code}")]
    Handshake {
        /// Address.
        addr: SocketAddr,
        /// Broker error.
        code: ErrorCode,
    },
    /// No version of an API both sides support.
    #[error("broker {addr}: {source}")]
    Version {
        /// Address.
        addr: SocketAddr,
        /// Detail.
        source: crate::protocol::api::NoCommonVersion,
    },
    /// The node is not connected (or its in-flight limit is reached).
    #[error("node {0} is not ready")]
    NotReady(i32),
    /// The node is unknown.
    #[error("unknown node {0}")]
    UnknownNode(i32),
}
