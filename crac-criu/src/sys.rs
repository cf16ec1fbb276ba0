//! The system calls the engine makes, in one module; the `crac` program (`crac-cli`) uses
//! them too and adds its own. Most go through `rustix` (safe, typed, no `unsafe` of ours).
//! What stays on `libc`, with `unsafe` stated sound at each call, is what rustix does not
//! cover or covers differently: the fork/exec of the dump helper with only async-signal-safe
//! calls in the child (`SpawnPlan`), a signal handler with `SA_SIGINFO` (rustix's `Signal`
//! has no real-time signals), `SO_PEERCRED` and `fcntl` on descriptors found by number in
//! `/proc/self/fd`, file leases (`F_SETLEASE`, which rustix lacks), and `getsid`, whose 0 (a
//! session leader outside the PID namespace) rustix's nonzero `Pid` cannot carry. Everything
//! else in the crate is safe code.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A connected `AF_UNIX`/`SOCK_SEQPACKET` pair, both ends close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
    Ok(socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Connects a `SOCK_SEQPACKET` socket to the unix socket at `path`.
pub fn seqpacket_connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    rustix::net::connect(&fd, &rustix::net::SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// A unix `SOCK_SEQPACKET` socket, close-on-exec.
pub fn seqpacket_socket() -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Bounds every receive on `sock` to `timeout` (`None`: no bound).
pub fn set_recv_timeout(sock: &impl AsFd, timeout: Option<std::time::Duration>) -> io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_timeout(
        sock,
        rustix::net::sockopt::Timeout::Recv,
        timeout,
    )?)
}

/// Sends one packet with descriptors attached (`SCM_RIGHTS`, at most 4).
pub fn send_with_fds(sock: &impl AsFd, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if fds.len() > 4 || (!fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds))) {
        return Err(io::Error::other("too many descriptors for one packet"));
    }
    let n = rustix::net::sendmsg(
        sock,
        &[io::IoSlice::new(data)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if n != data.len() {
        return Err(io::Error::other("packet cut short"));
    }
    Ok(())
}

/// A pipe `(read, write)`, both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Takes ownership of a descriptor this process inherited by number (a pipe end a parent
/// left open across `exec`, named on the command line), after checking that it is open.
pub fn inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fd {fd} is a standard stream, not an inherited pipe"),
        ));
    }
    // SAFETY: F_GETFD takes no pointers; it fails with EBADF if `fd` is not open.
    cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: the descriptor is open, and nothing else in this process knows its number
    // (it came from the parent, by the argument the caller parsed); from here on it is owned.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets or clears `FD_CLOEXEC`.
pub fn set_cloexec(fd: &impl AsFd, on: bool) -> io::Result<()> {
    use rustix::io::{FdFlags, fcntl_getfd, fcntl_setfd};
    let mut flags = fcntl_getfd(fd)?;
    flags.set(FdFlags::CLOEXEC, on);
    Ok(fcntl_setfd(fd, flags)?)
}

/// Gives the C allocator's free memory back to the kernel (`malloc_trim(0)`: whole free pages
/// in every arena, not only at the heap's top); whether any was given back. A no-op where the
/// C library is not glibc.
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers and takes the allocator's own locks.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Sends one packet (never raising `SIGPIPE`).
pub fn send(fd: &impl AsFd, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(
        fd,
        buf,
        rustix::net::SendFlags::NOSIGNAL,
    )?)
}

/// Receives one packet (retrying on `EINTR`); `Ok(0)` means the peer closed.
pub fn recv(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::net::recv(fd, &mut *buf, rustix::net::RecvFlags::empty()) {
            Ok((n, _)) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The pid of the peer of a connected unix socket (`SO_PEERCRED`), if the kernel knows it.
/// By descriptor number (libc): the caller finds it in `/proc/self/fd` and does not own it.
pub fn peer_pid(fd: RawFd) -> Option<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writing and `len` holds the buffer size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid)
}

/// Everything the helper child needs, prepared before `fork` so the child only makes
/// async-signal-safe calls.
pub struct SpawnPlan {
    /// Run with `fexecve` (close-on-exec is fine for an ELF file).
    exe: OwnedFd,
    argv: Vec<CString>,
    envp: Vec<CString>,
    keep_fds: Vec<RawFd>,
    devnull: OwnedFd,
}

