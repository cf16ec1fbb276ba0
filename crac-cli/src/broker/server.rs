//! `crac daemon`: the broker's server (see the module above for what it guarantees).
//!
//! One thread accepts; a request is admitted only within its user's share ([`Limits`]:
//! requests in flight per user and in all), so one user can never take another's turn, and
//! each admitted one is served by a worker thread of its own at once ([`Workers`]). Who the caller is comes from the kernel at connect ([`Peer`]); every
//! exchange with it has a deadline ([`super::peer`]). criu runs as the caller
//! ([`super::as_caller`]); the images live in the caller's own directory of the store,
//! `STORE/UID/NAME`, owned by the caller but under `STORE/UID`, root's and `0700`: no path
//! reaches them but the broker's descriptors. A restored service is held by the init of its
//! restore, not by the broker ([`super::restore`]). The daemon is a child subreaper; its
//! children are waited on through their pidfds ([`Children`]).
//!
//! Under systemd it takes its socket from socket activation (`LISTEN_FDS`, the units in
//! `deploy/systemd/`); else it binds the socket itself.

use std::collections::HashSet;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use ring::hmac;

use super::children::Children;
use super::limits::{Admitted, Limits};
use super::peer::{self, Peer};
use super::{dump, restore, seal};
use crate::cli::args::DaemonArgs;
use crate::sys;
use crac_criu::safe_dir::{self, Access, Dir};

/// How long a caller may take to send its request.
const REQUEST_WAIT: Duration = Duration::from_secs(5);

/// How long a caller may take to close its side before a dump.
pub(super) const CLIENT_WAIT: Duration = Duration::from_secs(10);

/// What every request handler needs.
pub(super) struct Broker {
    /// The images, `STORE/UID/NAME`.
    store: Dir,
    /// Root's and `0700`: the restores' work directories (`STORE/.work`).
    pub(super) work: Dir,
    pub(super) key: hmac::Key,
    pub(super) criu: PathBuf,
    /// Whether restores can be lazy here ([`Broker::lazy_kdat`], [`probe_for_callers`]).
    lazy: Result<(), String>,
    /// A root-owned empty directory given to criu as its plugin directory (`-L`).
    pub(super) no_plugins: Dir,
    /// Root's, `0755`: a copy of root's CRIU kernel probe (`criu.kdat`) that a lazy restore's
    /// criu, running as the caller, loads through `XDG_RUNTIME_DIR` (see [`super::restore`]).
    pub(super) kdat: Dir,
    pub(super) timeout: Duration,
    pub(super) children: Arc<Children>,
    /// This program, which runs each restore's init.
    pub(super) exe: PathBuf,
    /// The (uid, name) images being dumped and sealed: a restore of one waits (in stop mode
    /// the process is gone before its image is sealed).
    sealing: (Mutex<HashSet<(u32, String)>>, Condvar),
}

impl Broker {
    /// The caller's own store directory (`STORE/UID`, root's).
    pub(super) fn user_store(&self, uid: u32) -> Result<Dir, String> {
        self.store
            .subdir(&uid.to_string())
            .map_err(|e| format!("the store: {e}"))
    }

    /// Runs `f` with the image `name` of `uid` marked as being dumped.
    pub(super) fn sealing<T>(&self, uid: u32, name: &str, f: impl FnOnce() -> T) -> T {
        let key = (uid, name.to_owned());
        let lock = || self.sealing.0.lock().unwrap_or_else(|p| p.into_inner());
        lock().insert(key.clone());
        let r = f();
        lock().remove(&key);
        self.sealing.1.notify_all();
        r
    }

    /// Whether this host restores lazily through the broker, and if so the directory holding
    /// a copy of root's CRIU kernel probe for the caller's criu (`Err`: why not).
    pub(super) fn lazy_kdat(&self) -> Result<&Dir, String> {
        self.lazy.clone().map(|()| &self.kdat)
    }

