//! The consumer as a CRaC [`Resource`]: before the image, stop fetching, commit the positions
//! of records `poll()` returned, leave the group and close every connection; after the restore,
//! re-bootstrap and rejoin, resuming from the committed offsets.
//!
//! How the member leaves depends on its membership: a dynamic member leaves for good
//! (LeaveGroup; KIP-848: epoch -1), so its partitions move to the others during the freeze
//! (with `cooperative-sticky` or `group.protocol=consumer`, only its partitions move); a
//! static member (`group.instance.id`) leaves only for now (classic: no LeaveGroup; KIP-848:
//! epoch -2), so its partitions wait for it until the session timeout and nobody else moves.
//!
//! `group.instance.id` across restores: clones of one image must not share it (the second
//! would fence the first). After an image was taken, a configured id is replaced by the
//! restorer's value of the variable named by `crac.group.instance.id.var` (default
//! `KAFKA_GROUP_INSTANCE_ID`: `crac restore DIR --env KAFKA_GROUP_INSTANCE_ID=worker-7`),
//! for deployments that give each restored copy its own stable identity; without one, by
//! `<configured id>-crac<generation>-<8 random hex digits>`, unique per restore (the random
//! part is drawn from the operating system after the restore, so clones differ). A copy
//! restored under the image's own id takes the waiting partitions back without a rebalance; a
//! copy under another id first removes the image's member for good (the coordinator then
//! moves its partitions), so no one is fenced either way.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crac_api::{Context, Resource, ResourceError};

use super::ConsumerInner;
use super::error::ConsumerCheckpointError;
use super::network_thread::Command;
use crate::network::checkpoint::{id_after_restore, reply_grace};

impl Resource for ConsumerInner {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let client_id = self.config.common.client_id.clone();
        if self.shared.state.lock().closed {
            return Ok(());
        }
        let _span =
            tracing::info_span!("kafka_consumer_checkpoint", client_id = %client_id).entered();
        // poll() returns nothing from here on, and the network thread fetches nothing.
        self.shared.state.lock().checkpointing = true;
        self.shared.notify();
        let timeout = self.config.checkpoint_timeout;
        let (tx, rx) = mpsc::channel();
        let reopen = || {
            self.shared.state.lock().checkpointing = false;
            self.shared.notify();
            self.wake();
        };
        if !self.command(Command::Checkpoint {
            deadline: Instant::now() + timeout,
            reply: tx,
        }) {
            reopen();
            return Err(ConsumerCheckpointError::NoNetworkThread { client_id }.into());
        }
        match rx.recv_timeout(timeout + reply_grace(timeout)) {
            Ok(Ok(())) => {
                self.checkpoint.closed_now();
                Ok(())
            }
            Ok(Err(detail)) => {
                reopen();
                Err(ConsumerCheckpointError::NotCommitted {
                    client_id,
                    group: self.config.group_id.clone().unwrap_or_default(),
                    detail,
                }
                .into())
            }
            Err(_) => {
                reopen();
                Err(ConsumerCheckpointError::NoNetworkThread { client_id }.into())
            }
        }
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        let marker = self.checkpoint.take();
        let shift = marker.unwrap_or(Duration::ZERO);
        let current = self
            .shared
            .state
            .lock()
            .membership
            .group_instance_id
            .clone();
        let instance = match (&self.config.group_instance_id, marker) {
            (Some(configured), Some(_)) => Some(id_after_restore(
                configured,
                &self.config.crac_group_instance_id_var,
            )),
            _ => current,
        };
        let (tx, rx) = mpsc::channel();
        if self.command(Command::Restore {
            shift,
            group_instance_id: instance.clone(),
            reply: tx,
        }) {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
        {
            let mut st = self.shared.state.lock();
            st.checkpointing = false;
            st.last_poll = Instant::now();
        }
        self.shared.notify();
        self.wake();
        tracing::info!(client_id = %self.config.common.client_id, shift_ms = shift.as_millis() as u64, group_instance_id = ?instance, "kafka consumer resumed after restore");
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka-consumer[{}]", self.config.common.client_id)
    }
}
