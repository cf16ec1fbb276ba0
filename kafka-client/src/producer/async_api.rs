//! The producer for async code: `send_async` awaits buffer space (and metadata, and the end of
//! a checkpoint) by parking its task, never a runtime's thread; `flush_async` awaits the
//! completions; `close_async` runs the close on a thread of its own. Runtime-agnostic: the
//! tasks are woken by the producer's own I/O thread, so any executor works and no call hides a
//! `block_on`.
//!
//! A `send_async` whose record is accepted at once (the common case) costs what `send` costs;
//! one that must wait copies its record into the future, which holds it until it is accepted.
//! Dropping the future before that sends nothing. Across a checkpoint it behaves as a waiting
//! `send()`: in the original it goes on; in a restored copy a send caught waiting fails with
//! [`ProduceError::RestoredWhileWaiting`] (each copy would otherwise send the same record).
//! Unlike `send()`, it is not bounded by `max.block.ms`: bound it with the runtime's timeout
//! (`tokio::time::timeout`), which drops it, sending nothing.
//!
//! Transactions: `init_transactions_async` and its siblings return a [`TransactionFuture`]
//! that runs the blocking call's steps. A transactional record belongs to the transaction it
//! was sent in: one still waiting to be accepted when that transaction ends is refused
//! (await [`SendFuture::accepted`] before committing).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::accumulator::{Append, NoCallback, Wait};
use super::transaction::{Call, TransactionError, TransactionFuture, TransactionManager};
use super::{
    DeliveryFuture, ProduceError, Producer, ProducerInner, ProducerRecord, RecordMetadata,
    TimeoutError,
};
use crate::completion::{Completion, on_thread};
use crate::consumer::{ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition};
use crate::protocol::record::Header;

/// A record owned by a waiting [`SendFuture`].
struct OwnedRecord {
    topic: String,
    partition: Option<i32>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Option<i64>,
}

impl OwnedRecord {
    fn of(r: &ProducerRecord<'_>) -> Self {
        OwnedRecord {
            topic: r.topic.to_owned(),
            partition: r.partition,
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect(),
            timestamp: r.timestamp,
        }
    }

    /// Appends it (borrowed for the call).
    fn append(&self, inner: &ProducerInner, wait: &mut Wait<'_>) -> Result<Append, ProduceError> {
        let headers: Vec<Header<'_>> = self
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        let rec = ProducerRecord {
            topic: &self.topic,
            partition: self.partition,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &headers,
            timestamp: self.timestamp,
        };
        inner.acc.append_with::<NoCallback>(&rec, None, wait)
    }
}

/// What a waiting record must still match to be accepted.
struct Admission {
    /// The restore epoch when it was sent: a restored copy does not send it.
    epoch: u64,
    /// The transaction it was sent in (transactional producers): accepted only into that one.
    transaction: Option<u64>,
}

enum SendState {
    /// Not accepted yet: the producer, the record, the restore epoch of the first attempt.
    Waiting(Arc<ProducerInner>, Box<OwnedRecord>, Admission),
    /// Accepted: its delivery report.
    Delivering(DeliveryFuture),
    /// Failed before it was accepted.
    Failed(Option<ProduceError>),
}

/// The future of [`Producer::send_async`]: resolves with the record's delivery report.
#[must_use = "a record is sent only once its future is polled (or accepted at once)"]
pub struct SendFuture {
    state: SendState,
}

impl SendFuture {
    /// Whether the record is accepted (in the producer's buffer, to be sent whatever happens
    /// to this future).
    pub fn is_accepted(&self) -> bool {
        matches!(self.state, SendState::Delivering(_))
    }

    /// A future that resolves once the record is accepted, with its delivery report (itself a
    /// future): for sending in order, one record accepted before the next is sent, while the
    /// reports are awaited later.
    pub fn accepted(self) -> Accepted {
        Accepted(Some(self))
    }

    /// Tries to get the record accepted; `Pending` with the task registered when it must wait.
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let SendState::Waiting(inner, rec, admission) = &self.state {
            let mut wait = Wait::Task {
                waker: Some(cx.waker()),
                epoch: admission.epoch,
            };
            let appended = match (&inner.txn, admission.transaction) {
                (Some(t), Some(begun)) => t
                    .check_send_in(begun)
                    .map_err(ProduceError::Transaction)
                    .and_then(|()| rec.append(inner, &mut wait)),
                _ => rec.append(inner, &mut wait),
            };
            self.state = match appended {
                Ok(Append::Pending) => return Poll::Pending,
                Ok(Append::Done(Some(report))) => SendState::Delivering(report),
                Ok(Append::Done(None)) => unreachable!("no callback: a report"),
                Err(e) => SendState::Failed(Some(e)),
            };
        }
        Poll::Ready(())
    }
}

/// The future of [`SendFuture::accepted`].
#[must_use = "a record is sent only once its future is polled (or accepted at once)"]
pub struct Accepted(Option<SendFuture>);

impl Future for Accepted {
    type Output = Result<DeliveryFuture, ProduceError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let f = self.0.as_mut().expect("polled after completion");
        if f.poll_accept(cx).is_pending() {
            return Poll::Pending;
        }
        match self.0.take().expect("present").state {
            SendState::Delivering(report) => Poll::Ready(Ok(report)),
            SendState::Failed(e) => Poll::Ready(Err(e.expect("an error once"))),
            SendState::Waiting(..) => unreachable!("accepted or failed"),
        }
    }
}

