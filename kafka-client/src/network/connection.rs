//! One blocking connection to a broker: TCP, TLS over it when `security.protocol` says so,
//! API versions, then SASL authentication.
//!
//! Writes happen on the caller's thread (the sender). A reader thread per connection blocks
//! on the socket and forwards each response frame, or the disconnect, as an [`Event`] to the
//! one channel the sender waits on. Closing shuts the socket down (which wakes the reader) and
//! joins the reader, so after [`BrokerConnection::close`] no thread and no descriptor is left.

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use zeroize::Zeroizing;

use crate::protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use crate::protocol::{ApiVersionsTable, ErrorCode, Request, decode_response, encode_frame};

use super::security::sasl::{Credentials, Exchange, SaslMechanism, Step};
use super::security::{SecurityConfig, tls};
use super::transport::{FrameReader, FrameWriter, Setup};
use super::{Event, NetworkError};

/// Largest response frame accepted; a larger size prefix means a broken or hostile peer.
pub const MAX_RESPONSE_SIZE: usize = 100 * 1024 * 1024;

/// An open connection: the write half, the reader thread, the negotiated versions.
#[derive(Debug)]
pub struct BrokerConnection {
    stream: TcpStream,
    writer: FrameWriter,
    reader: Option<JoinHandle<()>>,
    /// A number unique among this client's connections, so late events of a closed
    /// connection are recognised and dropped.
    pub conn_id: u64,
    /// The peer.
    pub addr: SocketAddr,
    /// What the broker supports.
    pub versions: ApiVersionsTable,
    /// How long the SASL session lasts (KIP-368), if the broker limits it.
    pub session_lifetime: Option<Duration>,
}

/// Everything needed to open a connection.
pub(crate) struct ConnectParams<'a> {
    pub node_id: i32,
    pub conn_id: u64,
    pub addrs: &'a [SocketAddr],
    /// The host name connected to (the name the broker's certificate must hold).
    pub host: &'a str,
    pub security: &'a SecurityConfig,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub client_id: &'a str,
    pub events: Sender<Event>,
}

