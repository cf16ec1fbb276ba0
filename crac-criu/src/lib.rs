//! crac-rs's real checkpoint engine: CRIU.
//!
//! Link it with one line in the application's `main.rs`:
//!
//! ```
//! use crac_criu as _;
//! ```
//!
//! `crac_api::Core::checkpoint_restore()` then takes an image of the process with CRIU
//! (`criu swrk`, run by a helper that is not a descendant of the process, as CRIU cannot dump
//! its own ancestor) and returns `Restored` in every copy restored from it with
//! `crac restore DIR`.
//!
//! Configuration (environment; [`crac_api::CheckpointOptions`] overrides the first two):
//!
//! | variable | meaning |
//! | --- | --- |
//! | `CRAC_CHECKPOINT_TO` | image directory (created `0700`; one others can access is refused) |
//! | `CRAC_CHECKPOINT_MODE` | `stop` (default: the process ends after the dump) or `leave-running` |
//! | `CRAC_CRIU` | the criu executable (else `PATH`, else `scripts/install-criu`'s location) |
//! | `CRAC_CRIU_LOG_LEVEL` | CRIU's log level for `dump.log` in the image directory (default 4) |
//! | `CRAC_CHECKPOINT_SIGNAL` | `0` disables the `crac checkpoint PID` listener |
//! | `CRAC_CRIU_TIMEOUT` | seconds a dump may take before CRIU is stopped (default 300) |
//!
//! Before CRIU runs, the engine scans the process's file descriptors and refuses, with one
//! line per fd, anything CRIU cannot checkpoint: connected TCP sockets (with both addresses),
//! unix stream sockets connected to other processes, held file locks. What fds 0–2 were is
//! recorded in the image's `crac-image.txt` so `crac restore` can hand the restorer's own
//! stdout/stderr to the restored process.
//!
//! A running process can be asked to checkpoint itself from outside with
//! `crac checkpoint PID` (see `docs/crac-command.md`).
#![warn(missing_docs)]

pub(crate) mod broker;
pub(crate) mod checkpoint;
pub mod cli;
pub(crate) mod criu;
pub(crate) mod error;
pub(crate) mod image;
#[cfg(feature = "registry")]
pub(crate) mod registry;
pub(crate) mod restore;
pub(crate) mod run_dir;
mod sys;

pub use crate::checkpoint::engine::CriuEngine;
pub use crate::checkpoint::memory::wait_own_memory_in;

/// What the end-to-end tests reach inside the crate (the `testing` feature): not an API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::image::cpu::host_features;
    pub use crate::image::dir::Dir;
    pub use crate::image::manifest::seal;
}

static ENGINE: CriuEngine = CriuEngine;

crac_api::register_engine!(&ENGINE, 100);

/// Runs before `main`: in a program started as the dump helper, the helper's work (it exits);
/// otherwise the `crac checkpoint PID` listener.
fn init() {
    checkpoint::helper::run_if_helper();
    checkpoint::control::init();
}

crate::__before_main!(crate::init);
