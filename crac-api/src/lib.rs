//! Coordinated Restore at Checkpoint for Rust: the facade.
//!
//! Libraries depend on this crate alone and implement [`Resource`] for whatever must be closed
//! before a checkpoint and reopened after a restore (sockets, pools, caches of host names). The
//! application links one engine (`crac-criu` for real images, `crac-noop` to run the hooks
//! without an image) and calls [`Core::checkpoint_restore`].
//!
//! ```
//! use std::sync::Arc;
//! use crac_api::{CheckpointError, Context, Core, Outcome, Resource, ResourceError};
//! use crac_noop as _; // the application links one engine (crac-criu takes real images)
//!
//! struct Pool;
//! impl Resource for Pool {
//!     fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
//!         Ok(()) // drain and close the connections
//!     }
//!     fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
//!         Ok(()) // reconnect (also after an aborted checkpoint)
//!     }
//! }
//!
//! fn main() -> Result<(), CheckpointError> {
//!     let pool = Arc::new(Pool);
//!     let db = Arc::new(Context::new("db")); // contexts nest: a context is a resource
//!     db.register(&pool); // held weakly: dropping `pool` unregisters it
//!     Core::global_context().register(&db);
//!     match Core::checkpoint_restore()? {
//!         Outcome::Restored(r) => println!("restored after {:?} frozen", r.frozen),
//!         Outcome::Continued { image_dir, .. } => println!("image in {}", image_dir.display()),
//!         Outcome::NoImage => println!("hooks ran, no image taken"),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Semantics, in short: one checkpoint at a time; every resource is notified even when one
//! fails; a failed `before_checkpoint` means no image and `after_restore` for everyone
//! notified; the [`Outcome`] tells restored, continued and no-image apart. A hook that does
//! not return in time (60 s, [`Core::set_hook_timeout`], `CRAC_HOOK_TIMEOUT`) counts as failed.
//!
//! A restored process is one of possibly many clones of one image: [`restore_epoch`],
//! [`restore_nonce`], [`ReseedGuard`] and [`os_random`] let it draw afresh what must be unique
//! (random generator state, ids, nonces).
//!
//! [`WipeOnFree`], an opt-in global allocator, zeroes what the program frees, so that secrets
//! libraries parsed and dropped (a TLS client key) are not in an image.
//!
//! Engines implement the [`spi`] module; `CRAC_ENGINE=noop|criu` picks one when several are
//! linked.
#![warn(missing_docs)]

mod async_resource;
mod context;
mod core;
mod discovery;
mod error;
mod global;
mod hook;
mod hook_thread;
mod management;
mod options;
mod outcome;
mod resource;
mod run;
pub mod spi;
mod uniqueness;
mod wipe;

pub use crate::async_resource::{AsyncResource, BoxFuture, CheckpointFuture, Spawner};
pub use crate::context::Context;
pub use crate::core::Core;
pub use crate::error::{CheckpointError, ContextFailures, HookTimedOut, Phase, ResourceFailure};
pub use crate::global::{GlobalContext, Priority, StaticResource};
pub use crate::management::Management;
pub use crate::options::{CheckpointMode, CheckpointOptions};
pub use crate::outcome::{Outcome, Restored};
pub use crate::resource::{Resource, ResourceError};
pub use crate::uniqueness::{ReseedGuard, os_random, os_random_u64, restore_epoch, restore_nonce};
pub use crate::wipe::WipeOnFree;

/// What the macros `register_static!` and `register_engine!` expand to; not an API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
