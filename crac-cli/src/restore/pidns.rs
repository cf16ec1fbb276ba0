//! The init of a restore: `crac restore --pidns` runs the restore under it as PID 1 of a
//! fresh PID namespace (`unshare --pid --fork --mount-proc crac __pidns-init …`), and the
//! checkpoint broker runs each restore under it (in a fresh namespace, or in its own as a
//! subreaper) so that the restored service is the init's to hold, not the broker's: the
//! broker is free once the init reports, and the init sends the service's exit status to the
//! caller's connection (`--answer-fd`) when it ends.
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
use std::io::Write;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lazy;
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
    let deadline = std::time::Instant::now() + timeout;
    let mut line = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            return Some(InitReport::parse(&String::from_utf8_lossy(&line[..end])));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        match sys::poll_readable(&status, ms) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                return Some(InitReport::Failed(format!(
                    "reading the pidns init's report: {e}"
                )));
            }
        }
        match rustix::io::read(&status, &mut buf) {
            Ok(0) => {
                return Some(InitReport::Failed(
                    "the pidns init ended without a report".into(),
                ));
            }
            // A report is one short line: more is not the init's.
            Ok(n) if line.len() + n <= 4096 => line.extend_from_slice(&buf[..n]),
            Ok(_) => {
                return Some(InitReport::Failed(
                    "the pidns init's report is too long".into(),
                ));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Some(InitReport::Failed(format!(
                    "reading the pidns init's report: {e}"
                )));
            }
        }
    }
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
    /// A connection to send `exit code=N` on when the restored process ends (the broker's
    /// caller).
    #[arg(long, value_name = "N")]
    answer_fd: Option<RawFd>,
    /// Where to say why the restored process was ended, should that happen after the
    /// report (the caller's stderr; the broker's restores).
    #[arg(long, value_name = "N")]
    say_fd: Option<RawFd>,
    /// A lazy restore: the lazy-pages daemon the init starts before criu restore.
    #[command(flatten)]
    lazy: LazyArgs,
    /// criu and its arguments, after `--`: taken as they are, dashes and all.
    #[arg(last = true, required = true, value_name = "CRIU ARGS")]
    criu: Vec<String>,
}

/// The lazy-pages daemon of a lazy restore under the init (the broker's): its command line,
/// run as it is (criu as the caller), and the pipe it reports ready on.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct LazyArgs {
    /// The read end of the daemon's status pipe.
    #[arg(long, value_name = "N", requires = "lazy_pages_arg")]
    lazy_ready_fd: Option<RawFd>,
    /// The write end (the daemon's `--status-fd`), closed here once the daemon has it.
    #[arg(long, value_name = "N", requires = "lazy_ready_fd")]
    lazy_status_fd: Option<RawFd>,
    /// The restore's work directory (the daemon's socket, its log).
    #[arg(long, value_name = "DIR", requires = "lazy_ready_fd")]
    lazy_work: Option<PathBuf>,
    /// The bound on the whole load, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    lazy_bound_ms: u64,
    /// One word of the daemon's command line (program first), in order.
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "lazy_ready_fd"
    )]
    lazy_pages_arg: Vec<String>,
}

