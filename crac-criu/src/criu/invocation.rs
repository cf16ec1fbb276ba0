//! How criu is called, in one place: every dump, restore, lazy-pages daemon and check that
//! crac-rs runs is described by an [`Invocation`] and turned into criu's command line (or,
//! for the engine's self-dump, its RPC request) here. The engine's dump, `crac restore`, the
//! lazy-pages daemon and the broker all build theirs with it, so a change to how criu is
//! called (an option, how descriptors are handed in, the log) is made once.
//!
//! What each caller still decides is its own: which process, which image directory, which
//! descriptors it hands in, and how it waits (the bound is [`Invocation::timeout`]).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::rpc;
use crate::image::metadata::Metadata;
use crate::safe_dir::Dir;

/// What criu is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    /// `criu dump -t PID` (another process's tree).
    Dump(i32),
    /// The swrk RPC's DUMP of the process that sends it (the engine's self-dump).
    DumpSelf,
    /// `criu restore --restore-detached`.
    Restore,
    /// `criu lazy-pages`: the daemon that serves a lazy restore's pages.
    LazyPages,
    /// `criu check`.
    Check,
}

/// One call of criu: what it does, on which image, with which options and descriptors.
#[derive(Debug, Clone)]
pub struct Invocation {
    action: Action,
    /// The image directory as criu opens it (`/proc/self/fd/N` of a descriptor the caller
    /// holds, never the path a user could swap) and that descriptor's number.
    images: Option<(PathBuf, RawFd)>,
    log: Option<PathBuf>,
    log_level: u32,
    leave_running: bool,
    unprivileged: bool,
    externals: Vec<String>,
    inherited: Vec<(RawFd, String)>,
    /// criu's work directory (`--work-dir`): its statistics, and where a lazy restore and
    /// its daemon find each other. Unset: the image directory, which a sealed image must
    /// never get a file in.
    work_dir: Option<PathBuf>,
    /// A restore whose memory the lazy-pages daemon serves.
    lazy: bool,
    pidfile: Option<PathBuf>,
    status_fd: Option<RawFd>,
    plugins: Option<PathBuf>,
    features: Vec<String>,
    timeout: Duration,
}

/// How criu is started.
#[derive(Debug, Clone, Default)]
pub enum Launch {
    /// criu itself.
    #[default]
    Direct,
    /// In a fresh PID namespace under an init of the caller's: `unshare --pid --fork
    /// --mount-proc --kill-child INIT… -- CRIU ARGS…`. `init` is the init's command line
    /// (program and its own options); it runs what follows its `--`. Ending `unshare` ends
    /// the init and the whole namespace with it.
    PidNamespace {
        /// The init's program and options.
        init: Vec<OsString>,
    },
    /// Under an init of the caller's, in this PID namespace: `INIT… -- CRIU ARGS…` (the init
    /// holds what criu restores: the broker's way to hand a restored service off).
    Init {
        /// The init's program and options.
        init: Vec<OsString>,
    },
}

impl Invocation {
    fn new(action: Action) -> Invocation {
        Invocation {
            action,
            images: None,
            log: None,
            // Validated where the caller starts (a bad value is a named error there).
            log_level: crate::settings::criu_log_level()
                .unwrap_or(crate::settings::DEFAULT_CRIU_LOG_LEVEL),
            leave_running: false,
            unprivileged: super::unprivileged(),
            externals: Vec::new(),
            inherited: Vec::new(),
            work_dir: None,
            lazy: false,
            pidfile: None,
            status_fd: None,
            plugins: None,
            features: Vec::new(),
            timeout: crate::settings::DEFAULT_CRIU_TIMEOUT,
        }
    }

    fn on(mut self, images: &Dir) -> Invocation {
        self.images = Some((images.proc_path(), images.fd().as_raw_fd()));
        self
    }

    /// Dumps the process tree of `pid` into `images`.
    pub fn dump(pid: i32, images: &Dir) -> Invocation {
        Invocation::new(Action::Dump(pid)).on(images)
    }

    /// Dumps the calling process into `images` (through `criu swrk`, see [`Self::rpc_request`]).
    pub fn dump_self(images: &Dir) -> Invocation {
        Invocation::new(Action::DumpSelf).on(images)
    }

