//! The `ConsumerNetworkThread`: the consumer's one I/O thread (the role of the producer's
//! `Sender`, and the name Java 4's consumer gives it).
//!
//! It owns every connection and in-flight request ([`Net`]), the [`Coordinator`] and the
//! [`Fetcher`], and loops: apply commands, refresh metadata, drive the group and the commits,
//! send fetches, wait for the next event (a response, a disconnect, a wake-up), handle it. The
//! application's calls never touch a socket: they change [`Shared`] state or send a command,
//! and wait for its answer. That is what makes the checkpoint simple and safe while the
//! application sits in `poll()`: a checkpoint is a command to this thread (commit what was
//! returned, leave the group, close every connection), a restore is another (re-bootstrap,
//! rejoin as a new member).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::config::ConsumerConfig;
use super::coordinator::{CommitOffsets, CommitReply, CommittedReply, Coordinator};
use super::error::ConsumerError;
use super::fetcher::Fetcher;
use super::net::{Net, RequestContext};
use super::record::TopicPartition;
use super::shared::{RebalanceStep, Shared, Subscription};
use super::validation::PositionValidator;
use crate::network::{Completion, Event, NetworkClient};
use crate::protocol::DecodeError;
use crate::protocol::messages::MetadataRequest;
use crate::protocol::messages::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
use crate::protocol::messages::fetch::FetchRequest;
use crate::protocol::messages::find_coordinator::FindCoordinatorRequest;
use crate::protocol::messages::heartbeat::HeartbeatRequest;
use crate::protocol::messages::join_group::JoinGroupRequest;
use crate::protocol::messages::leave_group::LeaveGroupRequest;
use crate::protocol::messages::list_offsets::ListOffsetsRequest;
use crate::protocol::messages::offset_commit::OffsetCommitRequest;
use crate::protocol::messages::offset_fetch::OffsetFetchRequest;
use crate::protocol::messages::offset_for_leader_epoch::OffsetForLeaderEpochRequest;
use crate::protocol::messages::sync_group::SyncGroupRequest;

/// What the consumer's API asks of the network thread.
#[derive(Debug)]
pub(crate) enum Command {
    /// Commit offsets.
    Commit {
        offsets: CommitOffsets,
        timeout: Duration,
        reply: CommitReply,
    },
    /// Look up committed offsets.
    Committed {
        partitions: Vec<TopicPartition>,
        timeout: Duration,
        reply: CommittedReply,
    },
    /// `unsubscribe()`: leave the group.
    Leave,
    /// Before a checkpoint: commit, leave, close every connection.
    Checkpoint {
        deadline: Instant,
        reply: mpsc::Sender<Result<(), String>>,
    },
    /// After a restore (or a failed checkpoint): shift deadlines; if the connections were
    /// closed for an image, re-bootstrap and rejoin as a new member.
    Restore {
        shift: Duration,
        group_instance_id: Option<String>,
        reply: mpsc::Sender<()>,
    },
    /// Leave the group (within the deadline) and stop.
    Close { deadline: Instant },
}

/// A response that did not decode, with the request it answered.
struct Malformed {
    ctx: RequestContext,
    api: &'static str,
    error: DecodeError,
}

fn malformed(ctx: RequestContext, api: &'static str, error: DecodeError) -> Box<Malformed> {
    Box::new(Malformed { ctx, api, error })
}

#[derive(Debug)]
enum Phase {
    Running,
    /// Before a checkpoint: waiting for the commit, then for the leave.
    Draining {
        deadline: Instant,
        reply: mpsc::Sender<Result<(), String>>,
        commit: Option<Receiver<Result<(), ConsumerError>>>,
    },
    /// Connections closed for a checkpoint: no network activity until `Restore`.
    Checkpointed,
    Closing {
        deadline: Instant,
        leaving: bool,
    },
}

