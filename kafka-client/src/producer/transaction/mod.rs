//! Transactions (Java's `TransactionManager`): the state machine shared by the application's
//! calls and the sender thread, and what a checkpoint does with it.
//!
//! The application's calls (`init_transactions`, `begin_transaction`,
//! `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`) change the state
//! here and, but for `begin`, hand the sender thread an operation and wait (up to
//! `max.block.ms`) for its outcome; the sender thread (`io`) talks to the transaction and
//! group coordinators and completes it. One operation at a time: a call that timed out leaves
//! its operation going, and the same call made again waits for it, as in Java. The calls are
//! steps ([`calls`]) that a blocking method and a future drive alike.
//!
//! Errors are sorted as Java sorts them: fencing (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`),
//! `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `INVALID_TXN_STATE` and answers the client cannot
//! read are fatal (close the producer); a failed record, a consumer group that moved on,
//! a lost producer id and the like make the transaction abortable (abort it, retry the
//! work); coordinator moves and loads are retried. See [`TransactionError::action`].
//!
//! A checkpoint (`TransactionManager::checkpoint_begin`) closes a gate so no transaction
//! begins, then waits for the open one to end or aborts it (`checkpoint.transaction.policy`);
//! after a restore the producer takes a producer id again under the restored copy's
//! `transactional.id` (`TransactionManager::restored`).

mod calls;
pub(super) mod error;
pub(crate) mod io;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

pub(crate) use self::calls::Call;
pub use self::calls::TransactionFuture;
pub use self::error::{TransactionAction, TransactionError, TransactionState};
use super::config::CheckpointTransactionPolicy;
use crate::consumer::{OffsetAndMetadata, TopicPartition};
use crate::protocol::ErrorCode;

/// Offsets to commit in the open transaction, with the consumer group they belong to.
#[derive(Debug, Clone)]
pub(crate) struct SendOffsets {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub offsets: Vec<(TopicPartition, OffsetAndMetadata)>,
}

/// What an operation asks of the sender thread.
#[derive(Debug, Clone)]
pub(crate) enum OpKind {
    /// FindCoordinator, then InitProducerId with the `transactional.id`.
    Init,
    /// AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator.
    SendOffsets(Arc<SendOffsets>),
    /// Every record delivered, then EndTxn(commit).
    Commit,
    /// Unsent records dropped, the rest delivered, then EndTxn(abort) (and InitProducerId
    /// with the current id and epoch when a new epoch is needed).
    Abort,
}

impl OpKind {
    fn method(&self) -> &'static str {
        match self {
            OpKind::Init => "init_transactions()",
            OpKind::SendOffsets(_) => "send_offsets_to_transaction()",
            OpKind::Commit => "commit_transaction()",
            OpKind::Abort => "abort_transaction()",
        }
    }
}

/// An operation the sender thread works on.
#[derive(Debug)]
pub(crate) struct Op {
    pub id: u64,
    pub kind: OpKind,
    /// Started by the producer itself (the re-init after a restore, the checkpoint's abort):
    /// nobody waits for its outcome; it goes away when done.
    pub internal: bool,
    outcome: Option<Result<(), TransactionError>>,
}

/// The state, under one lock.
#[derive(Debug)]
pub(crate) struct Core {
    /// The `transactional.id` in use (a restored copy may have another one).
    pub id: Arc<str>,
    state: TransactionState,
    /// The abortable or fatal error behind `AbortableError` / `FatalError`.
    pub error: Option<TransactionError>,
    /// The abort must take a new epoch afterwards (InitProducerId with the current id and
    /// epoch, KIP-360): sequence numbers of some partition are no longer known.
    pub bump_epoch: bool,
    /// The coordinator lost the producer id's mapping: EndTxn would be refused, so the abort
    /// goes straight to InitProducerId.
    pub skip_end_txn: bool,
    /// Partitions or offsets were added: the coordinator knows the transaction, and ending
    /// it takes an EndTxn.
    pub started: bool,
    pub op: Option<Op>,
    next_op: u64,
    /// A checkpoint is under way: no transaction begins.
    gate_closed: bool,
    /// The checkpoint aborted the application's transaction: its next call on it says so,
    /// and its `abort_transaction()` then succeeds at once.
    abort_owed: Option<TransactionError>,
    /// Tasks of the async calls waiting for a change (woken with the condition variable).
    tasks: Vec<Waker>,
}

impl Core {
    pub fn state(&self) -> TransactionState {
        self.state
    }