impl Future for SendFuture {
    type Output = Result<RecordMetadata, ProduceError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.poll_accept(cx).is_pending() {
            return Poll::Pending;
        }
        match &mut self.state {
            SendState::Delivering(report) => Pin::new(report).poll(cx),
            SendState::Failed(e) => Poll::Ready(Err(e.take().expect("polled after completion"))),
            SendState::Waiting(..) => unreachable!("handled above"),
        }
    }
}

/// The future of [`Producer::flush_async`].
#[must_use = "futures do nothing unless polled"]
pub struct FlushFuture {
    inner: Arc<ProducerInner>,
    id: u64,
}

impl Future for FlushFuture {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.inner.acc.poll_flush(self.id, cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// A result computed on a thread of its own, as a future ([`Producer::close_async`]).
pub type ThreadFuture<T> = Completion<T>;

impl Producer {
    /// [`send`](Self::send) for async code: resolves with the delivery report. Waits for
    /// buffer space, metadata or a checkpoint's end by parking the task, never its thread;
    /// dropping the future before the record is accepted sends nothing (see the module
    /// documentation for checkpoints and for `max.block.ms`).
    pub fn send_async(&self, record: ProducerRecord<'_>) -> SendFuture {
        if let Err(e) = self.inner.check_transaction() {
            return SendFuture {
                state: SendState::Failed(Some(e)),
            };
        }
        let admission = Admission {
            epoch: crac_api::restore_epoch(),
            transaction: self.inner.txn.as_ref().map(|t| t.begun()),
        };
        let epoch = admission.epoch;
        // Accepted at once (the common case): no copy of the record.
        let mut first = Wait::Task { waker: None, epoch };
        let state = match self
            .inner
            .acc
            .append_with::<NoCallback>(&record, None, &mut first)
        {
            Ok(Append::Done(Some(report))) => SendState::Delivering(report),
            Ok(Append::Done(None)) => unreachable!("no callback: a report"),
            Ok(Append::Pending) => SendState::Waiting(
                self.inner.clone(),
                Box::new(OwnedRecord::of(&record)),
                admission,
            ),
            Err(e) => SendState::Failed(Some(e)),
        };
        SendFuture { state }
    }

    /// [`flush`](Self::flush) for async code: resolves once every record accepted so far is
    /// acknowledged or failed (bound it with the runtime's timeout).
    pub fn flush_async(&self) -> FlushFuture {
        let id = self.inner.acc.begin_flush();
        self.inner.wake();
        FlushFuture {
            inner: self.inner.clone(),
            id,
        }
    }

    /// [`close`](Self::close) for async code: the close runs on a thread of its own (it joins
    /// the producer's I/O thread) and the future resolves with its result.
    pub fn close_async(&self, timeout: Duration) -> ThreadFuture<Result<(), TimeoutError>> {
        let inner = self.inner.clone();
        on_thread("kafka-producer-close", move || inner.close(timeout))
    }
}

/// Transactions for async code: the calls of [`Producer::init_transactions`] and its siblings
/// as [`TransactionFuture`]s, under the same rules (see there for a future that is dropped).
impl Producer {
    /// [`init_transactions`](Self::init_transactions) as a future.
    pub fn init_transactions_async(&self) -> TransactionFuture {
        self.transaction_future("init_transactions()", |t| Ok(t.init_call()))
    }

    /// [`begin_transaction`](Self::begin_transaction) as a future: ready at once but while a
    /// checkpoint is under way or a restored copy takes its producer id.
    pub fn begin_transaction_async(&self) -> TransactionFuture {
        self.transaction_future("begin_transaction()", |_| Ok(Call::Begin))
    }

    /// [`send_offsets_to_transaction`](Self::send_offsets_to_transaction) as a future.
    pub fn send_offsets_to_transaction_async(
        &self,
        offsets: &[(TopicPartition, OffsetAndMetadata)],
        group: &ConsumerGroupMetadata,
    ) -> TransactionFuture {
        self.transaction_future("send_offsets_to_transaction()", |t| {
            t.send_offsets_call(offsets, group)
        })
    }

    /// [`commit_transaction`](Self::commit_transaction) as a future.
    pub fn commit_transaction_async(&self) -> TransactionFuture {
        let flush = self.flush_now();
        self.transaction_future("commit_transaction()", |t| Ok(t.commit_call(flush)))
    }

    /// [`abort_transaction`](Self::abort_transaction) as a future.
    pub fn abort_transaction_async(&self) -> TransactionFuture {
        self.transaction_future("abort_transaction()", |t| Ok(t.abort_call()))
    }

    fn transaction_future(
        &self,
        operation: &'static str,
        call: impl FnOnce(&TransactionManager) -> Result<Call, TransactionError>,
    ) -> TransactionFuture {
        match self
            .transactions(operation)
            .and_then(|t| Ok((t.clone(), call(t)?)))
        {
            Ok((t, call)) => TransactionFuture::new(t, call),
            Err(e) => TransactionFuture::failed(e),
        }
    }
}