    /// Restores the image in `images`, detached: criu exits once the tree runs, and its
    /// status says whether the restore worked.
    pub fn restore(images: &Dir) -> Invocation {
        Invocation::new(Action::Restore).on(images)
    }

    /// The lazy-pages daemon for a restore of `images`, listening in `work_dir`.
    pub fn lazy_pages(images: &Dir, work_dir: &Path) -> Invocation {
        let mut i = Invocation::new(Action::LazyPages).on(images);
        i.work_dir = Some(work_dir.to_owned());
        i
    }

    /// `criu check` (with [`Self::feature`]: only those features).
    pub fn check() -> Invocation {
        Invocation::new(Action::Check)
    }

    /// Checks one feature (`--feature NAME`).
    pub fn feature(mut self, name: &str) -> Invocation {
        self.features.push(name.to_owned());
        self
    }

    /// criu's log: the file (absolute, or relative to the image directory) and, unless
    /// changed, the level of [`crate::settings`]' `CRAC_CRIU_LOG_LEVEL`.
    pub fn log(mut self, file: impl Into<PathBuf>) -> Invocation {
        self.log = Some(file.into());
        self
    }

    /// A dump that leaves the process running.
    pub fn leave_running(mut self, yes: bool) -> Invocation {
        self.leave_running = yes;
        self
    }

    /// CRIU's unprivileged mode (`--unprivileged`: criu's capabilities are its own, not
    /// root's); default: when this process is not root.
    pub fn unprivileged(mut self, yes: bool) -> Invocation {
        self.unprivileged = yes;
        self
    }

    /// Resources outside the dumped tree (`--external`, e.g. `unix[INO]`).
    pub fn externals(mut self, names: &[String]) -> Invocation {
        self.externals.extend(names.iter().cloned());
        self
    }

    /// Hands this process's descriptor `fd` to the restored tree in place of the resource
    /// `key` (`--inherit-fd fd[N]:KEY`). Skipped, with `false`, when `fd` is not open here
    /// (criu would fail on it) or `key` is handed in already (one descriptor per resource).
    pub fn inherit_fd(&mut self, fd: RawFd, key: &str) -> bool {
        if !fd_is_open(fd) || self.inherited.iter().any(|(_, k)| k == key) {
            return false;
        }
        self.inherited.push((fd, key.to_owned()));
        true
    }

    /// Hands `fds` (this process's descriptors to use as the restored process's 0, 1 and 2)
    /// in where the image's standard descriptors were pipes, sockets or files: output then
    /// reaches the restorer, and a log file that grew does not fail the restore.
    pub fn inherit_stdio(&mut self, meta: &Metadata, fds: [RawFd; 3]) {
        for s in &meta.stdio {
            let Some(&fd) = usize::try_from(s.fd).ok().and_then(|i| fds.get(i)) else {
                continue;
            };
            if s.is_closed() || !(s.is_stream() || s.is_file()) {
                continue;
            }
            // CRIU names a file by its path without the leading slash.
            let key = if s.is_file() {
                s.target.trim_start_matches('/')
            } else {
                &s.target
            };
            self.inherit_fd(fd, key);
        }
    }

    /// Hands `fd` in as the pipe the image's process reads its restore payload from.
    pub fn inherit_payload_pipe(&mut self, meta: &Metadata, fd: RawFd) {
        if let Some((_, key)) = &meta.env_fd {
            self.inherit_fd(fd, key);
        }
    }

    /// Hands the image directory `dir` in where the dumped process held its image directory
    /// open (it is now wherever the image is).
    pub fn inherit_image_dir(&mut self, meta: &Metadata, dir: &Dir) {
        if let Some(key) = &meta.image_dir {
            self.inherit_fd(dir.fd().as_raw_fd(), key);
        }
    }

    /// A restore whose memory the lazy-pages daemon in `work_dir` serves (`--lazy-pages`;
    /// criu's work directory is then the daemon's).
    pub fn through_lazy_pages(mut self, work_dir: &Path) -> Invocation {
        self.lazy = true;
        self.work_dir(work_dir)
    }