    /// Waits (bounded by the CRIU timeout) while the image `name` of `uid` is being dumped.
    pub(super) fn wait_sealed(&self, uid: u32, name: &str) -> Result<(), String> {
        let key = (uid, name.to_owned());
        let deadline = Instant::now() + self.timeout;
        let mut busy = self.sealing.0.lock().unwrap_or_else(|p| p.into_inner());
        while busy.contains(&key) {
            let left = deadline
                .checked_duration_since(Instant::now())
                .ok_or_else(|| format!("the image {name:?} is still being dumped"))?;
            busy = self
                .sealing
                .1
                .wait_timeout(busy, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

/// Writes one line to the daemon's stderr (its log).
pub(super) fn log(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "crac daemon: {msg}");
}

/// An admitted request: its connection, its caller, its place in the caller's share.
type Job = (OwnedFd, Peer, Admitted);

/// The threads that serve requests: one per request in flight at the most (the limits bound
/// them), kept for the next request rather than ended, so a burst leaves no thread stacks
/// behind to grow the daemon.
struct Workers {
    idle: Arc<AtomicUsize>,
    tx: mpsc::Sender<Job>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
}

impl Workers {
    fn new() -> Workers {
        let (tx, rx) = mpsc::channel();
        Workers {
            idle: Arc::new(AtomicUsize::new(0)),
            tx,
            rx: Arc::new(Mutex::new(rx)),
        }
    }

    /// Hands `job` to an idle worker, or to a new one if none is idle (a request never waits
    /// for another to end).
    fn run(&self, b: &Arc<Broker>, job: Job) {
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !claimed {
            let (b, rx, idle) = (b.clone(), self.rx.clone(), self.idle.clone());
            let spawned = std::thread::Builder::new()
                .name("crac-request".into())
                .spawn(move || serve(&b, &rx, &idle));
            if let Err(e) = spawned {
                log(&format!("cannot start a request thread: {e}"));
                let (conn, _, _) = job;
                peer::refuse(
                    &conn,
                    "error the broker cannot take a request now; try again",
                );
                return;
            }
        }
        let _ = self.tx.send(job);
    }
}

/// How long a worker waits for its next request before it ends.
const WORKER_IDLE: Duration = Duration::from_secs(2);

/// A worker: serves the requests it is handed, one at a time, until none came for
/// [`WORKER_IDLE`].
fn serve(b: &Broker, jobs: &Mutex<mpsc::Receiver<Job>>, idle: &AtomicUsize) {
    loop {
        let job = jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recv_timeout(WORKER_IDLE);
        let (conn, peer, admitted) = match job {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Leave unless a request was handed to this worker meanwhile (its place as
                // an idle worker was claimed): then take it.
                let left = idle
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok();
                if left {
                    // What the thread freed since its last request goes back too.
                    sys::release_free_heap();
                    return;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        handle(b, conn, &peer);
        drop(admitted);
        // A burst of requests (a fleet, an attack) leaves its freed buffers with the
        // allocator: give them back, the daemon runs for months.
        sys::release_free_heap();
        idle.fetch_add(1, Ordering::AcqRel);
    }
}

/// Runs the daemon until it is killed.
pub fn run_daemon(opts: &DaemonArgs) -> Result<i32, String> {
    if sys::euid() != 0 {
        return Err("crac daemon runs as root (it runs criu for other users)".into());
    }
    let b = Arc::new(setup(&opts.store, &opts.key)?);
    let (listener, at) = match listener_from_systemd()? {
        Some(fd) => (fd, "the socket systemd passed".to_owned()),
        None => {
            let socket = match &opts.socket {
                Some(s) => s.clone(),
                None => crac_criu::broker::socket_path().map_err(|e| e.to_string())?,
            };
            (bind(&socket)?, socket.display().to_string())
        }
    };
    let limits = Limits::new(opts.max_per_user as usize, opts.max_requests as usize);
    let workers = Workers::new();
    log(&format!(
        "listening on {at}; images in {}; criu {}; at most {} requests, {} per user",
        opts.store.display(),
        b.criu.display(),
        limits.total,
        limits.per_user
    ));
    loop {
        let conn = match sys::accept(&listener) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let peer = match Peer::of(&conn) {
            Ok(p) => p,
            Err(e) => {
                peer::reply(&conn, &format!("error {e}"));
                continue;
            }
        };
        // Only a request within its user's share gets a thread; the others are answered here,
        // without waiting on the caller, and nothing a caller does keeps this loop from the
        // next connection.
        match limits.admit(peer.uid) {
            Ok(admitted) => workers.run(&b, (conn, peer, admitted)),
            Err(e) => peer::refuse(&conn, &format!("error {e}")),
        }
    }
}

/// The store, the key, criu and its empty plugin directory, the children's reaper.
fn setup(store: &Path, key: &Path) -> Result<Broker, String> {
    sys::one_malloc_arena();
    sys::set_child_subreaper().map_err(|e| format!("prctl(PR_SET_CHILD_SUBREAPER): {e}"))?;
    sys::ignore_sigpipe().map_err(|e| format!("SIGPIPE: {e}"))?;
    let store_dir = Dir::create_private(store).map_err(|e| format!("{}: {e}", store.display()))?;
    let m = store_dir.metadata().map_err(|e| e.to_string())?;
    safe_dir::check_owner_mode(&m, 0, Access::ReadWrite)
        .map_err(|why| format!("{}: not root's alone ({why:?})", store.display()))?;
    // Root's and empty; criu (running as the caller) must be able to list it.
    let no_plugins = store_dir
        .subdir_mode(".no-plugins", 0o755)
        .map_err(|e| format!("{}/.no-plugins: {e}", store.display()))?;
    sys::fchmod(no_plugins.fd(), 0o755).map_err(|e| format!(".no-plugins: {e}"))?;
    if !no_plugins.entries().map_err(|e| e.to_string())?.is_empty() {
        return Err(format!("{}/.no-plugins is not empty", store.display()));
    }
    let work = store_dir
        .subdir_mode(".work", 0o700)
        .map_err(|e| format!("{}/.work: {e}", store.display()))?;
    safe_dir::check_owner_mode(
        &work.metadata().map_err(|e| e.to_string())?,
        0,
        Access::ReadWrite,
    )
    .map_err(|why| format!("{}/.work: not root's alone ({why:?})", store.display()))?;
    let kdat = store_dir
        .subdir_mode(".kdat", 0o755)
        .map_err(|e| format!("{}/.kdat: {e}", store.display()))?;
    sys::fchmod(kdat.fd(), 0o755).map_err(|e| format!(".kdat: {e}"))?;
    super::restore::sweep_work(&work, Duration::ZERO);
    let criu = crac_criu::criu::find().map_err(|e| e.to_string())?;
    runnable_by_all(&criu.path)?;
    let timeout = crac_criu::criu::criu_timeout().map_err(|e| e.to_string())?;
    crac_criu::settings::criu_log_level().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    Ok(Broker {
        store: store_dir,
        work,
        key: seal::host_key(key)?,
        criu: criu.path.clone(),
        lazy: probe_for_callers(&criu, timeout, &kdat),
        no_plugins,
        kdat,
        timeout,
        children: Children::start(),
        exe,
        sealing: (Mutex::new(HashSet::new()), Condvar::new()),
    })
}

/// Whether this host restores lazily, once at start: if so, root's CRIU kernel probe is
/// copied into `kdat` (root's, `0755`) for the callers' criu. CRIU's unprivileged mode skips
/// its probe of userfaultfd (a user without `CAP_SYS_PTRACE` cannot open one) and then has no
/// lazy pages; the broker's criu has that capability and, with root's probe (through
/// `XDG_RUNTIME_DIR`), opens its userfaultfds with the features a lazy restore needs. The
/// probe depends on the boot and the kernel, which a running daemon does not outlive.
fn probe_for_callers(
    criu: &crac_criu::criu::Criu,
    timeout: Duration,
    kdat: &Dir,
) -> Result<(), String> {
    use crac_criu::criu::kdat::{self, Cache, KDAT_PATH};
    let facts = kdat::facts(criu, timeout);
    let r = facts.lazy_pages.and_then(|()| match facts.cache {
        Cache::Absent(why) => Err(format!("no CRIU kernel probe to hand to callers: {why}")),
        _ => {
            let probe = std::fs::read(KDAT_PATH).map_err(|e| format!("{KDAT_PATH}: {e}"))?;
            kdat.write_atomic("criu.kdat", &probe, 0o644)
                .map_err(|e| format!("the broker's copy of {KDAT_PATH}: {e}"))
        }
    });
    match &r {
        Ok(()) => log("restores are lazy by default (crac restore --broker --eager for eager)"),
        Err(why) => log(&format!("restores are eager: {why}")),
    }
    r
}

/// criu runs as the caller: every directory on its path must be searchable by all, and it
/// and they root's and writable by nobody else (or a user could swap the criu the broker
/// grants capabilities to). A criu with file capabilities is refused: it needs none here.
fn runnable_by_all(criu: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let fix = "install a criu without capabilities where all can run it, as root: \
               CRAC_CRIU_ROOT=/opt/crac-rs/criu scripts/install-criu, and start the daemon \
               with CRAC_CRIU=/opt/crac-rs/criu/bin/criu";
    let mut p = Some(criu);
    while let Some(at) = p {
        let m = std::fs::metadata(at).map_err(|e| format!("{}: {e}", at.display()))?;
        if m.uid() != 0 || m.mode() & 0o022 != 0 || m.mode() & 0o001 == 0 {
            return Err(format!(
                "{} (on the path of {}) must be root's, writable by root alone and \
                 executable by all (it is uid {}, mode {:04o}); {fix}",
                at.display(),
                criu.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        p = at.parent();
    }
    let mut buf = [0u8; 64];
    if sys::getxattr(criu, "security.capability", &mut buf).is_ok() {
        return Err(format!(
            "{} carries file capabilities; {fix}",
            criu.display()
        ));
    }
    Ok(())
}

/// Binds the socket (replacing a stale one of root's), readable and writable by all: who may
/// do what is decided per request.
fn bind(socket: &Path) -> Result<OwnedFd, String> {
    let shown = socket.display();
    if let Ok(m) = std::fs::symlink_metadata(socket) {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if !m.file_type().is_socket() || m.uid() != 0 {
            return Err(format!(
                "{shown} exists and is not a socket of root's; remove it"
            ));
        }
        std::fs::remove_file(socket).map_err(|e| format!("{shown}: {e}"))?;
    }
    if let Some(parent) = socket.parent() {
        Dir::create_private(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        // Others must reach the socket; the directory stays root's.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
    }
    let fd = sys::seqpacket_listen(socket).map_err(|e| format!("{shown}: {e}"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(fd)
}

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is this process
/// and `LISTEN_FDS` at least 1; the socket is descriptor 3), if it did.
fn listener_from_systemd() -> Result<Option<OwnedFd>, String> {
    let var = |k: &str| std::env::var(k).ok();
    let ours = var("LISTEN_PID").and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = var("LISTEN_FDS")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    if !ours || count == 0 {
        return Ok(None);
    }
    let fd = sys::inherited_fd(3).map_err(|e| format!("the socket systemd passed (fd 3): {e}"))?;
    sys::set_cloexec(&fd, true).map_err(|e| format!("fd 3: {e}"))?;
    if !sys::is_seqpacket_listener(&fd) {
        return Err(
            "the socket systemd passed (fd 3) is not a listening SOCK_SEQPACKET unix socket: \
             use ListenSequentialPacket= in the .socket unit"
                .into(),
        );
    }
    Ok(Some(fd))
}

/// Serves one connection: its request, the answer.
fn handle(b: &Broker, conn: OwnedFd, peer: &Peer) {
    let (text, fds) = match peer::recv_request(&conn, REQUEST_WAIT) {
        Ok(r) => r,
        Err(e) => {
            peer::reply(&conn, &format!("error {e}"));
            return;
        }
    };
    let (op, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let op = op.to_owned();
    let (uid, pid) = (peer.uid, peer.pid);
    let r = match op.as_str() {
        "ping" => {
            peer::reply(&conn, &format!("pong uid={uid}"));
            Ok(())
        }
        "checkpoint" => dump::checkpoint(b, &conn, peer, rest, fds),
        // The restored service's init keeps a copy of the connection for its exit status.
        "restore" => restore::restore(b, &conn, peer, rest, fds),
        _ => Err(format!("unknown request {op:?}")),
    };
    if let Err(e) = r {
        log(&format!("uid {uid} pid {pid} {op}: refused: {e}"));
        peer::reply(&conn, &format!("error {e}"));
    }
}
