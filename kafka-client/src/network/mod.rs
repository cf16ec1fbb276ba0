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
pub(crate) mod reauth;
pub mod security;
pub(crate) mod transport;

use std::net::SocketAddr;

pub use client::{Completion, NetworkClient, NetworkConfig};
pub use metadata::Metadata;
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
    /// The TLS handshake failed (untrusted certificate, hostname mismatch, no client
    /// certificate, not a TLS listener).
    #[error("TLS with broker {addr} ({host}) failed: {reason} [key: {key}]")]
    Tls {
        /// Address.
        addr: SocketAddr,
        /// The host name connected to.
        host: String,
        /// The configuration key to fix.
        key: &'static str,
        /// What happened and what to do.
        reason: String,
    },
    /// SASL authentication failed (wrong password, mechanism not enabled, token refused).
    #[error("SASL {mechanism} authentication with broker {addr} failed: {reason} [key: {key}]")]
    Authentication {
        /// Address.
        addr: SocketAddr,
        /// `sasl.mechanism`.
        mechanism: security::SaslMechanism,
        /// The configuration key to fix.
        key: &'static str,
        /// What the broker said.
        reason: String,
    },
    /// A security setting could not be used (a file or provider that cannot be read, a bad
    /// key or certificate).
    #[error("cannot connect: {0}")]
    Security(#[from] security::SecurityError),
    /// The node is not connected (or its in-flight limit is reached).
    #[error("node {0} is not ready")]
    NotReady(i32),
    /// The node is unknown.
    #[error("unknown node {0}")]
    UnknownNode(i32),
}

impl NetworkError {
    /// Whether the error comes from the security settings (TLS, SASL, their files): trying
    /// again with the same settings fails the same way, so the clients report it to their
    /// callers at once instead of only backing off.
    pub fn is_security(&self) -> bool {
        matches!(
            self,
            NetworkError::Tls { .. }
                | NetworkError::Authentication { .. }
                | NetworkError::Security(_)
        )
    }
}
