//! The producer as a CRaC [`Resource`]: drain and disconnect before the image, re-bootstrap
//! and take a new producer id after the restore.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crac_api::{Context, Resource, ResourceError};

use super::ProducerInner;
use super::sender::Command;
use crate::network::checkpoint::reply_grace;

/// Why `before_checkpoint` refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointDrainError {
    /// Records were still unacknowledged at `checkpoint.drain.timeout.ms`.
    #[error("kafka producer {client_id}: cannot checkpoint: {detail}")]
    NotDrained {
        /// The producer.
        client_id: String,
        /// What was left.
        detail: String,
    },
    /// The sender thread is gone (producer closed) or did not answer.
    #[error("kafka producer {client_id}: sender thread did not answer the checkpoint request")]
    NoSender {
        /// The producer.
        client_id: String,
    },
}

impl Resource for ProducerInner {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let client_id = self.config.common.client_id.clone();
        if self.acc.is_closed() {
            return Ok(());
        }
        let timeout = self.config.checkpoint_drain_timeout;
        let _span =
            tracing::info_span!("kafka_producer_checkpoint", client_id = %client_id).entered();
        self.acc.pause();
        let (tx, rx) = mpsc::channel();
        if !self.command(Command::Drain {
            deadline: Instant::now() + timeout,
            reply: tx,
        }) {
            self.acc.resume();
            return Err(CheckpointDrainError::NoSender { client_id }.into());
        }
        match rx.recv_timeout(timeout + reply_grace(timeout)) {
            Ok(Ok(())) => {
                self.checkpoint.closed_now();
                Ok(())
            }
            Ok(Err(detail)) => {
                self.acc.resume();
                Err(CheckpointDrainError::NotDrained { client_id, detail }.into())
            }
            Err(_) => {
                self.acc.resume();
                Err(CheckpointDrainError::NoSender { client_id }.into())
            }
        }
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        let shift = self.checkpoint.take().unwrap_or(Duration::ZERO);
        let (tx, rx) = mpsc::channel();
        if self.command(Command::Restore { shift, reply: tx }) {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
        self.acc.resume();
        tracing::info!(client_id = %self.config.common.client_id, shift_ms = shift.as_millis() as u64, "kafka producer resumed after restore");
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka-producer[{}]", self.config.common.client_id)
    }
}
