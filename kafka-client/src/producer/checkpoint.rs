//! The producer as a CRaC [`Resource`]: drain and disconnect before the image, re-bootstrap
//! and take a new producer id after the restore.
//!
//! A transactional producer first ends its open transaction ([`TransactionCheckpoint`], also
//! registered on its own at the application level so that this happens before any
//! network-level resource acts: the transaction's consumer is still a member of its group
//! when the transaction commits): no transaction begins until the restore, and the open one
//! is waited for or aborted (`checkpoint.transaction.policy`). So an image holds no open
//! transaction. A restored copy takes a producer id again under its own `transactional.id`:
//! the restorer's (`crac restore --env KAFKA_TRANSACTIONAL_ID=…`, the variable
//! `crac.transactional.id.var` names), else the configured one (`crac.transactional.id.policy
//! =keep`, which fences any other producer with that id) or the configured one made unique to
//! the restore (`unique`).

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crac_api::{Context, Resource, ResourceError};

use super::ProducerInner;
use super::config::{CheckpointTransactionPolicy, ProducerConfig, TransactionalIdPolicy};
use super::error::CheckpointDrainError;
use super::sender::Command;
use super::transaction::TransactionManager;
use crate::network::checkpoint::{reply_grace, restore_var, unique_id};

/// A transactional producer's checkpoint step: ends the open transaction and keeps new ones
/// from beginning until after the restore.
pub(crate) struct TransactionCheckpoint {
    txn: Arc<TransactionManager>,
    policy: CheckpointTransactionPolicy,
    timeout: Duration,
    client_id: String,
}

impl TransactionCheckpoint {
    pub fn new(txn: Arc<TransactionManager>, config: &ProducerConfig) -> Self {
        Self {
            txn,
            policy: config.checkpoint_transaction_policy,
            timeout: config.checkpoint_drain_timeout,
            client_id: config.common.client_id.clone(),
        }
    }

    fn end_transaction(&self, deadline: Instant) -> Result<(), CheckpointDrainError> {
        let _span = tracing::info_span!("kafka_transaction_checkpoint", client_id = %self.client_id, policy = %self.policy).entered();
        self.txn
            .checkpoint_begin(self.policy, deadline)
            .map_err(|detail| CheckpointDrainError::TransactionOpen {
                client_id: self.client_id.clone(),
                detail,
            })
    }
}

impl Resource for TransactionCheckpoint {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(self.end_transaction(Instant::now() + self.timeout)?)
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.txn.checkpoint_end();
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka-transaction[{}]", self.client_id)
    }
}

/// The `transactional.id` of a restored copy.
fn transactional_id_after_restore(config: &ProducerConfig, configured: &str) -> String {
    if let Some(id) = restore_var(&config.crac_transactional_id_var) {
        return id;
    }
    match config.crac_transactional_id_policy {
        TransactionalIdPolicy::Keep => configured.to_owned(),
        TransactionalIdPolicy::Unique => unique_id(configured),
    }
}

impl Resource for ProducerInner {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let client_id = self.config.common.client_id.clone();
        if self.acc.is_closed() {
            return Ok(());
        }
        let timeout = self.config.checkpoint_drain_timeout;
        let start = Instant::now();
        // The transaction's own step (already done at the application level when registered
        // there: then this only checks).
        if let Some(t) = &self.txn_resource {
            t.end_transaction(start + timeout)?;
        }
        let timeout = timeout.saturating_sub(start.elapsed());
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
        let marker = self.checkpoint.take();
        let shift = marker.unwrap_or(Duration::ZERO);
        let (tx, rx) = mpsc::channel();
        if self.command(Command::Restore { shift, reply: tx }) {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
        if let Some(t) = &self.txn {
            if marker.is_some()
                && let Some(configured) = &self.config.transactional_id
            {
                // Connections were closed for an image: this may be one of several copies.
                t.restored(&transactional_id_after_restore(&self.config, configured));
            }
            t.checkpoint_end();
        }
        self.acc.resume();
        tracing::info!(client_id = %self.config.common.client_id, shift_ms = shift.as_millis() as u64, "kafka producer resumed after restore");
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka-producer[{}]", self.config.common.client_id)
    }
}
