//! The init of a checkpointing container (issue 40's experiments, docs/containers.md; the
//! `crac` program is to carry it): `container_init MIN_PID PROGRAM [ARGS…]`, the container's
//! entrypoint, PID 1 of its PID namespace.
//!
//! 1. Pushes the namespace's pid counter to `MIN_PID - 1` by forking children that exit at once
//!    (about 90 µs each here; no capability, no sysctl: `/proc/sys/kernel/ns_last_pid` is
//!    read-only in a container, and clone3's `set_tid` places one pid while the service's
//!    threads still take low ones). Every pid and thread id of the service is then at least
//!    `MIN_PID`, so a restore in a fresh container, whose own processes and threads (`crac
//!    restore` as PID 1, criu, its probes) stay far below it, finds them free.
//! 2. Starts PROGRAM (its pid is then `MIN_PID` or above) and forwards SIGTERM, SIGINT,
//!    SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it.
//! 3. Reaps every process until none is left (a stop-mode checkpoint's dump helper outlives
//!    the service it dumped: PID 1 exiting earlier would end it in the middle of sealing the
//!    image), then exits with PROGRAM's status (128 + signal if a signal ended it).

use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill(2) is async-signal-safe and takes plain integers.
        unsafe { libc::kill(child, sig) };
    }
}

fn die(msg: &str) -> ExitCode {
    eprintln!("container_init: {msg}");
    ExitCode::from(111)
}

/// Forks children that exit at once until the last one had a pid of at least `min - 1`.
fn push_pids_to(min: i32) -> Result<(), String> {
    loop {
        // SAFETY: the child calls only _exit(2), which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        let mut st = 0;
        // SAFETY: waits for the child just forked; `st` is a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if pid >= min - 1 {
            return Ok(());
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(min), Some(program)) = (args.first(), args.get(1)) else {
        return die("usage: container_init MIN_PID PROGRAM [ARGS...]");
    };
    let Some(min) = min.parse::<i32>().ok().filter(|m| *m >= 1) else {
        return die(&format!("MIN_PID {min}: not a pid"));
    };
    let pid_max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    if min >= pid_max {
        return die(&format!(
            "MIN_PID {min} is not below kernel.pid_max {pid_max}"
        ));
    }
    // Outside PID 1 (a test), orphans come to us only as a subreaper.
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes integers only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if let Err(e) = push_pids_to(min) {
        return die(&e);
    }
    let child = match Command::new(program).args(&args[2..]).spawn() {
        Ok(c) => c,
        Err(e) => return die(&format!("cannot run {program}: {e}")),
    };
    let child_pid = child.id() as i32;
    CHILD.store(child_pid, Ordering::SeqCst);
    eprintln!("container_init: started {program} as pid {child_pid}");
    for sig in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: installs a handler that only calls kill(2); no other state is touched.
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    // The child is reaped below with every other process, not through `Child`.
    drop(child);
    let mut code = 1u8;
    loop {
        let mut st = 0;
        // SAFETY: waits for any child; `st` is a valid out-pointer.
        let pid = unsafe { libc::wait(&mut st) };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // ECHILD: nothing is left.
            return ExitCode::from(code);
        }
        if pid == child_pid {
            code = if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st) as u8
            } else {
                128u8.wrapping_add(libc::WTERMSIG(st) as u8)
            };
            CHILD.store(0, Ordering::SeqCst);
        }
    }
}
