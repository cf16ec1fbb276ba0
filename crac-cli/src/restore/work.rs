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
    base.and_then(|b| {
        prune_failed(&b, &prefix);
        b.make_temp(&prefix)
    })
    .map_err(|e| {
        Error::new(
            ErrorKind::Other,
            format!("cannot make the restore's work directory: {e}"),
        )
        .with_source(e)
    })
}

/// A failed restore keeps its work directory (criu's log is there, and its error names it);
/// the newest this many of those stay.
const KEPT_FAILED: usize = 8;

/// Removes the work directories named `prefix…` in `base` beyond the [`KEPT_FAILED`] newest
/// among those no restore can still be using (older than the CRIU timeout and a minute).
fn prune_failed(base: &Dir, prefix: &str) {
    let in_use = crac_criu::criu::criu_timeout()
        .unwrap_or(crac_criu::settings::DEFAULT_CRIU_TIMEOUT)
        + std::time::Duration::from_secs(60);
    let mut old: Vec<(std::time::SystemTime, String)> = base
        .entries()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .filter_map(|n| {
            let t = base.stat(&n).ok().flatten()?.modified().ok()?;
            (t.elapsed().ok()? > in_use).then_some((t, n))
        })
        .collect();
    old.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
    for (_, name) in old.into_iter().skip(KEPT_FAILED) {
        let _ = std::fs::remove_dir_all(base.path().join(name));
    }
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
