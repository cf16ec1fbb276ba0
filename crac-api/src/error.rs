//! Errors of a checkpoint: every resource's failure with its name, the engine's refusal, misuse.

use std::fmt;
use std::time::Duration;

use crate::spi::EngineError;
use crate::{Outcome, ResourceError};

/// Which hook failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `before_checkpoint`.
    BeforeCheckpoint,
    /// `after_restore`.
    AfterRestore,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::BeforeCheckpoint => "before_checkpoint",
            Phase::AfterRestore => "after_restore",
        })
    }
}

/// One resource's failure.
#[derive(Debug)]
pub struct ResourceFailure {
    /// The resource's name, prefixed by the names of the contexts it is nested in
    /// (`"global/application/my-cache"`).
    pub resource: String,
    /// The hook that failed.
    pub phase: Phase,
    /// What it returned. A panic in a hook is caught and reported here too.
    pub error: ResourceError,
}

impl fmt::Display for ResourceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed in {}: {}",
            self.resource, self.phase, self.error
        )
    }
}

/// A hook that did not return within its timeout: the error of its [`ResourceFailure`]. The
/// hook was left running on its own thread (a thread cannot be stopped from outside); its
/// resource does not get `after_restore` for that cycle, and the next checkpoint calls it
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookTimedOut {
    /// The hook.
    pub phase: Phase,
    /// The timeout it overran.
    pub after: Duration,
}

impl fmt::Display for HookTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} did not return within {:.1} s (the hook timeout: Core::set_hook_timeout, \
             CRAC_HOOK_TIMEOUT or register_with_timeout); it was left running and counts as \
             failed",
            self.phase,
            self.after.as_secs_f64()
        )
    }
}

impl std::error::Error for HookTimedOut {}

/// The error a [`Context`](crate::Context) returns when some of its resources failed; the core
/// flattens it, so nested failures reach the user with their full path.
#[derive(Debug)]
pub struct ContextFailures {
    /// The failures, in the order the resources were called.
    pub failures: Vec<ResourceFailure>,
}

impl fmt::Display for ContextFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} resource(s) failed", self.failures.len())?;
        for x in &self.failures {
            write!(f, "; {x}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ContextFailures {}

/// Why [`Core::checkpoint_restore`](crate::Core::checkpoint_restore) did not end cleanly.
#[derive(Debug)]
#[non_exhaustive]
pub enum CheckpointError {
    /// No engine is linked (or none can work here, or `CRAC_ENGINE` names one that is not
    /// linked). Registration still works; no hook was called.
    Unsupported(String),
    /// Called from inside a hook of a running checkpoint. Nothing was done.
    Recursive,
    /// One or more resources failed. When a `before_checkpoint` failed, no image was taken
    /// (`outcome` is `None`) and `after_restore` still ran for everyone notified. When only
    /// `after_restore` hooks failed, `outcome` says what happened to the image.
    Resources {
        /// What happened, when the snapshot step ran.
        outcome: Option<Outcome>,
        /// Every failure, each with the resource's name.
        failures: Vec<ResourceFailure>,
    },
    /// The engine did not take the image. Every resource got `after_restore`; the process
    /// goes on. `after_restore` failures, if any, are listed too.
    Engine {
        /// The engine's error.
        error: EngineError,
        /// `after_restore` failures that followed.
        failures: Vec<ResourceFailure>,
    },
}

impl CheckpointError {
    /// Every resource failure this error carries.
    pub fn failures(&self) -> &[ResourceFailure] {
        match self {
            CheckpointError::Resources { failures, .. }
            | CheckpointError::Engine { failures, .. } => failures,
            _ => &[],
        }
    }

    /// Whether an image was taken despite the error (only `after_restore` hooks failed).
    pub fn image_taken(&self) -> bool {
        matches!(
            self,
            CheckpointError::Resources { outcome: Some(o), .. } if !matches!(o, Outcome::NoImage)
        )
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Unsupported(why) => write!(f, "checkpoint/restore unsupported: {why}"),
            CheckpointError::Recursive => f.write_str(
                "checkpoint_restore() called from inside a checkpoint hook: recursive checkpoints are not allowed",
            ),
            CheckpointError::Resources { outcome, failures } => {
                match outcome {
                    None => write!(f, "checkpoint aborted, no image taken: ")?,
                    Some(o) => write!(f, "checkpoint finished ({o}) but resources failed: ")?,
                }
                for (i, x) in failures.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{x}")?;
                }
                Ok(())
            }
            CheckpointError::Engine { error, failures } => {
                write!(f, "checkpoint failed, no image taken: {error}")?;
                for x in failures {
                    write!(f, "; {x}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Engine { error, .. } => Some(error),
            _ => None,
        }
    }
}
