//! The [`Resource`] trait: what a component implements to take part in a checkpoint.

use crate::Context;

/// The error a hook returns. Any error type converts into it with `?` or `.into()`.
pub type ResourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A component that must prepare for a checkpoint and recover after a restore.
///
/// `before_checkpoint` runs before the image is taken: close sockets, drain queues, flush.
/// `after_restore` runs in the restored process (and also in the original when the checkpoint
/// was aborted or the image was taken in leave-running mode): reconnect, re-resolve, re-seed.
///
/// Hooks are called one at a time, on a `crac-hooks` worker thread while the thread that called
/// [`Core::checkpoint_restore`](crate::Core::checkpoint_restore) watches the time: a hook that
/// does not return within its timeout (60 s by default; [`Core::set_hook_timeout`],
/// `CRAC_HOOK_TIMEOUT`, [`Context::register_with_timeout`]) counts as failed and is left
/// running, and the next checkpoint calls it again, so a hook that can block should tolerate a
/// second call while the first is still blocked (a lock held by the first makes the second
/// wait and time out too). A hook may register new resources (they join the next cycle) but may
/// not start another checkpoint.
///
/// [`Core::set_hook_timeout`]: crate::Core::set_hook_timeout
pub trait Resource: Send + Sync {
    /// Prepares for the image. An error aborts the checkpoint: no image is taken and every
    /// resource notified so far gets `after_restore`.
    fn before_checkpoint(&self, context: &Context) -> Result<(), ResourceError>;

    /// Recovers after a restore, an aborted checkpoint or a leave-running dump.
    fn after_restore(&self, context: &Context) -> Result<(), ResourceError>;

    /// A name for diagnostics and error reports. Default: the type name.
    fn name(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}