pub(crate) struct ConsumerNetworkThread {
    config: Arc<ConsumerConfig>,
    net: Net,
    coordinator: Coordinator,
    fetcher: Fetcher,
    validator: PositionValidator,
    shared: Arc<Shared>,
    events: Receiver<Event>,
    commands: Receiver<Command>,
    wake_pending: Arc<AtomicBool>,
    phase: Phase,
    topics_version: (u64, usize),
    /// The last security failure reported to `poll()`, until a connection succeeds.
    security_error: Option<String>,
}

impl ConsumerNetworkThread {
    pub fn new(
        config: Arc<ConsumerConfig>,
        client: NetworkClient<RequestContext>,
        shared: Arc<Shared>,
        events: Receiver<Event>,
        commands: Receiver<Command>,
        wake_pending: Arc<AtomicBool>,
    ) -> Self {
        Self {
            net: Net::new(client, &config.common),
            coordinator: Coordinator::new(config.clone()),
            fetcher: Fetcher::new(config.clone()),
            validator: PositionValidator::new(config.clone()),
            config,
            shared,
            events,
            commands,
            wake_pending,
            phase: Phase::Running,
            topics_version: (u64::MAX, usize::MAX),
            security_error: None,
        }
    }

    /// The thread's body: runs until closed.
    pub fn run(mut self) {
        let _span =
            tracing::info_span!("kafka_consumer", client_id = %self.config.common.client_id)
                .entered();
        tracing::debug!("consumer network thread started");
        loop {
            let now = Instant::now();
            self.apply_commands(now);
            self.poll_connects();
            if matches!(self.phase, Phase::Checkpointed) {
                self.wait(Duration::from_secs(3600));
                continue;
            }
            let lost = self.net.ensure_bootstrap_nodes();
            self.dispatch_lost(lost, "bootstrap address changed");
            self.track_topics();
            // Nothing connects before the application gives the consumer something to do.
            if self.coordinator.has_work(&self.shared) {
                // A failed send is a failed attempt, retried after the backoff.
                let _ = self.net.maybe_update_metadata(now);
            }
            self.coordinator.poll(&mut self.net, &self.shared, now);
            if matches!(self.phase, Phase::Running) {
                self.validator.poll(&mut self.net, &self.shared, now);
                self.fetcher.poll(&mut self.net, &self.shared, now);
            }
            if self.check_phase(Instant::now()) {
                break;
            }
            let timeout = self.poll_timeout(now);
            self.wait(timeout);
            for c in self.net.client.expire(Instant::now()) {
                self.on_completion(c);
            }
        }
        let lost = self.net.close_all("consumer closed");
        self.dispatch_lost(lost, "consumer closed");
        tracing::debug!("consumer network thread stopped");
    }