impl BrokerConnection {
    /// Connects to the first address that answers, handshakes TLS, negotiates API versions
    /// (ApiVersions v4 down to what the broker supports), authenticates, then starts the
    /// reader thread. The secrets this needs are resolved here and wiped before it returns.
    pub(crate) fn open(p: ConnectParams<'_>) -> Result<Self, NetworkError> {
        let resolved = p.security.resolve()?;
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
        let (stream, addr) = match stream {
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
        let handle = stream.try_clone().map_err(io_err)?;
        let client_key = resolved.tls.as_ref().and_then(|t| t.client_key.clone());
        // A key that could not be loaded when the broker asked for it is the reason, whatever
        // alert the broker then sent.
        let tls_fail = |e: io::Error| match client_key.as_ref().and_then(|k| k.failure()) {
            Some(se) => NetworkError::Tls {
                addr,
                host: p.host.to_owned(),
                key: se.key,
                reason: se.reason,
            },
            None => tls_error(e, addr, p.host),
        };
        let mut setup = match resolved.tls.as_ref().map(|t| t.config.clone()) {
            Some(config) => {
                let name =
                    rustls::pki_types::ServerName::try_from(p.host.to_owned()).map_err(|_| {
                        NetworkError::Tls {
                            addr,
                            host: p.host.to_owned(),
                            key: "bootstrap.servers",
                            reason: "not a valid host name for TLS".into(),
                        }
                    })?;
                let conn =
                    rustls::ClientConnection::new(config, name).map_err(|e| NetworkError::Tls {
                        addr,
                        host: p.host.to_owned(),
                        key: "security.protocol",
                        reason: e.to_string(),
                    })?;
                Setup::tls(stream, conn).map_err(tls_fail)?
            }
            None => Setup::Plain(stream),
        };
        // With TLS 1.3 the broker checks the client's certificate after the client has
        // finished its handshake: its refusal arrives as an alert on the first read.
        let alert = |e: NetworkError| match e {
            NetworkError::Io { source, .. } if is_tls_error(&source) => tls_fail(source),
            e => e,
        };
        let versions = negotiate(&mut setup, addr, p.client_id).map_err(alert)?;
        let session_lifetime = match resolved.sasl {
            Some((mechanism, creds)) => {
                authenticate(&mut setup, addr, p.client_id, &versions, mechanism, creds)
                    .map_err(alert)?
            }
            None => None,
        };
        drop(resolved.tls);
        // The reader thread blocks without timeout: request timeouts are tracked by the
        // owner of the in-flight requests, not by the socket.
        handle.set_read_timeout(None).map_err(io_err)?;
        let (writer, read_half) = setup.split().map_err(io_err)?;
        let (node_id, conn_id, events) = (p.node_id, p.conn_id, p.events);
        let reader = std::thread::Builder::new()
            .name(format!("kafka-reader-{node_id}"))
            .spawn(move || read_loop(read_half, node_id, conn_id, events))
            .map_err(io_err)?;
        Ok(Self {
            stream: handle,
            writer,
            reader: Some(reader),
            conn_id,
            addr,
            versions,
            session_lifetime,
        })
    }

    /// A second handle on the write side (for a re-authentication running on a helper thread
    /// while this connection stays with its owner).
    pub(crate) fn writer(&self) -> io::Result<FrameWriter> {
        self.writer.try_clone()
    }

    /// Writes one complete frame, given in parts.
    pub fn send_parts(&mut self, parts: &mut [std::io::IoSlice<'_>]) -> Result<(), NetworkError> {
        self.writer
            .write_parts(parts)
            .map_err(|e| NetworkError::Io {
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

fn read_loop(stream: FrameReader, node_id: i32, conn_id: u64, events: Sender<Event>) {
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
    stream: &mut Setup,
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

fn is_tls_error(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// A failed TLS handshake as the error a user can act on.
fn tls_error(e: io::Error, addr: SocketAddr, host: &str) -> NetworkError {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let (key, reason) = match rustls_error {
        Some(r) => tls::explain(r, host),
        None => (
            "security.protocol",
            format!("TLS handshake failed: {e} (is the port a TLS listener?)"),
        ),
    };
    NetworkError::Tls {
        addr,
        host: host.to_owned(),
        key,
        reason,
    }
}

/// Where a SASL exchange sends its frames and reads the answers: the socket while a
/// connection is set up, the open connection and its reader thread when it re-authenticates.
pub(crate) trait FrameChannel {
    /// Writes one complete frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// The next response frame (body after the size).
    fn recv(&mut self) -> io::Result<Vec<u8>>;
}

impl FrameChannel for Setup {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.write_all(frame)
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        read_frame(self)
    }
}

/// SaslHandshake, then SaslAuthenticate rounds until the mechanism is satisfied. Returns the
/// session lifetime the broker set (KIP-368). Every frame that carried a secret is wiped.
pub(crate) fn authenticate(
    stream: &mut impl FrameChannel,
    addr: SocketAddr,
    client_id: &str,
    versions: &ApiVersionsTable,
    mechanism: SaslMechanism,
    creds: Credentials,
) -> Result<Option<Duration>, NetworkError> {
    let io_err = |e: io::Error| NetworkError::Io { addr, source: e };
    let auth_err = |key: &'static str, reason: String| NetworkError::Authentication {
        addr,
        mechanism,
        key,
        reason,
    };
    let mut correlation_id = 100;
    let handshake = SaslHandshakeRequest {
        mechanism: mechanism.name().to_owned(),
    };
    stream
        .send(&encode_frame(
            &handshake,
            1,
            correlation_id,
            Some(client_id),
        ))
        .map_err(io_err)?;
    let body = stream.recv().map_err(io_err)?;
    let resp = decode_response::<SaslHandshakeRequest>(&body, 1, correlation_id).map_err(|e| {
        NetworkError::Decode {
            addr,
            api: "SaslHandshake",
            source: e,
        }
    })?;
    match resp.error_code {
        ErrorCode::None => {}
        ErrorCode::UnsupportedSaslMechanism => {
            return Err(auth_err(
                "sasl.mechanism",
                format!(
                    "the broker does not enable {mechanism} on this listener (it enables: {})",
                    resp.mechanisms.join(", ")
                ),
            ));
        }
        code => {
            return Err(auth_err(
                "sasl.mechanism",
                format!("SaslHandshake failed: {code}"),
            ));
        }
    }
    let version = versions
        .negotiate(
            SaslAuthenticateRequest::API_KEY,
            SaslAuthenticateRequest::versions(),
        )
        .map_err(|source| NetworkError::Version { addr, source })?;
    let (mut exchange, mut message) =
        Exchange::start(creds).map_err(|r| auth_err("sasl.jaas.config", r))?;
    for _round in 0..8 {
        correlation_id += 1;
        let frame = Zeroizing::new(encode_frame(
            &SaslAuthenticateRequest {
                auth_bytes: &message,
            },
            version,
            correlation_id,
            Some(client_id),
        ));
        stream.send(&frame).map_err(io_err)?;
        let body = Zeroizing::new(stream.recv().map_err(io_err)?);
        let resp = decode_response::<SaslAuthenticateRequest<'_>>(&body, version, correlation_id)
            .map_err(|e| NetworkError::Decode {
            addr,
            api: "SaslAuthenticate",
            source: e,
        })?;
        if resp.error_code != ErrorCode::None {
            let detail = resp
                .error_message
                .unwrap_or_else(|| resp.error_code.to_string());
            let key = match mechanism {
                SaslMechanism::OAuthBearer => {
                    "sasl.jaas.config (or the OAUTHBEARER token provider)"
                }
                _ => "sasl.jaas.config",
            };
            return Err(auth_err(key, format!("{} ({detail})", resp.error_code)));
        }
        match exchange
            .next(&resp.auth_bytes)
            .map_err(|r| auth_err("sasl.jaas.config", r))?
        {
            Step::Send(next) => message = next,
            Step::Done => {
                let lifetime = u64::try_from(resp.session_lifetime_ms)
                    .ok()
                    .filter(|&ms| ms > 0)
                    .map(Duration::from_millis);
                tracing::debug!(%addr, %mechanism, session_lifetime_ms = ?lifetime.map(|d| d.as_millis()), "authenticated");
                return Ok(lifetime);
            }
        }
    }
    Err(auth_err(
        "sasl.mechanism",
        "the SASL exchange did not end after 8 rounds".into(),
    ))
}
