//! The application's calls (`init_transactions`, `begin_transaction`,
//! `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`) as [`Call`]s: one
//! step function decides, under the lock, whether a call is over; the blocking methods wait
//! for the next change on the condition variable (up to `max.block.ms`), the async ones park
//! their task, which every change wakes. Both follow the same rules because they run the same
//! steps.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use super::{Locked, OpKind, SendOffsets, TransactionError, TransactionManager, TransactionState};
use crate::consumer::{ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition};

/// Checks the state and returns the operation to hand the sender (`None`: done at once).
type Start = Box<dyn FnOnce(&mut Locked<'_>) -> Result<Option<OpKind>, TransactionError> + Send>;

/// One application call, from its start to its outcome.
pub(crate) enum Call {
    /// `begin_transaction()`: no operation; waits only while a checkpoint or a restored
    /// copy's re-init holds transactions back.
    Begin,
    /// A call that hands the sender an operation and waits for its outcome.
    Op {
        method: &'static str,
        start: Option<Start>,
        /// The operation waited for, once started (or found going: a call made again after
        /// it timed out, or after its future was dropped, waits for the same operation).
        id: Option<u64>,
    },
}

impl Call {
    fn op(method: &'static str, start: Start) -> Self {
        Call::Op {
            method,
            start: Some(start),
            id: None,
        }
    }

    /// The method's name, for errors.
    pub fn method(&self) -> &'static str {
        match self {
            Call::Begin => "begin_transaction()",
            Call::Op { method, .. } => method,
        }
    }
}

/// The calls, made.
impl TransactionManager {
    /// `init_transactions()`: a producer id and epoch for the `transactional.id` (which also
    /// aborts what an earlier producer with that id left open, and fences it).
    pub fn init_call(&self) -> Call {
        Call::op(
            OpKind::Init.method(),
            Box::new(|core| {
                if let Some(e) = Self::refusal(core) {
                    return Err(e);
                }
                match core.state {
                    TransactionState::Uninitialized => {
                        core.set_state(TransactionState::Initializing);
                        Ok(Some(OpKind::Init))
                    }
                    _ => Err(core.invalid(
                        "init_transactions()",
                        "call it once, before the first transaction (a restored copy takes its producer id by itself)",
                    )),
                }
            }),
        )
    }

    /// `send_offsets_to_transaction()`: the consumer's offsets committed with the transaction.
    pub fn send_offsets_call(
        &self,
        offsets: &[(TopicPartition, OffsetAndMetadata)],
        group: &ConsumerGroupMetadata,
    ) -> Result<Call, TransactionError> {
        const METHOD: &str = "send_offsets_to_transaction()";
        let Some(group_id) = group.group_id.clone() else {
            return Err(TransactionError::InvalidState {
                operation: METHOD,
                state: self.state(),
                hint: "the consumer group metadata has no group.id",
            });
        };
        let work = Arc::new(SendOffsets {
            group_id,
            generation_id: group.generation_id,
            member_id: group.member_id.clone(),
            group_instance_id: group.group_instance_id.clone(),
            offsets: offsets.to_vec(),
        });
        Ok(Call::op(
            METHOD,
            Box::new(move |core| {
                Self::in_transaction(core, METHOD)?;
                Ok((!work.offsets.is_empty()).then_some(OpKind::SendOffsets(work)))
            }),
        ))
    }

    /// `commit_transaction()`. `flush` is called once the state allows the commit, to send
    /// every record now (ignoring `linger.ms`).
    pub fn commit_call(&self, flush: impl FnOnce() + Send + 'static) -> Call {
        const METHOD: &str = "commit_transaction()";
        Call::op(
            METHOD,
            Box::new(move |core| {
                Self::in_transaction(core, METHOD)?;
                core.set_state(TransactionState::Committing);
                flush();
                Ok(Some(OpKind::Commit))
            }),
        )
    }

    /// `abort_transaction()`.
    pub fn abort_call(&self) -> Call {
        const METHOD: &str = "abort_transaction()";
        Call::op(
            METHOD,
            Box::new(|core| {
                if core.state == TransactionState::FatalError {
                    return Err(core.error.clone().expect("fatal state has its error"));
                }
                if core.abort_owed.take().is_some() {
                    // The checkpoint aborted it already.
                    return Ok(None);
                }
                match core.state {
                    TransactionState::InTransaction | TransactionState::AbortableError => {
                        core.set_state(TransactionState::Aborting);
                        Ok(Some(OpKind::Abort))
                    }
                    _ => Err(core.invalid(METHOD, "no transaction is open")),
                }
            }),
        )
    }
}

/// What the calls on an open transaction check first.
impl TransactionManager {
    /// The transaction is open and may go on (not fatal, aborted or abortable).
    fn in_transaction(core: &Locked<'_>, method: &'static str) -> Result<(), TransactionError> {
        if let Some(e) = Self::refusal(core) {
            return Err(e);
        }
        if core.state != TransactionState::InTransaction {
            return Err(core.invalid(method, "call begin_transaction() first"));
        }
        Ok(())
    }
}

/// The calls, driven: blocking or as a future.
impl TransactionManager {
    /// Runs `call` to its outcome on this thread, waiting up to `max.block.ms` (a
    /// [`TransactionError::Timeout`] leaves its operation going: call it again).
    pub fn wait(&self, mut call: Call) -> Result<(), TransactionError> {
        let deadline = self.deadline();
        let mut core = self.lock();
        loop {
            if let Some(outcome) = self.step(&mut core, &mut call) {
                return outcome;
            }
            if !core.wait_until(deadline) {
                return Err(self.timeout(call.method()));
            }
        }
    }

