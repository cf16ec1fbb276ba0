//! The admin client's I/O, driven by the thread that makes the call: it holds the connections
//! ([`Net`], shared with the producer and the consumer) under the admin client's lock, sends
//! requests, and pumps the connections' events until its answers are in. An admin call is a
//! few requests in a row (find the controller or a coordinator, ask it, retry on a moved
//! leader), so straight-line code per call reads better than a state machine on a thread of
//! its own, and nothing runs between calls (a checkpoint finds no thread to stop).
//!
//! Retries follow Java's `KafkaAdminClient`: an error that is retriable (a lost connection, a
//! moved controller or leader, a coordinator loading) is tried again after
//! `retry.backoff.ms` (growing to `retry.backoff.max.ms`), with the cluster view refreshed
//! first when the error says it is stale, until the call's time runs out; each request is
//! bounded by `request.timeout.ms`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::error::AdminError;
use crate::config::CommonConfig;
use crate::network::client::Completion;
use crate::network::{Event, MetadataContext, Net, NetworkClient, NetworkConfig, NetworkError};
use crate::protocol::Request;
use crate::protocol::messages::find_coordinator::FindCoordinatorRequest;
use crate::protocol::messages::{MetadataRequest, MetadataResponse};

/// Requests in flight per connection: an admin call fans out over brokers, not down one.
const MAX_IN_FLIGHT: usize = 5;

/// The context of a request in flight: the token its answer is filed under.
#[derive(Debug)]
pub(crate) struct Token(u64);

impl MetadataContext for Token {
    fn metadata() -> Self {
        Token(0)
    }
}

/// An answer waiting to be picked up by the code that sent the request.
enum Answer {
    Frame {
        node: i32,
        version: i16,
        correlation_id: i32,
        body: Vec<u8>,
    },
    Lost(String),
}

/// One call's name and time: every wait of the call ends at its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub op: &'static str,
    pub deadline: Instant,
    pub timeout: Duration,
}

impl Call {
    pub fn new(op: &'static str, timeout: Duration) -> Self {
        Call {
            op,
            deadline: Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)),
            timeout,
        }
    }
}

/// The connections and what they answered.
pub(crate) struct Io {
    net: Net<Token>,
    events: Receiver<Event>,
    answers: HashMap<u64, Answer>,
    /// Requests whose caller gave up (timed out): their answers are dropped on arrival.
    abandoned: HashSet<u64>,
    next_token: u64,
    retry_backoff: Duration,
    retry_backoff_max: Duration,
    /// The last failure met while waiting (a connection refused), for the timeout's message.
    last_error: Option<String>,
    /// Connection attempts that failed since their node was last asked for: a call waiting
    /// for that node fails over to another try instead of waiting out its time.
    refused: HashMap<i32, String>,
}

impl Io {
    pub fn new(common: &CommonConfig) -> Self {
        let (tx, rx) = mpsc::channel();
        let client = NetworkClient::new(NetworkConfig::new(common, MAX_IN_FLIGHT), tx);
        Io {
            net: Net::new(client, common),
            events: rx,
            answers: HashMap::new(),
            abandoned: HashSet::new(),
            next_token: 1,
            retry_backoff: common.retry_backoff,
            retry_backoff_max: common.retry_backoff_max,
            last_error: None,
            refused: HashMap::new(),
        }
    }

    fn timeout(&self, call: &Call) -> AdminError {
        AdminError::Timeout {
            operation: call.op,
            after: call.timeout,
            last: self.last_error.clone(),
        }
    }

    /// Moves the connections along until `until` at most: finished connection attempts,
    /// answers, lost connections, requests past `request.timeout.ms`.
    fn pump(&mut self, until: Instant) {
        for (node, r) in self.net.client.poll_connects() {
            if let Err(e) = r {
                let why = format!("node {node}: {e}");
                self.last_error = Some(why.clone());
                self.refused.insert(node, why);
            }
        }
        let now = Instant::now();
        for c in self.net.client.expire(now) {
            self.complete(c);
        }
        let wake = self
            .net
            .client
            .next_deadline()
            .map_or(until, |d| d.min(until));
        // Connection attempts report on the channel too; a bound keeps a missed wakeup cheap.
        let wait = wake
            .saturating_duration_since(now)
            .min(Duration::from_millis(50));
        if let Ok(ev) = self.events.recv_timeout(wait) {
            self.on_event(ev);
        }
        while let Ok(ev) = self.events.try_recv() {
            self.on_event(ev);
        }
    }

