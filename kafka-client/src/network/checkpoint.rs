//! What a client's checkpoint hook keeps between `before_checkpoint` and `after_restore`: when
//! its connections were closed, so the restore knows whether an image may have been taken and
//! how far to shift deadlines; and the identities a restored copy takes (a consumer's
//! `group.instance.id`, a producer's `transactional.id`). Shared by the producer and the
//! consumer.

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

/// The value the restorer gave in the variable `var` (`crac restore --env VAR=…`), if any.
pub(crate) fn restore_var(var: &str) -> Option<String> {
    Core::management()
        .restore_var(var)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// An identity for a restored copy: the restorer's (in `var`), or the configured one made
/// unique to this restore, `<configured>-crac<generation>-<8 random hex digits>` (the random
/// part is drawn from the operating system after the restore, so clones of one image differ).
pub(crate) fn id_after_restore(configured: &str, var: &str) -> String {
    restore_var(var).unwrap_or_else(|| unique_id(configured))
}

/// `<configured>-crac<generation>-<8 random hex digits>`.
pub(crate) fn unique_id(configured: &str) -> String {
    format!(
        "{configured}-crac{}-{:08x}",
        Core::management().generation(),
        random_u32()
    )
}

/// Drawn from the operating system now, never from state the image holds.
fn random_u32() -> u32 {
    crac_api::os_random_u64() as u32
}

/// How long past its own deadline a checkpoint waits for the client thread's answer (a thread
/// held up by a slow callback answers late): as long again as the timeout, at most 10 s. After
/// it the checkpoint fails and the thread, when it gets to the request, runs on as before.
pub(crate) fn reply_grace(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::{id_after_restore, jump};
    use std::time::Duration;

    #[test]
    fn ids_differ_per_restore() {
        let a = id_after_restore("worker", "CRAC_TEST_UNSET_VAR");
        let b = id_after_restore("worker", "CRAC_TEST_UNSET_VAR");
        assert!(a.starts_with("worker-crac0-"), "{a}");
        assert_ne!(a, b);
    }

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
