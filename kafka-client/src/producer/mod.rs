//! The producer: [`Producer`] (the API), [`config`] (Java-compatible settings),
//! `accumulator` (`RecordAccumulator`), `sender` (the I/O thread), [`partitioner`],
//! [`delivery`] (reports), `error` ([`ProduceError`], [`TimeoutError`]), [`transaction`],
//! `checkpoint` (the CRaC resource) and `metrics`.

mod accumulator;
mod async_api;
pub(crate) mod checkpoint;
pub mod config;
pub mod delivery;
mod error;
mod idempotence;
mod metrics;
pub mod partitioner;
mod producer_id;
mod record;
mod request;
mod sender;
pub mod transaction;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::accumulator::{AccumulatorConfig, NoCallback, RecordAccumulator};
pub use self::async_api::{Accepted, FlushFuture, SendFuture, ThreadFuture};
pub use self::config::{
    Acks, CheckpointTransactionPolicy, ConfigError, ProducerConfig, TransactionalIdPolicy,
};
pub use self::delivery::{Callback, DeliveryFuture};
pub use self::error::{CheckpointDrainError, ProduceError, TimeoutError};
use self::metrics::Counters;
pub use self::metrics::ProducerMetrics;
pub use self::record::{ProducerRecord, RecordMetadata};
use self::sender::{Command, Sender};
use self::transaction::{Call, TransactionManager};
pub use self::transaction::{
    TransactionAction, TransactionError, TransactionFuture, TransactionState,
};
use crate::consumer::{ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition};
use crate::network::checkpoint::CheckpointState;
use crate::network::{Event, NetworkClient, NetworkConfig};

static NEXT_CLIENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A Kafka producer. Cheap to clone (all clones share one sender thread); thread-safe.
///
/// ```no_run
/// use kafka_client::producer::{Producer, ProducerConfig, ProducerRecord};
/// use kafka_client::Header;
///
/// let producer = Producer::new(ProducerConfig::new("127.0.0.1:9092")?)?;
/// let headers = [Header::new("trace", b"abc")];
/// let report = producer.send(
///     ProducerRecord::new("events").key(b"user-1").value(b"hello").headers(&headers),
/// )?;
/// let md = report.wait()?; // or `report.await` in async code
/// println!("{}-{}@{}", md.topic, md.partition, md.offset);
/// producer.close(std::time::Duration::from_secs(30))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// By default the producer registers itself (weakly) in the global CRaC context at
/// [`crac_api::Priority::Network`]: before a checkpoint it stops accepting records
/// (`send()` waits), delivers everything it accepted, and closes every connection; after a
/// restore it re-bootstraps, takes a new producer id and goes on. `crac.register=false`
/// switches that off.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<ProducerInner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("client_id", &self.inner.config.common.client_id)
            .finish_non_exhaustive()
    }
}

pub(crate) struct ProducerInner {
    config: ProducerConfig,
    acc: Arc<RecordAccumulator>,
    commands: mpsc::Sender<Command>,
    events: mpsc::Sender<Event>,
    wake_pending: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Mutex<Option<JoinHandle<usize>>>,
    sender_thread: std::thread::ThreadId,
    checkpoint: CheckpointState,
    /// The transaction state (with `transactional.id`).
    txn: Option<Arc<TransactionManager>>,
    /// Registered at the application level so that the open transaction ends before the
    /// network-level resources (a consumer leaving its group) act; see `checkpoint`.
    txn_resource: Option<Arc<checkpoint::TransactionCheckpoint>>,
}