fn cstring(s: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl SpawnPlan {
    /// Runs the open executable `exe` with `argv` (`argv[0]` included) and this process's environment plus
    /// `extra_env`; `keep_fds` are left open (without close-on-exec) for the program.
    pub fn new(
        exe: OwnedFd,
        argv: &[String],
        extra_env: &[(String, String)],
        keep_fds: &[RawFd],
    ) -> io::Result<Self> {
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let mut envp = Vec::new();
        for (k, v) in std::env::vars_os() {
            if extra_env
                .iter()
                .any(|(x, _)| k.as_encoded_bytes() == x.as_bytes())
            {
                continue;
            }
            let mut s = k.into_encoded_bytes();
            s.push(b'=');
            s.extend(v.into_encoded_bytes());
            if let Ok(s) = CString::new(s) {
                envp.push(s);
            }
        }
        for (k, v) in extra_env {
            envp.push(cstring(format!("{k}={v}"))?);
        }
        let devnull = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        Ok(Self {
            exe,
            argv,
            envp,
            keep_fds: keep_fds.to_vec(),
            devnull: devnull.into(),
        })
    }
}

/// The steps of the helper child, reported with their errno when one fails.
const STEPS: [&str; 8] = [
    "setsid",
    "fork",
    "sigprocmask",
    "sigaction",
    "dup2",
    "fcntl",
    "exec",
    "write",
];

/// Reports `(step, errno)` through the error pipe and ends the child. Async-signal-safe.
///
/// # Safety
/// Only to be called in a forked child; `fd` is the error pipe's write end.
unsafe fn child_fail(fd: RawFd, step: u32) -> ! {
    // SAFETY: __errno_location, write and _exit are async-signal-safe; `msg` lives on the stack.
    unsafe {
        let errno = *libc::__errno_location();
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&step.to_ne_bytes());
        msg[4..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(fd, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

/// Starts `plan` as a process that is *not* a descendant of the caller: fork, `setsid`, fork
/// again, exec in the grandchild, and the intermediate child exits at once and is reaped here.
/// The grandchild is adopted by init (or the nearest subreaper), so CRIU running under it may
/// dump the caller. Its stdin/stdout/stderr are `/dev/null`, its signal mask is empty and every
/// signal has its default disposition.
///
/// Between `fork` and `exec` the children only make async-signal-safe calls on memory prepared
/// before the fork, and check every one; a failure comes back through a close-on-exec pipe as
/// the step and its errno (the pipe just closes when `exec` succeeds).
pub fn spawn_detached(plan: &SpawnPlan) -> io::Result<()> {
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let null = plan.devnull.as_raw_fd();
    let (err_r, err_w) = pipe()?;
    let ew = err_w.as_raw_fd();
    let sigmax = libc::SIGRTMAX();
    // SAFETY: zeroed sigset_t/sigaction are valid starting values; sigemptyset only writes the
    // set. Prepared here so the child does not build them.
    let (empty, dfl) = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        (set, sa)
    };
    // SAFETY: the children run only async-signal-safe calls (setsid, fork, sigprocmask,
    // sigaction, dup2, fcntl, fexecve, write, _exit) on memory prepared before the fork,
    // so this is sound even in a multithreaded parent.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; nothing here allocates or takes a lock.
        unsafe {
            if libc::setsid() < 0 {
                child_fail(ew, 0);
            }
            let pid2 = libc::fork();
            if pid2 < 0 {
                child_fail(ew, 1);
            }
            if pid2 > 0 {
                libc::_exit(0);
            }
            if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) < 0 {
                child_fail(ew, 2);
            }
            for sig in 1..=sigmax {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                // EINVAL: a signal the C library reserves for itself; it cannot be set.
                if libc::sigaction(sig, &dfl, std::ptr::null_mut()) < 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    child_fail(ew, 3);
                }
            }
            for fd in 0..3 {
                if libc::dup2(null, fd) < 0 {
                    child_fail(ew, 4);
                }
            }
            for &fd in &plan.keep_fds {
                let fl = libc::fcntl(fd, libc::F_GETFD);
                if fl < 0 || libc::fcntl(fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC) < 0 {
                    child_fail(ew, 5);
                }
            }
            libc::fexecve(plan.exe.as_raw_fd(), argv.as_ptr(), envp.as_ptr());
            child_fail(ew, 6);
        }
    }
    drop(err_w);
    let status = wait_pid(pid)?;
    let mut msg = [0u8; 8];
    let n = read_full(&err_r, &mut msg)?;
    if n == msg.len() {
        let step = u32::from_ne_bytes(msg[..4].try_into().expect("4 bytes")) as usize;
        let errno = i32::from_ne_bytes(msg[4..].try_into().expect("4 bytes"));
        return Err(io::Error::other(format!(
            "the helper's {} failed: {}",
            STEPS.get(step).copied().unwrap_or("start"),
            io::Error::from_raw_os_error(errno)
        )));
    }
    if status != 0 {
        return Err(io::Error::other(format!(
            "the helper's intermediate child exited with status {status}"
        )));
    }
    Ok(())
}