    /// criu's work directory (`--work-dir`), where it writes its statistics
    /// (`stats-restore`, `stats-dump`) instead of the image directory: an image restored many
    /// times, or sealed, must not change.
    pub fn work_dir(mut self, dir: &Path) -> Invocation {
        self.work_dir = Some(dir.to_owned());
        self
    }

    /// Where criu writes the restored root's pid.
    pub fn pidfile(mut self, path: impl Into<PathBuf>) -> Invocation {
        self.pidfile = Some(path.into());
        self
    }

    /// The descriptor the lazy-pages daemon writes a byte to once it listens.
    pub fn status_fd(mut self, fd: RawFd) -> Invocation {
        self.status_fd = Some(fd);
        self
    }

    /// criu's plugin directory (`-L`): an empty one of root's loads none.
    pub fn plugins(mut self, dir: impl Into<PathBuf>) -> Invocation {
        self.plugins = Some(dir.into());
        self
    }

    /// How long criu may run before its caller stops it (default: `CRAC_CRIU_TIMEOUT`).
    pub fn with_timeout(mut self, timeout: Duration) -> Invocation {
        self.timeout = timeout;
        self
    }

    /// How long criu may run before its caller stops it.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The descriptors criu must inherit: the image directory's, the handed-in ones and the
    /// status pipe's (the caller clears their close-on-exec flag while it spawns criu).
    pub fn fds(&self) -> Vec<RawFd> {
        let mut fds: Vec<RawFd> = self.images.iter().map(|(_, fd)| *fd).collect();
        fds.extend(self.inherited.iter().map(|(fd, _)| *fd));
        fds.extend(self.status_fd);
        fds
    }

    /// The log file as criu is told it: absolute, or under the image directory.
    fn log_path(&self) -> Option<PathBuf> {
        let log = self.log.as_ref()?;
        Some(match &self.images {
            Some((dir, _)) if log.is_relative() => dir.join(log),
            _ => log.clone(),
        })
    }

    /// criu's command line (without the program).
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| (*s).to_owned()));
        match &self.action {
            Action::Dump(pid) => push(&["dump", "-t", &pid.to_string()]),
            // The swrk RPC carries the options; its command line is only `swrk FD`.
            Action::DumpSelf => return Vec::new(),
            Action::Restore => push(&["restore"]),
            Action::LazyPages => push(&["lazy-pages"]),
            Action::Check => push(&["check"]),
        }
        for f in &self.features {
            push(&["--feature", f]);
        }
        if let Some((dir, _)) = &self.images {
            push(&["-D", &dir.display().to_string()]);
        }
        if matches!(self.action, Action::Dump(_) | Action::Restore) {
            // The tree runs in a session (or PID namespace) of its own.
            push(&["--shell-job"]);
        }
        if let Some(log) = self.log_path() {
            push(&["-o", &log.display().to_string()]);
            push(&[&format!("-v{}", self.log_level)]);
        }
        if self.action == Action::Restore {
            // criu's own exit status says whether the restore worked.
            push(&["--restore-detached"]);
        }
        if let Some(p) = &self.pidfile {
            push(&["--pidfile", &p.display().to_string()]);
        }
        if self.leave_running {
            push(&["--leave-running"]);
        }
        if self.lazy && self.action == Action::Restore {
            push(&["--lazy-pages"]);
        }
        if let Some(w) = &self.work_dir {
            push(&["--work-dir", &w.display().to_string()]);
        }
        if let Some(fd) = self.status_fd {
            push(&["--status-fd", &fd.to_string()]);
        }
        for (fd, key) in &self.inherited {
            push(&["--inherit-fd", &format!("fd[{fd}]:{key}")]);
        }
        for e in &self.externals {
            push(&["--external", e]);
        }
        if self.unprivileged {
            push(&["--unprivileged"]);
        }
        if let Some(p) = &self.plugins {
            push(&["-L", &p.display().to_string()]);
        }
        a
    }

    /// The command that runs `criu` this way, started as `launch` says. Standard streams
    /// and descriptors are the caller's to set.
    pub fn command(&self, criu: &Path, launch: &Launch) -> Command {
        self.command_under(criu, launch, &[])
    }

    /// [`Self::command`] with criu run by `wrapper` (a program and its options that end
    /// with running what follows them, e.g. `setpriv … --`).
    pub fn command_under(&self, criu: &Path, launch: &Launch, wrapper: &[OsString]) -> Command {
        let criu_line = wrapper
            .iter()
            .cloned()
            .chain([criu.as_os_str().to_owned()])
            .chain(self.args().into_iter().map(OsString::from));
        let (program, rest): (OsString, Vec<OsString>) = match launch {
            Launch::Direct => {
                let mut all = criu_line;
                (all.next().expect("criu"), all.collect())
            }
            Launch::PidNamespace { init } => (
                "unshare".into(),
                ["--pid", "--fork", "--mount-proc", "--kill-child"]
                    .map(OsString::from)
                    .into_iter()
                    .chain(init.iter().cloned())
                    .chain(["--".into()])
                    .chain(criu_line)
                    .collect(),
            ),
            Launch::Init { init } => {
                let (first, more) = init.split_first().expect("an init program");
                (
                    first.clone(),
                    more.iter()
                        .cloned()
                        .chain(["--".into()])
                        .chain(criu_line)
                        .collect(),
                )
            }
        };
        let mut c = Command::new(program);
        c.args(rest);
        c
    }

    /// The swrk RPC request of a [`Self::dump_self`] (sent on the socket `criu swrk` was
    /// given; see [`swrk_args`]).
    pub fn rpc_request(&self) -> Vec<u8> {
        let opts = rpc::DumpOpts {
            images_dir_fd: self.images.as_ref().map_or(-1, |(_, fd)| *fd),
            leave_running: self.leave_running,
            shell_job: true,
            file_locks: false,
            log_level: self.log_level as i32,
            log_file: self
                .log
                .as_ref()
                .map(|l| l.display().to_string())
                .unwrap_or_default(),
            external: self.externals.clone(),
            unprivileged: self.unprivileged,
            ..rpc::DumpOpts::default()
        };
        rpc::encode_request(rpc::ReqType::Dump, Some(&opts))
    }
}

