//! What the application asks of one checkpoint: where the image goes and what becomes of the
//! process after the dump.

use std::path::PathBuf;

/// How the engine treats the process after the image is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointMode {
    /// The process ends once the image is written; it lives on only in restored copies.
    #[default]
    StopAfterDump,
    /// The process is snapshotted and goes on running (CRIU `--leave-running`).
    LeaveRunning,
}

/// What the application asks of a checkpoint, given to
/// [`Core::checkpoint_restore_with`](crate::Core::checkpoint_restore_with). Engines fill unset
/// fields from their own configuration (for CRIU: `CRAC_CHECKPOINT_TO`, `CRAC_CHECKPOINT_MODE`).
///
/// ```
/// use crac_api::{CheckpointMode, CheckpointOptions};
///
/// let options = CheckpointOptions::new()
///     .image_dir("/var/lib/my-service/image")
///     .mode(CheckpointMode::LeaveRunning);
/// assert_eq!(options.mode, Some(CheckpointMode::LeaveRunning));
/// // With an engine linked: `crac_api::Core::checkpoint_restore_with(&options)?`
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// Where the image goes. `None`: the engine's configured default.
    pub image_dir: Option<PathBuf>,
    /// Stop after dump or leave running. `None`: the engine's configured default.
    pub mode: Option<CheckpointMode>,
}

impl CheckpointOptions {
    /// Options with every field left to the engine's configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the image directory.
    pub fn image_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.image_dir = Some(dir.into());
        self
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: CheckpointMode) -> Self {
        self.mode = Some(mode);
        self
    }
}
