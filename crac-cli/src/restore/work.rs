//! Where a restore keeps its private files (criu's pidfile, the lazy-pages daemon's socket):
//! a new directory (`mkdtemp`-style: made, never found) in a directory only root or the
//! restoring user can write where there is one: `/run/crac` for root, the user's
//! `XDG_RUNTIME_DIR`; else the temp directory, where making it new is what keeps it ours.

use std::path::Path;

use crate::error::{Error, ErrorKind};
use crate::sys;
use crac_criu::safe_dir::{self, Access, Dir};

/// A new private directory named `PREFIX…` for one restore.
pub fn temp(prefix: &str) -> Result<Dir, Error> {
    let (base, prefix) = if sys::euid() == 0 {
        (crac_criu::run_dir::open(true), prefix.to_owned())
    } else {
        match user_runtime_dir() {
            Some(d) => (Ok(d), format!("crac-{prefix}")),
            None => (Dir::open(&std::env::temp_dir()), format!("crac-{prefix}")),
        }
    };
    base.and_then(|b| b.make_temp(&prefix)).map_err(|e| {
        Error::new(
            ErrorKind::Other,
            format!("cannot make the restore's work directory: {e}"),
        )
        .with_source(e)
    })
}

/// This user's `XDG_RUNTIME_DIR`, if it is set, absolute and private.
fn user_runtime_dir() -> Option<Dir> {
    let x = std::env::var_os("XDG_RUNTIME_DIR")?;
    let p = Path::new(&x);
    if !p.is_absolute() {
        return None;
    }
    let d = Dir::open_trusted(p, sys::euid()).ok()?;
    let m = d.metadata().ok()?;
    safe_dir::check_owner_mode(&m, sys::euid(), Access::ReadWrite).ok()?;
    Some(d)
}
