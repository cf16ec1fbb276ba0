//! The consumer: [`Consumer`] (the API), [`config`] (Java-compatible settings), [`record`]
//! (what `poll()` returns), [`rebalance`] (the listener), [`assignor`] (`range`,
//! `roundrobin`), and, behind the API: `network_thread` (the one I/O thread), `coordinator`
//! (the group protocol and offset commits), `fetcher` (Fetch and ListOffsets), `batch_reader`
//! (fetched bytes to records), `shared` (state shared with `poll()`), `checkpoint` (the CRaC
//! resource).

pub mod assignor;
pub(crate) mod batch_reader;
mod checkpoint;
pub mod config;
mod coordinator;
pub mod error;
mod fetcher;
mod net;
mod network_thread;
pub mod rebalance;
pub mod record;
mod shared;
mod sticky;
mod stream;
mod validation;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use self::assignor::AssignorKind;
pub use self::config::{AutoOffsetReset, ConfigError, ConsumerConfig, GroupProtocol};
use self::coordinator::{CommitOffsets, CommitReply};
pub use self::error::{ConsumerCheckpointError, ConsumerError};
use self::network_thread::{Command, ConsumerNetworkThread};
pub use self::rebalance::{ConsumerRebalanceListener, NoopListener};
pub use self::record::{
    ConsumerRecord, ConsumerRecords, OffsetAndMetadata, TimestampType, TopicPartition,
};
use self::shared::{RebalanceStep, Shared, Subscription};
pub use self::stream::{CommitFuture, RecordStream};
use crate::network::checkpoint::CheckpointState;
use crate::network::{Event, NetworkClient, NetworkConfig};
pub use crate::protocol::messages::fetch::IsolationLevel;

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// `now + timeout`, or a year from now for a timeout too long to add (`Duration::MAX`: wait
/// for good).
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .unwrap_or(now + Duration::from_secs(86_400 * 365))
}

/// Callback of an asynchronous commit, run on the application thread (in a later `poll()`,
/// `commit_sync()` or `close()`), as in Java.
pub type CommitCallback = Box<dyn FnOnce(Result<(), ConsumerError>) + Send>;

/// The group membership of a consumer (Java's `groupMetadata()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: Option<String>,
    /// The generation joined, -1 if not a member.
    pub generation_id: i32,
    /// The member id the coordinator gave, empty if not a member.
    pub member_id: String,
    /// `group.instance.id` in use (after a restore: the restored copy's own).
    pub group_instance_id: Option<String>,
}

/// Counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerMetrics {
    /// Records returned by `poll()`.
    pub records_returned: u64,
    /// Assignments received (rebalances completed).
    pub rebalances: u64,
    /// Partitions assigned now.
    pub assigned_partitions: usize,
    /// Records fetched and not yet returned.
    pub buffered_records: usize,
}

/// A Kafka consumer: classic consumer groups (`subscribe`) or manual assignment (`assign`),
/// `poll()`, commits, seeks, rebalance callbacks. Thread-safe, but like Java's it is meant to
/// be polled from one thread (a concurrent `poll()` is refused).
///
/// ```no_run
/// use std::time::Duration;
/// use kafka_client::consumer::{Consumer, ConsumerConfig, AutoOffsetReset};
///
/// let config = ConsumerConfig::new("127.0.0.1:9092")?
///     .group_id("billing")
///     .auto_offset_reset(AutoOffsetReset::Earliest)
///     .enable_auto_commit(false);
/// let consumer = Consumer::new(config)?;
/// consumer.subscribe(["invoices"])?;
/// loop {
///     let records = consumer.poll(Duration::from_millis(500))?;
///     for r in &records {
///         println!("{}-{}@{}: {:?}", r.topic, r.partition, r.offset, r.value);
///     }
///     consumer.commit_sync()?; // the positions of the records poll() returned
/// #   break;
/// }
/// consumer.close(Duration::from_secs(30))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// By default the consumer registers itself (weakly) in the global CRaC context at
/// [`crac_api::Priority::Network`]: before a checkpoint it stops fetching (a `poll()` in
/// progress returns nothing), commits the positions of records `poll()` returned (fetched but
/// unreturned records are dropped and read again from there), leaves the group so its
/// partitions move to the other members while it is frozen, and closes every connection;
/// after a restore it re-bootstraps and rejoins as a new member. `crac.register=false` switches
/// that off.
pub struct Consumer {
    inner: Arc<ConsumerInner>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("client_id", &self.inner.config.common.client_id)
            .field("group_id", &self.inner.config.group_id)
            .finish_non_exhaustive()
    }
}

