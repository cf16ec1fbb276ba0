//! The system calls only the `crac` program makes; the ones the engine makes too are
//! [`crac_criu::sys`] (re-exported here, so the program's code names one module). As there,
//! most go through `rustix`; what stays on `libc`, with `unsafe` stated sound at each call:
//! `sigqueue`-style signals through a pidfd (rustix's `pidfd_send_signal` takes no siginfo),
//! `UFFDIO_WAKE`, and raw wait statuses (`exit_code` decodes them as shells do).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

pub(crate) use crac_criu::sys::*;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A listening unix `SOCK_SEQPACKET` socket at `path` (made by `bind`: fails if the path
/// exists).
pub(crate) fn seqpacket_listen(path: &std::path::Path) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    rustix::net::bind(&fd, &rustix::net::SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&fd, 64)?;
    Ok(fd)
}

/// Accepts one connection (close-on-exec).
pub(crate) fn accept(listener: &impl AsFd) -> io::Result<OwnedFd> {
    loop {
        match rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return Ok(r?),
        }
    }
}

/// The peer of a connected unix socket as the kernel recorded it at `connect`:
/// `(pid, uid, gid)`.
pub(crate) fn peer_cred(sock: &impl AsFd) -> io::Result<(i32, u32, u32)> {
    let c = rustix::net::sockopt::socket_peercred(sock)?;
    Ok((c.pid.as_raw_nonzero().get(), c.uid.as_raw(), c.gid.as_raw()))
}

/// Receives one packet (at most `buf.len()` bytes; a longer one is an error) and the
/// descriptors attached to it (at most 4, close-on-exec). `Ok((0, []))`: the peer closed.
pub(crate) fn recv_with_fds(sock: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [io::IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Err(io::Error::other(
            "packet or descriptors cut short: too long",
        ));
    }
    Ok((msg.bytes, fds))
}

/// `struct uffdio_range` of `<linux/userfaultfd.h>`.
#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `UFFDIO_WAKE`: `_IOR(0xAA, 0x02, struct uffdio_range)` (not in the libc crate).
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
const _: () = assert!(std::mem::size_of::<UffdioRange>() == 16);

/// `ioctl(uffd, UFFDIO_WAKE, {start, len})`: wakes the threads waiting on a page fault in that
/// range of the userfaultfd's process; each retries its fault, which the monitor sees again if
/// the page is still missing.
pub(crate) fn uffd_wake(uffd: &impl AsRawFd, start: u64, len: u64) -> io::Result<()> {
    let range = UffdioRange { start, len };
    // SAFETY: `range` is a valid uffdio_range the kernel only reads.
    cvt(unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_WAKE, &range as *const UffdioRange) })?;
    Ok(())
}

/// `pidfd_open(pid, 0)`: a descriptor that refers to this very process, whatever happens to
/// its pid later.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid).ok_or(io::ErrorKind::InvalidInput)?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// The kernel's `siginfo_t` as `sigqueue` fills it (`SI_QUEUE`), for `pidfd_send_signal`:
/// signo, errno, code, then (8-aligned) pid, uid and the value; 128 bytes in all.
#[repr(C)]
struct QueueInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: u64,
    _rest: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<QueueInfo>() == 128);

/// Sends `sig` with the integer `value` (as `sigqueue` does) to the process of `pidfd`.
pub(crate) fn pidfd_sigqueue(pidfd: &impl AsRawFd, sig: i32, value: i32) -> io::Result<()> {
    let info = QueueInfo {
        signo: sig,
        errno: 0,
        code: libc::SI_QUEUE,
        _pad: 0,
        // SAFETY: getpid and getuid cannot fail and take no arguments.
        pid: unsafe { libc::getpid() },
        // SAFETY: as above.
        uid: unsafe { libc::getuid() },
        value: value as u32 as u64,
        _rest: [0; 12],
    };
    // SAFETY: `info` is a valid 128-byte siginfo for the kernel to copy.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            &info as *const QueueInfo,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`: a plain signal to exactly the process of `pidfd`
/// (a pid reused since cannot be hit).
pub(crate) fn pidfd_kill(pidfd: &impl AsRawFd, sig: i32) -> io::Result<()> {
    // SAFETY: plain values; a null siginfo makes the kernel fill in a plain `kill`'s.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate (close-on-exec) of descriptor `fd` of the process
/// of `pidfd`; needs ptrace access to that process.
pub(crate) fn pidfd_getfd(pidfd: &impl AsFd, fd: RawFd) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_getfd(
        pidfd,
        fd,
        rustix::process::PidfdGetfdFlags::empty(),
    )?)
}