/// Reads until `buf` is full or end of file (retrying on `EINTR`); returns the bytes read.
pub fn read_full(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

/// Waits up to `timeout_ms` (-1: forever) for `fd` to become readable (or hung up); `Ok(false)`
/// on timeout.
pub fn poll_readable(fd: &impl AsFd, timeout_ms: i32) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let timeout = (timeout_ms >= 0).then(|| Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    });
    loop {
        let mut p = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut p, timeout.as_ref()) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Ignores `SIGPIPE` (a write to a closed pipe then fails with `EPIPE`), as Rust's runtime does
/// before `main`; for code that runs before it.
pub fn ignore_sigpipe() -> io::Result<()> {
    // SAFETY: installing SIG_IGN touches no memory of ours.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat(dir: &impl AsFd, name: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// `open(path, flags | O_CLOEXEC)` for a path (directories, `/proc/self/exe`).
pub fn open(path: &std::path::Path, flags: i32) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: &impl AsFd, name: &str, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(
        dir,
        name,
        rustix::fs::Mode::from_raw_mode(mode),
    )?)
}

/// `unlinkat(dir, name, 0)`: removes a file (not a directory).
pub fn unlinkat(dir: &impl AsFd, name: &str) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(
        dir,
        name,
        rustix::fs::AtFlags::empty(),
    )?)
}

/// `readlinkat(dir, name)`: where the symbolic link `name` points.
pub fn readlinkat(dir: &impl AsFd, name: &str) -> io::Result<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    Ok(std::ffi::OsString::from_vec(target.into_bytes()))
}

/// `renameat(dir, from, dir, to)`: both names in the same directory.
pub fn renameat(dir: &impl AsFd, from: &str, to: &str) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// `getxattr(path, name)` into `buf`; the value's length.
pub fn getxattr(path: &std::path::Path, name: &str, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::fs::getxattr(path, name, buf)?)
}

/// `fchown(fd, uid, gid)`.
pub fn fchown(fd: &impl AsFd, uid: u32, gid: u32) -> io::Result<()> {
    use rustix::fs::{Gid, Uid};
    Ok(rustix::fs::fchown(
        fd,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
    )?)
}

/// `fchmod(fd, mode)`.
pub fn fchmod(fd: &impl AsFd, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(
        fd,
        rustix::fs::Mode::from_raw_mode(mode),
    )?)
}

/// Linux's `F_SETSIG` (`<fcntl.h>`; the libc crate does not export it).
const F_SETSIG: libc::c_int = 10;

/// Whether nobody holds `file` open for writing (or mapped shared and writable), in any
/// process: a read lease (`F_SETLEASE F_RDLCK`) is granted only then, and given back at once.
/// `Ok(false)`: someone does. Needs the file's owner or `CAP_LEASE`; a file system without
/// leases gives `EINVAL`.
pub fn no_writer(file: &impl AsFd) -> io::Result<bool> {
    let fd = file.as_fd().as_raw_fd();
    // SAFETY: fcntl on a descriptor we borrow, with integer arguments only. F_SETSIG first:
    // should someone open the file for writing while we hold the lease, the kernel signals
    // the holder, and SIGIO (the default) would end this process; SIGURG is ignored.
    cvt(unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) })?;
    // SAFETY: as above.
    match cvt(unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) }) {
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) })?;
    Ok(true)
}

