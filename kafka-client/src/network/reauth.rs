//! KIP-368 re-authentication: when a broker limits a SASL session
//! (`connections.max.reauth.ms`, or a token's expiry), the client authenticates again on the
//! same connection before the session ends; a broker closes a connection whose session has
//! expired at its next request.
//!
//! The owner of the connections ([`super::NetworkClient`]) stops sending on the connection at
//! 85-95% of the lifetime (the jitter keeps the connections of many clients apart), waits for
//! its in-flight requests to be answered, then hands the exchange to a helper thread: it
//! resolves the credentials again (a rotated secret or a fresh token is picked up), writes
//! SaslHandshake and SaslAuthenticate through a second handle on the connection's write side,
//! and reads the answers, which the reader thread delivers to the owner and the owner forwards
//! here. The owner's thread never blocks on a token provider or on the broker.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use super::connection::{FrameChannel, authenticate};
use super::security::SecurityConfig;
use super::transport::FrameWriter;
use super::{Event, NetworkError};
use crate::protocol::ApiVersionsTable;

/// A re-authentication running on a helper thread.
#[derive(Debug)]
pub(crate) struct Reauth {
    /// Response frames for the helper; dropping it ends the exchange.
    forward: Option<Sender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
    result: Receiver<Result<Option<Duration>, NetworkError>>,
}

/// What the helper needs.
pub(crate) struct ReauthParams {
    pub node_id: i32,
    pub addr: SocketAddr,
    pub writer: FrameWriter,
    pub versions: ApiVersionsTable,
    pub client_id: String,
    pub security: Arc<SecurityConfig>,
    pub timeout: Duration,
    pub events: Sender<Event>,
}

impl Reauth {
    /// Starts the exchange on a helper thread; a `Wakeup` event announces its end.
    pub fn start(p: ReauthParams) -> io::Result<Self> {
        let (forward, frames) = mpsc::channel();
        let (tx, result) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("kafka-reauth-{}", p.node_id))
            .spawn(move || {
                let r = run(&p, frames);
                let _ = tx.send(r);
                let _ = p.events.send(Event::Wakeup);
            })?;
        Ok(Self {
            forward: Some(forward),
            thread: Some(thread),
            result,
        })
    }

    /// Hands a response frame of the connection to the exchange.
    pub fn deliver(&self, body: Vec<u8>) {
        if let Some(f) = &self.forward {
            let _ = f.send(body);
        }
    }

    /// The outcome, once the helper is done: the new session lifetime.
    pub fn poll(&mut self) -> Option<Result<Option<Duration>, NetworkError>> {
        let r = self.result.try_recv().ok()?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Some(r)
    }

    /// Ends the exchange (the connection is closing) and waits for the helper.
    pub fn abandon(mut self) {
        self.forward = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(p: &ReauthParams, frames: Receiver<Vec<u8>>) -> Result<Option<Duration>, NetworkError> {
    let Some((mechanism, creds)) = p.security.resolve_sasl()? else {
        return Ok(None);
    };
    let mut channel = Channel {
        writer: p.writer.try_clone().map_err(|e| NetworkError::Io {
            addr: p.addr,
            source: e,
        })?,
        frames,
        timeout: p.timeout,
    };
    let lifetime = authenticate(
        &mut channel,
        p.addr,
        &p.client_id,
        &p.versions,
        mechanism,
        creds,
    )?;
    tracing::debug!(node = p.node_id, addr = %p.addr, %mechanism, "re-authenticated (KIP-368)");
    Ok(lifetime)
}

struct Channel {
    writer: FrameWriter,
    frames: Receiver<Vec<u8>>,
    timeout: Duration,
}

impl FrameChannel for Channel {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.writer.write_frame(frame)
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.frames.recv_timeout(self.timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer to the re-authentication within request.timeout.ms",
            ),
            mpsc::RecvTimeoutError::Disconnected => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the connection closed during the re-authentication",
            ),
        })
    }
}
