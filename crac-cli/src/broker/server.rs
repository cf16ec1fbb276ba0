//! `crac daemon`: the broker's server (see the module above for what it guarantees).
//!
//! criu runs as the caller (its uid, gid and groups) with three capabilities only,
//! `cap_checkpoint_restore`, `cap_sys_ptrace` and `cap_setpcap` (ambient, through util-linux
//! `setpriv`), in
//! CRIU's unprivileged mode: it can do to the caller's processes what they could do to
//! themselves, reopens their files with the caller's permissions (a symlink the user swaps
//! in cannot make it open a file the user may not), and no process of the caller can trace
//! it (it holds capabilities they lack). Its environment is cleared, its plugin directory an
//! empty one of root's, no action script is given. The images live in the caller's own
//! directory of the store, `STORE/UID/NAME`, owned by the caller but under `STORE/UID`,
//! root's and `0700`: no path reaches them but the broker's descriptors.
//!
//! One thread accepts; each connection gets a thread of its own (at most [`MAX_CLIENTS`] at
//! once). The daemon is a child subreaper: a restored process becomes its child once criu
//! exits, so it can report the exit status. One reaper thread collects every child and
//! hands each status to whoever waits for that pid ([`Reaper`]); nothing else calls `wait`.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ring::hmac;

use super::tree::{self, Caller};
use super::{creds, seal};
use crate::sys;
use crac_criu::broker::{MAX_PACKET, header, headers, valid_name};
use crac_criu::criu::invocation::Invocation;
use crac_criu::image::metadata::Metadata;
use crac_criu::safe_dir::{self, Access, Dir};

/// How many requests are served at once.
const MAX_CLIENTS: usize = 16;

/// How long a client may take to send its request or to close its side before a dump.
const CLIENT_WAIT: Duration = Duration::from_secs(10);

/// What every request handler needs.
struct Broker {
    store: Dir,
    key: hmac::Key,
    criu: PathBuf,
    /// A root-owned empty directory given to criu as its plugin directory (`-L`).
    no_plugins: Dir,
    timeout: Duration,
    reaper: Reaper,
    /// The (uid, name) images being dumped and sealed: a restore of one waits (in stop mode
    /// the process is gone before its image is sealed).
    sealing: (Mutex<HashSet<(u32, String)>>, Condvar),
}

/// Writes one line to the daemon's stderr (its log).
fn log(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "crac daemon: {msg}");
}