/// `flock(fd, op)` (`LOCK_SH`, `LOCK_EX`, `LOCK_UN`, optionally `| LOCK_NB`); `Ok(false)` when
/// `LOCK_NB` was given and the lock is held elsewhere.
pub fn flock(fd: &impl AsFd, op: i32) -> io::Result<bool> {
    use rustix::fs::FlockOperation as F;
    let op = match op {
        libc::LOCK_SH => F::LockShared,
        libc::LOCK_EX => F::LockExclusive,
        libc::LOCK_UN => F::Unlock,
        o if o == libc::LOCK_SH | libc::LOCK_NB => F::NonBlockingLockShared,
        o if o == libc::LOCK_EX | libc::LOCK_NB => F::NonBlockingLockExclusive,
        o => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("flock operation {o:#x}"),
            ));
        }
    };
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for a child and returns its raw wait status (retrying on `EINTR`).
pub fn wait_pid(pid: i32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write the status to.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The session id of this process as seen in its PID namespace: 0 when the session leader
/// lives in an ancestor namespace (libc: rustix's `getsid` returns a nonzero `Pid`).
pub fn own_session() -> io::Result<i32> {
    // SAFETY: getsid(0) reads this process's session id and takes no pointers.
    cvt(unsafe { libc::getsid(0) })
}

/// Makes this process the leader of a new session (`setsid`); `EPERM` when it leads its
/// process group.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid()?;
    Ok(())
}

/// Children of `pid` (from `/proc/PID/task/*/children`, in the PID namespace of the `/proc`
/// mount); empty when it cannot be read.
pub fn children(pid: i32) -> Vec<i32> {
    children_in(&format!("/proc/{pid}/task"))
}

/// Children of this process (through `/proc/self`, right whichever namespace `/proc` shows).
pub fn own_children() -> Vec<i32> {
    children_in("/proc/self/task")
}

fn children_in(tasks: &str) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(d) = std::fs::read_dir(tasks) {
        for t in d.filter_map(Result::ok) {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// The effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Sends a plain signal.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes plain values.
    cvt(unsafe { libc::kill(pid, sig) })?;
    Ok(())
}

/// `SIGRTMIN` as this libc defines it at run time.
pub fn sigrtmin() -> i32 {
    libc::SIGRTMIN()
}

/// Write end of the pipe the checkpoint-request signal handler writes to (-1: not installed).
static REQUEST_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_request_signal(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // Only async-signal-safe work here: read the siginfo and write 12 bytes to a pipe.
    let fd = REQUEST_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    if fd < 0 || info.is_null() {
        return;
    }
    let saved = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (pid, uid, value) = unsafe {
        let i = &*info;
        (
            i.si_pid(),
            i.si_uid(),
            i.si_value().sival_ptr as isize as i32,
        )
    };
    let mut msg = [0u8; 12];
    msg[..4].copy_from_slice(&pid.to_ne_bytes());
    msg[4..8].copy_from_slice(&uid.to_ne_bytes());
    msg[8..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: write(2) is async-signal-safe; `msg` is valid for 12 bytes.
    unsafe {
        libc::write(fd, msg.as_ptr().cast(), msg.len());
        *libc::__errno_location() = saved;
    }
}

/// Installs the handler for `sig` that forwards `(sender pid, sender uid, value)` as 12 bytes
/// to `write_end` (which must be non-blocking; it is kept open for the life of the process).
pub fn install_request_handler(sig: i32, write_end: OwnedFd) -> io::Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = write_end.into_raw_fd();
    // SAFETY: F_SETFL on a descriptor we own.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) })?;
    REQUEST_PIPE.store(fd, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: `sa` is fully initialised (zeroed, then the fields we use) and the handler has
    // the SA_SIGINFO signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_request_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
    }
    Ok(())
}

/// Runs `f` before `main` (an `.init_array` entry), the way `inventory` registers its items.
#[macro_export]
#[doc(hidden)]
macro_rules! __before_main {
    ($f:path) => {
        #[used]
        #[unsafe(link_section = ".init_array")]
        static __CRAC_CRIU_INIT: extern "C" fn() = {
            extern "C" fn init() {
                $f()
            }
            init
        };
    };
}
