//! The imaged process's side: the engine `Core::checkpoint_restore()` calls, the dump helper
//! it starts (CRIU cannot dump its own ancestor), the scan of descriptors CRIU could not
//! restore, the checkpoint through the broker for a process that is not root, the listener
//! for `crac checkpoint PID`, and the wait for its own pages after a lazy restore.

pub(crate) mod config;
pub(crate) mod engine;
pub(crate) mod fdcheck;
pub(crate) mod helper;
pub(crate) mod listener;
pub(crate) mod memory;
pub(crate) mod preflight;
pub(crate) mod via_broker;
