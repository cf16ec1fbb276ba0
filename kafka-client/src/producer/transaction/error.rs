//! What can go wrong with a transaction, typed, each with what the application must do
//! ([`TransactionError::action`]), as Java's producer sorts its transactional exceptions.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::ErrorCode;

/// Where a transactional producer stands (Java's `TransactionManager.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionState {
    /// `init_transactions()` not called yet.
    Uninitialized,
    /// Getting a producer id and epoch for the `transactional.id` (at
    /// `init_transactions()`, after a restore, after an abort that needs a new epoch).
    Initializing,
    /// No transaction open.
    Ready,
    /// A transaction is open.
    InTransaction,
    /// `commit_transaction()` in progress.
    Committing,
    /// `abort_transaction()` in progress.
    Aborting,
    /// The open transaction cannot commit; only `abort_transaction()` helps.
    AbortableError,
    /// The producer can do nothing more.
    FatalError,
}

impl TransactionState {
    pub(crate) const ALL: [TransactionState; 8] = [
        Self::Uninitialized,
        Self::Initializing,
        Self::Ready,
        Self::InTransaction,
        Self::Committing,
        Self::Aborting,
        Self::AbortableError,
        Self::FatalError,
    ];

    pub(crate) fn index(self) -> u8 {
        Self::ALL.iter().position(|s| *s == self).unwrap_or(0) as u8
    }

    /// Java's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uninitialized => "UNINITIALIZED",
            Self::Initializing => "INITIALIZING",
            Self::Ready => "READY",
            Self::InTransaction => "IN_TRANSACTION",
            Self::Committing => "COMMITTING_TRANSACTION",
            Self::Aborting => "ABORTING_TRANSACTION",
            Self::AbortableError => "ABORTABLE_ERROR",
            Self::FatalError => "FATAL_ERROR",
        }
    }
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the application must do after a [`TransactionError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionAction {
    /// Call `abort_transaction()`, rewind the input to the last committed offsets (a consumer's
    /// `seek` to `committed`), and do the work again in a new transaction.
    AbortAndRetry,
    /// The producer can do nothing more: close it. A new producer with the same
    /// `transactional.id` fences this one for good (if another one has not already).
    CloseProducer,
    /// The call gave up waiting after `max.block.ms` but the operation goes on: call the same
    /// method again to keep waiting (or close the producer).
    RetryCall,
    /// The call is not allowed in this state: a mistake in the calling code.
    FixApplication,
    /// Nothing to do: the record belonged to a transaction that was aborted and is not written.
    None,
}

/// Why a transactional call (or a record of a transaction) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// Another producer took this `transactional.id` over (`PRODUCER_FENCED`,
    /// `INVALID_PRODUCER_EPOCH`): a newer instance, or another copy of the same checkpoint
    /// image running under the same id. Close this producer.
    #[error(
        "transactional.id {transactional_id}: fenced ({code}): another producer took this transactional.id over (a newer instance, or another copy of the same checkpoint image under the same id: give each copy its own with KAFKA_TRANSACTIONAL_ID or crac.transactional.id.policy=unique); close this producer"
    )]
    Fenced {
        /// The id.
        transactional_id: Arc<str>,
        /// What the broker said.
        code: ErrorCode,
    },
    /// An error the producer cannot recover from (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`,
    /// `INVALID_TXN_STATE`, an unexpected answer). Close the producer.
    #[error(
        "transactional.id {transactional_id}: {operation} failed: {reason}; close this producer"
    )]
    Fatal {
        /// The id.
        transactional_id: Arc<str>,
        /// What was being done (`InitProducerId`, `EndTxn`, a record of the transaction, ...).
        operation: &'static str,
        /// Why.
        reason: Arc<str>,
    },
    /// The open transaction cannot commit (a record failed, the group moved on, the
    /// checkpoint aborted it, ...). Abort it and do its work again.
    #[error(
        "transactional.id {transactional_id}: the transaction cannot commit: {reason}; call abort_transaction() and do its work again from the last committed offsets"
    )]
    Abortable {
        /// The id.
        transactional_id: Arc<str>,
        /// Why.
        reason: Arc<str>,
        /// The broker's error code, when it gave one.
        code: Option<ErrorCode>,
    },
    /// `max.block.ms` passed; the operation goes on in the background.
    #[error(
        "{operation} did not finish within max.block.ms={} ms; it goes on: call {operation} again to wait for it",
        .after.as_millis()
    )]
    Timeout {
        /// The method.
        operation: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// The call is not allowed now (`begin_transaction()` twice, `send()` outside a
    /// transaction, `commit_transaction()` without one, ...).
    #[error("{operation} is not allowed in state {state}: {hint}")]
    InvalidState {
        /// The method.
        operation: &'static str,
        /// The state.
        state: TransactionState,
        /// What to call instead.
        hint: &'static str,
    },
    /// The producer has no `transactional.id`.
    #[error(
        "{operation}: the producer has no transactional.id (set transactional.id to use transactions)"
    )]
    NotTransactional {
        /// The method.
        operation: &'static str,
    },
    /// The record was not written: its transaction was aborted before it was sent.
    #[error("transactional.id {transactional_id}: record not written: its transaction was aborted")]
    Aborted {
        /// The id.
        transactional_id: Arc<str>,
    },
    /// The producer is closed.
    #[error("{operation}: the producer is closed")]
    Closed {
        /// The method.
        operation: &'static str,
    },
}

impl TransactionError {
    /// What the application must do.
    pub fn action(&self) -> TransactionAction {
        match self {
            Self::Fenced { .. } | Self::Fatal { .. } | Self::Closed { .. } => {
                TransactionAction::CloseProducer
            }
            Self::Abortable { .. } => TransactionAction::AbortAndRetry,
            Self::Timeout { .. } => TransactionAction::RetryCall,
            Self::InvalidState { .. } | Self::NotTransactional { .. } => {
                TransactionAction::FixApplication
            }
            Self::Aborted { .. } => TransactionAction::None,
        }
    }

    /// Whether the producer cannot go on.
    pub fn is_fatal(&self) -> bool {
        self.action() == TransactionAction::CloseProducer
    }

    /// The broker's error code behind it, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Fenced { code, .. } => Some(*code),
            Self::Abortable { code, .. } => *code,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_says_what_to_do() {
        let id: Arc<str> = Arc::from("svc-1");
        let fenced = TransactionError::Fenced {
            transactional_id: id.clone(),
            code: ErrorCode::ProducerFenced,
        };
        assert_eq!(fenced.action(), TransactionAction::CloseProducer);
        assert!(
            fenced.to_string().contains("close this producer"),
            "{fenced}"
        );
        assert!(
            fenced.to_string().contains("KAFKA_TRANSACTIONAL_ID"),
            "{fenced}"
        );
        let abortable = TransactionError::Abortable {
            transactional_id: id,
            reason: Arc::from("a record failed"),
            code: None,
        };
        assert_eq!(abortable.action(), TransactionAction::AbortAndRetry);
        assert!(abortable.to_string().contains("abort_transaction()"));
        let timeout = TransactionError::Timeout {
            operation: "commit_transaction()",
            after: Duration::from_secs(60),
        };
        assert_eq!(timeout.action(), TransactionAction::RetryCall);
        assert!(
            timeout
                .to_string()
                .contains("call commit_transaction() again")
        );
        for (i, s) in TransactionState::ALL.iter().enumerate() {
            assert_eq!(s.index() as usize, i);
        }
    }
}
