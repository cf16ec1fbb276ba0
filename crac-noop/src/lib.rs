//! The noop checkpoint engine: runs the whole protocol (every `before_checkpoint`, no snapshot,
//! every `after_restore`) so resource logic can be exercised on any machine, like CRaC's
//! simengine.
//!
//! Link it with one line in the application's `main.rs`:
//!
//! ```
//! use crac_noop as _;
//! ```
//!
//! It ranks lowest: when a real engine is linked and usable, that one is used unless
//! `CRAC_ENGINE=noop` is set.

use crac_api::{CheckpointOptions, Engine, EngineError, EngineOutcome};

/// The engine. Registered at link time; you never need to name it.
#[derive(Debug)]
pub struct NoopEngine;

impl Engine for NoopEngine {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn probe(&self) -> Result<(), EngineError> {
        Ok(())
    }

    fn checkpoint(&self, _options: &CheckpointOptions) -> Result<EngineOutcome, EngineError> {
        tracing::debug!("noop engine: no image taken");
        Ok(EngineOutcome::NoImage)
    }
}

static ENGINE: NoopEngine = NoopEngine;

crac_api::register_engine!(&ENGINE, 0);
