//! Where a checkpoint's image goes and how: from the options, else the environment.

use std::path::PathBuf;

use crac_api::{CheckpointMode, CheckpointOptions};

use crate::error::{Error, ErrorKind};
use crate::settings;

/// The image directory and mode for one checkpoint, from the options or the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the image goes.
    pub image_dir: PathBuf,
    /// Stop or leave running.
    pub mode: CheckpointMode,
}

impl Config {
    /// Fills what `options` leaves open from `CRAC_CHECKPOINT_TO` / `CRAC_CHECKPOINT_MODE`.
    pub fn resolve(options: &CheckpointOptions) -> Result<Self, Error> {
        let image_dir = match options.image_dir.clone().or_else(settings::checkpoint_to) {
            Some(d) => d,
            None => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "no image directory: set {}=/path/to/dir or pass \
                         CheckpointOptions::image_dir",
                        settings::CHECKPOINT_TO
                    ),
                ));
            }
        };
        let mode = match options.mode {
            Some(m) => m,
            None => settings::checkpoint_mode()?.unwrap_or(CheckpointMode::StopAfterDump),
        };
        Ok(Self { image_dir, mode })
    }
}