    /// Collects finished connection attempts. A failure on the security settings is reported
    /// to `poll()` (once, until a connection succeeds again): retrying cannot fix it.
    fn poll_connects(&mut self) {
        for (_, r) in self.net.client.poll_connects() {
            match r {
                Ok(()) => self.security_error = None,
                Err(e) if e.is_security() => {
                    let msg = e.to_string();
                    if self.security_error.as_deref() != Some(msg.as_str()) {
                        tracing::error!(error = %msg, "cannot connect with the security settings");
                        self.security_error = Some(msg.clone());
                        self.shared
                            .state
                            .lock()
                            .errors
                            .push_back(ConsumerError::Security(Arc::from(msg)));
                        self.shared.notify();
                    }
                }
                Err(_) => {}
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        let mut next = self.events.recv_timeout(timeout).ok();
        while let Some(ev) = next {
            if matches!(ev, Event::Wakeup) {
                self.wake_pending.store(false, Ordering::Release);
            } else if let Some(c) = self.net.client.handle_event(ev) {
                self.on_completion(c);
            }
            next = self.events.try_recv().ok();
        }
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut t = self
            .coordinator
            .next_due(now)
            .min(self.fetcher.next_due(now))
            .min(self.validator.next_due(now).unwrap_or(Duration::MAX))
            .min(self.net.metadata.time_to_update(now));
        if let Some(d) = self.net.client.next_deadline() {
            t = t.min(d.saturating_duration_since(now));
        }
        if let Phase::Draining { .. } | Phase::Closing { .. } = self.phase {
            t = t.min(Duration::from_millis(20));
        }
        t.clamp(Duration::from_millis(1), Duration::from_secs(1))
    }

    /// Topics the metadata must cover: the subscription's and the assignment's.
    fn track_topics(&mut self) {
        let st = self.shared.state.lock();
        let version = (st.subscription_version, st.assignment.len());
        if version == self.topics_version {
            return;
        }
        self.topics_version = version;
        if let Subscription::Topics(t) = &st.subscription {
            for topic in t {
                self.net.metadata.add_topic(topic);
            }
        }
        for tp in st.assignment.keys() {
            self.net.metadata.add_topic(&tp.topic);
        }
    }

    fn apply_commands(&mut self, now: Instant) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Commit {
                    offsets,
                    timeout,
                    reply,
                } => self.coordinator.enqueue_commit(offsets, timeout, reply),
                Command::Committed {
                    partitions,
                    timeout,
                    reply,
                } => self.coordinator.enqueue_query(partitions, timeout, reply),
                Command::Leave => {
                    self.coordinator.begin_leave(
                        &mut self.net,
                        &self.shared,
                        "the consumer unsubscribed",
                    );
                }
                Command::Checkpoint { deadline, reply } => self.begin_checkpoint(deadline, reply),
                Command::Restore {
                    shift,
                    group_instance_id,
                    reply,
                } => {
                    if matches!(self.phase, Phase::Draining { .. }) {
                        // before_checkpoint gave up waiting: the checkpoint is over.
                        self.fail_checkpoint(
                            "the checkpoint ended before the commit and leave".into(),
                        );
                    }
                    self.restore(shift, group_instance_id);
                    let _ = reply.send(());
                }
                Command::Close { deadline } => {
                    tracing::info!("closing consumer");
                    if let Phase::Draining { reply, .. } = std::mem::replace(
                        &mut self.phase,
                        Phase::Closing {
                            deadline,
                            leaving: false,
                        },
                    ) {
                        let _ =
                            reply.send(Err("the consumer was closed during the checkpoint".into()));
                    }
                    self.coordinator.suspend(true);
                    let _ = now;
                }
            }
        }
    }

    fn begin_checkpoint(&mut self, deadline: Instant, reply: mpsc::Sender<Result<(), String>>) {
        if !matches!(self.phase, Phase::Running) {
            let _ = reply.send(Err("the consumer is closing".into()));
            return;
        }
        if Instant::now() >= deadline {
            // The thread was held up past the checkpoint's deadline: it has given up, or will.
            tracing::warn!("checkpoint: request came after its deadline");
            let _ = reply.send(Err(
                "the network thread took the checkpoint request after checkpoint.timeout.ms".into(),
            ));
            return;
        }
        let commit_offsets = self.config.checkpoint_commit_offsets;
        tracing::info!(
            commit_offsets,
            "checkpoint: committing returned records and leaving the group"
        );
        // Records fetched but not returned are dropped: they are fetched again from the
        // committed offsets, by whichever member owns the partition then.
        self.shared.state.lock().clear_buffer();
        self.coordinator.suspend(true);
        // Without the commit (offsets committed by transactions), the leave comes at once.
        if self.config.group_id.is_some() && !commit_offsets {
            self.coordinator.begin_leave(
                &mut self.net,
                &self.shared,
                "checkpoint: the process is being frozen",
            );
        }
        let commit = (self.config.group_id.is_some() && commit_offsets).then(|| {
            let (tx, rx) = mpsc::channel();
            let timeout = self.config.checkpoint_timeout;
            self.coordinator
                .enqueue_commit(CommitOffsets::Current, timeout, CommitReply::Wait(tx));
            rx
        });
        self.phase = Phase::Draining {
            deadline,
            reply,
            commit,
        };
    }

    /// Moves a checkpoint or close forward. Returns true when the thread should stop.
    fn check_phase(&mut self, now: Instant) -> bool {
        match &mut self.phase {
            Phase::Running | Phase::Checkpointed => false,
            Phase::Draining {
                deadline, commit, ..
            } => {
                let deadline = *deadline;
                if let Some(rx) = commit {
                    match rx.try_recv() {
                        Ok(Ok(())) => {
                            *commit = None;
                            self.coordinator.begin_leave(
                                &mut self.net,
                                &self.shared,
                                "checkpoint: the process is being frozen",
                            );
                        }
                        Ok(Err(e)) => {
                            self.fail_checkpoint(format!(
                                "could not commit the positions of returned records: {e}"
                            ));
                            return false;
                        }
                        Err(mpsc::TryRecvError::Empty) => {
                            if now >= deadline + Duration::from_secs(1) {
                                self.fail_checkpoint(
                                    "could not commit the positions of returned records in time"
                                        .into(),
                                );
                            }
                            return false;
                        }
                        Err(mpsc::TryRecvError::Disconnected) => {
                            self.fail_checkpoint("the commit was dropped".into());
                            return false;
                        }
                    }
                } else if self.config.group_id.is_none() || self.coordinator.left() {
                    self.finish_checkpoint();
                } else if now >= deadline {
                    // The commit made it: nothing is lost or read twice; the partitions only
                    // move later, when the coordinator expires the member's session.
                    tracing::warn!(
                        "checkpoint: LeaveGroup not answered in time; the coordinator removes this member after session.timeout.ms"
                    );
                    self.coordinator.forget_member(&self.shared);
                    self.finish_checkpoint();
                }
                false
            }
            Phase::Closing { deadline, leaving } => {
                let deadline = *deadline;
                if !*leaving && (self.coordinator.pending_commits() == 0 || now >= deadline) {
                    *leaving = true;
                    self.coordinator.begin_leave(
                        &mut self.net,
                        &self.shared,
                        "the consumer is closing",
                    );
                    return false;
                }
                *leaving && (self.coordinator.left() || now >= deadline)
            }
        }
    }

    fn fail_checkpoint(&mut self, detail: String) {
        if !matches!(self.phase, Phase::Draining { .. }) {
            return;
        }
        self.coordinator.suspend(false);
        if let Phase::Draining { reply, .. } = std::mem::replace(&mut self.phase, Phase::Running) {
            tracing::warn!(%detail, "checkpoint: failed; the consumer goes on");
            let _ = reply.send(Err(detail));
        }
    }

    /// Committed and left: close every connection and give up the assignment (the
    /// application hears `on_partitions_revoked` at its first `poll()` after the restore).
    fn finish_checkpoint(&mut self) {
        let lost = self.net.close_all("checkpoint");
        self.dispatch_lost(lost, "checkpoint");
        self.fetcher.reset();
        self.validator.reset();
        {
            let mut st = self.shared.state.lock();
            st.clear_buffer();
            st.checkpoint_epoch += 1;
            match st.subscription {
                Subscription::Topics(_) => {
                    let partitions: Vec<TopicPartition> = st.assignment.keys().cloned().collect();
                    st.assignment.clear();
                    st.rebalance = RebalanceStep::Revoke {
                        partitions,
                        lost: false,
                    };
                }
                Subscription::Manual if self.config.group_id.is_some() => {
                    // Resume from what was committed, like a group member.
                    for p in st.assignment.values_mut() {
                        p.position = None;
                        p.committed_requested = false;
                        p.reset = None;
                    }
                }
                _ => {}
            }
        }
        if let Phase::Draining { reply, .. } =
            std::mem::replace(&mut self.phase, Phase::Checkpointed)
        {
            tracing::info!("checkpoint: committed, left the group, connections closed");
            if reply.send(Ok(())).is_err() {
                // before_checkpoint stopped waiting: no image is taken; rejoin now rather
                // than stay disconnected until a Restore.
                tracing::warn!("checkpoint: finished after the checkpoint gave up; rejoining");
                let instance = self.coordinator.instance_id().map(str::to_owned);
                self.restore(Duration::ZERO, instance);
            }
        }
    }

    fn restore(&mut self, shift: Duration, group_instance_id: Option<String>) {
        if !shift.is_zero() {
            tracing::info!(
                shift_ms = shift.as_millis() as u64,
                "rebasing deadlines by the frozen time"
            );
            self.net.rebase(shift);
            self.coordinator.rebase(shift);
            self.fetcher.rebase(shift);
        }
        self.shared.state.lock().last_poll = Instant::now();
        if matches!(self.phase, Phase::Checkpointed) {
            // The cluster may have changed while this was an image, and clones of one image
            // must not share a member id or a group.instance.id.
            let lost = self.net.rebootstrap();
            self.dispatch_lost(lost, "re-bootstrap");
            self.topics_version = (u64::MAX, usize::MAX);
            self.coordinator
                .reset_after_restore(group_instance_id, &self.shared);
            tracing::info!(group_instance_id = ?self.coordinator.instance_id(), "restored: re-bootstrapping and rejoining as a new member");
            self.phase = Phase::Running;
        }
    }

    fn dispatch_lost(&mut self, contexts: Vec<RequestContext>, _why: &str) {
        for ctx in contexts {
            self.on_lost(ctx);
        }
    }

    fn on_lost(&mut self, ctx: RequestContext) {
        match ctx {
            RequestContext::Metadata => self.net.metadata_lost(Instant::now()),
            RequestContext::Fetch(f) => self.fetcher.on_fetch_lost(f),
            RequestContext::ListOffsets(l) => self.fetcher.on_list_offsets_lost(l),
            RequestContext::OffsetForLeaderEpoch(c) => self.validator.on_lost(c),
            other => self.coordinator.on_request_lost(other, &self.shared),
        }
    }

    fn on_completion(&mut self, c: Completion<RequestContext>) {
        match c {
            Completion::Disconnected {
                node_id,
                contexts,
                reason,
            } => {
                tracing::info!(node = node_id, reason = %reason, lost = contexts.len(), "connection lost");
                self.net.metadata.request_update();
                self.dispatch_lost(contexts, &reason);
            }
            Completion::Response {
                node_id,
                context,
                version,
                correlation_id,
                body,
                ..
            } => {
                if let Err(m) = self.on_response(node_id, context, version, correlation_id, &body) {
                    let Malformed { ctx, api, error: e } = *m;
                    tracing::warn!(node = node_id, api, error = %e, "malformed response; reconnecting");
                    let lost = self.net.client.disconnect(node_id, &e.to_string());
                    match ctx {
                        RequestContext::Metadata
                        | RequestContext::Fetch(_)
                        | RequestContext::ListOffsets(_)
                        | RequestContext::OffsetForLeaderEpoch(_) => self.on_lost(ctx),
                        group => self.coordinator.on_malformed(
                            &mut self.net,
                            group,
                            &self.shared,
                            &e.to_string(),
                        ),
                    }
                    self.dispatch_lost(lost, "malformed response");
                }
            }
        }
    }

    /// Decodes a response and hands it to its owner; a frame that does not decode comes back
    /// with its context (never a panic: `tests/consumer_fetch_fuzz.rs`).
    fn on_response(
        &mut self,
        node: i32,
        ctx: RequestContext,
        version: i16,
        correlation_id: i32,
        body: &[u8],
    ) -> Result<(), Box<Malformed>> {
        // Decodes and applies the response's throttle time to its connection.
        macro_rules! decode {
            ($r:ty) => {
                self.net
                    .client
                    .decode::<$r>(node, body, version, correlation_id)
            };
        }
        let shared = self.shared.clone();
        match ctx {
            RequestContext::Metadata => {
                self.net.metadata_in_flight = false;
                match decode!(MetadataRequest) {
                    Ok(resp) => {
                        let lost = self.net.apply_metadata(&resp, Instant::now());
                        self.dispatch_lost(lost, "broker left the metadata");
                    }
                    Err(e) => return Err(malformed(RequestContext::Metadata, "Metadata", e)),
                }
            }
            RequestContext::Fetch(f) => match decode!(FetchRequest) {
                Ok(resp) => self
                    .fetcher
                    .on_fetch(&mut self.net, f, version, resp, &shared),
                Err(e) => return Err(malformed(RequestContext::Fetch(f), "Fetch", e)),
            },
            RequestContext::ListOffsets(l) => match decode!(ListOffsetsRequest) {
                Ok(resp) => self
                    .fetcher
                    .on_list_offsets(&mut self.net, l, resp, &shared),
                Err(e) => {
                    return Err(malformed(RequestContext::ListOffsets(l), "ListOffsets", e));
                }
            },
            RequestContext::OffsetForLeaderEpoch(c) => match decode!(OffsetForLeaderEpochRequest) {
                Ok(resp) => self.validator.on_response(&mut self.net, c, resp, &shared),
                Err(e) => {
                    return Err(malformed(
                        RequestContext::OffsetForLeaderEpoch(c),
                        "OffsetForLeaderEpoch",
                        e,
                    ));
                }
            },
            RequestContext::FindCoordinator => match decode!(FindCoordinatorRequest) {
                Ok(r) => self
                    .coordinator
                    .on_find_coordinator(&mut self.net, r, &shared),
                Err(e) => return Err(malformed(ctx, "FindCoordinator", e)),
            },
            RequestContext::JoinGroup => match decode!(JoinGroupRequest) {
                Ok(r) => self.coordinator.on_join_group(&mut self.net, r, &shared),
                Err(e) => return Err(malformed(ctx, "JoinGroup", e)),
            },
            RequestContext::SyncGroup => match decode!(SyncGroupRequest) {
                Ok(r) => self.coordinator.on_sync_group(&mut self.net, r, &shared),
                Err(e) => return Err(malformed(ctx, "SyncGroup", e)),
            },
            RequestContext::Heartbeat => match decode!(HeartbeatRequest) {
                Ok(r) => self.coordinator.on_heartbeat(&mut self.net, r, &shared),
                Err(e) => return Err(malformed(ctx, "Heartbeat", e)),
            },
            RequestContext::GroupHeartbeat(kind) => match decode!(ConsumerGroupHeartbeatRequest) {
                Ok(r) => self
                    .coordinator
                    .on_group_heartbeat(&mut self.net, kind, r, &shared),
                Err(e) => return Err(malformed(ctx, "ConsumerGroupHeartbeat", e)),
            },
            RequestContext::Release => match decode!(LeaveGroupRequest) {
                Ok(r) => self.coordinator.on_release(r.error()),
                Err(e) => return Err(malformed(ctx, "LeaveGroup", e)),
            },
            RequestContext::LeaveGroup => match decode!(LeaveGroupRequest) {
                Ok(r) => self.coordinator.on_leave_group(r, &shared),
                Err(e) => return Err(malformed(ctx, "LeaveGroup", e)),
            },
            RequestContext::OffsetCommit(id) => match decode!(OffsetCommitRequest) {
                Ok(r) => self
                    .coordinator
                    .on_offset_commit(&mut self.net, id, r, &shared),
                Err(e) => return Err(malformed(ctx, "OffsetCommit", e)),
            },
            RequestContext::OffsetFetch(q) => match decode!(OffsetFetchRequest) {
                Ok(r) => self
                    .coordinator
                    .on_offset_fetch(&mut self.net, q, r, &shared),
                Err(e) => return Err(malformed(ctx, "OffsetFetch", e)),
            },
        }
        Ok(())
    }
}