/// Sets the calling thread's nice value (Linux schedules threads one by one, so this changes
/// only this thread).
pub(crate) fn set_thread_nice(nice: i32) -> io::Result<()> {
    Ok(rustix::process::setpriority_process(
        Some(rustix::thread::gettid()),
        nice,
    )?)
}

/// Whether the process of `pidfd` still runs: a pidfd turns readable when its process ends
/// (a zombie not yet reaped has ended too, though it still takes signals).
pub(crate) fn pidfd_alive(pidfd: &impl AsFd) -> bool {
    matches!(poll_readable(pidfd, 0), Ok(false))
}

/// Reaps child `pid` if it has ended: `Some(raw status)`, `None` while it runs.
pub(crate) fn try_wait_pid(pid: i32) -> io::Result<Option<i32>> {
    let mut status = 0;
    // SAFETY: `status` is a valid int to write the status to.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r > 0).then_some(status))
}

/// Blocks until any child ends: `Ok(None)` when there are no children left.
pub(crate) fn wait_any() -> io::Result<Option<(i32, i32)>> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write the status to.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r > 0 {
            return Ok(Some((r, status)));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Decodes a raw wait status into an exit code the way shells do (128+signal).
pub(crate) fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Makes this process a child subreaper, so orphaned descendants (the restored process once
/// criu exits) are reparented to it and it can collect their exit status.
pub(crate) fn set_child_subreaper() -> io::Result<()> {
    Ok(rustix::process::set_child_subreaper(Some(
        rustix::process::getpid(),
    ))?)
}

/// `SO_PEERGROUPS` and `SO_PEERPIDFD` (`<asm-generic/socket.h>`; the libc crate does not
/// export them for every target).
const SO_PEERGROUPS: libc::c_int = 59;
const SO_PEERPIDFD: libc::c_int = 77;

/// The supplementary groups of the peer of a connected unix socket, as the kernel recorded
/// them at `connect` (`SO_PEERGROUPS`).
pub(crate) fn peer_groups(sock: &impl AsFd) -> io::Result<Vec<u32>> {
    // NGROUPS_MAX is 65536; start small and grow once to what the kernel says it needs.
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    for _ in 0..2 {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is valid for `len` bytes of writing and `len` says so.
        let r = unsafe {
            libc::getsockopt(
                sock.as_fd().as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() {
            return Err(e);
        }
        groups.resize(n, 0);
    }
    Err(io::Error::other(
        "SO_PEERGROUPS: the group list kept growing",
    ))
}

/// A pidfd of the process that connected to this unix socket, taken by the kernel at
/// `connect` (`SO_PEERPIDFD`, Linux 6.5): it is that process even if its pid was reused.
pub(crate) fn peer_pidfd(sock: &impl AsFd) -> io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writing and `len` holds the buffer size.
    cvt(unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    if fd < 0 {
        return Err(io::Error::other("SO_PEERPIDFD gave no descriptor"));
    }
    // SAFETY: the kernel just made this descriptor for us; nothing else owns it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Blocks until a child of this process has ended and returns its pid without reaping it
/// (`waitid(P_ALL, WEXITED | WNOWAIT)`): `Ok(None)` when there are no children.
pub(crate) fn peek_ended_child() -> io::Result<Option<i32>> {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for writing; the id is ignored with P_ALL.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            // SAFETY: waitid filled `info` for an ended child (si_pid is set for SIGCHLD).
            return Ok(Some(unsafe { info.si_pid() }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Reaps the child of `pidfd` if it has ended: its exit code as shells give it (128+signal),
/// `None` while it runs.
pub(crate) fn reap_pidfd(pidfd: &impl AsFd) -> io::Result<Option<i32>> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let st = loop {
        match waitid(
            WaitId::PidFd(pidfd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    Ok(st.map(|s| match (s.exit_status(), s.terminating_signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }))
}

/// Sends one packet without blocking (never raising `SIGPIPE`): `Ok(false)` when the peer's
/// buffer is full.
pub(crate) fn send_nonblocking(sock: &impl AsFd, buf: &[u8]) -> io::Result<bool> {
    use rustix::net::SendFlags;
    match rustix::net::send(sock, buf, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::AGAIN) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits up to `timeout_ms` for `fd` to take writes (or hang up); `Ok(false)` on timeout.
pub(crate) fn poll_writable(fd: &impl AsFd, timeout_ms: i32) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let timeout = Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    };
    loop {
        let mut p = [PollFd::new(fd, PollFlags::OUT)];
        match poll(&mut p, Some(&timeout)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sets `O_NONBLOCK` on the open file description of `fd` (a pipe end this process alone
/// holds: the flag is shared with every holder of the description).
pub(crate) fn set_nonblocking(fd: &impl AsFd) -> io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(fd)?;
    Ok(fcntl_setfl(fd, flags | OFlags::NONBLOCK)?)
}

/// Sends `sig` to every process of process group `pgid`.
pub(crate) fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    crac_criu::sys::kill(-pgid, sig)
}

/// Whether `fd` is a listening unix `SOCK_SEQPACKET` socket.
pub(crate) fn is_seqpacket_listener(fd: &impl AsFd) -> bool {
    use rustix::net::{SocketType, sockopt};
    sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::SEQPACKET)
        && sockopt::socket_acceptconn(fd).unwrap_or(false)
}

/// Keeps a long-running daemon's heap from growing with its busiest moment (glibc; a no-op
/// elsewhere): every thread allocates from the main arena (`M_ARENA_MAX` 1: a thread's own
/// arena keeps what it freed resident, `malloc_trim` trims only the main arena's top), and
/// buffers of 64 KiB or more are mapped and unmapped on their own (a fixed
/// `M_MMAP_THRESHOLD`: glibc would raise it to the largest buffer freed, and put the next
/// ones among the small allocations, where they stay).
pub(crate) fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes only the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

/// The pidfd that [`forward_signal`] signals (-1: none).
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The signals `crac restore` passes on to the process it restored and waits for.
pub(crate) const FORWARDED: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn forward_signal(sig: libc::c_int) {
    let fd = FORWARD_TO.load(std::sync::atomic::Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    // SAFETY: errno is this thread's; saved and put back so the interrupted code sees its own.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: pidfd_send_signal is a plain system call (async-signal-safe) on integers and a
    // null siginfo; a stale descriptor only makes it fail.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd,
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
        *libc::__errno_location() = errno;
    }
}

/// While alive, SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to this process go to the process of
/// its pidfd instead (a container's PID 1 gets no signal it has no handler for: `podman stop`
/// would wait, then kill). Dropping it restores the default actions.
#[derive(Debug)]
pub(crate) struct Forwarding {
    /// Held open while the handler may signal it.
    _pidfd: OwnedFd,
}

/// Forwards [`FORWARDED`] to the process of `pidfd` until the result is dropped.
pub(crate) fn forward_signals(pidfd: OwnedFd) -> io::Result<Forwarding> {
    FORWARD_TO.store(pidfd.as_raw_fd(), std::sync::atomic::Ordering::SeqCst);
    for sig in FORWARDED {
        set_handler(sig, forward_signal as *const () as libc::sighandler_t)?;
    }
    Ok(Forwarding { _pidfd: pidfd })
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        FORWARD_TO.store(-1, std::sync::atomic::Ordering::SeqCst);
        for sig in FORWARDED {
            let _ = set_handler(sig, libc::SIG_DFL);
        }
        // The pidfd closes after this, when no handler can use it any more.
    }
}

/// `sigaction(sig)` with `handler`, restarting interrupted system calls (the waiter's
/// `waitpid` goes on).
fn set_handler(sig: i32, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid (empty mask, no flags); only the handler, a
    // function that makes one async-signal-safe system call, or SIG_DFL, is set.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: `sa` is initialised above; the old action is not asked for.
    cvt(unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) }).map(drop)
}
