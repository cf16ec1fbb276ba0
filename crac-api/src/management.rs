//! Process-level checkpoint facts, like Java's `CRaCMXBean`.

use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

/// A snapshot of the checkpoint/restore history of this process, from
/// [`Core::management`](crate::Core::management).
#[derive(Debug, Clone, Default)]
pub struct Management {
    pub(crate) generation: u64,
    pub(crate) restores: u64,
    pub(crate) restore_time: Option<SystemTime>,
    pub(crate) restored_at: Option<Instant>,
    pub(crate) last_frozen: Option<Duration>,
    pub(crate) total_frozen: Duration,
    pub(crate) last_checkpoint: Option<Duration>,
    pub(crate) new_env: Vec<(String, String)>,
}

impl Management {
    /// Generation of the newest image in this process's line (0: never checkpointed).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many times this process's line has been restored.
    pub fn restore_count(&self) -> u64 {
        self.restores
    }

    /// Wall-clock time of the last restore, if this process was restored.
    pub fn restore_time(&self) -> Option<SystemTime> {
        self.restore_time
    }

    /// Time since the last restore, if this process was restored.
    pub fn uptime_since_restore(&self) -> Option<Duration> {
        self.restored_at.map(|t| t.elapsed())
    }

    /// How long the process was frozen before its last restore. Resources use it to rebase
    /// timeouts: a deadline computed before the checkpoint should not expire because the image
    /// sat on disk for a day.
    pub fn frozen_duration(&self) -> Option<Duration> {
        self.last_frozen
    }

    /// Total frozen time over every restore of this line.
    pub fn total_frozen(&self) -> Duration {
        self.total_frozen
    }

    /// How long the last checkpoint took from the first hook to the return of
    /// `checkpoint_restore()` (in the original for leave-running and aborted checkpoints).
    pub fn last_checkpoint_duration(&self) -> Option<Duration> {
        self.last_checkpoint
    }

    /// Configuration the restorer handed to this process at its last restore.
    pub fn restore_env(&self) -> &[(String, String)] {
        &self.new_env
    }

    /// One value of [`restore_env`](Self::restore_env), the last one given for `key`.
    pub fn restore_var(&self, key: &str) -> Option<&str> {
        self.new_env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) static STATE: Mutex<Management> = Mutex::new(Management {
    generation: 0,
    restores: 0,
    restore_time: None,
    restored_at: None,
    last_frozen: None,
    total_frozen: Duration::ZERO,
    last_checkpoint: None,
    new_env: Vec::new(),
});
