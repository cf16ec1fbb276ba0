//! The producer as a CRaC [`Resource`]: drain and disconnect before the image, re-bootstrap
//! and take a new producer id after the restore.

use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use crac_api::{Context, Core, Resource, ResourceError};
use parking_lot::Mutex;

use super::ProducerInner;
use super::sender::Command;

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

/// What `before_checkpoint` left for `after_restore`.
#[derive(Debug, Default)]
pub(crate) struct CheckpointState {
    /// Monotonic and wall time when the connections were closed, if they were.
    marker: Mutex<Option<(Instant, SystemTime)>>,
}

/// How far the monotonic clock moved while the process was frozen: zero when the restore
/// ran in a time namespace that continues `CLOCK_MONOTONIC` (CRIU's default here), the frozen
/// time when it did not. Deadlines are shifted by that much, so nothing expires because the
/// process slept.
pub(crate) fn monotonic_jump(marker: (Instant, SystemTime)) -> Duration {
    let (mono0, wall0) = marker;
    let mono = mono0.elapsed();
    let wall = SystemTime::now()
        .duration_since(wall0)
        .unwrap_or(Duration::ZERO);
    let m = Core::management();
    let frozen = match m.restore_time() {
        Some(t) if t >= wall0 => m.frozen_duration().unwrap_or(Duration::ZERO),
        _ => Duration::ZERO,
    };
    jump(mono, wall, frozen)
}

/// Between the drain and the restore hook the process ran for `wall - frozen`; whatever the
/// monotonic clock advanced beyond that is the jump (never more than the frozen time).
fn jump(mono: Duration, wall: Duration, frozen: Duration) -> Duration {
    let running = wall.saturating_sub(frozen);
    mono.saturating_sub(running).min(frozen)
}

impl Resource for ProducerInner {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let client_id = self.config.client_id.clone();
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
        match rx.recv_timeout(timeout + Duration::from_secs(10)) {
            Ok(Ok(())) => {
                *self.checkpoint.marker.lock() = Some((Instant::now(), SystemTime::now()));
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
        let marker = self.checkpoint.marker.lock().take();
        let shift = marker.map_or(Duration::ZERO, monotonic_jump);
        let (tx, rx) = mpsc::channel();
        if self.command(Command::Restore { shift, reply: tx }) {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
        self.acc.resume();
        tracing::info!(client_id = %self.config.client_id, shift_ms = shift.as_millis() as u64, "kafka producer resumed after restore");
        Ok(())
    }

    fn name(&self) -> String {
        format!("kafka-producer[{}]", self.config.client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::jump;
    use std::time::Duration;

    #[test]
    fn jump_is_what_the_monotonic_clock_gained_while_frozen() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // CRIU with a time namespace: monotonic continued where it stopped (this machine).
        assert_eq!(jump(ms(300), s(120) + ms(300), s(120)), Duration::ZERO);
        // Without one: monotonic jumped by the frozen time.
        assert_eq!(jump(s(120) + ms(300), s(120) + ms(300), s(120)), s(120));
        // No image (noop engine, aborted checkpoint): nothing to shift.
        assert_eq!(jump(ms(50), ms(50), Duration::ZERO), Duration::ZERO);
        // Wall clock stepped backwards: no shift rather than a bogus one.
        assert_eq!(jump(ms(50), Duration::ZERO, Duration::ZERO), Duration::ZERO);
    }
}