/// `criu swrk FD`: criu serves RPC requests on the socket `fd` it inherits.
pub fn swrk_args(fd: RawFd) -> Vec<String> {
    vec!["swrk".to_owned(), fd.to_string()]
}

/// Whether `fd` is open in this process.
fn fd_is_open(fd: RawFd) -> bool {
    Path::new(&format!("/proc/self/fd/{fd}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::metadata::StdFd;

    /// A private directory of its own for the test `tag` (tests run at once).
    fn image(tag: &str) -> (Dir, PathBuf) {
        let base =
            std::env::temp_dir().join(format!("crac-invocation-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        (Dir::create_private(&base).unwrap(), base)
    }

    #[test]
    fn a_restore_hands_in_stdio_payload_and_image_dir_once_each_and_only_open_fds() {
        let (dir, base) = image("1");
        let meta = Metadata {
            stdio: vec![
                StdFd {
                    fd: 0,
                    target: "/dev/null".into(),
                    flags: 0,
                },
                StdFd {
                    fd: 1,
                    target: "pipe:[77]".into(),
                    flags: 0,
                },
                StdFd {
                    fd: 2,
                    target: "pipe:[77]".into(),
                    flags: 0,
                },
            ],
            env_fd: Some((9, "pipe:[88]".into())),
            image_dir: Some("srv/img".into()),
            external: vec!["unix[5]".into()],
            ..Metadata::default()
        };
        let mut inv = Invocation::restore(&dir)
            .log("restore.log")
            .pidfile("/run/x/pid")
            .externals(&meta.external)
            .unprivileged(false);
        inv.inherit_stdio(&meta, [0, 1, 2]);
        inv.inherit_payload_pipe(&meta, 2);
        inv.inherit_image_dir(&meta, &dir);
        assert!(!inv.inherit_fd(9999, "pipe:[99]"), "fd 9999 is not open");
        let a = inv.args();
        let fd = dir.fd().as_raw_fd();
        let proc = format!("/proc/self/fd/{fd}");
        let inherit: Vec<&String> = a.iter().filter(|s| s.starts_with("fd[")).collect();
        // /dev/null is reopened by criu; the pipe of fds 1 and 2 is handed in once.
        assert_eq!(
            inherit,
            [
                &"fd[1]:pipe:[77]".to_owned(),
                &"fd[2]:pipe:[88]".to_owned(),
                &format!("fd[{fd}]:srv/img")
            ]
        );
        assert_eq!(&a[..3], ["restore", "-D", proc.as_str()]);
        for w in [
            "--shell-job",
            "--restore-detached",
            "--pidfile",
            "--external",
            "unix[5]",
        ] {
            assert!(a.iter().any(|x| x == w), "{w} in {a:?}");
        }
        assert!(a.contains(&format!("{proc}/restore.log")), "{a:?}");
        assert!(!a.iter().any(|x| x == "--unprivileged"));
        assert_eq!(inv.fds(), vec![fd, 1, 2, fd]);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn lazy_pages_dump_and_pid_namespace_command_lines() {
        let (dir, base) = image("2");
        let w = Path::new("/run/crac/lazy-1");
        let daemon = Invocation::lazy_pages(&dir, w)
            .log("/x/lazy.log")
            .status_fd(7)
            .unprivileged(true)
            .args();
        assert_eq!(daemon[0], "lazy-pages");
        assert!(
            daemon
                .windows(2)
                .any(|p| p == ["--work-dir", "/run/crac/lazy-1"])
        );
        assert!(daemon.windows(2).any(|p| p == ["--status-fd", "7"]));
        assert!(daemon.windows(2).any(|p| p == ["-o", "/x/lazy.log"]));
        // criu refuses to run as a user without it, the daemon too.
        assert!(daemon.iter().any(|x| x == "--unprivileged"));
        let eager = Invocation::restore(&dir)
            .work_dir(Path::new("/run/crac/restore-1"))
            .args();
        assert!(
            eager
                .windows(2)
                .any(|p| p == ["--work-dir", "/run/crac/restore-1"])
        );
        assert!(!eager.iter().any(|x| x == "--lazy-pages"));
        let restore = Invocation::restore(&dir).through_lazy_pages(w).args();
        assert!(
            restore
                .windows(3)
                .any(|p| p == ["--lazy-pages", "--work-dir", "/run/crac/lazy-1"])
        );
        let dump = Invocation::dump(42, &dir)
            .leave_running(true)
            .unprivileged(true)
            .plugins("/p")
            .args();
        assert_eq!(&dump[..3], ["dump", "-t", "42"]);
        for w in ["--leave-running", "--unprivileged", "-L", "--shell-job"] {
            assert!(dump.iter().any(|x| x == w), "{w} in {dump:?}");
        }
        let c = Invocation::check().feature("uffd-noncoop").command(
            Path::new("/c/criu"),
            &Launch::PidNamespace {
                init: vec!["/bin/init".into(), "--x".into()],
            },
        );
        let argv: Vec<String> = std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "/bin/init",
                "--x",
                "--",
                "/c/criu",
                "check",
                "--feature",
                "uffd-noncoop"
            ]
            .iter()
            .map(|s| s.to_string())
            .chain(super::super::unprivileged().then(|| "--unprivileged".to_owned()))
            .collect::<Vec<_>>()
        );
        let wrapped = Invocation::check().unprivileged(false).command_under(
            Path::new("/c/criu"),
            &Launch::Init {
                init: vec!["/bin/init".into(), "--y".into()],
            },
            &["setpriv".into(), "--reuid=7".into(), "--".into()],
        );
        let argv: Vec<String> = std::iter::once(wrapped.get_program())
            .chain(wrapped.get_args())
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "/bin/init",
                "--y",
                "--",
                "setpriv",
                "--reuid=7",
                "--",
                "/c/criu",
                "check"
            ]
        );
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn the_self_dump_request_carries_the_options() {
        let (dir, base) = image("3");
        let req = Invocation::dump_self(&dir)
            .log("dump.log")
            .leave_running(true)
            .externals(&["unix[3]".to_owned()])
            .rpc_request();
        assert_eq!(&req[..2], &[0x08, 0x01]);
        let text = String::from_utf8_lossy(&req);
        assert!(
            text.contains("dump.log") && text.contains("unix[3]"),
            "{text}"
        );
        assert!(Invocation::dump_self(&dir).args().is_empty());
        std::fs::remove_dir_all(base).unwrap();
    }
}