    /// Hands the sender thread a new operation; returns its id.
    fn start_op(&mut self, kind: OpKind, internal: bool) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        self.op = Some(Op {
            id,
            kind,
            internal,
            outcome: None,
        });
        id
    }

    /// The operation the sender should work on, if any is waiting for it.
    pub fn pending_op(&self) -> Option<(u64, &OpKind)> {
        self.op
            .as_ref()
            .filter(|o| o.outcome.is_none())
            .map(|o| (o.id, &o.kind))
    }

    /// Whether a transaction is open or being ended (the checkpoint waits for these).
    fn transaction_open(&self) -> bool {
        matches!(
            self.state,
            TransactionState::InTransaction
                | TransactionState::Committing
                | TransactionState::Aborting
                | TransactionState::AbortableError
        )
    }

    fn abortable_error(
        &self,
        reason: impl Into<Arc<str>>,
        code: Option<ErrorCode>,
    ) -> TransactionError {
        TransactionError::Abortable {
            transactional_id: self.id.clone(),
            reason: reason.into(),
            code,
        }
    }

    fn invalid(&self, operation: &'static str, hint: &'static str) -> TransactionError {
        TransactionError::InvalidState {
            operation,
            state: self.state,
            hint,
        }
    }
}

/// The transaction state shared by the application's calls and the sender thread.
pub(crate) struct TransactionManager {
    core: Mutex<Core>,
    changed: Condvar,
    /// `core.state`, readable without the lock (`send()` checks it for every record).
    fast_state: AtomicU8,
    /// Transactions begun so far: a record that waited to be accepted belongs to the one it
    /// was sent in, or to none.
    begun: AtomicU64,
    wake: Box<dyn Fn() + Send + Sync>,
    max_block: Duration,
}

impl std::fmt::Debug for TransactionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionManager")
            .field("core", &*self.core.lock())
            .finish_non_exhaustive()
    }
}

/// The state locked, with the transitions the sender thread makes. Dropping it wakes the
/// application's calls waiting for a change.
pub(crate) struct Locked<'a> {
    mgr: &'a TransactionManager,
    core: MutexGuard<'a, Core>,
    changed: bool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        self.changed = true;
        &mut self.core
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if self.changed {
            self.notify();
        }
    }
}