    fn on_event(&mut self, ev: Event) {
        if let Some(c) = self.net.client.handle_event(ev) {
            self.complete(c);
        }
    }

    fn complete(&mut self, c: Completion<Token>) {
        match c {
            Completion::Response {
                node_id,
                context,
                version,
                correlation_id,
                body,
            } => self.file(
                context,
                Answer::Frame {
                    node: node_id,
                    version,
                    correlation_id,
                    body,
                },
            ),
            Completion::Disconnected {
                node_id,
                contexts,
                reason,
            } => {
                self.last_error = Some(format!("node {node_id}: {reason}"));
                self.lose(
                    contexts,
                    &format!("connection to node {node_id} lost: {reason}"),
                );
            }
        }
    }

    fn file(&mut self, token: Token, answer: Answer) {
        if !self.abandoned.remove(&token.0) {
            self.answers.insert(token.0, answer);
        }
    }

    fn lose(&mut self, tokens: Vec<Token>, reason: &str) {
        for t in tokens {
            self.file(t, Answer::Lost(reason.to_owned()));
        }
    }

    /// Waits until `node` can take a request (connecting it if need be).
    fn ready(&mut self, call: &Call, node: i32) -> Result<(), AdminError> {
        if !self.net.client.knows(node) {
            return Err(AdminError::invalid(
                call.op,
                format!("no broker {node} in the cluster's metadata"),
            ));
        }
        self.refused.remove(&node);
        loop {
            let now = Instant::now();
            if self.net.ready(node, now) {
                return Ok(());
            }
            if let Some(why) = self.refused.remove(&node) {
                return Err(AdminError::Network {
                    operation: call.op,
                    reason: why,
                });
            }
            if now >= call.deadline {
                return Err(self.timeout(call));
            }
            self.pump(call.deadline);
        }
    }

    /// A broker that can take a request now (a bootstrap server before the first metadata).
    pub fn any_node(&mut self, call: &Call) -> Result<i32, AdminError> {
        let lost = self.net.ensure_bootstrap_nodes();
        self.lose(lost, "bootstrap servers changed");
        loop {
            let now = Instant::now();
            if let Some(n) = self.net.any_node(now) {
                return Ok(n);
            }
            if now >= call.deadline {
                return Err(self.timeout(call));
            }
            self.pump(call.deadline);
        }
    }

    /// Sends `req` to `node` once it is ready; returns the token to [`wait`](Self::wait) for.
    pub fn send<R: Request>(&mut self, call: &Call, node: i32, req: &R) -> Result<u64, AdminError> {
        self.ready(call, node)?;
        let token = self.next_token;
        self.next_token += 1;
        match self
            .net
            .client
            .send(node, req, Token(token), true, Instant::now())
        {
            Ok(_) => Ok(token),
            Err((e, _)) => Err(network(call, node, &e)),
        }
    }

    /// The answer to the request filed under `token`.
    pub fn wait<R: Request>(&mut self, call: &Call, token: u64) -> Result<R::Response, AdminError> {
        loop {
            match self.answers.remove(&token) {
                Some(Answer::Frame {
                    node,
                    version,
                    correlation_id,
                    body,
                }) => {
                    return self
                        .net
                        .client
                        .decode::<R>(node, &body, version, correlation_id)
                        .map_err(|e| AdminError::Protocol {
                            operation: call.op,
                            reason: format!("{} from node {node}: {e}", R::API_KEY),
                        });
                }
                Some(Answer::Lost(reason)) => {
                    return Err(AdminError::Network {
                        operation: call.op,
                        reason,
                    });
                }
                None => {}
            }
            if Instant::now() >= call.deadline {
                self.abandoned.insert(token);
                return Err(self.timeout(call));
            }
            self.pump(call.deadline);
        }
    }

    /// Sends `req` to `node` and waits for the answer.
    pub fn request<R: Request>(
        &mut self,
        call: &Call,
        node: i32,
        req: &R,
    ) -> Result<R::Response, AdminError> {
        let token = self.send(call, node, req)?;
        self.wait::<R>(call, token)
    }

    /// Sends one request per node at once, then waits for every answer (in the order given).
    pub fn fan_out<R: Request>(
        &mut self,
        call: &Call,
        requests: Vec<(i32, R)>,
    ) -> Vec<(i32, Result<R::Response, AdminError>)> {
        let sent: Vec<(i32, Result<u64, AdminError>)> = requests
            .iter()
            .map(|(node, req)| (*node, self.send(call, *node, req)))
            .collect();
        sent.into_iter()
            .map(|(node, token)| (node, token.and_then(|t| self.wait::<R>(call, t))))
            .collect()
    }

