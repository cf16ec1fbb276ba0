//! Coordinated Restore at Checkpoint for Rust: the facade.
//!
//! Libraries depend on this crate alone and implement [`Resource`] for whatever must be closed
//! before a checkpoint and reopened after a restore (sockets, pools, caches of host names). The
//! application links one engine (`crac-criu` for real images, `crac-noop` to run the hooks
//! without an image) and calls [`Core::checkpoint_restore`].
//!
//! ```
//! use std::sync::Arc;
//! use crac_api::{Context, Core, Resource, ResourceError};
//!
//! struct Pool;
//! impl Resource for Pool {
//!     fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
//!         Ok(()) // close connections
//!     }
//!     fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
//!         Ok(()) // reconnect
//!     }
//! }
//!
//! let pool = Arc::new(Pool);
//! Core::global_context().register(&pool); // held weakly
//! // With an engine linked: `let outcome = Core::checkpoint_restore()?;`
//! ```
//!
//! Semantics, in short: one checkpoint at a time; every resource is notified even when one
//! fails; a failed `before_checkpoint` means no image and `after_restore` for everyone
//! notified; the [`Outcome`] tells restored, continued and no-image apart.
#![warn(missing_docs)]

mod context;
mod core;
pub mod engine;
mod error;
mod global;
mod management;
mod outcome;
mod plan;
mod resource;
pub mod uniqueness;

pub use crate::context::Context;
pub use crate::core::Core;
pub use crate::engine::{
    CheckpointMode, CheckpointOptions, Engine, EngineError, EngineErrorKind, EngineOutcome,
    EngineRegistration, RestoreData,
};
pub use crate::error::{CheckpointError, ContextFailures, HookTimedOut, Phase, ResourceFailure};
pub use crate::global::{GlobalContext, Priority, StaticResource};
pub use crate::management::Management;
pub use crate::outcome::{Outcome, Restored};
pub use crate::resource::{Resource, ResourceError};
pub use crate::uniqueness::{ReseedGuard, os_random, os_random_u64, restore_epoch, restore_nonce};

#[doc(hidden)]
pub use inventory;
