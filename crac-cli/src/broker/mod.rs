//! The checkpoint broker: a small root service (`crac daemon`) through which services of
//! users who are not root checkpoint themselves and are restored, without any of them being
//! able to execute a capability-bearing criu (whoever can, holds its capabilities: CRIU's
//! unprivileged mode trusts its plugins and the credentials an image records).
//!
//! - `server`: the daemon. It identifies the caller by `SO_PEERCRED` (and a pidfd), dumps
//!   only the caller's own tree of unprivileged tasks (`tree`), checks the credentials CRIU
//!   recorded (`creds`), seals each image with a host key only root reads (`seal`), and
//!   restores only images it sealed for that same user, with those credentials checked
//!   again. It runs criu itself, with a cleared environment, no plugins and no action
//!   scripts, every wait bounded. Images live in its store (`/var/lib/crac/images/UID/NAME`,
//!   root's): a user names them, never reads or writes them.
//! - `client`: `crac restore --broker NAME` and `crac check`'s ping. The engine's own
//!   checkpoint through the broker, and the wire protocol both sides speak, are in
//!   [`crac_criu::broker`].

mod as_caller;
mod children;
pub(crate) mod client;
mod creds;
mod dump;
mod limits;
mod peer;
mod restore;
mod seal;
pub(crate) mod server;
mod tree;
