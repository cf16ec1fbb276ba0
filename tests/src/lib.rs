//! End-to-end test support.

pub mod kafka;
pub mod process;
pub mod stream;
pub mod warm;