impl Locked<'_> {
    /// Waits for a change until `deadline`; false (without waiting) once it has passed.
    pub fn wait_until(&mut self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return false;
        }
        if self.changed {
            // Others may be waiting for what this caller changed.
            self.notify();
            self.changed = false;
        }
        let _ = self.mgr.changed.wait_until(&mut self.core, deadline);
        true
    }

    /// Moves to `to`, as Java's `TransactionManager.transitionTo` allows.
    /// Wakes the threads and the tasks waiting for a change.
    fn notify(&mut self) {
        self.mgr.changed.notify_all();
        for task in self.core.tasks.drain(..) {
            task.wake();
        }
    }

    pub fn set_state(&mut self, to: TransactionState) {
        use TransactionState::*;
        let from = self.core.state;
        let valid = match to {
            Uninitialized => false,
            Initializing => matches!(from, Uninitialized | Initializing | Ready | Aborting),
            Ready => matches!(from, Initializing | Committing | Aborting),
            InTransaction => from == Ready,
            Committing => from == InTransaction,
            Aborting => matches!(from, InTransaction | AbortableError),
            AbortableError => matches!(from, InTransaction | Committing | AbortableError),
            FatalError => true,
        };
        if !valid {
            tracing::error!(%from, %to, "invalid transaction state transition (a bug)");
            debug_assert!(valid, "transaction state {from} -> {to}");
            return;
        }
        if from != to {
            tracing::debug!(%from, %to, "transaction state");
        }
        self.changed = true;
        self.core.state = to;
        self.mgr.fast_state.store(to.index(), Ordering::Release);
    }

    /// Completes the operation under way. An internal one goes away; the application's
    /// waits for its caller to take the outcome.
    pub fn complete(&mut self, outcome: Result<(), TransactionError>) {
        self.changed = true;
        match self.core.op.take() {
            Some(op) if op.internal => {
                if let Err(e) = outcome {
                    tracing::warn!(op = op.kind.method(), error = %e, "transaction operation of the producer's own failed");
                }
            }
            Some(mut op) => {
                op.outcome = Some(outcome);
                self.core.op = Some(op);
            }
            None => {}
        }
    }

    /// The open transaction cannot commit any more. With `bump`, the abort takes a new
    /// epoch. Outside a transaction there is nothing to abort: the error is only logged.
    pub fn abortable(&mut self, reason: impl Into<Arc<str>>, code: Option<ErrorCode>, bump: bool) {
        use TransactionState::*;
        let reason = reason.into();
        self.changed = true;
        self.core.bump_epoch |= bump;
        match self.core.state {
            InTransaction | Committing | AbortableError => {
                tracing::warn!(%reason, "transaction must be aborted");
                if self.core.state != AbortableError {
                    self.core.error = Some(self.core.abortable_error(reason, code));
                    self.set_state(AbortableError);
                }
                // An operation other than the abort fails with it (commit, send_offsets).
                if self
                    .core
                    .pending_op()
                    .is_some_and(|(_, k)| !matches!(k, OpKind::Abort))
                {
                    let e = self.core.error.clone().expect("set above");
                    self.complete(Err(e));
                }
            }
            Aborting => tracing::info!(%reason, "error while aborting; the abort goes on"),
            state => tracing::warn!(%reason, %state, "abortable error outside a transaction"),
        }
    }

    /// The producer can do nothing more: the operation under way fails with `e`, and every
    /// later call too.
    pub fn fatal(&mut self, e: TransactionError) {
        if self.core.state == TransactionState::FatalError {
            return;
        }
        tracing::error!(error = %e, "transactional producer failed fatally");
        self.core.error = Some(e.clone());
        self.set_state(TransactionState::FatalError);
        if self.core.op.is_some() {
            self.complete(Err(e));
        }
    }

    /// The transaction ended (EndTxn answered, or there was nothing to end): ready for the
    /// next one.
    pub fn ended(&mut self) {
        self.core.started = false;
        self.core.error = None;
        self.core.skip_end_txn = false;
        self.set_state(TransactionState::Ready);
        self.complete(Ok(()));
    }

    pub fn fenced(&self, code: ErrorCode) -> TransactionError {
        TransactionError::Fenced {
            transactional_id: self.core.id.clone(),
            code,
        }
    }

    pub fn fatal_error(
        &self,
        operation: &'static str,
        reason: impl Into<Arc<str>>,
    ) -> TransactionError {
        TransactionError::Fatal {
            transactional_id: self.core.id.clone(),
            operation,
            reason: reason.into(),
        }
    }
}

impl TransactionManager {
    pub fn new(id: &str, max_block: Duration, wake: Box<dyn Fn() + Send + Sync>) -> Self {
        Self {
            core: Mutex::new(Core {
                id: Arc::from(id),
                state: TransactionState::Uninitialized,
                error: None,
                bump_epoch: false,
                skip_end_txn: false,
                started: false,
                op: None,
                next_op: 1,
                gate_closed: false,
                abort_owed: None,
                tasks: Vec::new(),
            }),
            changed: Condvar::new(),
            fast_state: AtomicU8::new(TransactionState::Uninitialized.index()),
            begun: AtomicU64::new(0),
            wake,
            max_block,
        }
    }

    pub fn lock(&self) -> Locked<'_> {
        Locked {
            mgr: self,
            core: self.core.lock(),
            changed: false,
        }
    }

    /// The state now.
    pub fn state(&self) -> TransactionState {
        TransactionState::ALL[self.fast_state.load(Ordering::Acquire) as usize]
    }

    /// The `transactional.id` in use.
    pub fn transactional_id(&self) -> Arc<str> {
        self.core.lock().id.clone()
    }

    /// How many transactions have begun (see [`check_send_in`](Self::check_send_in)).
    pub fn begun(&self) -> u64 {
        self.begun.load(Ordering::Acquire)
    }

    /// Whether a record sent while transaction number `begun` was open may be added now: only
    /// while that same transaction is still open (an async send accepted after its
    /// transaction's commit would otherwise land in the next one, or in none).
    pub fn check_send_in(&self, begun: u64) -> Result<(), TransactionError> {
        self.check_send()?;
        if self.begun() != begun {
            return Err(TransactionError::InvalidState {
                operation: "send_async()",
                state: self.state(),
                hint: "the transaction it was sent in ended before the record was accepted: await `accepted()` before committing",
            });
        }
        Ok(())
    }

    /// Whether `send()` may add a record now: only inside a transaction (an atomic load on
    /// that path; the lock only to say why not).
    pub fn check_send(&self) -> Result<(), TransactionError> {
        if self.state() == TransactionState::InTransaction {
            return Ok(());
        }
        let core = self.core.lock();
        Err(Self::refusal(&core).unwrap_or_else(|| {
            let hint = match core.state {
                TransactionState::Uninitialized => {
                    "call init_transactions(), then begin_transaction() first"
                }
                TransactionState::Committing | TransactionState::Aborting => {
                    "the transaction is ending: call begin_transaction() for the next one"
                }
                _ => "call begin_transaction() first",
            };
            core.invalid("send()", hint)
        }))
    }

    /// Why a call on the open transaction cannot go on: fatal, aborted by the checkpoint, or
    /// abortable.
    fn refusal(core: &Core) -> Option<TransactionError> {
        match core.state {
            TransactionState::FatalError => core.error.clone(),
            _ if core.abort_owed.is_some() => core.abort_owed.clone(),
            TransactionState::AbortableError => core.error.clone(),
            _ => None,
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now()
            .checked_add(self.max_block)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
    }

    fn timeout(&self, operation: &'static str) -> TransactionError {
        TransactionError::Timeout {
            operation,
            after: self.max_block,
        }
    }
}

