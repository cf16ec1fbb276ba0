//! Running test programs and reading what they print, line by line, with timeouts.
//!
//! The test programs print `key=value` words per line (see `src/bin/criu_app.rs`); a test
//! waits for a line with a given prefix and picks fields out of it. On a timeout the panic
//! message carries every line the program printed, which is what one needs to debug it.
//!
//! Lines are events, not a script: a program's threads print in whatever order they are
//! scheduled, so [`Proc::expect`] takes the first line with its prefix that no earlier
//! `expect` took, wherever it stands; lines it passes over stay for later calls. Waiting for
//! `a` then `b` therefore works whichever of the two was printed first.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running program whose stdout and stderr are read by background threads.
pub struct Proc {
    name: String,
    child: Option<Child>,
    lines: Receiver<String>,
    /// Lines received and not yet taken by an `expect`, in the order they came.
    pending: Vec<String>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr piped (stdin from `/dev/null`). Lines from stderr
    /// are kept for diagnostics with a `stderr: ` prefix and are also matched.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let (tx, rx) = channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        for (stream, prefix) in [
            (Box::new(out) as Box<dyn std::io::Read + Send>, ""),
            (Box::new(err), "stderr: "),
        ] {
            let tx = tx.clone();
            let seen = seen.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let line = format!("{prefix}{line}");
                    seen.lock().unwrap().push(line.clone());
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            name: name.to_owned(),
            child: Some(child),
            lines: rx,
            pending: Vec::new(),
            seen,
        }
    }

    /// The pid of the started program (not of a process it restores).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Everything printed so far.
    pub fn transcript(&self) -> String {
        self.seen.lock().unwrap().join("\n")
    }

    /// Takes the first line starting with `prefix` not taken before (lines printed in
    /// between stay for other calls), waiting up to `timeout` for one to come.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        self.expect_where(prefix, timeout, |_| true)
    }

    /// Like [`Proc::expect`], for the first such line that `pred` also accepts (lines with the
    /// prefix that it refuses are taken and dropped: it is for "the first `progress` line with
    /// at least N acked", where the earlier ones are of no further use).
    pub fn expect_where(
        &mut self,
        prefix: &str,
        timeout: Duration,
        mut pred: impl FnMut(&str) -> bool,
    ) -> String {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].starts_with(prefix) {
                let l = self.pending.remove(i);
                if pred(&l) {
                    return l;
                }
            } else {
                i += 1;
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => {
                    if pred(&l) {
                        return l;
                    }
                }
                Ok(l) => self.pending.push(l),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line starting with `{prefix}` within {timeout:?}; it printed:\n{}",
                    self.name,
                    self.transcript()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: ended without a line starting with `{prefix}`; it printed:\n{}",
                    self.name,
                    self.transcript()
                ),
            }
        }
    }

    /// Drops the lines starting with `prefix` received so far and not yet taken: the next
    /// such line [`Proc::expect`] takes was printed about now or later.
    pub fn skip(&mut self, prefix: &str) {
        while let Ok(l) = self.lines.try_recv() {
            self.pending.push(l);
        }
        self.pending.retain(|l| !l.starts_with(prefix));
    }

    /// Waits for the program to end (panics after `timeout`, killing it).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("not waited yet");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                self.child = None;
                // Let the reader threads drain what is left.
                std::thread::sleep(Duration::from_millis(20));
                return st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                panic!(
                    "{} did not end within {timeout:?}; it printed:\n{}",
                    self.name,
                    self.transcript()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Our own child only, by its handle.
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The value of `key=` in a line of `key=value` words.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Like [`field`], panicking with the line when the key is missing.
pub fn must<'a>(line: &'a str, key: &str) -> &'a str {
    field(line, key).unwrap_or_else(|| panic!("no `{key}=` in `{line}`"))
}

/// The criu the tests use: `CRAC_CRIU`, which `scripts/test` sets after installing it.
pub fn criu() -> PathBuf {
    let p = std::env::var_os("CRAC_CRIU")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "CRAC_CRIU is not set: these tests take real CRIU images; run them with \
             scripts/test (as root), or export CRAC_CRIU=$(scripts/install-criu | tail -n1)"
            )
        });
    assert!(
        p.exists(),
        "CRAC_CRIU={} does not exist; run scripts/install-criu",
        p.display()
    );
    p
}

/// A fresh, private (`0700`) directory for one test, under the system temp dir; removed on
/// drop unless `KEEP_IMAGES=1`.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/crac-tests/<name>-<pid>-<n>`.
    pub fn new(name: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = std::env::temp_dir().join("crac-tests");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&base)
            .expect("create the tests' temp dir");
        let p = base.join(format!("{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .expect("create a test dir");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("KEEP_IMAGES").is_none_or(|v| v != "1") {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A field of `/proc/PID/status` (e.g. `VmRSS`, `Threads`, `PPid`, `State`), trimmed.
pub fn proc_status(pid: i32, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: i32) -> bool {
    proc_status(pid, "State").is_some_and(|s| !s.starts_with('Z') && !s.starts_with('X'))
}

/// Total size of the files in `dir` whose names start with `prefix`.
pub fn size_of_files(dir: &Path, prefix: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Established TCP connections of this process to one of `ports`, from /proc.
pub fn established_connections_to(ports: &std::collections::HashSet<u16>) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(link) = std::fs::read_link(e.path()) {
            let l = link.to_string_lossy();
            if let Some(i) = l.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.insert(i.to_owned());
            }
        }
    }
    let mut n = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 10 || cols[3] != "01" || !inodes.contains(cols[9]) {
                continue;
            }
            let port = cols[2]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if port.is_some_and(|p| ports.contains(&p)) {
                n += 1;
            }
        }
    }
    n
}

/// `crac ARGS…`, the `crac` command at `exe`, with the tests' criu.
pub fn crac_command(exe: &str, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args).env("CRAC_CRIU", criu());
    c
}

/// `crac checkpoint PID` (the `crac` command at `exe`, 120 s to answer): the exit code and
/// stdout followed by stderr.
pub fn crac_checkpoint(exe: &str, pid: i32) -> (i32, String) {
    let o = crac_command(exe, &["checkpoint", &pid.to_string(), "--timeout", "120"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {exe}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// Waits for a `progress …` line of the producing service (`src/bin/kafka_service.rs`) with at
/// least `at_least` records acknowledged and no error; returns the count it shows.
pub fn wait_acked(p: &mut Proc, at_least: u64, timeout: Duration) -> u64 {
    loop {
        let line = p.expect("progress ", timeout);
        let acked: u64 = must(&line, "acked").parse().unwrap();
        assert_eq!(must(&line, "errors"), "0", "{}", p.transcript());
        if acked >= at_least {
            return acked;
        }
    }
}