/// The application side's own state: the listener and async commit callbacks.
struct AppState {
    listener: Option<Box<dyn ConsumerRebalanceListener>>,
    callbacks: HashMap<u64, CommitCallback>,
    next_callback: u64,
    next_auto_commit: Instant,
}

pub(crate) struct ConsumerInner {
    config: Arc<ConsumerConfig>,
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    events: mpsc::Sender<Event>,
    wake_pending: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    app: Mutex<AppState>,
    /// Held by `poll()`: a second concurrent (or re-entrant) poll is refused.
    polling: Mutex<()>,
    checkpoint: CheckpointState,
}

impl ConsumerInner {
    fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            let _ = self.events.send(Event::Wakeup);
        }
    }

    fn command(&self, c: Command) -> bool {
        let ok = self.commands.send(c).is_ok();
        self.wake();
        ok
    }
}

impl Consumer {
    /// Starts a consumer: validates the configuration and starts its network thread. Nothing
    /// connects until `subscribe()` or `assign()` gives it something to do.
    pub fn new(mut config: ConsumerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if config.common.client_id.is_empty() {
            config.common.client_id = format!(
                "consumer-{}-{}",
                config.group_id.as_deref().unwrap_or("nogroup"),
                NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)
            );
        }
        let config = Arc::new(config);
        let (events_tx, events_rx) = mpsc::channel();
        let (commands_tx, commands_rx) = mpsc::channel();
        let wake_pending = Arc::new(AtomicBool::new(false));
        let shared = Shared::new(config.group_instance_id.clone());
        let client = NetworkClient::new(NetworkConfig::new(&config.common, 5), events_tx.clone());
        let io = ConsumerNetworkThread::new(
            config.clone(),
            client,
            shared.clone(),
            events_rx,
            commands_rx,
            wake_pending.clone(),
        );
        let thread = std::thread::Builder::new()
            // A thread name cannot hold a NUL; the default client.id holds the group.id's.
            .name(format!("kafka-consumer-{}", config.common.client_id).replace('\0', ""))
            .spawn({
                let shared = shared.clone();
                move || {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| io.run())).is_err()
                    {
                        tracing::error!("kafka consumer network thread panicked");
                        let mut st = shared.state.lock();
                        st.errors.push_back(ConsumerError::Fatal(Arc::from(
                            "the consumer's network thread panicked",
                        )));
                        st.closed = true;
                        drop(st);
                        shared.notify();
                    }
                }
            })
            .map_err(|e| {
                ConfigError::new(
                    "client.id",
                    &config.common.client_id,
                    format!("cannot start the network thread: {e}"),
                )
            })?;
        let inner = Arc::new(ConsumerInner {
            app: Mutex::new(AppState {
                listener: None,
                callbacks: HashMap::new(),
                next_callback: 0,
                next_auto_commit: Instant::now() + config.auto_commit_interval,
            }),
            config,
            shared,
            commands: commands_tx,
            events: events_tx,
            wake_pending,
            thread: Mutex::new(Some(thread)),
            polling: Mutex::new(()),
            checkpoint: CheckpointState::default(),
        });
        if inner.config.common.crac_register {
            crac_api::Core::global_context()
                .register_with_priority(&inner, crac_api::Priority::Network);
        }
        tracing::info!(client_id = %inner.config.common.client_id, group_id = ?inner.config.group_id, "consumer started");
        Ok(Self { inner })
    }

    /// Starts a consumer from Java-style `key=value` properties.
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        Self::new(ConsumerConfig::from_properties(props)?)
    }

    /// The configuration in force.
    pub fn config(&self) -> &ConsumerConfig {
        &self.inner.config
    }

    fn check_open(&self) -> Result<(), ConsumerError> {
        if self.inner.shared.state.lock().closed {
            return Err(ConsumerError::Closed);
        }
        Ok(())
    }

    // --- subscription ----------------------------------------------------------------------

    /// Subscribes to `topics` with group management (`group.id` needed): partitions are
    /// assigned by the group's leader, and move between members as they come and go. Replaces
    /// an earlier subscription (the member rejoins at the next `poll()`).
    pub fn subscribe<I, S>(&self, topics: I) -> Result<(), ConsumerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.subscribe_inner(topics, None)
    }

    /// [`subscribe`](Self::subscribe) with a rebalance listener.
    pub fn subscribe_with_listener<I, S>(
        &self,
        topics: I,
        listener: impl ConsumerRebalanceListener + 'static,
    ) -> Result<(), ConsumerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.subscribe_inner(topics, Some(Box::new(listener)))
    }

    fn subscribe_inner<I, S>(
        &self,
        topics: I,
        listener: Option<Box<dyn ConsumerRebalanceListener>>,
    ) -> Result<(), ConsumerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.check_open()?;
        if self.inner.config.group_id.is_none() {
            return Err(ConsumerError::NoGroupId("subscribe()"));
        }
        let topics: BTreeSet<String> = topics
            .into_iter()
            .map(|t| t.as_ref().trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        if topics.is_empty() {
            return self.unsubscribe();
        }
        {
            let mut st = self.inner.shared.state.lock();
            if st.subscription == Subscription::Manual {
                return Err(ConsumerError::illegal(
                    "subscribe() after assign(): call unsubscribe() first",
                ));
            }
            let next = Subscription::Topics(topics);
            if st.subscription != next {
                st.subscription = next;
                st.subscription_version += 1;
            }
        }
        if let Some(l) = listener {
            self.inner.app.lock().listener = Some(l);
        }
        self.inner.wake();
        Ok(())
    }

    /// Consumes exactly these partitions, without group management (commits still go to
    /// `group.id` if one is set). Positions of partitions kept are kept.
    pub fn assign(&self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.check_open()?;
        {
            let mut st = self.inner.shared.state.lock();
            if matches!(st.subscription, Subscription::Topics(_)) {
                return Err(ConsumerError::illegal(
                    "assign() after subscribe(): call unsubscribe() first",
                ));
            }
            st.set_assignment(partitions.iter().cloned());
            st.subscription = if partitions.is_empty() {
                Subscription::None
            } else {
                Subscription::Manual
            };
            st.subscription_version += 1;
        }
        self.inner.wake();
        Ok(())
    }

    /// Gives up the subscription (leaving the group: commit first if auto-commit, then
    /// `on_partitions_revoked`) or the manual assignment.
    pub fn unsubscribe(&self) -> Result<(), ConsumerError> {
        self.check_open()?;
        let (grouped, partitions) = {
            let st = self.inner.shared.state.lock();
            (
                matches!(st.subscription, Subscription::Topics(_)),
                st.assignment.keys().cloned().collect::<Vec<_>>(),
            )
        };
        if grouped {
            self.give_up(&partitions, false, self.inner.config.default_api_timeout);
        }
        {
            let mut st = self.inner.shared.state.lock();
            st.assignment.clear();
            st.clear_buffer();
            st.subscription = Subscription::None;
            st.subscription_version += 1;
            st.rebalance = RebalanceStep::None;
        }
        if grouped {
            self.inner.command(Command::Leave);
        }
        Ok(())
    }

    /// The subscribed topics.
    pub fn subscription(&self) -> Vec<String> {
        match &self.inner.shared.state.lock().subscription {
            Subscription::Topics(t) => t.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The partitions assigned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.inner
            .shared
            .state
            .lock()
            .assignment
            .keys()
            .cloned()
            .collect()
    }

    /// The group membership of the last assignment `poll()` delivered, as Java's
    /// `groupMetadata()`: the member that read the records `poll()` returns, for
    /// [`Producer::send_offsets_to_transaction`](crate::Producer::send_offsets_to_transaction).
    /// It changes only in `poll()`; a leave (close, checkpoint) or a rebalance under way does
    /// not change it, so a transaction committing offsets of records read by a member that
    /// is gone is refused by the group coordinator (KIP-447).
    pub fn group_metadata(&self) -> ConsumerGroupMetadata {
        let st = self.inner.shared.state.lock();
        let m = &st.polled_membership;
        ConsumerGroupMetadata {
            group_id: self.inner.config.group_id.clone(),
            generation_id: m.generation_id,
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
        }
    }

    /// Counters.
    pub fn metrics(&self) -> ConsumerMetrics {
        let st = self.inner.shared.state.lock();
        ConsumerMetrics {
            records_returned: st.records_returned,
            rebalances: st.rebalances,
            assigned_partitions: st.assignment.len(),
            buffered_records: st.buffer.iter().map(|c| c.records.len()).sum(),
        }
    }

    // --- poll ------------------------------------------------------------------------------

    /// Returns fetched records (at most `max.poll.records`), waiting up to `timeout` for some.
    /// Rebalances happen here: the listener is called, the member (re)joins. A checkpoint in
    /// progress makes it return nothing (waiting out `timeout`); it goes on after the restore.
    pub fn poll(&self, timeout: Duration) -> Result<ConsumerRecords, ConsumerError> {
        self.poll_noting(timeout, None)
    }

    /// [`poll`](Self::poll), noting each partition's records in a row among those returned in
    /// `runs` (the stream's books).
    pub(crate) fn poll_noting(
        &self,
        timeout: Duration,
        runs: Option<&mut Vec<shared::Run>>,
    ) -> Result<ConsumerRecords, ConsumerError> {
        let Some(_polling) = self.inner.polling.try_lock() else {
            return Err(ConsumerError::illegal(
                "poll() is already running (from another thread or from a listener)",
            ));
        };
        let now = Instant::now();
        let deadline = deadline_after(now, timeout);
        {
            let mut st = self.inner.shared.state.lock();
            st.in_poll = true;
            st.last_poll = now;
        }
        let r = self.poll_until(deadline, runs);
        let mut st = self.inner.shared.state.lock();
        st.in_poll = false;
        st.last_poll = Instant::now();
        r
    }

    /// Records already fetched, taken without waiting, as `poll()` would take them: the
    /// stream's fast path. [`PollNow::Waiting`]: none buffered and nothing else due; `waker` is
    /// woken by what would wake a waiting `poll()` (records, a rebalance step, an error), and
    /// the wait counts as time in `poll()` for `max.poll.interval.ms`. [`PollNow::PollDue`]:
    /// `poll()` has work first (a rebalance step, an error, an auto-commit, a checkpoint in
    /// progress) or is running. Each partition's records in a row among those taken are
    /// noted in `runs`.
    pub(crate) fn poll_now(
        &self,
        waker: &std::task::Waker,
        runs: &mut Vec<shared::Run>,
    ) -> PollNow {
        let Some(_polling) = self.inner.polling.try_lock() else {
            return PollNow::PollDue;
        };
        let mut st = self.inner.shared.state.lock();
        let step_due = !matches!(
            st.rebalance,
            RebalanceStep::None | RebalanceStep::JoinAllowed
        );
        if st.closed
            || st.checkpointing
            || step_due
            || !st.errors.is_empty()
            || st.subscription == Subscription::None
        {
            return PollNow::PollDue;
        }
        if self.inner.config.enable_auto_commit
            && Instant::now() >= self.inner.app.lock().next_auto_commit
        {
            return PollNow::PollDue;
        }
        let (records, error) = st.drain(self.inner.config.max_poll_records, Some(runs));
        if records.is_empty() && error.is_none() {
            // Registered under the state's lock: what is buffered after this wakes it.
            crate::completion::set_waker(&mut self.inner.shared.waker.lock(), waker);
            if !st.in_poll {
                st.in_poll = true;
                st.last_poll = Instant::now();
            }
            return PollNow::Waiting;
        }
        st.in_poll = false;
        st.last_poll = Instant::now();
        drop(st);
        self.inner.wake(); // drained partitions can be fetched again
        PollNow::Records(match error {
            Some(e) => Err(e),
            None => Ok(ConsumerRecords::new(records)),
        })
    }

    fn poll_until(
        &self,
        deadline: Instant,
        mut runs: Option<&mut Vec<shared::Run>>,
    ) -> Result<ConsumerRecords, ConsumerError> {
        // A poll() that waits across a checkpoint returns nothing in the restored copies: what
        // it would return is the copy's to fetch again, from the positions it resumes at.
        let epoch = crac_api::restore_epoch();
        self.run_commit_callbacks();
        // At most one auto-commit per poll(), as Java's: with auto.commit.interval.ms=0 this
        // loop would otherwise send commits until the end of time.
        let mut auto_committed = false;
        loop {
            let mut st = self.inner.shared.state.lock();
            if st.closed {
                return Err(st.errors.pop_front().unwrap_or(ConsumerError::Closed));
            }
            if crac_api::restore_epoch() != epoch {
                return Ok(ConsumerRecords::default());
            }
            if st.subscription == Subscription::None {
                return Err(ConsumerError::illegal(
                    "not subscribed to any topic and no partition assigned",
                ));
            }
            if !st.checkpointing {
                if let Some(e) = st.errors.pop_front() {
                    return Err(e);
                }
                match st.rebalance.clone() {
                    RebalanceStep::Revoke { partitions, lost } => {
                        drop(st);
                        self.revoke_for_rejoin(partitions, lost);
                        continue;
                    }
                    step @ RebalanceStep::Assign { .. } => {
                        drop(st);
                        self.apply_assignment(step);
                        continue;
                    }
                    RebalanceStep::Assigned(partitions) => {
                        // A rebalance step left over from an earlier poll() whose listener
                        // panicked: the assignment is installed; finish.
                        st.rebalance = RebalanceStep::None;
                        drop(st);
                        tracing::debug!(partitions = partitions.len(), "assignment step finished");
                        self.inner.wake();
                        continue;
                    }
                    RebalanceStep::None | RebalanceStep::JoinAllowed => {}
                }
                if self.inner.config.enable_auto_commit && !auto_committed {
                    let mut app = self.inner.app.lock();
                    if Instant::now() >= app.next_auto_commit {
                        auto_committed = true;
                        app.next_auto_commit =
                            Instant::now() + self.inner.config.auto_commit_interval;
                        drop(app);
                        drop(st);
                        // Java's auto-commit: the positions returned by earlier polls, async.
                        let offsets = self.snapshot(None);
                        self.inner.command(Command::Commit {
                            offsets,
                            timeout: self.inner.config.default_api_timeout,
                            reply: self.async_reply(Box::new(|r| {
                                if let Err(e) = r {
                                    tracing::warn!(error = %e, "auto-commit failed");
                                }
                            })),
                        });
                        continue;
                    }
                }
                let (records, error) =
                    st.drain(self.inner.config.max_poll_records, runs.as_deref_mut());
                if !records.is_empty() || error.is_some() {
                    drop(st);
                    self.inner.wake(); // drained partitions can be fetched again
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(ConsumerRecords::new(records)),
                    };
                }
            }
            if Instant::now() >= deadline {
                return Ok(ConsumerRecords::default());
            }
            self.inner.shared.cv.wait_until(&mut st, deadline);
            drop(st);
            self.run_commit_callbacks();
        }
    }

    /// Before (re)joining, on the application thread: commit (auto-commit), tell the listener,
    /// give the partitions up (eager: all; cooperative: those lost or no longer subscribed),
    /// let the network thread join.
    fn revoke_for_rejoin(&self, partitions: Vec<TopicPartition>, lost: bool) {
        self.give_up(&partitions, lost, self.inner.config.default_api_timeout);
        let mut st = self.inner.shared.state.lock();
        for tp in &partitions {
            st.assignment.remove(tp);
            st.drop_buffered(tp);
        }
        if matches!(&st.rebalance, RebalanceStep::Revoke { partitions: p, .. } if *p == partitions)
        {
            st.rebalance = RebalanceStep::JoinAllowed;
        }
        drop(st);
        self.inner.wake();
    }

    /// A new assignment, on the application thread: give up what is revoked (auto-commit,
    /// `on_partitions_revoked`), install the assignment, then `on_partitions_assigned` with
    /// what was added (with the eager protocol: everything). Fetching of the new partitions
    /// starts once the listener returns.
    fn apply_assignment(&self, step: RebalanceStep) {
        let RebalanceStep::Assign {
            revoked,
            assignment,
            added,
        } = &step
        else {
            return;
        };
        self.give_up(revoked, false, self.inner.config.default_api_timeout);
        {
            let mut st = self.inner.shared.state.lock();
            if st.rebalance != step {
                // The network thread moved on meanwhile (fenced, left): its step comes next.
                return;
            }
            st.set_assignment(assignment.iter().cloned());
            // group_metadata() now speaks for this assignment (KIP-447).
            st.polled_membership = st.assigned_membership.clone();
            st.rebalance = RebalanceStep::Assigned(added.clone());
        }
        self.inner.wake();
        self.call_listener(|l, c| l.on_partitions_assigned(c, added));
        let mut st = self.inner.shared.state.lock();
        if st.rebalance == RebalanceStep::Assigned(added.clone()) {
            st.rebalance = RebalanceStep::None;
        }
        drop(st);
        self.inner.wake();
    }

    /// Auto-commit (unless lost) and the listener, for partitions given up.
    fn give_up(&self, partitions: &[TopicPartition], lost: bool, timeout: Duration) {
        if partitions.is_empty() {
            return;
        }
        if !lost
            && self.inner.config.enable_auto_commit
            && let Err(e) = self.commit_inner(None, timeout)
        {
            tracing::warn!(error = %e, "auto-commit before giving up partitions failed");
        }
        if lost {
            self.call_listener(|l, c| l.on_partitions_lost(c, partitions));
        } else {
            self.call_listener(|l, c| l.on_partitions_revoked(c, partitions));
        }
    }

    fn call_listener(&self, f: impl FnOnce(&mut dyn ConsumerRebalanceListener, &Consumer)) {
        // Taken out while it runs, so it may call back into the consumer.
        let taken = self.inner.app.lock().listener.take();
        if let Some(mut l) = taken {
            f(l.as_mut(), self);
            let mut app = self.inner.app.lock();
            if app.listener.is_none() {
                app.listener = Some(l);
            }
        }
    }

    // --- commits ---------------------------------------------------------------------------

    /// Commits the positions of the records `poll()` returned, for every assigned partition,
    /// and waits (up to `default.api.timeout.ms`, retrying while the coordinator moves).
    pub fn commit_sync(&self) -> Result<(), ConsumerError> {
        self.commit_inner(None, self.inner.config.default_api_timeout)
    }

    /// Commits these offsets (the next offset to read, per partition) and waits.
    pub fn commit_sync_offsets(
        &self,
        offsets: &[(TopicPartition, OffsetAndMetadata)],
        timeout: Duration,
    ) -> Result<(), ConsumerError> {
        self.commit_inner(Some(offsets.to_vec()), timeout)
    }

    fn commit_inner(
        &self,
        offsets: Option<Vec<(TopicPartition, OffsetAndMetadata)>>,
        timeout: Duration,
    ) -> Result<(), ConsumerError> {
        self.check_open()?;
        if self.inner.config.group_id.is_none() {
            return Err(ConsumerError::NoGroupId("commit"));
        }
        let offsets = self.snapshot(offsets);
        let (tx, rx) = mpsc::channel();
        if !self.inner.command(Command::Commit {
            offsets,
            timeout,
            reply: CommitReply::Wait(tx),
        }) {
            return Err(ConsumerError::Closed);
        }
        let r = rx
            .recv_timeout(timeout.saturating_add(Duration::from_secs(5)))
            .unwrap_or(Err(ConsumerError::Timeout {
                operation: "commit",
                after: timeout,
                last_error: None,
            }));
        self.run_commit_callbacks();
        r
    }

    /// Commits the positions of returned records without waiting; `callback` runs on this
    /// thread in a later `poll()`, `commit_sync()` or `close()`. Not retried (as in Java: a
    /// later commit would be overtaken by the retry).
    pub fn commit_async(
        &self,
        callback: impl FnOnce(Result<(), ConsumerError>) + Send + 'static,
    ) -> Result<(), ConsumerError> {
        self.commit_async_inner(None, Box::new(callback))
    }

    /// Commits these offsets without waiting.
    pub fn commit_async_offsets(
        &self,
        offsets: &[(TopicPartition, OffsetAndMetadata)],
        callback: impl FnOnce(Result<(), ConsumerError>) + Send + 'static,
    ) -> Result<(), ConsumerError> {
        self.commit_async_inner(Some(offsets.to_vec()), Box::new(callback))
    }

    fn commit_async_inner(
        &self,
        offsets: Option<Vec<(TopicPartition, OffsetAndMetadata)>>,
        callback: CommitCallback,
    ) -> Result<(), ConsumerError> {
        self.check_open()?;
        if self.inner.config.group_id.is_none() {
            return Err(ConsumerError::NoGroupId("commit"));
        }
        let offsets = self.snapshot(offsets);
        let reply = self.async_reply(callback);
        self.inner.command(Command::Commit {
            offsets,
            timeout: self.inner.config.default_api_timeout,
            reply,
        });
        Ok(())
    }

    /// What a commit call stores: the given offsets, or the positions of the records returned
    /// so far, as of this call (as Java's `commitSync()`/`commitAsync()`: a later `poll()`
    /// does not add to it).
    fn snapshot(&self, offsets: Option<Vec<(TopicPartition, OffsetAndMetadata)>>) -> CommitOffsets {
        let st = self.inner.shared.state.lock();
        CommitOffsets::App {
            offsets: offsets.unwrap_or_else(|| st.consumed_offsets()),
            epoch: st.checkpoint_epoch,
        }
    }

    fn async_reply(&self, callback: CommitCallback) -> CommitReply {
        let mut app = self.inner.app.lock();
        app.next_callback += 1;
        let id = app.next_callback;
        app.callbacks.insert(id, callback);
        CommitReply::Async(id)
    }

    /// Whether an async commit's callback has yet to run.
    fn commit_callbacks_pending(&self) -> bool {
        !self.inner.app.lock().callbacks.is_empty()
    }

    fn run_commit_callbacks(&self) {
        let done = std::mem::take(&mut self.inner.shared.state.lock().async_commits_done);
        for (id, r) in done {
            let cb = self.inner.app.lock().callbacks.remove(&id);
            if let Some(cb) = cb {
                cb(r);
            }
        }
    }

    /// The committed offsets of `partitions` (`None` where nothing is committed).
    pub fn committed(
        &self,
        partitions: &[TopicPartition],
        timeout: Duration,
    ) -> Result<Vec<(TopicPartition, Option<OffsetAndMetadata>)>, ConsumerError> {
        self.check_open()?;
        let (tx, rx) = mpsc::channel();
        if !self.inner.command(Command::Committed {
            partitions: partitions.to_vec(),
            timeout,
            reply: tx,
        }) {
            return Err(ConsumerError::Closed);
        }
        rx.recv_timeout(timeout.saturating_add(Duration::from_secs(5)))
            .unwrap_or(Err(ConsumerError::Timeout {
                operation: "committed",
                after: timeout,
                last_error: None,
            }))
            .map(|m| m.into_iter().collect())
    }

    // --- positions -------------------------------------------------------------------------

    /// Moves the position of an assigned partition: the next `poll()` returns records from
    /// `offset`.
    pub fn seek(&self, tp: &TopicPartition, offset: i64) -> Result<(), ConsumerError> {
        let mut st = self.inner.shared.state.lock();
        let p = st
            .assignment
            .get_mut(tp)
            .ok_or_else(|| ConsumerError::illegal(format!("seek(): {tp} is not assigned")))?;
        p.position = Some(offset);
        p.leader_epoch = None;
        p.reset = None;
        p.blocked = false;
        p.awaiting_validation = false;
        st.drop_buffered(tp);
        st.drop_position_errors(tp);
        drop(st);
        self.inner.wake();
        Ok(())
    }

    /// Moves positions to the first offset of each partition.
    pub fn seek_to_beginning(&self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.seek_reset(partitions, AutoOffsetReset::Earliest)
    }

    /// Moves positions to the end of each partition.
    pub fn seek_to_end(&self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.seek_reset(partitions, AutoOffsetReset::Latest)
    }

    fn seek_reset(
        &self,
        partitions: &[TopicPartition],
        to: AutoOffsetReset,
    ) -> Result<(), ConsumerError> {
        let mut st = self.inner.shared.state.lock();
        for tp in partitions {
            let p = st
                .assignment
                .get_mut(tp)
                .ok_or_else(|| ConsumerError::illegal(format!("seek: {tp} is not assigned")))?;
            p.position = None;
            p.reset = Some(to);
            p.blocked = false;
            p.awaiting_validation = false;
            st.drop_buffered(tp);
            st.drop_position_errors(tp);
        }
        drop(st);
        self.inner.wake();
        Ok(())
    }

    /// The offset of the next record `poll()` returns for `tp`, waiting (up to
    /// `default.api.timeout.ms`) for it to be known (committed offset, reset).
    pub fn position(&self, tp: &TopicPartition) -> Result<i64, ConsumerError> {
        let deadline = Instant::now() + self.inner.config.default_api_timeout;
        let mut st = self.inner.shared.state.lock();
        loop {
            let p = st.assignment.get(tp).ok_or_else(|| {
                ConsumerError::illegal(format!("position(): {tp} is not assigned"))
            })?;
            if let Some(pos) = p.position {
                return Ok(pos);
            }
            if p.blocked {
                return Err(ConsumerError::NoOffset(tp.clone()));
            }
            if Instant::now() >= deadline {
                return Err(ConsumerError::Timeout {
                    operation: "position",
                    after: self.inner.config.default_api_timeout,
                    last_error: None,
                });
            }
            self.inner.wake();
            self.inner.shared.cv.wait_until(&mut st, deadline);
        }
    }

    // --- flow control ----------------------------------------------------------------------

    /// Stops fetching `partitions` (each must be assigned, or nothing changes and the error
    /// names it): `poll()` returns none of their records until [`resume`](Self::resume), and
    /// records fetched before wait in the buffer. Positions and the group membership are
    /// untouched: a member that pauses everything stays in its group as long as it calls
    /// `poll()`. A partition that is revoked and assigned again comes back unpaused (as in
    /// Java); one kept through a cooperative rebalance stays paused.
    pub fn pause(&self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.set_paused(partitions, true, "pause()")
    }

    /// Fetches `partitions` again (each must be assigned); records fetched before the pause
    /// come first.
    pub fn resume(&self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.set_paused(partitions, false, "resume()")
    }

    /// The assigned partitions paused now.
    pub fn paused(&self) -> Vec<TopicPartition> {
        let st = self.inner.shared.state.lock();
        st.assignment
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    fn set_paused(
        &self,
        partitions: &[TopicPartition],
        on: bool,
        call: &str,
    ) -> Result<(), ConsumerError> {
        self.check_open()?;
        let mut st = self.inner.shared.state.lock();
        if let Some(tp) = partitions
            .iter()
            .find(|tp| !st.assignment.contains_key(*tp))
        {
            return Err(ConsumerError::illegal(format!(
                "{call}: {tp} is not assigned to this consumer"
            )));
        }
        for tp in partitions {
            if let Some(p) = st.assignment.get_mut(tp) {
                p.paused = on;
            }
        }
        drop(st);
        if !on {
            self.inner.shared.notify();
        }
        self.inner.wake();
        Ok(())
    }

    // --- close -----------------------------------------------------------------------------

    /// Commits (if auto-commit), tells the listener the partitions are revoked, leaves the
    /// group and closes every connection, within `timeout`. Later calls return at once.
    pub fn close(&self, timeout: Duration) -> Result<(), ConsumerError> {
        let Some(thread) = self.inner.thread.lock().take() else {
            return Ok(());
        };
        let deadline = deadline_after(Instant::now(), timeout);
        let (grouped, partitions) = {
            let st = self.inner.shared.state.lock();
            (
                !matches!(st.subscription, Subscription::None),
                st.assignment.keys().cloned().collect::<Vec<_>>(),
            )
        };
        tracing::info!(client_id = %self.inner.config.common.client_id, partitions = partitions.len(), "closing consumer");
        if grouped && !self.inner.shared.state.lock().checkpointing {
            self.give_up(&partitions, false, timeout);
        }
        {
            let mut st = self.inner.shared.state.lock();
            st.closed = true;
            st.clear_buffer();
        }
        self.inner.shared.notify();
        self.inner.command(Command::Close { deadline });
        let _ = thread.join();
        self.run_commit_callbacks();
        Ok(())
    }

    /// [`close`](Self::close) for async code: runs on a thread of its own (the close waits for
    /// the group coordinator and the I/O thread) and resolves with its result; a stream of
    /// this consumer then ends. Dropping the future does not stop the close.
    pub fn close_async(
        &self,
        timeout: Duration,
    ) -> crate::completion::Completion<Result<(), ConsumerError>> {
        let consumer = Consumer {
            inner: self.inner.clone(),
        };
        crate::completion::on_thread("kafka-consumer-close", move || consumer.close(timeout))
    }

    /// The consumer as a CRaC resource (to register in a context of your own when
    /// `crac.register=false`).
    pub fn as_resource(&self) -> Arc<dyn crac_api::Resource> {
        self.inner.clone()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.close(Duration::from_secs(30));
    }
}

/// What [`Consumer::poll_now`] found.
pub(crate) enum PollNow {
    /// Records (or a fetch error), taken as `poll()` takes them.
    Records(Result<ConsumerRecords, ConsumerError>),
    /// Nothing to take and nothing due: the waker is registered.
    Waiting,
    /// `poll()` must run (see [`Consumer::poll_now`]).
    PollDue,
}
