//! `/run/crac`: root's directory of crac's runtime state, shared by the two sides (the
//! per-user control channels of `crac checkpoint PID`, and the stamp of CRIU's cached kernel
//! probe).

use std::path::Path;

use crate::safe_dir::{self, Access, Dir};
use crate::sys;

fn other(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// `/run/crac`, root's directory of crac's runtime state (per-user channels, the kdat stamp);
/// with `create` (root only) made `0755` if missing. Refused unless root's alone.
pub fn open(create: bool) -> std::io::Result<Dir> {
    let run = Dir::open(Path::new("/run"))?;
    let crac = if create {
        let d = run.subdir_mode("crac", 0o755)?;
        sys::fchmod(d.fd(), 0o755)?;
        d
    } else {
        run.open_subdir("crac")
            .map_err(|e| other(format!("/run/crac: {e}")))?
    };
    let m = crac.metadata()?;
    safe_dir::check_owner_mode(&m, 0, Access::Write)
        .map_err(|why| other(format!("/run/crac is not root's alone ({why:?})")))?;
    Ok(crac)
}
