//! One blocking TCP connection to a broker.
//!
//! Writes happen on the caller's thread (the sender). A reader thread per connection blocks
//! on the socket and forwards each response frame, or the disconnect, as an [`Event`] to the
//! one channel the sender waits on. Closing shuts the socket down (which wakes the reader) and
//! joins the reader, so after [`BrokerConnection::close`] no thread and no descriptor is left.

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use crate::protocol::{ApiVersionsTable, ErrorCode, Request, decode_response, encode_frame};

use super::{Event, NetworkError};

/// Largest response frame accepted; a larger size prefix means a broken or hostile peer.
pub const MAX_RESPONSE_SIZE: usize = 100 * 1024 * 1024;

/// An open connection: the write half, the reader thread, the negotiated versions.
#[derive(Debug)]
pub struct BrokerConnection {
    stream: TcpStream,
    reader: Option<JoinHandle<()>>,
    /// Which node this connection serves.
    pub node_id: i32,
    /// A number unique among this client's connections, so late events of a closed
    /// connection are recognised and dropped.
    pub conn_id: u64,
    /// The peer.
    pub addr: SocketAddr,
    /// What the broker supports.
    pub versions: ApiVersionsTable,
}

/// Everything needed to open a connection.
pub(crate) struct ConnectParams<'a> {
    pub node_id: i32,
    pub conn_id: u64,
    pub addrs: &'a [SocketAddr],
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub client_id: &'a str,
    pub events: Sender<Event>,
}

impl BrokerConnection {
    /// Connects to the first address that answers, negotiates API versions (ApiVersions v4
    /// down to what the broker supports), then starts the reader thread.
    pub(crate) fn open(p: ConnectParams<'_>) -> Result<Self, NetworkError> {
        let mut last_err = None;
        let mut stream = None;
        for addr in p.addrs {
            match TcpStream::connect_timeout(addr, p.connect_timeout) {
                Ok(s) => {
                    stream = Some((s, *addr));
                    break;
                }
                Err(e) => last_err = Some((*addr, e)),
            }
        }
        let (mut stream, addr) = match stream {
            Some(s) => s,
            None => {
                let (addr, e) = last_err.ok_or_else(|| NetworkError::Resolve {
                    host: format!("node {}", p.node_id),
                    reason: "no addresses".into(),
                })?;
                return Err(NetworkError::Connect { addr, source: e });
            }
        };
        let io_err = |e: io::Error| NetworkError::Io { addr, source: e };
        stream.set_nodelay(true).map_err(io_err)?;
        stream
            .set_write_timeout(Some(p.request_timeout))
            .map_err(io_err)?;
        stream
            .set_read_timeout(Some(p.request_timeout))
            .map_err(io_err)?;
        let versions = negotiate(&mut stream, addr, p.client_id)?;
        // The reader thread blocks without timeout: request timeouts are tracked by the
        // owner of the in-flight requests, not by the socket.
        stream.set_read_timeout(None).map_err(io_err)?;
        let read_half = stream.try_clone().map_err(io_err)?;
        let (node_id, conn_id, events) = (p.node_id, p.conn_id, p.events);
        let reader = std::thread::Builder::new()
            .name(format!("kafka-reader-{node_id}"))
            .spawn(move || read_loop(read_half, node_id, conn_id, events))
            .map_err(io_err)?;
        Ok(Self {
            stream,
            reader: Some(reader),
            node_id,
            conn_id,
            addr,
            versions,
        })
    }

    /// Writes one complete frame.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), NetworkError> {
        self.stream.write_all(frame).map_err(|e| NetworkError::Io {
            addr: self.addr,
            source: e,
        })
    }

    /// Shuts the socket down and joins the reader thread.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

impl Drop for BrokerConnection {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Reads one frame body (without its size), refusing absurd sizes.
pub(crate) fn read_frame(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    if size < 4 || size as usize > MAX_RESPONSE_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("response frame size {size} out of range"),
        ));
    }
    // Memory follows the bytes that arrive, not the size the peer declared: a peer that
    // announces 100 MiB and sends 4 bytes costs 4 bytes (large frames grow by doubling).
    let size = size as usize;
    let mut body = Vec::with_capacity(size.min(FRAME_FIRST_CAPACITY));
    stream.take(size as u64).read_to_end(&mut body)?;
    if body.len() < size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "connection closed {} bytes into a {size}-byte frame",
                body.len()
            ),
        ));
    }
    Ok(body)
}

/// What a frame's buffer starts with before its bytes have arrived.
const FRAME_FIRST_CAPACITY: usize = 1 << 20;

/// The reader thread's buffer: a response's size prefix and its body (and often the next
/// responses) come in one `recv`, instead of one for the size and one for the body. Larger
/// frames are read straight into their own buffer past what is buffered.
const READ_BUFFER: usize = 16 * 1024;

fn read_loop(stream: TcpStream, node_id: i32, conn_id: u64, events: Sender<Event>) {
    let mut stream = BufReader::with_capacity(READ_BUFFER, stream);
    loop {
        match read_frame(&mut stream) {
            Ok(body) => {
                if body.len() < 4 {
                    continue;
                }
                let correlation_id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                let ev = Event::Response {
                    node_id,
                    conn_id,
                    correlation_id,
                    body,
                    received: Instant::now(),
                };
                if events.send(ev).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = events.send(Event::Disconnected {
                    node_id,
                    conn_id,
                    reason: e.to_string(),
                });
                return;
            }
        }
    }
}

/// ApiVersions, highest version first; on `UNSUPPORTED_VERSION` retry with the broker's
/// highest ApiVersions version (it lists it in its v0 answer).
fn negotiate(
    stream: &mut TcpStream,
    addr: SocketAddr,
    client_id: &str,
) -> Result<ApiVersionsTable, NetworkError> {
    let mut version = ApiVersionsRequest::MAX_VERSION;
    for attempt in 0..3 {
        let correlation_id = attempt;
        let frame = encode_frame(
            &ApiVersionsRequest::default(),
            version,
            correlation_id,
            Some(client_id),
        );
        let io_err = |e: io::Error| NetworkError::Io { addr, source: e };
        stream.write_all(&frame).map_err(io_err)?;
        let body = read_frame(stream).map_err(io_err)?;
        let resp: ApiVersionsResponse =
            decode_response::<ApiVersionsRequest>(&body, version, correlation_id).map_err(|e| {
                NetworkError::Decode {
                    addr,
                    api: "ApiVersions",
                    source: e,
                }
            })?;
        match resp.error_code {
            ErrorCode::None => return Ok(resp.table()),
            ErrorCode::UnsupportedVersion => {
                let table = resp.table();
                let theirs = table
                    .negotiate(ApiVersionsRequest::API_KEY, ApiVersionsRequest::versions())
                    .unwrap_or(0);
                tracing::debug!(%addr, from = version, to = theirs, "ApiVersions version downgraded");
                if theirs >= version {
                    break;
                }
                version = theirs;
            }
            code => return Err(NetworkError::Handshake { addr, code }),
        }
    }
    Err(NetworkError::Handshake {
        addr,
        code: ErrorCode::UnsupportedVersion,
    })
}
