//! The `crac` command: restore an image, ask a running process to checkpoint itself, check the
//! machine. It lives in the library so that every binary built from it (the `crac` binary of
//! this crate, and the copy the end-to-end tests build) runs the same code.
//!
//! ```text
//! crac restore DIR [--lazy | --eager] [--verify full|metadata] [--pidns] [--env K=V]...
//!              [--detach] [--pid-wait SECS]
//! crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
//! crac check
//! crac push DIR REF [--sign KEY] …
//! crac pull REF DIR [--trust DIR] …
//! ```
//!
//! Messages go to the `err` writer (stderr), prefixed `crac:`; stdout belongs to the restored
//! process, which writes to the restorer's own stdout.

use std::io::Write;
use std::time::Duration;

mod check;
mod checkpoint;
#[cfg(feature = "registry")]
mod registry;
mod restore;

/// The usage text.
pub const USAGE: &str = "usage:
  crac restore DIR [--lazy | --eager] [--verify full|metadata] [--pidns] [--env K=V]...
               [--detach] [--pid-wait SECS]
      restore the image in DIR; waits for the restored process and exits with its status
      (--detach: exits once the process runs and its memory is all in and checked).
      --lazy (the default where `crac check` says it works): the process runs at once and
      its memory is served on demand while the rest streams in; --eager: every page is read
      first. --verify full: every file's digest before the process runs (default when
      eager); metadata: the page files' digests while it runs, a mismatch ends it (default
      when lazy). --pidns restores into a fresh PID namespace, so several copies of one image
      can run at once; --env passes configuration to the restored process
      (Core::management().restore_env()).
  crac restore --broker NAME [--env K=V]... [--detach]
      as a user who is not root: the checkpoint broker restores this user's image NAME
      (its seal and credentials checked) with this terminal's descriptors.
  crac restore REF [restore options] [--trust DIR]... [--allow-unsigned] [--pull-to DIR]
               [--plain-http] [--ca-file CA]
      pull the image REF (HOST[:PORT]/REPO[:TAG|@DIGEST], or oci://REF) from its registry,
      its signature checked (below), into DIR or the image cache, and restore it.
  crac push DIR REF [--sign KEY] [--chunk-mb N] [--level N] [--plain-http] [--ca-file CA]
      push the sealed image in DIR to an OCI registry as a zstd-compressed artifact, signed
      with the ed25519 KEY (PEM, `openssl genpkey -algorithm ed25519`; or CRAC_SIGNING_KEY);
      prints REPO@DIGEST. Credentials: REGISTRY_AUTH_FILE or ~/.docker/config.json.
  crac pull REF DIR [--trust DIR]... [--allow-unsigned] [--plain-http] [--ca-file CA]
      pull an image pushed by crac push into the new or empty DIR, streaming; refused before
      any page is downloaded unless signed by a key in --trust (or CRAC_TRUSTED_KEYS) and
      runnable on this host (CPU features, executable build).
  crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
      ask a running crac-criu program to checkpoint itself (like jcmd PID JDK.checkpoint)
  crac check
      can checkpoints work here? criu, its version, `criu check`, privileges, kernel,
      the checkpoint broker
  crac daemon [--socket PATH] [--store DIR] [--key FILE]
      (root) the checkpoint broker: users who are not root checkpoint and restore through it";

/// Where the command writes: `out` for results (`crac check`'s report, the image directory of
/// `crac checkpoint`), `err` for messages.
pub struct Term<'a> {
    /// Results.
    pub out: &'a mut dyn Write,
    /// Messages.
    pub err: &'a mut dyn Write,
}

impl Term<'_> {
    fn say(&mut self, msg: &str) {
        let _ = writeln!(self.err, "crac: {msg}");
        let _ = self.err.flush();
    }

    fn print(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
}

/// The `crac` program: runs [`run`] with the process's arguments and terminal and exits with
/// its code.
pub fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = run(
        &args,
        &mut Term {
            out: &mut out,
            err: &mut err,
        },
    );
    std::process::ExitCode::from(code as u8)
}

/// Runs the command with `args` (without the program name) and returns the exit code: the
/// restored process's status for `restore`, 0/1 for the others, 2 for a usage or setup error.
pub fn run(args: &[String], term: &mut Term<'_>) -> i32 {
    let r = match args.first().map(String::as_str) {
        Some("restore") => restore::cmd_restore(&args[1..], term),
        Some("checkpoint") => checkpoint::cmd_checkpoint(&args[1..], term),
        Some("check") => Ok(check::cmd_check(term)),
        #[cfg(feature = "registry")]
        Some("push") => registry::cmd_push(&args[1..], term),
        #[cfg(feature = "registry")]
        Some("pull") => registry::cmd_pull(&args[1..], term),
        Some("daemon") => crate::broker::server::run_daemon(&args[1..]),
        Some(crate::restore::pidns::INIT_COMMAND) => crate::restore::pidns::run_init(&args[1..]),
        Some(crate::restore::guard::GUARD_COMMAND) => crate::restore::guard::run_guard(&args[1..]),
        Some("-h") | Some("--help") | Some("help") => {
            term.print(USAGE);
            Ok(0)
        }
        Some(c) => Err(format!("unknown command `{c}`\n{USAGE}")),
        None => Err(USAGE.to_owned()),
    };
    match r {
        Ok(code) => code.clamp(0, 255),
        Err(e) => {
            term.say(&format!("error: {e}"));
            2
        }
    }
}

pub(crate) fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

pub(crate) fn seconds(s: &str, flag: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{flag} {s}: not a number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn usage_errors_exit_2() {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let mut t = Term {
            out: &mut o,
            err: &mut e,
        };
        assert_eq!(run(&args("frobnicate"), &mut t), 2);
        assert_eq!(run(&args("checkpoint notapid"), &mut t), 2);
        assert!(String::from_utf8_lossy(&e).contains("unknown command `frobnicate`"));
    }
}