/// Runs the daemon until it is killed.
pub fn run_daemon(opts: &crate::cli::args::DaemonArgs) -> Result<i32, String> {
    let socket = match &opts.socket {
        Some(s) => s.clone(),
        None => crac_criu::broker::socket_path().map_err(|e| e.to_string())?,
    };
    let (socket, store, key) = (&socket, &opts.store, &opts.key);
    if sys::euid() != 0 {
        return Err("crac daemon runs as root (it runs criu for other users)".into());
    }
    let b = Arc::new(setup(store, key)?);
    let listener = listen(socket)?;
    log(&format!(
        "listening on {}; images in {}; criu {}",
        socket.display(),
        store.display(),
        b.criu.display()
    ));
    let busy = Arc::new(AtomicUsize::new(0));
    loop {
        let conn = match sys::accept(&listener) {
            Ok(c) => c,
            Err(e) => {
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            busy.fetch_sub(1, Ordering::AcqRel);
            reply(&conn, "error the broker is busy; try again");
            continue;
        }
        let (b, busy) = (b.clone(), busy.clone());
        std::thread::spawn(move || {
            handle(&b, conn);
            busy.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The store, the key, criu and its empty plugin directory, the reaper.
fn setup(store: &Path, key: &Path) -> Result<Broker, String> {
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
    let criu = crac_criu::criu::find().map_err(|e| e.to_string())?;
    runnable_by_all(&criu.path)?;
    let timeout = crac_criu::criu::criu_timeout().map_err(|e| e.to_string())?;
    crac_criu::settings::criu_log_level().map_err(|e| e.to_string())?;
    crac_criu::criu::kdat::facts(&criu, timeout);
    Ok(Broker {
        store: store_dir,
        key: seal::host_key(key)?,
        criu: criu.path,
        no_plugins,
        timeout,
        reaper: Reaper::start(),
        sealing: (Mutex::new(HashSet::new()), Condvar::new()),
    })
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
fn listen(socket: &Path) -> Result<OwnedFd, String> {
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

fn reply(conn: &impl AsFd, text: &str) {
    let _ = sys::send(conn, text.as_bytes());
}

/// Serves one connection: the caller, its request, the answer.
fn handle(b: &Broker, conn: OwnedFd) {
    let _ = sys::set_recv_timeout(&conn, Some(CLIENT_WAIT));
    let (pid, uid, gid) = match sys::peer_cred(&conn) {
        Ok(c) => c,
        Err(e) => return reply(&conn, &format!("error SO_PEERCRED: {e}")),
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let (n, fds) = match sys::recv_with_fds(&conn, &mut buf) {
        Ok(r) => r,
        Err(e) => return reply(&conn, &format!("error reading the request: {e}")),
    };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else {
        return reply(&conn, "error the request is not UTF-8");
    };
    let (op, rest) = text.split_once('\n').unwrap_or((text, ""));
    let r = match op {
        "ping" => {
            reply(&conn, &format!("pong uid={uid}"));
            Ok(())
        }
        "checkpoint" => checkpoint(b, &conn, (pid, uid, gid), rest, fds),
        "restore" => restore(b, &conn, (pid, uid, gid), rest, fds),
        _ => Err(format!("unknown request {op:?}")),
    };
    if let Err(e) = r {
        log(&format!("uid {uid} pid {pid} {op}: refused: {e}"));
        reply(&conn, &format!("error {e}"));
    }
}

/// The caller's own store directory (`STORE/UID`, root's).
fn user_store(b: &Broker, uid: u32) -> Result<Dir, String> {
    b.store
        .subdir(&uid.to_string())
        .map_err(|e| format!("the store: {e}"))
}

/// A checkpoint request: the caller's tree is checked, the caller closes its side, criu dumps
/// it into a new directory of the store, the credentials CRIU recorded are checked, the image
/// is sealed and takes the name. The outcome goes to the caller through the pipe it passed.
fn checkpoint(
    b: &Broker,
    conn: &OwnedFd,
    (pid, uid, gid): (i32, u32, u32),
    rest: &str,
    mut fds: Vec<OwnedFd>,
) -> Result<(), String> {
    let (h, body) = headers(rest);
    let name = valid_name(header(&h, "name").unwrap_or(""))?.to_owned();
    let leave_running = match header(&h, "mode") {
        Some("leave-running") => true,
        Some("stop") => false,
        m => return Err(format!("mode {m:?}: expected stop or leave-running")),
    };
    if fds.len() != 1 {
        return Err("a checkpoint request passes exactly one descriptor (its answer pipe)".into());
    }
    let answer = std::fs::File::from(fds.remove(0));
    let caller = tree::caller(pid, uid, gid)?;
    // Held from here: a pid reused after the caller died is never dumped.
    let pidfd = sys::pidfd_open(pid).map_err(|e| format!("pidfd_open({pid}): {e}"))?;
    tree::check_tree(&caller)?;
    let meta = checked_metadata(body, &caller)?;
    reply(conn, "accepted");
    // The caller's connection must not be in its image: it closes it, then waits on the pipe.
    let mut byte = [0u8; 1];
    match sys::recv(conn, &mut byte) {
        Ok(0) => {}
        _ => return Err("the caller did not close its connection in time".into()),
    }
    if !sys::pidfd_alive(&pidfd) {
        return Err("the caller exited".into());
    }
    let key = (uid, name.clone());
    b.sealing
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone());
    let outcome = dump_and_seal(b, &caller, &name, &meta, leave_running);
    b.sealing
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    b.sealing.1.notify_all();
    let line = match &outcome {
        Ok(path) => format!("crac-dumped ok {}\n", path.display()),
        Err(e) => format!("crac-dumped error {}\n", e.replace('\n', " ")),
    };
    log(&format!(
        "uid {uid} pid {pid} checkpoint {name}: {}",
        line.trim()
    ));
    let mut answer = answer;
    let _ = answer.write_all(line.as_bytes());
    Ok(())
}

/// The metadata the caller sent, checked: its own pid, and only the forms of keys the broker
/// hands to criu (`unix[INO]` externals, a `pipe:[INO]` answer pipe).
fn checked_metadata(text: &str, caller: &Caller) -> Result<Metadata, String> {
    let mut meta = Metadata::from_text(text)?;
    if meta.pid != caller.pid {
        return Err(format!(
            "the metadata is of pid {}, not the caller's",
            meta.pid
        ));
    }
    let ino = |s: &str, pre: &str, post: &str| {
        s.strip_prefix(pre)
            .and_then(|r| r.strip_suffix(post))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some(e) = meta.external.iter().find(|e| !ino(e, "unix[", "]")) {
        return Err(format!("external {e:?}: only unix[INO] is taken"));
    }
    match &meta.env_fd {
        Some((_, key)) if ino(key, "pipe:[", "]") => {}
        other => return Err(format!("answer pipe {other:?}: expected pipe:[INO]")),
    }
    meta.image_dir = None;
    Ok(meta)
}

/// Dumps the caller into a new directory of its store, checks and seals the image, and gives
/// it the name (replacing an older image of that name). Returns where it is.
fn dump_and_seal(
    b: &Broker,
    caller: &Caller,
    name: &str,
    meta: &Metadata,
    leave_running: bool,
) -> Result<PathBuf, String> {
    let store = user_store(b, caller.uid)?;
    let tmp = store
        .make_temp(".dump-")
        .map_err(|e| format!("the store: {e}"))?;
    let r = (|| {
        meta.write(&tmp).map_err(|e| e.to_string())?;
        // criu writes as the caller; nobody reaches the directory by path (STORE/UID is 0700).
        sys::fchown(tmp.fd(), caller.uid, caller.gid).map_err(|e| format!("fchown: {e}"))?;
        run_dump(b, caller, &tmp, meta, leave_running)?;
        for (file, c) in creds::read_all(&tmp)? {
            creds::check(&c, caller.uid, caller.gid, &caller.groups, caller.bnd)
                .map_err(|why| format!("the image's {file}: {why}; not kept"))?;
        }
        seal::seal(&tmp, &b.key, caller.uid, name)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_dir_all(tmp.path());
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(store.path().join(name));
    sys::renameat(store.fd(), tmp.name(), name).map_err(|e| format!("rename: {e}"))?;
    Ok(store.path().join(name))
}

/// `criu dump` of the tree of `pid` into `dir`, as root, with a cleared environment and no
/// plugins; bounded by the CRIU timeout.
fn run_dump(
    b: &Broker,
    caller: &Caller,
    dir: &Dir,
    meta: &Metadata,
    leave_running: bool,
) -> Result<(), String> {
    let inv = Invocation::dump(caller.pid, dir)
        .log(crac_criu::image::DUMP_LOG)
        .leave_running(leave_running)
        .externals(&meta.external);
    let st = run_criu(b, caller, inv, &[dir.fd()], &[])?;
    if st != 0 || dir.stat("inventory.img").ok().flatten().is_none() {
        return Err(format!(
            "criu dump failed (status {st}): {}",
            crac_criu::criu::log::log_errors_in(dir, crac_criu::image::DUMP_LOG)
        ));
    }
    Ok(())
}

/// Serializes spawns: descriptors made inheritable for one criu must not leak into another
/// spawned meanwhile by another request's thread.
static SPAWN: Mutex<()> = Mutex::new(());

/// Runs criu as `inv` says, as the caller (see the module documentation), in CRIU's
/// unprivileged mode, with `-L` of the empty plugin directory and a cleared environment;
/// `keep` and `pass` (the caller's descriptors `inv` hands in) inherited; waits (bounded)
/// through the reaper.
fn run_criu(
    b: &Broker,
    caller: &Caller,
    inv: Invocation,
    keep: &[&OwnedFd],
    pass: &[OwnedFd],
) -> Result<i32, String> {
    let inv = inv
        .unprivileged(true)
        .plugins(b.no_plugins.proc_path())
        .with_timeout(b.timeout);
    let groups: Vec<String> = caller.groups.iter().map(u32::to_string).collect();
    // cap_setpcap: the restorer drops from each task's bounding set what the image's lacks.
    let caps = "-all,+checkpoint_restore,+sys_ptrace,+setpcap";
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", caller.uid))
        .arg(format!("--regid={}", caller.gid))
        .arg(if groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            format!("--groups={}", groups.join(","))
        })
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg("--")
        .arg(&b.criu)
        .args(inv.args())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = {
        let _g = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        let all: Vec<&OwnedFd> = keep
            .iter()
            .copied()
            .chain(pass)
            .chain([b.no_plugins.fd()])
            .collect();
        for fd in &all {
            sys::set_cloexec(*fd, false).map_err(|e| format!("fcntl: {e}"))?;
        }
        let child = cmd.spawn();
        for fd in &all {
            let _ = sys::set_cloexec(*fd, true);
        }
        child.map_err(|e| {
            format!(
                "cannot run setpriv (util-linux) for {}: {e}",
                b.criu.display()
            )
        })?
    };
    let pid = child.id() as i32;
    let pidfd = sys::pidfd_open(pid).map_err(|e| format!("pidfd_open: {e}"))?;
    match b.reaper.wait(pid, b.timeout) {
        Some(st) => Ok(sys::exit_code(st)),
        None => {
            let _ = sys::pidfd_kill(&pidfd, libc::SIGKILL);
            let _ = b.reaper.wait(pid, Duration::from_secs(10));
            Err(format!(
                "criu did not finish within {:.0} s ({}) and was stopped",
                b.timeout.as_secs_f64(),
                crac_criu::settings::CRIU_TIMEOUT
            ))
        }
    }
}

/// A restore request: the caller's own image of that name, its seal, the credentials it
/// records and the checks of any restore; criu restores it with the caller's standard
/// descriptors; the caller hears `restored pid=N`, then `exit code=C` when the process ends.
fn restore(
    b: &Broker,
    conn: &OwnedFd,
    (pid, uid, gid): (i32, u32, u32),
    rest: &str,
    fds: Vec<OwnedFd>,
) -> Result<(), String> {
    let started = Instant::now();
    let (h, _) = headers(rest);
    let name = valid_name(header(&h, "name").unwrap_or(""))?.to_owned();
    if fds.len() != 4 {
        return Err(
            "a restore request passes its descriptors 0, 1 and 2 and its payload pipe".into(),
        );
    }
    let caller = tree::caller(pid, uid, gid)?;
    wait_sealed(b, uid, &name)?;
    let dir = user_store(b, uid)?
        .open_subdir(&name)
        .map_err(|e| format!("no image {name:?} of uid {uid} in the broker's store ({e})"))?;
    seal::verify(&dir, &b.key, uid, &name)?;
    for (file, c) in creds::read_all(&dir)? {
        creds::check(&c, uid, gid, &caller.groups, caller.bnd)
            .map_err(|why| format!("the image's {file}: {why}"))?;
    }
    let meta = Metadata::read(&dir).map_err(|e| e.to_string())?;
    crate::restore::trust::check_cpu(&meta).map_err(|e| e.to_string())?;
    crate::restore::wait_pids_free(&meta, Duration::from_secs(10), &mut |_| {})
        .map_err(|e| e.to_string())?;
    let work = crac_criu::run_dir::open(true)
        .and_then(|r| r.make_temp("broker-"))
        .and_then(|w| sys::fchown(w.fd(), uid, gid).map(|()| w))
        .map_err(|e| format!("work directory: {e}"))?;
    let r = run_restore(b, &caller, &dir, &meta, &work, fds);
    // The caller owns the work directory: what is in it is read without following links.
    let pidfile = work.open_file("pid").ok().and_then(|f| {
        use std::io::Read;
        let mut s = String::new();
        f.take(64).read_to_string(&mut s).ok().map(|_| s)
    });
    let errors = crac_criu::criu::log::log_errors_in(&work, "restore.log");
    let _ = std::fs::remove_dir_all(work.path());
    let st = r?;
    let restored: i32 = match (st, pidfile.and_then(|p| p.trim().parse().ok())) {
        (0, Some(p)) => p,
        _ => return Err(format!("criu restore failed (status {st}): {errors}")),
    };
    reply(
        conn,
        &format!(
            "restored pid={restored} ms={:.1}",
            started.elapsed().as_secs_f64() * 1e3
        ),
    );
    log(&format!("uid {uid} restore {name}: pid {restored}"));
    // The restored process is our child now (subreaper): its status is the caller's answer.
    let code = b
        .reaper
        .wait(restored, Duration::MAX)
        .map(sys::exit_code)
        .unwrap_or(1);
    reply(conn, &format!("exit code={code}"));
    Ok(())
}

/// Waits (bounded by the CRIU timeout) while the image `name` of `uid` is being dumped.
fn wait_sealed(b: &Broker, uid: u32, name: &str) -> Result<(), String> {
    let key = (uid, name.to_owned());
    let deadline = Instant::now() + b.timeout;
    let mut busy = b.sealing.0.lock().unwrap_or_else(|p| p.into_inner());
    while busy.contains(&key) {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or_else(|| format!("the image {name:?} is still being dumped"))?;
        busy = b
            .sealing
            .1
            .wait_timeout(busy, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    Ok(())
}

/// `criu restore` of `dir` with the caller's descriptors `fds` (0, 1, 2) in place of the
/// image's standard descriptors and its payload pipe (`fds[3]`) in place of the answer pipe.
fn run_restore(
    b: &Broker,
    caller: &Caller,
    dir: &Dir,
    meta: &Metadata,
    work: &Dir,
    fds: Vec<OwnedFd>,
) -> Result<i32, String> {
    let [stdin, stdout, stderr, payload] =
        <[&OwnedFd; 4]>::try_from(fds.iter().collect::<Vec<_>>())
            .map_err(|_| "a restore passes four descriptors".to_owned())?;
    // criu's log, pidfile and statistics go to the work directory: the sealed image must
    // not change, or the next restore of it would be refused.
    let mut inv = Invocation::restore(dir)
        .log(work.proc_path().join("restore.log"))
        .pidfile(work.proc_path().join("pid"))
        .work_dir(&work.proc_path())
        .externals(&meta.external);
    inv.inherit_stdio(meta, [stdin, stdout, stderr].map(|fd| fd.as_raw_fd()));
    inv.inherit_payload_pipe(meta, payload.as_raw_fd());
    run_criu(b, caller, inv, &[dir.fd(), work.fd()], &fds)
}

/// Collects every child of the daemon and hands each status to the one waiting for it.
struct Reaper {
    state: Arc<(Mutex<HashMap<i32, i32>>, Condvar)>,
}

impl Reaper {
    fn start() -> Reaper {
        let state = Arc::new((Mutex::new(HashMap::new()), Condvar::new()));
        let s = state.clone();
        std::thread::spawn(move || {
            loop {
                match sys::wait_any() {
                    Ok(Some((pid, st))) => {
                        let (m, cv) = &*s;
                        let mut done = m.lock().unwrap_or_else(|p| p.into_inner());
                        done.insert(pid, st);
                        // Orphans nobody waits for are dropped after a while.
                        if done.len() > 10_000 {
                            done.clear();
                        }
                        cv.notify_all();
                    }
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Reaper { state }
    }

    /// The raw status of child `pid` once it ends, `None` after `timeout`.
    fn wait(&self, pid: i32, timeout: Duration) -> Option<i32> {
        let (m, cv) = &*self.state;
        let deadline = Instant::now().checked_add(timeout);
        let mut done = m.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(st) = done.remove(&pid) {
                return Some(st);
            }
            let left = match deadline {
                Some(d) => d.checked_duration_since(Instant::now())?,
                None => Duration::from_secs(3600),
            };
            done = cv
                .wait_timeout(done, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
