//! What a client's checkpoint hook keeps between `before_checkpoint` and `after_restore`: when
//! its connections were closed, so the restore knows whether an image may have been taken and
//! how far to shift deadlines. Shared by the producer and the consumer.

use std::time::{Duration, Instant, SystemTime};

use crac_api::Core;
use parking_lot::Mutex;

/// Set by a `before_checkpoint` that closed the connections, taken by `after_restore`.
#[derive(Debug, Default)]
pub(crate) struct CheckpointState {
    /// Monotonic and wall time when the connections were closed, if they were.
    marker: Mutex<Option<(Instant, SystemTime)>>,
}

impl CheckpointState {
    /// The connections are closed now (the checkpoint may go ahead).
    pub fn closed_now(&self) {
        *self.marker.lock() = Some((Instant::now(), SystemTime::now()));
    }

    /// For `after_restore`: `Some(shift)` when the connections were closed for an image, the
    /// shift being how far deadlines move (see [`monotonic_jump`]); `None` when they were not.
    pub fn take(&self) -> Option<Duration> {
        self.marker.lock().take().map(monotonic_jump)
    }
}

/// How far the monotonic clock moved while the process was frozen: zero when the restore
/// ran in a time namespace that continues `CLOCK_MONOTONIC` (CRIU's default here), the frozen
/// time when it did not. Deadlines are shifted by that much, so nothing expires because the
/// process slept.
fn monotonic_jump(marker: (Instant, SystemTime)) -> Duration {
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

/// How long past its own deadline a checkpoint waits for the client thread's answer (a thread
/// held up by a slow callback answers late): as long again as the timeout, at most 10 s. After
/// it the checkpoint fails and the thread, when it gets to the request, runs on as before.
pub(crate) fn reply_grace(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(10))
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
