//! `NetworkClient`: the one owner of every broker connection and every in-flight request.
//!
//! It is driven by a single thread (the producer's sender), which it never blocks on a
//! connection attempt: `connect` starts one on a helper thread (resolve, TCP connect,
//! ApiVersions) and `poll_connects` collects the result. `send` writes a request and
//! remembers it with a caller context `T`; `handle_event` turns a reader thread's event into a
//! [`Completion`] carrying that context back; `expire` and `disconnect` hand back the contexts
//! of requests that will never be answered. That single place is what lets a checkpoint close
//! every connection knowing exactly what was in flight.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::connection::{BrokerConnection, ConnectParams};
use super::reauth::{Reauth, ReauthParams};
use super::{Event, NetworkError};
use std::sync::Arc;

use super::security::SecurityConfig;
use crate::config::CommonConfig;
use crate::protocol::{
    ApiKey, DecodeError, Request, Response, VersionRange, decode_response, encode_frame,
};

/// Connection settings (Java's names in the docs).
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// `client.id`.
    pub client_id: String,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`.
    pub connect_timeout: Duration,
    /// `reconnect.backoff.ms`.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
    /// `max.in.flight.requests.per.connection`.
    pub max_in_flight: usize,
    /// `security.protocol`, `ssl.*`, `sasl.*`.
    pub security: Arc<SecurityConfig>,
}

impl NetworkConfig {
    /// The connection settings of a client's common keys.
    pub fn new(common: &CommonConfig, max_in_flight: usize) -> Self {
        Self {
            client_id: common.client_id.clone(),
            request_timeout: common.request_timeout,
            connect_timeout: common.connect_timeout,
            reconnect_backoff: common.reconnect_backoff,
            reconnect_backoff_max: common.reconnect_backoff_max,
            max_in_flight,
            security: Arc::new(common.security.clone()),
        }
    }
}

/// A request waiting for its response.
#[derive(Debug)]
struct InFlight<T> {
    correlation_id: i32,
    version: i16,
    deadline: Instant,
    context: T,
}

/// A connection attempt running on a helper thread.
#[derive(Debug)]
struct Attempt {
    target: String,
    thread: JoinHandle<()>,
    result: Receiver<Result<BrokerConnection, NetworkError>>,
}

impl Attempt {
    /// Waits for the attempt and closes what it opened (a node that was removed or a client
    /// that closes everything must leave no socket behind).
    fn abandon(self) {
        let _ = self.thread.join();
        if let Ok(Ok(conn)) = self.result.try_recv() {
            conn.close();
        }
    }
}

#[derive(Debug)]
struct Node<T> {
    host: String,
    port: u16,
    conn: Option<BrokerConnection>,
    connecting: Option<Attempt>,
    failures: u32,
    next_attempt: Option<Instant>,
    in_flight: VecDeque<InFlight<T>>,
    /// When the connection's SASL session should be renewed (KIP-368): sends stop then, and
    /// the re-authentication starts once nothing is in flight.
    reauth_at: Option<Instant>,
    reauth: Option<Reauth>,
    /// The broker asked for no request before this (KIP-219 throttling).
    throttled_until: Option<Instant>,
}

impl<T> Node<T> {
    fn throttled(&self) -> bool {
        // The clock is read only while a throttle is set.
        self.throttled_until.is_some_and(|t| Instant::now() < t)
    }
}

/// What an event amounted to.
#[derive(Debug)]
pub enum Completion<T> {
    /// The response to a request.
    Response {
        /// Node.
        node_id: i32,
        /// The caller's context given to `send`.
        context: T,
        /// Version the request was sent in.
        version: i16,
        /// Correlation id.
        correlation_id: i32,
        /// Frame body (response header included), for `protocol::decode_response`.
        body: Vec<u8>,
    },
    /// A connection ended: these requests will not be answered.
    Disconnected {
        /// Node.
        node_id: i32,
        /// Contexts of the requests that were in flight, oldest first.
        contexts: Vec<T>,
        /// Why.
        reason: String,
    },
}

/// Owner of all connections. `T` is the caller's context of an in-flight request.
#[derive(Debug)]
pub struct NetworkClient<T> {
    config: NetworkConfig,
    events: Sender<Event>,
    nodes: HashMap<i32, Node<T>>,
    next_correlation_id: i32,
    next_conn_id: u64,
    seed: u64,
    /// Draws `seed` afresh at first use and after every restore: clones must not reconnect
    /// in lockstep.
    reseed: crac_api::ReseedGuard,
    /// Attempts of nodes that went away meanwhile: closed when they finish.
    orphans: Vec<Attempt>,
    /// Connections that now serve another node than the one they were opened for (a
    /// bootstrap connection kept for the broker the metadata named at its address): conn_id →
    /// node. Their reader threads still report the node they were opened for.
    moved: HashMap<u64, i32>,
}

impl<T> NetworkClient<T> {
    /// A client whose reader threads report on `events`.
    pub fn new(config: NetworkConfig, events: Sender<Event>) -> Self {
        Self {
            config,
            events,
            nodes: HashMap::new(),
            next_correlation_id: 0,
            next_conn_id: 0,
            seed: 1,
            reseed: crac_api::ReseedGuard::new(),
            orphans: Vec::new(),
            moved: HashMap::new(),
        }
    }

    /// Adds or updates a node's address. A changed address closes the old connection (its
    /// in-flight contexts are returned). A broker new to the client whose address is, to the
    /// letter, that of an idle bootstrap connection takes that connection over (as
    /// librdkafka does): a client's start and a restore then cost one connection, one
    /// ApiVersions and one TLS and SASL handshake less.
    pub fn set_node(&mut self, node_id: i32, host: &str, port: u16) -> Vec<T> {
        if let Some(n) = self.nodes.get(&node_id) {
            if n.host == host && n.port == port {
                return Vec::new();
            }
            tracing::info!(node_id, old = %format!("{}:{}", n.host, n.port), new = %format!("{host}:{port}"), "broker address changed");
        } else if node_id >= 0 && self.adopt_bootstrap(node_id, host, port) {
            return Vec::new();
        }
        let lost = self.disconnect(node_id, "address changed");
        if let Some(a) = self
            .nodes
            .get_mut(&node_id)
            .and_then(|n| n.connecting.take())
        {
            self.orphans.push(a);
        }
        self.nodes.insert(
            node_id,
            Node {
                host: host.to_owned(),
                port,
                conn: None,
                connecting: None,
                failures: 0,
                next_attempt: None,
                in_flight: VecDeque::new(),
                reauth_at: None,
                reauth: None,
                throttled_until: None,
            },
        );
        lost
    }

    /// Moves an idle, connected bootstrap node (negative id) at `host:port` to `node_id`.
    fn adopt_bootstrap(&mut self, node_id: i32, host: &str, port: u16) -> bool {
        let Some(&from) = self.nodes.iter().find_map(|(id, n)| {
            (*id < 0
                && n.host == host
                && n.port == port
                && n.conn.is_some()
                && n.connecting.is_none()
                && n.in_flight.is_empty()
                && n.reauth.is_none())
            .then_some(id)
        }) else {
            return false;
        };
        let node = self.nodes.remove(&from).expect("found above");
        let conn_id = node.conn.as_ref().expect("connected").conn_id;
        self.moved.insert(conn_id, node_id);
        tracing::debug!(
            node_id,
            from,
            host,
            port,
            "bootstrap connection kept for the broker at its address"
        );
        self.nodes.insert(node_id, node);
        true
    }

    /// The node a reader thread's event is for (see `moved`).
    fn event_node(&self, node_id: i32, conn_id: u64) -> i32 {
        self.moved.get(&conn_id).copied().unwrap_or(node_id)
    }

    /// Removes every node whose id is not in `keep` (and closes its connection). Returns the
    /// in-flight contexts of the removed ones.
    pub fn retain_nodes(&mut self, keep: impl Fn(i32) -> bool) -> Vec<T> {
        let gone: Vec<i32> = self.nodes.keys().copied().filter(|&id| !keep(id)).collect();
        let mut lost = Vec::new();
        for id in gone {
            lost.extend(self.disconnect(id, "node left the cluster metadata"));
            if let Some(a) = self.nodes.remove(&id).and_then(|n| n.connecting) {
                self.orphans.push(a);
            }
        }
        lost
    }

    /// Whether `node_id` is a node of this client (a broker the metadata named, a bootstrap
    /// server, a coordinator).
    pub fn knows(&self, node_id: i32) -> bool {
        self.nodes.contains_key(&node_id)
    }

    /// Whether `node_id` has an open connection.
    pub fn is_connected(&self, node_id: i32) -> bool {
        self.nodes.get(&node_id).is_some_and(|n| n.conn.is_some())
    }

    /// Whether a request can be sent to the node now (connected, under the in-flight limit,
    /// not throttled).
    pub fn is_ready(&self, node_id: i32) -> bool {
        self.nodes.get(&node_id).is_some_and(|n| {
            n.conn.is_some()
                && n.in_flight.len() < self.config.max_in_flight
                && n.reauth.is_none()
                && n.reauth_at.is_none_or(|t| Instant::now() < t)
                && !n.throttled()
        })
    }

    /// Holds requests to the node back for `throttle_ms` (a response's `throttle_time_ms`):
    /// the broker answered a request over its quota at once and expects the client to wait,
    /// as Java's `NetworkClient` does (KIP-219).
    pub fn throttle(&mut self, node_id: i32, throttle_ms: i32, now: Instant) {
        let Some(n) = self.nodes.get_mut(&node_id) else {
            return;
        };
        let Ok(ms) = u64::try_from(throttle_ms) else {
            return;
        };
        if ms == 0 {
            return;
        }
        let until = now + Duration::from_millis(ms);
        tracing::debug!(node_id, throttle_ms, "throttled by the broker");
        n.throttled_until = Some(n.throttled_until.map_or(until, |t| t.max(until)));
    }

    /// Decodes a response to `R` from the node and applies its throttle time (for the versions
    /// whose throttling is the client's job).
    pub fn decode<R: Request>(
        &mut self,
        node_id: i32,
        body: &[u8],
        version: i16,
        correlation_id: i32,
    ) -> Result<R::Response, DecodeError> {
        let resp = decode_response::<R>(body, version, correlation_id)?;
        if version >= R::CLIENT_THROTTLES_FROM {
            self.throttle(node_id, resp.throttle_time_ms(), Instant::now());
        }
        Ok(resp)
    }

    /// The contexts of every request in flight (the producer fails batches that expire while
    /// their request is out).
    pub fn in_flight_contexts_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.nodes
            .values_mut()
            .flat_map(|n| n.in_flight.iter_mut().map(|f| &mut f.context))
    }

    /// Requests in flight to the node.
    pub fn in_flight_count(&self, node_id: i32) -> usize {
        self.nodes.get(&node_id).map_or(0, |n| n.in_flight.len())
    }

    /// Requests in flight in total.
    pub fn total_in_flight(&self) -> usize {
        self.nodes.values().map(|n| n.in_flight.len()).sum()
    }

    /// Open connections.
    pub fn connection_count(&self) -> usize {
        self.nodes.values().filter(|n| n.conn.is_some()).count()
    }

    /// Whether a connection attempt to the node is allowed now (not backing off).
    pub fn can_attempt(&self, node_id: i32, now: Instant) -> bool {
        self.nodes.get(&node_id).is_some_and(|n| {
            n.conn.is_none() && n.connecting.is_none() && n.next_attempt.is_none_or(|t| now >= t)
        })
    }

    /// Whether a connection attempt to the node is running.
    pub fn is_connecting(&self, node_id: i32) -> bool {
        self.nodes
            .get(&node_id)
            .is_some_and(|n| n.connecting.is_some())
    }

    /// Starts connecting to the node if it is not connected, not connecting and not backing
    /// off. The attempt (resolve, TCP connect bounded by the connect timeout, ApiVersions)
    /// runs on a helper thread; a `Wakeup` event announces its end and
    /// [`poll_connects`](Self::poll_connects) collects it. Host names are resolved on every
    /// attempt, so a restored process sees today's DNS.
    pub fn connect(&mut self, node_id: i32, now: Instant) -> Result<(), NetworkError> {
        let node = self
            .nodes
            .get(&node_id)
            .ok_or(NetworkError::UnknownNode(node_id))?;
        if node.conn.is_some() || node.connecting.is_some() {
            return Ok(());
        }
        if node.next_attempt.is_some_and(|t| now < t) {
            return Err(NetworkError::NotReady(node_id));
        }
        let target = format!("{}:{}", node.host, node.port);
        self.next_conn_id += 1;
        let conn_id = self.next_conn_id;
        let (tx, rx) = mpsc::channel();
        let events = self.events.clone();
        let (connect_timeout, request_timeout) =
            (self.config.connect_timeout, self.config.request_timeout);
        let client_id = self.config.client_id.clone();
        let security = self.config.security.clone();
        let host = node.host.clone();
        let t = target.clone();
        let thread = std::thread::Builder::new()
            .name(format!("kafka-connect-{node_id}"))
            .spawn(move || {
                let r = resolve(&t).and_then(|addrs| {
                    BrokerConnection::open(ConnectParams {
                        node_id,
                        conn_id,
                        addrs: &addrs,
                        host: &host,
                        security: &security,
                        connect_timeout,
                        request_timeout,
                        client_id: &client_id,
                        events: events.clone(),
                    })
                });
                let _ = tx.send(r);
                let _ = events.send(Event::Wakeup);
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                return Err(NetworkError::Resolve {
                    host: target,
                    reason: format!("cannot start a connect thread: {e}"),
                });
            }
        };
        tracing::debug!(node_id, target = %target, "connecting to broker");
        let node = self.nodes.get_mut(&node_id).expect("checked above");
        node.connecting = Some(Attempt {
            target,
            thread,
            result: rx,
        });
        Ok(())
    }

    /// Collects finished connection attempts: `(node, Ok)` for a new connection, `(node,
    /// Err)` for a failure (the node then backs off). Also moves re-authentications along:
    /// starts those that are due, and a failed one closes its connection and is reported
    /// like a failed attempt.
    pub fn poll_connects(&mut self) -> Vec<(i32, Result<(), NetworkError>)> {
        let mut out = self.poll_reauth(Instant::now());
        let mut i = 0;
        while i < self.orphans.len() {
            if self.orphans[i].thread.is_finished() {
                self.orphans.swap_remove(i).abandon();
            } else {
                i += 1;
            }
        }
        let connecting: Vec<i32> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.connecting.is_some())
            .map(|(id, _)| *id)
            .collect();
        for node_id in connecting {
            // The result says the attempt is over, not the thread's end: the thread sends the
            // result, then the wakeup, and may not have returned when the wakeup is handled.
            let result = {
                let a = self.nodes[&node_id]
                    .connecting
                    .as_ref()
                    .expect("listed above");
                match a.result.try_recv() {
                    Ok(r) => r,
                    Err(TryRecvError::Empty) => continue,
                    Err(TryRecvError::Disconnected) => Err(NetworkError::Resolve {
                        host: a.target.clone(),
                        reason: "connect thread ended without a result".into(),
                    }),
                }
            };
            let backoff = self.backoff(node_id);
            let seed = self.seed;
            let node = self.nodes.get_mut(&node_id).expect("listed above");
            let a = node.connecting.take().expect("listed above");
            // It ends right after sending; joining only reaps it.
            let _ = a.thread.join();
            match result {
                Ok(conn) => {
                    tracing::info!(node_id, addr = %conn.addr, "connected to broker");
                    node.reauth_at = conn
                        .session_lifetime
                        .map(|l| Instant::now() + renew_after(seed, l));
                    node.conn = Some(conn);
                    node.failures = 0;
                    node.next_attempt = None;
                    out.push((node_id, Ok(())));
                }
                Err(e) => {
                    node.failures = node.failures.saturating_add(1);
                    // The same settings fail the same way: no faster than the longest backoff.
                    let backoff = if e.is_security() {
                        backoff.max(self.config.reconnect_backoff_max)
                    } else {
                        backoff
                    };
                    node.next_attempt = Some(Instant::now() + backoff);
                    tracing::warn!(node_id, target = %a.target, error = %e, backoff_ms = backoff.as_millis() as u64, "connection to broker failed");
                    out.push((node_id, Err(e)));
                }
            }
        }
        out
    }

    /// Starts the re-authentications that are due on idle connections and collects those
    /// that ended.
    fn poll_reauth(&mut self, now: Instant) -> Vec<(i32, Result<(), NetworkError>)> {
        let mut out = Vec::new();
        let ids: Vec<i32> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.conn.is_some() && (n.reauth.is_some() || n.reauth_at.is_some_and(|t| now >= t))
            })
            .map(|(id, _)| *id)
            .collect();
        let seed = self.seed;
        for id in ids {
            let node = self.nodes.get_mut(&id).expect("listed above");
            if let Some(task) = node.reauth.as_mut() {
                let Some(result) = task.poll() else {
                    continue;
                };
                node.reauth = None;
                match result {
                    Ok(lifetime) => {
                        node.reauth_at = lifetime.map(|l| now + renew_after(seed, l));
                    }
                    Err(e) => {
                        tracing::warn!(node_id = id, error = %e, "re-authentication failed; reconnecting");
                        let lost = self.disconnect(id, &e.to_string());
                        debug_assert!(
                            lost.is_empty(),
                            "nothing is in flight during a re-authentication"
                        );
                        out.push((id, Err(e)));
                    }
                }
                continue;
            }
            if !node.in_flight.is_empty() {
                continue; // the last answers first
            }
            let conn = node.conn.as_ref().expect("listed above");
            let params = conn.writer().map(|writer| ReauthParams {
                node_id: id,
                addr: conn.addr,
                writer,
                versions: conn.versions.clone(),
                client_id: self.config.client_id.clone(),
                security: self.config.security.clone(),
                timeout: self.config.request_timeout,
                events: self.events.clone(),
            });
            match params.and_then(Reauth::start) {
                Ok(task) => {
                    tracing::debug!(node_id = id, "re-authenticating (KIP-368)");
                    node.reauth = Some(task);
                }
                Err(e) => {
                    let reason = format!("cannot start the re-authentication: {e}");
                    let _ = self.disconnect(id, &reason);
                }
            }
        }
        out
    }

    /// Exponential backoff with ±20% jitter, like Java's `reconnect.backoff.*`.
    fn backoff(&mut self, node_id: i32) -> Duration {
        let failures = self.nodes.get(&node_id).map_or(0, |n| n.failures);
        let base = self.config.reconnect_backoff.as_millis() as f64;
        let max = self.config.reconnect_backoff_max.as_millis() as f64;
        let exp = (base * 2f64.powi(failures.min(30) as i32)).min(max.max(base));
        // xorshift: jitter needs no quality, only spread (and a seed of each clone's own).
        if self.reseed.needs_reseed() {
            self.seed = crac_api::os_random_u64() | 1;
        }
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let jitter = 0.8 + 0.4 * ((self.seed % 1000) as f64 / 1000.0);
        Duration::from_millis((exp * jitter) as u64)
    }

    /// Sends `request` to a ready node with the highest version both sides support. With
    /// `expect_response` false (acks=0 produce) nothing is kept in flight and the context
    /// is returned at once. On failure the context comes back with the error.
    pub fn send<R: Request>(
        &mut self,
        node_id: i32,
        request: &R,
        context: T,
        expect_response: bool,
        now: Instant,
    ) -> Result<(i32, Option<T>), (NetworkError, T)> {
        let (version, correlation_id) =
            match self.begin_within::<R>(node_id, request.min_version(), R::MAX_VERSION) {
                Ok(x) => x,
                Err(e) => return Err((e, context)),
            };
        let frame = encode_frame(
            request,
            version,
            correlation_id,
            Some(&self.config.client_id),
        );
        self.send_frame(
            node_id,
            R::API_KEY,
            version,
            correlation_id,
            &frame,
            context,
            expect_response,
            now,
        )
    }

    /// [`send`](Self::send) (expecting a response) with a timeout of its own instead of
    /// `request.timeout.ms`: a JoinGroup is held by the coordinator for a whole rebalance.
    pub fn send_with_timeout<R: Request>(
        &mut self,
        node_id: i32,
        request: &R,
        context: T,
        timeout: Duration,
        now: Instant,
    ) -> Result<i32, (NetworkError, T)> {
        let (correlation_id, _) = self.send(node_id, request, context, true, now)?;
        if let Some(f) = self
            .nodes
            .get_mut(&node_id)
            .and_then(|n| n.in_flight.back_mut())
        {
            f.deadline = now + timeout;
        }
        Ok(correlation_id)
    }

    /// First half of a send whose request borrows from the context: checks the node is ready
    /// and picks the version (no higher than `max_version`) and correlation id. Encode the
    /// frame with them, then call [`send_frame`](Self::send_frame). (A transactional
    /// producer of transactions v1 must not send Produce v12, which means v2).
    pub fn begin_up_to<R: Request>(
        &mut self,
        node_id: i32,
        max_version: i16,
    ) -> Result<(i16, i32), NetworkError> {
        self.begin_within::<R>(node_id, R::MIN_VERSION, max_version)
    }

    /// [`begin_up_to`](Self::begin_up_to) with a version between `min_version` and
    /// `max_version` (within what this client speaks).
    fn begin_within<R: Request>(
        &mut self,
        node_id: i32,
        min_version: i16,
        max_version: i16,
    ) -> Result<(i16, i32), NetworkError> {
        let node = self
            .nodes
            .get(&node_id)
            .ok_or(NetworkError::UnknownNode(node_id))?;
        let conn = node.conn.as_ref().ok_or(NetworkError::NotReady(node_id))?;
        if node.in_flight.len() >= self.config.max_in_flight || node.throttled() {
            return Err(NetworkError::NotReady(node_id));
        }
        let client = VersionRange {
            min: min_version.max(R::MIN_VERSION),
            max: max_version.min(R::MAX_VERSION),
        };
        let version = conn
            .versions
            .negotiate(R::API_KEY, client)
            .map_err(|source| NetworkError::Version {
                addr: conn.addr,
                source,
            })?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1) & i32::MAX;
        Ok((version, correlation_id))
    }

    /// Second half of a send: writes the frame and records the request as in flight.
    #[allow(clippy::too_many_arguments)]
    pub fn send_frame(
        &mut self,
        node_id: i32,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
        frame: &[u8],
        context: T,
        expect_response: bool,
        now: Instant,
    ) -> Result<(i32, Option<T>), (NetworkError, T)> {
        if let Err(e) = self.write_parts(node_id, &mut [IoSlice::new(frame)]) {
            return Err((e, context));
        }
        let head = (api_key, version, correlation_id);
        self.sent(node_id, head, context, expect_response, now)
    }

    /// Writes one frame, given in parts, to the node's connection: the first half of
    /// [`send_frame`](Self::send_frame) for a frame whose parts borrow from the request's
    /// context (a Produce request's batches); [`sent`](Self::sent) is the second.
    pub fn write_parts(
        &mut self,
        node_id: i32,
        parts: &mut [IoSlice<'_>],
    ) -> Result<(), NetworkError> {
        let node = self
            .nodes
            .get_mut(&node_id)
            .ok_or(NetworkError::UnknownNode(node_id))?;
        let conn = node.conn.as_mut().ok_or(NetworkError::NotReady(node_id))?;
        conn.send_parts(parts)
    }

    /// Records a written request as in flight, or gives its context back when no response
    /// will come (an unknown node: the context back with the error).
    pub fn sent(
        &mut self,
        node_id: i32,
        (api_key, version, correlation_id): (ApiKey, i16, i32),
        context: T,
        expect_response: bool,
        now: Instant,
    ) -> Result<(i32, Option<T>), (NetworkError, T)> {
        tracing::trace!(node_id, api = %api_key, version, correlation_id, "request sent");
        let Some(node) = self.nodes.get_mut(&node_id) else {
            return Err((NetworkError::UnknownNode(node_id), context));
        };
        if !expect_response {
            return Ok((correlation_id, Some(context)));
        }
        node.in_flight.push_back(InFlight {
            correlation_id,
            version,
            deadline: now + self.config.request_timeout,
            context,
        });
        Ok((correlation_id, None))
    }

    /// Matches an event from a reader thread with its request.
    pub fn handle_event(&mut self, event: Event) -> Option<Completion<T>> {
        match event {
            Event::Response {
                node_id,
                conn_id,
                correlation_id,
                body,
                ..
            } => {
                let node_id = self.event_node(node_id, conn_id);
                let node = self.nodes.get_mut(&node_id)?;
                if node.conn.as_ref().map(|c| c.conn_id) != Some(conn_id) {
                    return None; // a late frame from a connection already closed
                }
                if let Some(task) = node.reauth.as_ref() {
                    task.deliver(body);
                    return None;
                }
                // Kafka answers the requests of one connection in order.
                let expected = node.in_flight.front().map(|f| f.correlation_id);
                if expected != Some(correlation_id) {
                    let reason = format!(
                        "response with correlation id {correlation_id}, expected {expected:?}"
                    );
                    let contexts = self.disconnect(node_id, &reason);
                    return Some(Completion::Disconnected {
                        node_id,
                        contexts,
                        reason,
                    });
                }
                let f = node.in_flight.pop_front()?;
                Some(Completion::Response {
                    node_id,
                    context: f.context,
                    version: f.version,
                    correlation_id,
                    body,
                })
            }
            Event::Disconnected {
                node_id,
                conn_id,
                reason,
            } => {
                let node_id = self.event_node(node_id, conn_id);
                let node = self.nodes.get(&node_id)?;
                if node.conn.as_ref().map(|c| c.conn_id) != Some(conn_id) {
                    return None;
                }
                let contexts = self.disconnect(node_id, &reason);
                Some(Completion::Disconnected {
                    node_id,
                    contexts,
                    reason,
                })
            }
            Event::Wakeup => None,
        }
    }

    /// Closes the node's connection (the normal disconnect path: the reader thread is joined,
    /// backoff starts) and returns the contexts of its in-flight requests, oldest first.
    pub fn disconnect(&mut self, node_id: i32, reason: &str) -> Vec<T> {
        let backoff = self.backoff(node_id);
        let Some(node) = self.nodes.get_mut(&node_id) else {
            return Vec::new();
        };
        if let Some(conn) = node.conn.take() {
            self.moved.remove(&conn.conn_id);
            tracing::info!(node_id, addr = %conn.addr, in_flight = node.in_flight.len(), reason, "disconnected from broker");
            conn.close();
            node.reauth_at = None;
            if let Some(task) = node.reauth.take() {
                task.abandon();
            }
            node.next_attempt = Some(Instant::now() + backoff.min(self.config.reconnect_backoff));
        }
        node.in_flight.drain(..).map(|f| f.context).collect()
    }

    /// Disconnects every node whose oldest request is past its deadline.
    pub fn expire(&mut self, now: Instant) -> Vec<Completion<T>> {
        let late: Vec<i32> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.in_flight.front().is_some_and(|f| now >= f.deadline))
            .map(|(id, _)| *id)
            .collect();
        late.into_iter()
            .map(|node_id| {
                let reason = format!(
                    "request timed out after {} ms",
                    self.config.request_timeout.as_millis()
                );
                tracing::warn!(node_id, %reason, "disconnecting");
                let contexts = self.disconnect(node_id, &reason);
                Completion::Disconnected {
                    node_id,
                    contexts,
                    reason,
                }
            })
            .collect()
    }

    /// Closes every connection (checkpoint, close), waiting for running connection attempts
    /// and closing what they opened, so no socket is left. Returns what was in flight.
    pub fn close_all(&mut self, reason: &str) -> Vec<T> {
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        let mut lost = Vec::new();
        for id in ids {
            lost.extend(self.disconnect(id, reason));
            if let Some(n) = self.nodes.get_mut(&id) {
                if let Some(a) = n.connecting.take() {
                    a.abandon();
                }
                n.next_attempt = None;
                n.failures = 0;
            }
        }
        for a in self.orphans.drain(..) {
            a.abandon();
        }
        lost
    }

    /// Forgets every node (re-bootstrap after a restore).
    pub fn clear_nodes(&mut self) -> Vec<T> {
        let lost = self.close_all("re-bootstrap");
        self.nodes.clear();
        lost
    }

    /// The earliest instant something needs attention: an in-flight deadline, a session to
    /// renew, the end of a throttle.
    pub fn next_deadline(&self) -> Option<Instant> {
        let throttles = self.nodes.values().filter_map(|n| n.throttled_until);
        self.nodes
            .values()
            .filter_map(|n| {
                // With requests in flight, their answers wake the owner; a renewal that is due
                // waits for them (its deadline would only make the owner spin).
                let renew = n
                    .reauth_at
                    .filter(|_| n.conn.is_some() && n.reauth.is_none() && n.in_flight.is_empty());
                match (n.in_flight.front().map(|f| f.deadline), renew) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .chain(throttles.filter(|t| *t > Instant::now()))
            .min()
    }

    /// When the node may be tried again, if it is backing off.
    #[cfg(test)]
    pub fn next_attempt(&self, node_id: i32) -> Option<Instant> {
        self.nodes.get(&node_id).and_then(|n| n.next_attempt)
    }

    /// The ready node with the fewest requests in flight among `candidates`, else one that may
    /// be connected now.
    pub fn least_loaded(&self, candidates: &[i32], now: Instant) -> Option<i32> {
        candidates
            .iter()
            .copied()
            .filter(|&id| self.is_ready(id))
            .min_by_key(|&id| self.in_flight_count(id))
            .or_else(|| {
                candidates
                    .iter()
                    .copied()
                    .find(|&id| self.can_attempt(id, now))
            })
    }

    /// Shifts every deadline by `by` (after a restore whose monotonic clock jumped).
    pub fn rebase(&mut self, by: Duration) {
        for n in self.nodes.values_mut() {
            for f in &mut n.in_flight {
                f.deadline += by;
            }
            if let Some(t) = n.next_attempt.as_mut() {
                *t += by;
            }
            if let Some(t) = n.throttled_until.as_mut() {
                *t += by;
            }
        }
    }
}

/// When to renew a session of `lifetime`: at 85-95% of it, as Java does (`seed` spreads the
/// connections of many clients).
fn renew_after(seed: u64, lifetime: Duration) -> Duration {
    let spread = (seed % 1000) as f64 / 1000.0;
    lifetime.mul_f64(0.85 + 0.10 * spread)
}

/// Resolves `host:port` now.
pub fn resolve(target: &str) -> Result<Vec<SocketAddr>, NetworkError> {
    let addrs: Vec<SocketAddr> = target
        .to_socket_addrs()
        .map_err(|e| NetworkError::Resolve {
            host: target.to_owned(),
            reason: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(NetworkError::Resolve {
            host: target.to_owned(),
            reason: "no addresses".into(),
        });
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_silent_peer_does_not_block_the_caller() {
        // Accepts TCP (the kernel's backlog does) but never answers ApiVersions.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        let mut c: NetworkClient<()> = NetworkClient::new(
            NetworkConfig {
                client_id: "t".into(),
                request_timeout: Duration::from_millis(500),
                connect_timeout: Duration::from_millis(500),
                reconnect_backoff: Duration::from_millis(50),
                reconnect_backoff_max: Duration::from_millis(100),
                max_in_flight: 5,
                security: Arc::new(SecurityConfig::new()),
            },
            tx,
        );
        c.set_node(1, "127.0.0.1", port);
        let t = Instant::now();
        c.connect(1, t).unwrap();
        assert!(t.elapsed() < Duration::from_millis(200));
        assert!(c.is_connecting(1) && !c.can_attempt(1, Instant::now()));
        // The attempt ends with the request timeout and announces itself.
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(Event::Wakeup)
        ));
        let r = c.poll_connects();
        assert_eq!(r.len(), 1);
        assert!(r[0].1.is_err());
        assert!(!c.is_connected(1) && !c.is_connecting(1));
        assert!(c.next_attempt(1).is_some(), "backing off");

        // close_all waits for a running attempt and leaves no socket.
        std::thread::sleep(Duration::from_millis(150));
        c.connect(1, Instant::now()).unwrap();
        c.close_all("test");
        assert!(!c.is_connecting(1) && !c.is_connected(1));
        drop(silent);
    }
}
