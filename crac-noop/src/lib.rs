//! The noop checkpoint engine for `crac-api`: runs the whole protocol (every
//! `before_checkpoint`, no snapshot, every `after_restore`) so resource logic can be exercised
//! on any machine, like CRaC's simengine.
//!
//! Link it with one line in the application's `main.rs` (without it the linker drops the
//! engine's registration), then checkpoint as usual:
//!
//! ```
//! use crac_api::{Core, Outcome};
//! use crac_noop as _;
//!
//! assert_eq!(Core::engine_name(), Some("noop"));
//! assert_eq!(Core::checkpoint_restore().unwrap(), Outcome::NoImage);
//! ```
//!
//! It ranks lowest: when a real engine is linked and usable, that one is used unless
//! `CRAC_ENGINE=noop` is set.
#![warn(missing_docs)]

use crac_api::CheckpointOptions;
use crac_api::spi::{Engine, EngineError, EngineOutcome};

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