    /// Runs `attempt` until it succeeds, fails for good, or the call's time runs out:
    /// retriable errors are tried again after a growing backoff (the cluster view refreshed
    /// first when the error says it is stale).
    pub fn retrying<T>(
        &mut self,
        call: &Call,
        mut attempt: impl FnMut(&mut Self) -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        let mut backoff = self.retry_backoff;
        loop {
            let e = match attempt(self) {
                Err(e) if e.is_retriable() => e,
                Err(AdminError::Timeout { .. }) => return Err(self.timeout(call)),
                other => return other,
            };
            tracing::debug!(op = call.op, error = %e, "retrying");
            self.last_error = Some(e.to_string());
            if e.invalidates_metadata() {
                self.net.metadata.request_update();
            }
            let until = Instant::now() + backoff;
            if until >= call.deadline {
                return Err(self.timeout(call));
            }
            while Instant::now() < until {
                self.pump(until);
            }
            backoff = (backoff * 2).min(self.retry_backoff_max.max(self.retry_backoff));
        }
    }

    /// Asks for the metadata of `topics` (`None`: every topic; empty: brokers only) and
    /// applies it to the cluster view.
    pub fn metadata(
        &mut self,
        call: &Call,
        topics: Option<Vec<String>>,
    ) -> Result<MetadataResponse, AdminError> {
        let node = self.any_node(call)?;
        let req = MetadataRequest {
            topics,
            allow_auto_topic_creation: false,
        };
        let resp = self.request(call, node, &req)?;
        let lost = self.net.apply_metadata(&resp, Instant::now());
        self.lose(lost, "broker address changed");
        Ok(resp)
    }

    /// The controller as the metadata names it (with KRaft, a broker that forwards to the
    /// quorum, as Java's admin client uses it).
    pub fn controller(&mut self, call: &Call) -> Result<i32, AdminError> {
        let resp = self.metadata(call, Some(Vec::new()))?;
        if resp.controller_id < 0 {
            return Err(AdminError::Network {
                operation: call.op,
                reason: "the metadata names no controller yet".into(),
            });
        }
        Ok(resp.controller_id)
    }

    /// The coordinator of `key` (`key_type` 0: a group, 1: a transactional id), registered as
    /// a node.
    pub fn coordinator(&mut self, call: &Call, key_type: i8, key: &str) -> Result<i32, AdminError> {
        let node = self.any_node(call)?;
        let req = FindCoordinatorRequest {
            key_type,
            coordinator_keys: vec![key.to_owned()],
        };
        let resp = self.request(call, node, &req)?;
        let Some(c) = resp.coordinators.into_iter().find(|c| c.key == key) else {
            return Err(AdminError::Protocol {
                operation: call.op,
                reason: format!("FindCoordinator answered without the key {key:?}"),
            });
        };
        AdminError::check(call.op, c.error_code, c.error_message.as_deref())?;
        let port = u16::try_from(c.port).map_err(|_| AdminError::Protocol {
            operation: call.op,
            reason: format!("coordinator port {} out of range", c.port),
        })?;
        let lost = self.net.client.set_node(c.node_id, &c.host, port);
        self.lose(lost, "coordinator address changed");
        Ok(c.node_id)
    }

    /// The node ids of every broker the metadata knows.
    pub fn brokers(&mut self, call: &Call) -> Result<Vec<i32>, AdminError> {
        let resp = self.metadata(call, Some(Vec::new()))?;
        let mut ids: Vec<i32> = resp.brokers.iter().map(|b| b.node_id).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Closes every connection (before a checkpoint, at close); what was in flight is lost.
    pub fn close_all(&mut self) {
        let lost = self.net.close_all("admin client checkpoint or close");
        drop(lost);
        self.answers.clear();
        self.abandoned.clear();
    }

    /// After a restore: forget the cluster (it may have changed), bootstrap again.
    pub fn rebootstrap(&mut self) {
        drop(self.net.rebootstrap());
        self.answers.clear();
        self.abandoned.clear();
        self.last_error = None;
    }
}

fn network(call: &Call, node: i32, e: &NetworkError) -> AdminError {
    match e {
        // The broker does not speak the request in a version of ours: retrying cannot help.
        NetworkError::Version { .. } => AdminError::Protocol {
            operation: call.op,
            reason: format!("node {node}: {e}"),
        },
        _ => AdminError::Network {
            operation: call.op,
            reason: format!("node {node}: {e}"),
        },
    }
}