    /// Takes `call` as far as it goes now; `Pending` registers `waker` for the next change.
    pub fn poll_call(&self, call: &mut Call, waker: &Waker) -> Poll<Result<(), TransactionError>> {
        let mut core = self.lock();
        match self.step(&mut core, call) {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                // Not through `DerefMut`: registering is no change others must hear of.
                let tasks = &mut core.core.tasks;
                if !tasks.iter().any(|w| w.will_wake(waker)) {
                    tasks.push(waker.clone());
                }
                Poll::Pending
            }
        }
    }

    /// One step of `call` under the lock: its outcome, or `None` while it must wait.
    fn step(&self, core: &mut Locked<'_>, call: &mut Call) -> Option<Result<(), TransactionError>> {
        match call {
            Call::Begin => Self::begin_step(core),
            Call::Op { method, start, id } => {
                let id = match *id {
                    Some(id) => id,
                    None => match self.start_step(core, method, start)? {
                        Ok(started) => *id.insert(started),
                        Err(done) => return Some(done),
                    },
                };
                Self::outcome_step(core, method, id)
            }
        }
    }

    /// Starts the call's operation, or finds the same call's operation going. `None` while
    /// an operation of the producer's own (the re-init after a restore, the checkpoint's
    /// abort) must finish first; `Some(Err(outcome))` when the call is over at once.
    fn start_step(
        &self,
        core: &mut Locked<'_>,
        method: &'static str,
        start: &mut Option<Start>,
    ) -> Option<Result<u64, Result<(), TransactionError>>> {
        match &core.op {
            Some(op) if op.internal => None,
            Some(op) if op.kind.method() == method => Some(Ok(op.id)),
            Some(op) => Some(Err(Err(TransactionError::InvalidState {
                operation: method,
                state: core.state,
                hint: match op.kind {
                    OpKind::Init => "init_transactions() timed out earlier: call it again",
                    OpKind::SendOffsets(_) => {
                        "send_offsets_to_transaction() timed out earlier: call it again"
                    }
                    OpKind::Commit => "commit_transaction() timed out earlier: call it again",
                    OpKind::Abort => "abort_transaction() timed out earlier: call it again",
                },
            }))),
            None => {
                let start = start.take().expect("a call starts once");
                Some(match start(core) {
                    Err(e) => Err(Err(e)),
                    Ok(None) => Err(Ok(())),
                    Ok(Some(kind)) => {
                        let id = core.start_op(kind, false);
                        (self.wake)();
                        Ok(id)
                    }
                })
            }
        }
    }

    /// The outcome of operation `id` once the sender delivered it.
    fn outcome_step(
        core: &mut Locked<'_>,
        method: &'static str,
        id: u64,
    ) -> Option<Result<(), TransactionError>> {
        if let Some(op) = core.op.as_mut().filter(|o| o.id == id)
            && let Some(outcome) = op.outcome.take()
        {
            core.op = None;
            return Some(outcome);
        }
        if core.op.as_ref().is_none_or(|o| o.id != id) {
            return Some(Err(Self::refusal(core).unwrap_or_else(|| {
                core.invalid(method, "the operation was cancelled")
            })));
        }
        None
    }

    /// `begin_transaction()`: at once, but while a checkpoint is under way or a restored copy
    /// takes its producer id.
    fn begin_step(core: &mut Locked<'_>) -> Option<Result<(), TransactionError>> {
        const METHOD: &str = "begin_transaction()";
        if let Some(e) = Self::refusal(core) {
            return Some(Err(e));
        }
        let internal_op = core.op.as_ref().is_some_and(|o| o.internal);
        Some(match core.state {
            TransactionState::Ready if !core.gate_closed && !internal_op => {
                core.started = false;
                core.bump_epoch = false;
                core.set_state(TransactionState::InTransaction);
                core.mgr.begun.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            TransactionState::Ready | TransactionState::Initializing
                if core.gate_closed || internal_op =>
            {
                return None;
            }
            TransactionState::Uninitialized => {
                Err(core.invalid(METHOD, "call init_transactions() first"))
            }
            TransactionState::Initializing => Err(core.invalid(
                METHOD,
                "init_transactions() timed out earlier: call it again",
            )),
            _ => Err(core.invalid(METHOD, "a transaction is open: commit or abort it first")),
        })
    }
}

/// A transactional call as a future: [`Producer::init_transactions_async`] and its siblings.
/// It parks its task while the call waits (for the coordinator's answer, a checkpoint's end, a
/// restored copy's re-init); the producer's I/O thread wakes it. Not bounded by
/// `max.block.ms`: bound it with the runtime's timeout. Dropped before its outcome, the
/// operation goes on, and the same call made again waits for it (as a blocking call that
/// timed out).
///
/// [`Producer::init_transactions_async`]: crate::Producer::init_transactions_async
#[must_use = "futures do nothing unless polled"]
pub struct TransactionFuture {
    state: FutureState,
}

enum FutureState {
    Calling(Arc<TransactionManager>, Call),
    Failed(Option<TransactionError>),
}

impl TransactionFuture {
    pub(crate) fn new(mgr: Arc<TransactionManager>, call: Call) -> Self {
        TransactionFuture {
            state: FutureState::Calling(mgr, call),
        }
    }

    pub(crate) fn failed(e: TransactionError) -> Self {
        TransactionFuture {
            state: FutureState::Failed(Some(e)),
        }
    }
}

impl std::future::Future for TransactionFuture {
    type Output = Result<(), TransactionError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            FutureState::Calling(mgr, call) => mgr.poll_call(call, cx.waker()),
            FutureState::Failed(e) => Poll::Ready(Err(e.take().expect("polled after completion"))),
        }
    }
}
