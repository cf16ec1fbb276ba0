//! Which threads are inside a checkpoint: the one that runs it and its `crac-hooks` workers.
//! A hook on any of them that calls `Core::checkpoint_restore` gets
//! `CheckpointError::Recursive` instead of deadlocking on the checkpoint lock.

use std::cell::Cell;

thread_local! {
    static IN_CHECKPOINT: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread runs a checkpoint or its hooks.
pub(crate) fn in_checkpoint() -> bool {
    IN_CHECKPOINT.with(Cell::get)
}

/// Marks a `crac-hooks` worker thread for its whole life (it exists only to run hooks).
pub(crate) fn mark_hook_thread() {
    IN_CHECKPOINT.with(|c| c.set(true));
}

/// Marks the checkpointing thread while the guard lives.
pub(crate) struct InCheckpoint;

impl InCheckpoint {
    pub(crate) fn enter() -> Self {
        IN_CHECKPOINT.with(|c| c.set(true));
        InCheckpoint
    }
}

impl Drop for InCheckpoint {
    fn drop(&mut self) {
        IN_CHECKPOINT.with(|c| c.set(false));
    }
}
