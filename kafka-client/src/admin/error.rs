//! The admin client's errors: a whole call's, and each item's (a topic, a group, a
//! partition) in the maps calls return, so that one item failing does not fail the rest.

use std::time::Duration;

use crate::protocol::ErrorCode;

/// Why an admin call, or one item of it, failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The broker refused it (for the item, or the whole request).
    #[error("{operation}: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The call (`create_topics`, …).
        operation: &'static str,
        /// Kafka's error code.
        code: ErrorCode,
        /// The broker's message, when it sent one.
        message: Option<String>,
    },
    /// The call's time ran out (its timeout, else `default.api.timeout.ms`), retries
    /// included; `last` is the error the last attempt met.
    #[error("{operation} timed out after {} ms{}", after.as_millis(), last.as_deref().map(|m| format!(" (last error: {m})")).unwrap_or_default())]
    Timeout {
        /// The call.
        operation: &'static str,
        /// The time it had.
        after: Duration,
        /// What the last attempt met.
        last: Option<String>,
    },
    /// A connection failed or closed while the request was out (retried until the timeout).
    #[error("{operation}: {reason}")]
    Network {
        /// The call.
        operation: &'static str,
        /// What happened.
        reason: String,
    },
    /// The broker's answer could not be read (not retried: the broker speaks another dialect).
    #[error("{operation}: cannot read the broker's answer: {reason}")]
    Protocol {
        /// The call.
        operation: &'static str,
        /// The decoder's error.
        reason: String,
    },
    /// The arguments cannot make a valid request (named in the message).
    #[error("{operation}: {reason}")]
    InvalidArgument {
        /// The call.
        operation: &'static str,
        /// What is wrong and with which value.
        reason: String,
    },
    /// The admin client was closed.
    #[error("{operation}: the admin client is closed")]
    Closed {
        /// The call.
        operation: &'static str,
    },
}

impl AdminError {
    /// The broker's error code, for a refusal.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AdminError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether trying again may succeed (a moved leader or controller, a coordinator
    /// loading, a lost connection): such errors are retried within the call's time. Unlike
    /// Kafka's table, `UNKNOWN_TOPIC_OR_PARTITION` is final here: an admin call about a topic
    /// that does not exist answers so at once (Java's retries it until the call's time is
    /// up, which only delays the same answer).
    pub fn is_retriable(&self) -> bool {
        match self {
            AdminError::Broker { code, .. } => {
                code.is_retriable() && *code != ErrorCode::UnknownTopicOrPartition
            }
            AdminError::Network { .. } => true,
            _ => false,
        }
    }

    /// Whether the cluster view must be refreshed before the retry (a leader or the
    /// controller moved, a topic the metadata does not know yet).
    pub(crate) fn invalidates_metadata(&self) -> bool {
        match self {
            AdminError::Broker { code, .. } => code.invalidates_metadata(),
            AdminError::Network { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn broker(
        operation: &'static str,
        code: ErrorCode,
        message: Option<String>,
    ) -> Self {
        AdminError::Broker {
            operation,
            code,
            message,
        }
    }

    /// `Ok(())` for `ErrorCode::None`, the refusal otherwise.
    pub(crate) fn check(
        operation: &'static str,
        code: ErrorCode,
        message: Option<&str>,
    ) -> Result<(), AdminError> {
        if code.is_ok() {
            Ok(())
        } else {
            Err(Self::broker(operation, code, message.map(str::to_owned)))
        }
    }

    pub(crate) fn invalid(operation: &'static str, reason: impl Into<String>) -> Self {
        AdminError::InvalidArgument {
            operation,
            reason: reason.into(),
        }
    }
}
