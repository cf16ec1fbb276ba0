//! `crac restore --pidns`: the restore runs under an init of ours, PID 1 of a fresh PID
//! namespace (`unshare --pid --fork --mount-proc crac __pidns-init …`).
//!
//! Why an init of our own rather than criu itself as PID 1: criu without `--restore-detached`
//! stays as the namespace's init, but then nothing says when the restore is over (its pidfile
//! is written while it keeps running, so a caller polls and races a program that ends at
//! once), and it exits 0 whatever the restored program's status. Our init runs
//! `criu restore --restore-detached`, so criu's own exit status says whether the restore
//! worked; it then tells the restorer on a pipe (`restored NS_PID` or `failed …`), adopts the
//! restored process (PID 1 is the namespace's reaper) and exits with its exit status. When
//! it exits, the kernel ends whatever is left in the namespace.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use crate::sys;

/// The hidden `crac` subcommand that runs the init: `crac __pidns-init --status-fd N
/// --pidfile FILE -- CRIU ARGS…`.
pub const INIT_COMMAND: &str = "__pidns-init";

/// What the init reports on its status pipe.
#[derive(Debug, PartialEq, Eq)]
pub enum InitReport {
    /// criu restored the tree; the restored process has this pid inside the namespace.
    Restored(i32),
    /// criu failed (its exit status, as text), or the init could not run it.
    Failed(String),
}

impl InitReport {
    fn line(&self) -> String {
        match self {
            InitReport::Restored(p) => format!("restored {p}\n"),
            InitReport::Failed(why) => format!("failed {}\n", why.replace('\n', " ")),
        }
    }

    /// Parses one status line; anything else is a failure that says what came.
    pub fn parse(line: &str) -> InitReport {
        let line = line.trim_end();
        if let Some(p) = line.strip_prefix("restored ") {
            if let Some(p) = p.parse::<i32>().ok().filter(|p| *p > 1) {
                return InitReport::Restored(p);
            }
        } else if let Some(why) = line.strip_prefix("failed ") {
            return InitReport::Failed(why.to_owned());
        }
        InitReport::Failed(format!("the pidns init said `{line}`"))
    }
}

/// Reads the init's report from the status pipe, waiting at most `timeout`. `None`: nothing
/// within the time. An init that ended without a line is a failure.
pub fn read_report(status: OwnedFd, timeout: Duration) -> Option<InitReport> {
    let (tx, rx) = mpsc::channel();
    // A thread, so the wait has a bound without a poll(2) wrapper; it ends when the pipe
    // closes, which the caller ensures by ending the init on a timeout.
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = match BufReader::new(fs::File::from(status)).read_line(&mut line) {
            Ok(0) => InitReport::Failed("the pidns init ended without a report".into()),
            Ok(_) => InitReport::parse(&line),
            Err(e) => InitReport::Failed(format!("reading the pidns init's report: {e}")),
        };
        let _ = tx.send(r);
    });
    rx.recv_timeout(timeout).ok()
}

/// The init's command line after [`INIT_COMMAND`] (a hidden subcommand of `crac`).
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct InitArgs {
    /// The pipe the init reports on (`restored NS_PID` or `failed …`).
    #[arg(long, value_name = "N")]
    status_fd: RawFd,
    /// Where criu writes the restored process's pid.
    #[arg(long, value_name = "FILE")]
    pidfile: PathBuf,
    /// criu and its arguments, after `--`: taken as they are, dashes and all.
    #[arg(last = true, required = true, value_name = "CRIU ARGS")]
    criu: Vec<String>,
}

/// Runs the init (PID 1 of the namespace) and returns the exit code: the restored process's
/// status, or 1 when the restore failed (reported on the status pipe first).
pub fn run_init(a: &InitArgs) -> Result<i32, String> {
    let mut status = fs::File::from(
        sys::inherited_fd(a.status_fd).map_err(|e| format!("status fd {}: {e}", a.status_fd))?,
    );
    let report = restore_detached(a);
    let _ = status.write_all(report.line().as_bytes());
    drop(status); // the restorer sees the line, then EOF
    let InitReport::Restored(root) = report else {
        return Ok(1);
    };
    // Adopted orphans are reaped as they end; the restored root's status is ours.
    loop {
        match sys::wait_any() {
            Ok(Some((pid, st))) if pid == root => return Ok(sys::exit_code(st)),
            Ok(Some(_)) => continue,
            Ok(None) => return Err(format!("restored pid {root} is not a child of the init")),
            Err(e) => return Err(format!("waitpid: {e}")),
        }
    }
}

fn restore_detached(a: &InitArgs) -> InitReport {
    let (criu, criu_args) = a.criu.split_first().expect("clap requires criu");
    let st = match Command::new(criu).args(criu_args).status() {
        Ok(st) => st,
        Err(e) => return InitReport::Failed(format!("cannot run {criu}: {e}")),
    };
    let pid = fs::read_to_string(&a.pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    fs::remove_file(&a.pidfile).ok();
    match pid {
        Some(pid) if st.success() => InitReport::Restored(pid),
        Some(_) => InitReport::Failed(format!("criu restore failed ({st})")),
        None if st.success() => InitReport::Failed("criu restore wrote no pidfile".into()),
        None => InitReport::Failed(format!("criu restore failed ({st})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(line: &str) -> Result<InitArgs, String> {
        let line: Vec<&str> = std::iter::once(INIT_COMMAND)
            .chain(line.split_whitespace())
            .collect();
        match crate::cli::args::parse(&line)? {
            crate::cli::args::Command::PidnsInit(a) => Ok(a),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn init_arguments() {
        let a = parse_args("--status-fd 7 --pidfile /t/p -- /c restore -D /i --lazy-pages -v4")
            .unwrap();
        assert_eq!(a.status_fd, 7);
        assert_eq!(a.pidfile, PathBuf::from("/t/p"));
        assert_eq!(a.criu, ["/c", "restore", "-D", "/i", "--lazy-pages", "-v4"]);
        let a = parse_args("--pidfile /t/p --status-fd 3 -- -x --status-fd 9 -- y").unwrap();
        assert_eq!(a.status_fd, 3);
        assert_eq!(a.criu, ["-x", "--status-fd", "9", "--", "y"]);
        assert!(parse_args("--status-fd 7 --pidfile /t/p --").is_err());
        assert!(parse_args("--status-fd 7 --pidfile /t/p /c").is_err());
        assert!(parse_args("--status-fd x --pidfile /t/p -- c").is_err());
        assert!(parse_args("--bogus").is_err());
    }

    #[test]
    fn report_lines_round_trip() {
        for r in [
            InitReport::Restored(4242),
            InitReport::Failed("criu restore failed (exit status: 1)".into()),
        ] {
            assert_eq!(InitReport::parse(&r.line()), r);
        }
        assert!(matches!(
            InitReport::parse("restored 1"),
            InitReport::Failed(_)
        ));
        assert!(matches!(
            InitReport::parse("garbage"),
            InitReport::Failed(_)
        ));
    }

    #[test]
    fn a_silent_init_is_a_failure_and_a_slow_one_a_timeout() {
        let (r, w) = sys::pipe().unwrap();
        drop(w);
        assert!(matches!(
            read_report(r, Duration::from_secs(5)),
            Some(InitReport::Failed(m)) if m.contains("without a report")
        ));
        let (r, _w) = sys::pipe().unwrap();
        assert_eq!(read_report(r, Duration::from_millis(20)), None);
    }
}