/// Starts the lazy-pages daemon the init was told of (`None` for an eager restore).
fn start_daemon(a: &InitArgs) -> Result<Option<lazy::Daemon>, String> {
    let l = &a.lazy;
    let (Some(ready), Some(status), Some(work)) =
        (l.lazy_ready_fd, l.lazy_status_fd, l.lazy_work.clone())
    else {
        return Ok(None);
    };
    let ready = sys::inherited_fd(ready).map_err(|e| format!("lazy ready fd: {e}"))?;
    sys::set_cloexec(&ready, true).map_err(|e| format!("lazy ready fd: {e}"))?;
    let status = sys::inherited_fd(status).map_err(|e| format!("lazy status fd: {e}"))?;
    let (program, args) = l
        .lazy_pages_arg
        .split_first()
        .ok_or("no --lazy-pages-arg")?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    let stderr = fs::File::create(work.join("lazy-pages.stderr"))
        .map_err(|e| format!("the lazy-pages daemon's stderr file: {e}"))?;
    let place = lazy::Place {
        log: work.join("lazy-pages.log"),
        work,
        remove_work: false,
    };
    let timeout = crac_criu::criu::criu_timeout().map_err(|e| e.to_string())?;
    lazy::Daemon::launch(cmd, stderr, (ready, status), place, timeout)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Runs the init (PID 1 of the namespace) and returns the exit code: the restored process's
/// status, or 1 when the restore failed (reported on the status pipe first).
pub fn run_init(a: &InitArgs) -> Result<i32, String> {
    // Outside a new namespace (the broker's restores), the restored root comes to us only
    // as a subreaper; as PID 1 this changes nothing.
    sys::set_child_subreaper().map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
    let taken = |fd: RawFd, what: &str| {
        let f = sys::inherited_fd(fd).map_err(|e| format!("{what} fd {fd}: {e}"))?;
        // Ours alone: criu and what it restores must not inherit it.
        sys::set_cloexec(&f, true).map_err(|e| format!("{what} fd {fd}: {e}"))?;
        Ok::<_, String>(f)
    };
    let mut status = fs::File::from(taken(a.status_fd, "status")?);
    let answer = a.answer_fd.map(|fd| taken(fd, "answer")).transpose()?;
    // A copy of the caller's stderr: the descriptor itself goes on to criu, which hands
    // it in to the restored process.
    let say = a
        .say_fd
        .map(|fd| {
            let f = sys::inherited_fd(fd).map_err(|e| format!("say fd {fd}: {e}"))?;
            let copy = f.try_clone().map_err(|e| format!("say fd {fd}: {e}"));
            let _ = std::os::fd::IntoRawFd::into_raw_fd(f);
            copy
        })
        .transpose()?;
    let started = Instant::now();
    let (mut daemon, report) = match start_daemon(a) {
        Ok(d) => (d, restore_detached(a)),
        Err(why) => (None, InitReport::Failed(why)),
    };
    if !matches!(report, InitReport::Restored(_)) {
        // Stopped before the report: the restorer may end this init once it reads it.
        drop(daemon.take());
    }
    let _ = status.write_all(report.line().as_bytes());
    drop(status); // the restorer sees the line, then EOF
    let InitReport::Restored(root) = report else {
        return Ok(1);
    };
    let reaped = Arc::new(lazy::Reaped::default());
    let daemon_pid = daemon.as_ref().map(lazy::Daemon::pid);
    if let Some(d) = daemon {
        let bound = Duration::from_millis(a.lazy.lazy_bound_ms);
        watch_lazy(d, root, started + bound, bound, reaped.clone(), say);
    }
    let code = wait_root(root, daemon_pid, &reaped)?;
    if let Some(conn) = answer {
        // One packet, never waited for: a caller that left (--detach) is not waited on.
        let _ = sys::send_nonblocking(&conn, format!("exit code={code}").as_bytes());
    }
    Ok(code)
}

/// Watches the lazy-pages daemon until every page is in, on a thread of its own: if it
/// fails, the restored root is ended (its missing pages would read as zeros) and `say` told.
fn watch_lazy(
    d: lazy::Daemon,
    root: i32,
    deadline: Instant,
    bound: Duration,
    reaped: Arc<lazy::Reaped>,
    say: Option<OwnedFd>,
) {
    let victim = sys::pidfd_open(root).ok();
    std::thread::spawn(move || {
        if let (Err(e), Some(fd)) = (d.watch(victim.as_ref(), deadline, bound, &reaped), say) {
            let _ = fs::File::from(fd).write_all(format!("crac: {e}\n").as_bytes());
        }
    });
}

/// Reaps adopted orphans as they end until the restored root does: its exit code. Statuses
/// The lazy-pages daemon's (`daemon`) goes to `reaped`, where its watcher waits for it.
fn wait_root(root: i32, daemon: Option<i32>, reaped: &lazy::Reaped) -> Result<i32, String> {
    loop {
        match sys::wait_any() {
            Ok(Some((pid, st))) if pid == root => return Ok(sys::exit_code(st)),
            Ok(Some((pid, st))) if Some(pid) == daemon => reaped.put(pid, st),
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
        // criu has exited: the restored root is ours now, or the pidfile is wrong.
        Some(pid) if st.success() && !sys::own_children().contains(&pid) => InitReport::Failed(
            format!("criu's pidfile names pid {pid}, which is not the restored process"),
        ),
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