impl Producer {
    /// Starts a producer: validates the configuration and starts the sender thread. Nothing
    /// connects until the first record (or metadata request) needs it.
    pub fn new(mut config: ProducerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if config.common.client_id.is_empty() {
            config.common.client_id =
                format!("producer-{}", NEXT_CLIENT.fetch_add(1, Ordering::Relaxed));
        }
        let (events_tx, events_rx) = mpsc::channel();
        let (commands_tx, commands_rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let wake_pending = Arc::new(AtomicBool::new(false));
        let wake = {
            let tx = events_tx.clone();
            let pending = wake_pending.clone();
            Box::new(move || {
                if !pending.swap(true, Ordering::AcqRel) {
                    let _ = tx.send(Event::Wakeup);
                }
            })
        };
        let acc = Arc::new(RecordAccumulator::new(
            AccumulatorConfig {
                batch_size: config.batch_size,
                // Growth on only where it can take a batch past batch.size.
                grow_max: match config.batch_grow_max.min(config.max_request_size) {
                    g if g > config.batch_size => g,
                    _ => 0,
                },
                linger: config.linger,
                buffer_memory: config.buffer_memory,
                max_block: config.max_block,
                max_request_size: config.max_request_size,
                compression: config.compression,
                ignore_keys: config.partitioner_ignore_keys,
                transactional: config.transactional_id.is_some(),
            },
            counters.clone(),
            wake,
        ));
        let client = NetworkClient::new(
            NetworkConfig::new(&config.common, config.max_in_flight),
            events_tx.clone(),
        );
        let txn = config.transactional_id.as_deref().map(|id| {
            let tx = events_tx.clone();
            let pending = wake_pending.clone();
            let wake = Box::new(move || {
                if !pending.swap(true, Ordering::AcqRel) {
                    let _ = tx.send(Event::Wakeup);
                }
            });
            Arc::new(TransactionManager::new(id, config.max_block, wake))
        });
        let sender = Sender::new(
            config.clone(),
            acc.clone(),
            client,
            events_rx,
            commands_rx,
            counters.clone(),
            wake_pending.clone(),
            txn.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("kafka-producer-{}", config.common.client_id))
            .spawn({
                let acc = acc.clone();
                move || {
                    // Should the I/O thread panic, accepted records still get a report (their
                    // batches fail as they drop) and send() refuses new ones.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sender.run()))
                        .unwrap_or_else(|_| {
                            tracing::error!("kafka producer I/O thread panicked");
                            acc.close(Some(Arc::from("the producer's I/O thread panicked")));
                            acc.take_all()
                                .iter()
                                .map(|b| b.record_count())
                                .sum::<usize>()
                        })
                }
            })
            .map_err(|e| ConfigError {
                key: "client.id".into(),
                value: config.common.client_id.clone(),
                reason: format!("cannot start the sender thread: {e}"),
            })?;
        let sender_thread = thread.thread().id();
        let txn_resource = txn
            .as_ref()
            .map(|t| Arc::new(checkpoint::TransactionCheckpoint::new(t.clone(), &config)));
        let inner = Arc::new(ProducerInner {
            sender_thread,
            config,
            acc,
            commands: commands_tx,
            events: events_tx,
            wake_pending,
            counters,
            thread: Mutex::new(Some(thread)),
            checkpoint: CheckpointState::default(),
            txn_resource,
            txn,
        });
        if inner.config.common.crac_register {
            let ctx = crac_api::Core::global_context();
            if let Some(r) = &inner.txn_resource {
                ctx.register_with_priority(r, crac_api::Priority::Application);
            }
            ctx.register_with_priority(&inner, crac_api::Priority::Network);
        }
        tracing::info!(client_id = %inner.config.common.client_id, idempotence = inner.config.enable_idempotence, acks = %inner.config.acks, "producer started");
        Ok(Self { inner })
    }

    /// Starts a producer from Java-style `key=value` properties.
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        Self::new(ProducerConfig::from_properties(props)?)
    }

    /// The configuration in force (after validation).
    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// Accepts a record and returns its delivery report. Blocks (up to `max.block.ms`) while
    /// the topic's metadata is unknown, `buffer.memory` is full, or a checkpoint is running.
    /// The record is serialized before this returns; its buffers can be reused at once.
    pub fn send(&self, record: ProducerRecord<'_>) -> Result<DeliveryFuture, ProduceError> {
        self.inner.check_transaction()?;
        match self.inner.acc.append::<NoCallback>(&record, None)? {
            Some(report) => Ok(report),
            None => unreachable!("append returns the report when there is no callback"),
        }
    }

