//! The imaged process's side: the engine `Core::checkpoint_restore()` calls, the dump helper
//! it starts (CRIU cannot dump its own ancestor), the scan of descriptors CRIU could not
//! restore, the listener for `crac checkpoint PID`, and the wait for its own pages after a
//! lazy restore.

pub(crate) mod control;
pub(crate) mod engine;
pub(crate) mod fdcheck;
pub(crate) mod helper;
pub(crate) mod memory;