/// What a checkpoint does.
impl TransactionManager {
    /// Before the image: no transaction begins from now on; then, by `policy`, waits until
    /// `deadline` for the open transaction to end, or aborts it. Called again in the same
    /// checkpoint (the producer's resource after the transaction's own), it only checks.
    /// On failure the gate opens again and the error says why.
    pub fn checkpoint_begin(
        &self,
        policy: CheckpointTransactionPolicy,
        deadline: Instant,
    ) -> Result<(), String> {
        let mut core = self.lock();
        core.gate_closed = true;
        loop {
            let busy = core.op.is_some();
            match core.state {
                s if !core.transaction_open() && !busy && s != TransactionState::Initializing => {
                    return Ok(());
                }
                TransactionState::InTransaction | TransactionState::AbortableError
                    if policy == CheckpointTransactionPolicy::Abort && !busy =>
                {
                    tracing::info!("checkpoint: aborting the open transaction");
                    let owed = core.abortable_error(
                        "the checkpoint aborted it (checkpoint.transaction.policy=abort)",
                        None,
                    );
                    core.abort_owed = Some(owed);
                    core.set_state(TransactionState::Aborting);
                    core.start_op(OpKind::Abort, true);
                    (self.wake)();
                }
                _ => {}
            }
            if !core.wait_until(deadline) {
                let state = core.state;
                core.gate_closed = false;
                return Err(format!(
                    "the transaction is still open (state {state}) at checkpoint.drain.timeout.ms: commit or abort it before the checkpoint, or set checkpoint.transaction.policy=abort; the producer goes on"
                ));
            }
        }
    }

    /// After the checkpoint (restored or not): transactions may begin again.
    pub fn checkpoint_end(&self) {
        let mut core = self.lock();
        if core.gate_closed {
            core.gate_closed = false;
        }
    }

    /// After a restore from an image: the copy goes on under `id`. An initialized producer
    /// takes a producer id again (which fences any other producer with that id); one not yet
    /// initialized only takes the id for its `init_transactions()`.
    pub fn restored(&self, id: &str) {
        let mut core = self.lock();
        if core.id.as_ref() != id {
            tracing::info!(from = %core.id, to = id, "transactional.id of the restored copy");
            core.id = Arc::from(id);
        }
        match core.state {
            TransactionState::Ready | TransactionState::Initializing
                if core.op.is_none() || core.op.as_ref().is_some_and(|o| o.internal) =>
            {
                core.set_state(TransactionState::Initializing);
                core.start_op(OpKind::Init, true);
                (self.wake)();
            }
            // The application's own init_transactions() goes on under the new id.
            _ => {}
        }
    }

    /// At close: a transaction still open is aborted (as Java's sender does at a graceful
    /// close). Returns whether the producer still has transactional work to finish.
    pub fn close_pending(&self) -> bool {
        let mut core = self.lock();
        if core.op.is_none()
            && matches!(
                core.state,
                TransactionState::InTransaction | TransactionState::AbortableError
            )
        {
            tracing::info!("aborting the open transaction at close");
            core.set_state(TransactionState::Aborting);
            core.start_op(OpKind::Abort, true);
        }
        core.op.as_ref().is_some_and(|o| o.outcome.is_none())
    }
}
