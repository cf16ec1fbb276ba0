//! `crac`, the program of crac-rs: restore an image, ask a running process to checkpoint
//! itself, check the machine, the checkpoint broker for users who are not root, and images
//! pushed to and pulled from OCI registries.
//!
//! It is what an operator runs, apart from what an application links (`crac-criu`, the
//! engine): the two share the image format, the CRIU driver, the control channel and the
//! broker's protocol, which are the engine's documented modules. The code lives in this
//! library so that every binary built from it (the `crac` binary, and the copy the
//! end-to-end tests build) runs the same code: its `main` is [`main`].
#![warn(missing_docs)]

pub(crate) mod broker;
pub(crate) mod checkpoint_request;
pub mod cli;
pub(crate) mod error;
#[cfg(feature = "registry")]
pub(crate) mod registry;
pub(crate) mod restore;
pub(crate) mod sys;

pub use cli::main;