    /// Like [`send`](Self::send), with a callback run on the producer's I/O thread once the
    /// record is acknowledged or has failed. When `send_with_callback` itself returns an error,
    /// the callback is not called. Callbacks of the same closure type are stored unboxed in
    /// their batch: no allocation per record.
    pub fn send_with_callback(
        &self,
        record: ProducerRecord<'_>,
        callback: impl FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    ) -> Result<(), ProduceError> {
        self.inner.check_transaction()?;
        self.inner.acc.append(&record, Some(callback)).map(drop)
    }

    /// Sends everything accepted so far at once (ignoring `linger.ms`) and blocks until each
    /// of those records is acknowledged or failed.
    pub fn flush(&self) -> Result<(), TimeoutError> {
        self.flush_until(None, Duration::MAX)
    }

    /// [`flush`](Self::flush) with a bound.
    pub fn flush_timeout(&self, timeout: Duration) -> Result<(), TimeoutError> {
        self.flush_until(Instant::now().checked_add(timeout), timeout)
    }

    fn flush_until(
        &self,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> Result<(), TimeoutError> {
        let id = self.inner.acc.begin_flush();
        self.inner.wake();
        self.inner
            .acc
            .await_flush(id, deadline)
            .map_err(|pending| TimeoutError {
                operation: "flush",
                after: timeout,
                pending_records: pending,
            })
    }

    /// Stops accepting records, delivers what was accepted within `timeout`, fails the rest
    /// with [`ProduceError::Closed`], and stops the I/O thread. Every accepted record gets its
    /// report either way. Later calls (and clones) return at once.
    pub fn close(&self, timeout: Duration) -> Result<(), TimeoutError> {
        self.inner.close(timeout)
    }

    /// Counters: records sent and failed, retries, requests in flight, buffer bytes in use.
    pub fn metrics(&self) -> ProducerMetrics {
        self.inner.counters.snapshot()
    }

    /// Records accepted and not yet acknowledged or failed.
    pub fn pending_records(&self) -> usize {
        self.inner.acc.incomplete_records()
    }

    /// The producer as a CRaC resource (to register in a context of your own when
    /// `crac.register=false`). A transactional producer's resource also ends the open
    /// transaction before it drains (see [`transaction_resource`](Self::transaction_resource)
    /// for doing that earlier, at the application level).
    pub fn as_resource(&self) -> Arc<dyn crac_api::Resource> {
        self.inner.clone()
    }

    /// A transactional producer's second resource: ends the open transaction (by
    /// `checkpoint.transaction.policy`) and keeps new ones from beginning until the restore.
    /// Registered by default at [`crac_api::Priority::Application`], before every
    /// network-level resource, so that the transaction commits while its consumer is still a
    /// member of its group.
    pub fn transaction_resource(&self) -> Option<Arc<dyn crac_api::Resource>> {
        self.inner
            .txn_resource
            .clone()
            .map(|r| r as Arc<dyn crac_api::Resource>)
    }

    // --- transactions ----------------------------------------------------------------------

    fn transactions(
        &self,
        operation: &'static str,
    ) -> Result<&Arc<TransactionManager>, TransactionError> {
        if self.inner.acc.is_closed() {
            return Err(TransactionError::Closed { operation });
        }
        self.inner
            .txn
            .as_ref()
            .ok_or(TransactionError::NotTransactional { operation })
    }

    /// What a commit does once the state allows it: send every record now (ignoring
    /// `linger.ms`).
    fn flush_now(&self) -> impl FnOnce() + Send + 'static {
        let inner = self.inner.clone();
        move || {
            inner.acc.begin_flush();
        }
    }

    /// Java's `initTransactions()`: takes a producer id and epoch for `transactional.id`.
    /// The coordinator first completes what an earlier producer with this id left open
    /// (aborting its transaction) and fences that producer for good. Call it once, before
    /// the first transaction; blocks up to `max.block.ms` (a
    /// [`TransactionError::Timeout`] leaves it going: call it again). A restored copy takes
    /// its producer id again by itself.
    pub fn init_transactions(&self) -> Result<(), TransactionError> {
        let t = self.transactions("init_transactions()")?;
        t.wait(t.init_call())
    }

