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
//! Configuration: environment variables, all of them in [`settings`] (one table: the
//! variables of the engine, of the `crac` program and of `crac-api`);
//! [`crac_api::CheckpointOptions`] overrides the image directory and the mode.
//!
//! Before CRIU runs, the engine scans the process's file descriptors and refuses, with one
//! line per fd, anything CRIU cannot checkpoint: connected TCP sockets (with both addresses),
//! unix stream sockets connected to other processes, held file locks. What fds 0–2 were is
//! recorded in the image's `crac-image.txt` so `crac restore` can hand the restorer's own
//! stdout/stderr to the restored process.
//!
//! A running process can be asked to checkpoint itself from outside with
//! `crac checkpoint PID` (see `docs/crac-command.md`).
//!
//! # What this crate holds for the `crac` program
//!
//! The `crac` program (crate `crac-cli`: restore, `checkpoint PID`, check, the broker, push
//! and pull) is built apart, with the dependencies and privileges an operator's tool needs;
//! an application that links this engine builds none of them. The two share, through these
//! modules, what must agree on both sides (versioned together, not an API for applications):
//!
//! | module | what |
//! | --- | --- |
//! | [`image`] | the image format: metadata, manifest (seal and verify), restore payload, CPU features, build id |
//! | [`criu`] | finding and checking criu, its kernel probe, its logs, and [`criu::invocation`]: every call of criu is built there |
//! | [`settings`] | every `CRAC_*` environment variable |
//! | [`control`] | the channel of `crac checkpoint PID` (signal, directory, file names) |
//! | [`broker`] | the checkpoint broker's wire protocol |
//! | [`safe_dir`], [`run_dir`] | directories opened through descriptors, owner and mode checked; `/run/crac` |
//! | [`sys`] | the system calls both make |
#![warn(missing_docs)]

pub mod broker;
pub(crate) mod checkpoint;
pub mod control;
pub mod criu;
pub mod error;
pub mod image;
pub mod run_dir;
pub mod safe_dir;
pub mod settings;
pub mod sys;

pub use crate::checkpoint::engine::CriuEngine;
pub use crate::checkpoint::memory::wait_own_memory_in;
pub use crate::error::{Error, ErrorKind};

static ENGINE: CriuEngine = CriuEngine;

crac_api::register_engine!(&ENGINE, 100);

/// Runs before `main`: in a program started as the dump helper, the helper's work (it exits);
/// otherwise the `crac checkpoint PID` listener.
fn init() {
    checkpoint::helper::run_if_helper();
    checkpoint::listener::init();
}

crate::__before_main!(crate::init);
