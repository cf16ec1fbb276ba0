//! Uniqueness of clones: what a restored process must draw again.
//!
//! An image copies into every clone whatever state the process had: the state of random
//! generators kept in memory (`rand::rng()` keeps one per thread), UUID generators, nonces,
//! tokens, ids. Two clones of one image would draw the same "random" numbers. So:
//!
//! - [`restore_epoch`] counts this process's restores (0: never restored). It is bumped in
//!   every restored copy before any `after_restore` runs; reading it is one relaxed atomic load,
//!   cheap enough for a hot path.
//! - [`restore_nonce`] is 32 bytes drawn from the operating system in the restored copy itself
//!   at each restore, so every clone has its own.
//! - [`ReseedGuard`] tells a generator of the application's own when to draw a fresh seed:
//!   on its first use, and on its first use after every restore. [`os_random`] draws it.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

static EPOCH: AtomicU64 = AtomicU64::new(0);
static NONCE: Mutex<Option<[u8; 32]>> = Mutex::new(None);

/// How many times this process has been restored from an image (0: never). Bumped in every
/// restored copy before any `after_restore` hook runs. One relaxed atomic load.
#[inline]
pub fn restore_epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// 32 bytes drawn from the operating system in this process at its last restore (`None`:
/// never restored). Every clone of an image has its own.
pub fn restore_nonce() -> Option<[u8; 32]> {
    *NONCE.lock()
}

/// Called by the core in a restored copy, before any `after_restore`.
pub(crate) fn on_restore() {
    let mut n = [0u8; 32];
    os_random(&mut n);
    *NONCE.lock() = Some(n);
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// Fills `buf` with random bytes from the operating system (`getrandom(2)`), drawn now: never
/// from state that an image could have copied.
pub fn os_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_ok() {
        return;
    }
    // getrandom(2) cannot fail on the kernels CRIU supports; should it, the wall clock's
    // nanoseconds, the pid and a counter still tell clones apart (not for cryptography).
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ u64::from(std::process::id()) << 32 ^ COUNTER.fetch_add(1, Ordering::Relaxed);
    for chunk in buf.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}

/// A random `u64` from the operating system (see [`os_random`]).
pub fn os_random_u64() -> u64 {
    let mut b = [0u8; 8];
    os_random(&mut b);
    u64::from_le_bytes(b)
}

/// Tells a generator that keeps its state in memory when to draw a fresh seed: on its first
/// use, and on its first use after every restore, in each clone. One atomic load when nothing
/// changed.
///
/// ```
/// use crac_api::{ReseedGuard, os_random_u64};
///
/// static RESEED: ReseedGuard = ReseedGuard::new();
/// static STATE: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
///
/// fn next_id() -> u64 {
///     let mut s = STATE.lock().unwrap();
///     if RESEED.needs_reseed() {
///         *s = os_random_u64() | 1;
///     }
///     *s ^= *s << 13;
///     *s ^= *s >> 7;
///     *s ^= *s << 17;
///     *s
/// }
/// # assert_ne!(next_id(), next_id());
/// ```
#[derive(Debug)]
pub struct ReseedGuard {
    /// The restore epoch (plus one) this guard last said "reseed" for; 0: never.
    seen: AtomicU64,
}

impl ReseedGuard {
    /// A guard that says "reseed" at its first call.
    pub const fn new() -> Self {
        Self {
            seen: AtomicU64::new(0),
        }
    }

    /// `true` once for the first call and once after each restore: draw a new seed now (from
    /// [`os_random`]). When several threads ask at once, exactly one gets `true`.
    #[inline]
    pub fn needs_reseed(&self) -> bool {
        let now = restore_epoch() + 1;
        self.seen.load(Ordering::Relaxed) != now && self.seen.swap(now, Ordering::AcqRel) != now
    }
}

impl Default for ReseedGuard {
    fn default() -> Self {
        Self::new()
    }
}