    /// Java's `beginTransaction()`: records sent from now on belong to a new transaction.
    /// Waits (up to `max.block.ms`) while a checkpoint is under way and while a restored
    /// copy takes its producer id.
    pub fn begin_transaction(&self) -> Result<(), TransactionError> {
        self.transactions("begin_transaction()")?.wait(Call::Begin)
    }

    /// Java's `sendOffsetsToTransaction(offsets, groupMetadata)`: commits a consumer's
    /// positions (the offset of the next record to read, per partition) with the open
    /// transaction. `group` is the consumer's [`group_metadata()`](crate::Consumer::group_metadata):
    /// the group coordinator refuses the offsets of a member that no longer owns its
    /// partitions (KIP-447), which keeps a zombie, or a restored copy holding records read
    /// before its checkpoint, from committing them. Blocks until the offsets are with the
    /// group coordinator.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, OffsetAndMetadata)],
        group: &ConsumerGroupMetadata,
    ) -> Result<(), TransactionError> {
        let t = self.transactions("send_offsets_to_transaction()")?;
        t.wait(t.send_offsets_call(offsets, group)?)
    }

    /// Java's `commitTransaction()`: sends every record of the transaction at once (ignoring
    /// `linger.ms`), waits for each one's answer, then commits. A record that failed makes it
    /// fail with [`TransactionError::Abortable`]: abort, and do the work again.
    pub fn commit_transaction(&self) -> Result<(), TransactionError> {
        let t = self.transactions("commit_transaction()")?;
        t.wait(t.commit_call(self.flush_now()))
    }

    /// Java's `abortTransaction()`: records not sent yet are dropped (their reports fail
    /// with [`TransactionError::Aborted`]), the rest are answered, then the transaction is
    /// aborted: `read_committed` consumers never see its records.
    pub fn abort_transaction(&self) -> Result<(), TransactionError> {
        let t = self.transactions("abort_transaction()")?;
        t.wait(t.abort_call())
    }

    /// Where the transactional producer stands (`None` without `transactional.id`).
    pub fn transaction_state(&self) -> Option<TransactionState> {
        self.inner.txn.as_ref().map(|t| t.state())
    }

    /// The `transactional.id` in use: the configured one, or a restored copy's own.
    pub fn transactional_id(&self) -> Option<String> {
        self.inner
            .txn
            .as_ref()
            .map(|t| t.transactional_id().to_string())
    }
}

impl ProducerInner {
    /// A transactional producer takes records only inside a transaction.
    fn check_transaction(&self) -> Result<(), ProduceError> {
        match &self.txn {
            Some(t) => t.check_send().map_err(ProduceError::Transaction),
            None => Ok(()),
        }
    }

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

    fn close(&self, timeout: Duration) -> Result<(), TimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        if std::thread::current().id() == self.sender_thread {
            // Called from a delivery callback: the I/O thread cannot wait for itself. Ask it
            // to close and return; it finishes after the callback.
            self.acc.close(None);
            self.command(Command::Close { deadline });
            return Ok(());
        }
        let Some(thread) = self.thread.lock().take() else {
            return Ok(());
        };
        let pending = self.acc.incomplete_records();
        tracing::info!(client_id = %self.config.common.client_id, pending, timeout_ms = timeout.as_millis() as u64, "closing producer");
        self.acc.close(None);
        // A checkpoint gate left closed must not keep the close from draining.
        self.acc.resume();
        self.command(Command::Close { deadline });
        let failed = thread.join().unwrap_or(0);
        if failed > 0 {
            return Err(TimeoutError {
                operation: "close",
                after: timeout,
                pending_records: failed,
            });
        }
        Ok(())
    }
}

impl Drop for ProducerInner {
    fn drop(&mut self) {
        // Dropping without close(): deliver within delivery.timeout.ms, as records would
        // expire by then anyway.
        let _ = self.close(self.config.delivery_timeout);
    }
}
