//! What a checkpoint did: restored, continued, or no image.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// The result of [`Core::checkpoint_restore`](crate::Core::checkpoint_restore) when every hook
/// succeeded. Unlike `org.crac`, the caller can tell the three cases apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This process was restored from an image.
    Restored(Restored),
    /// The image was written and this is the original process, still running (leave-running).
    Continued {
        /// The image's generation.
        generation: u64,
        /// Where the image was written.
        image_dir: PathBuf,
    },
    /// The engine takes no image (the noop engine); the hooks ran.
    NoImage,
}

/// Details of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Which image of this process's line: 1 for the first checkpoint, 2 for an image taken by a
    /// process restored from image 1, and so on.
    pub generation: u64,
    /// Wall-clock time the restore completed.
    pub restore_time: SystemTime,
    /// How long the process was frozen: wall time from the snapshot to the restore. (Monotonic
    /// clocks do not jump across a CRIU restore, so this is the only way to learn it.)
    pub frozen: Duration,
    /// The image it came from, when the engine knows.
    pub image_dir: Option<PathBuf>,
    /// Configuration the restorer handed to this process (`KEY=VALUE` pairs).
    pub new_env: Vec<(String, String)>,
}

impl Outcome {
    /// Whether this process is a restored copy.
    pub fn is_restored(&self) -> bool {
        matches!(self, Outcome::Restored(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Restored(r) => write!(
                f,
                "restored from image generation {} after {:.3}s frozen",
                r.generation,
                r.frozen.as_secs_f64()
            ),
            Outcome::Continued {
                generation,
                image_dir,
            } => write!(
                f,
                "image generation {generation} written to {}, process continued",
                image_dir.display()
            ),
            Outcome::NoImage => f.write_str("no image taken"),
        }
    }
}
