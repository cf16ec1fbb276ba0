//! A user speaking the checkpoint broker's socket protocol directly (tests/tests/
//! criu_broker.rs), the broker's socket from `CRAC_BROKER_SOCKET`:
//!
//! - `broker_user ping N`: N pings, 100 ms apart: one `ping ms=… answer=…` line each;
//! - `broker_user full-pipes N`: N checkpoint requests whose answer pipe is shrunk to one page
//!   and filled, never read (a broker that writes its answer blocking waits for ever); one
//!   `answer I: …` line each, then `ready`, then it holds them until killed;
//! - `broker_user silent N`: N connections that send nothing, reopened every 10 s; `ready`
//!   once the first N are open;
//! - `broker_user handoff GO`: connects, hands the connection to a child of its own and
//!   exits, printing `connected pid=PID`; the child sends a restore request on it once the
//!   file GO exists and prints `answer …` (what the broker said of a caller that is gone).

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use crac_criu::broker::{answer, connect};
use crac_criu::image::metadata::Metadata;
use crac_criu::sys;

/// Shrinks the pipe of `fd` to one page and fills it.
fn fill(fd: &OwnedFd) {
    // SAFETY: fcntl with integer arguments on a descriptor we own.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 4096);
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut f = std::fs::File::from(fd.try_clone().expect("dup"));
    while f.write(&[7u8; 512]).is_ok() {}
}

/// One checkpoint request with a full answer pipe: the pipe's read end (held, never read)
/// and what the broker answered on the connection.
fn full_pipe_request(i: usize) -> (OwnedFd, String) {
    let (r, w) = sys::pipe().expect("pipe");
    fill(&w);
    let key = std::fs::read_link(format!("/proc/self/fd/{}", r.as_raw_fd()))
        .expect("readlink")
        .to_string_lossy()
        .into_owned();
    let meta = Metadata {
        pid: std::process::id() as i32,
        env_fd: Some((r.as_raw_fd(), key)),
        ..Metadata::default()
    };
    let request = format!(
        "checkpoint\nname=attack-{i}\nmode=leave-running\n\n{}",
        meta.to_text()
    );
    let said = match connect(Duration::from_secs(60)) {
        Ok(conn) => match sys::send_with_fds(&conn, request.as_bytes(), &[w.as_fd()]) {
            Ok(()) => answer(&conn).unwrap_or_else(|e| e.to_string()),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    };
    (r, said)
}

fn full_pipes(n: usize) -> ! {
    let held: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| s.spawn(move || full_pipe_request(i)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("request")).collect()
    });
    for (i, (_, said)) in held.iter().enumerate() {
        println!("answer {i}: {said}");
    }
    println!("ready");
    let _held = held;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn silent(n: usize) -> ! {
    let mut first = true;
    loop {
        let conns: Vec<_> = (0..n)
            .filter_map(|_| connect(Duration::from_secs(60)).ok())
            .collect();
        if first {
            println!("ready {}", conns.len());
            first = false;
        }
        std::thread::sleep(Duration::from_secs(10));
        drop(conns);
    }
}

fn ping(n: usize) {
    for _ in 0..n {
        let t = Instant::now();
        let said = connect(Duration::from_secs(60))
            .and_then(|c| {
                sys::send(&c, b"ping\n").map_err(|e| {
                    crac_criu::Error::new(crac_criu::ErrorKind::Other, e.to_string())
                })?;
                answer(&c)
            })
            .map_err(|e| e.to_string())
            .unwrap_or_else(|e| e);
        println!(
            "ping ms={:.1} answer={}",
            t.elapsed().as_secs_f64() * 1e3,
            said.replace(' ', "_")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Connects and exits, leaving the connection to a child that speaks once `go` exists.
fn handoff(go: &str) {
    let conn = connect(Duration::from_secs(60)).expect("connect");
    sys::set_cloexec(&conn, false).expect("fcntl");
    let me = std::env::current_exe().expect("current_exe");
    // Not waited for: it outlives this process, which is the point.
    #[allow(clippy::zombie_processes)]
    let _child = std::process::Command::new(me)
        .args(["send-restore", &conn.as_raw_fd().to_string(), go])
        .stdout(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    println!("connected pid={}", std::process::id());
}

/// The child of `handoff`: a restore request on the inherited connection `fd`.
fn send_restore(fd: &str, go: &str) {
    let conn = sys::inherited_fd(fd.parse().expect("fd")).expect("inherited connection");
    while !Path::new(go).exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let (payload, _w) = sys::pipe().expect("pipe");
    let fds = [i.as_fd(), o.as_fd(), e.as_fd(), payload.as_fd()];
    let said = sys::send_with_fds(&conn, b"restore\nname=svc\n", &fds)
        .map_err(|e| e.to_string())
        .and_then(|()| answer(&conn).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| e);
    println!("answer {said}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = || -> usize { args.get(1).and_then(|n| n.parse().ok()).unwrap_or(16) };
    match args.first().map(String::as_str) {
        Some("full-pipes") => full_pipes(n()),
        Some("silent") => silent(n()),
        Some("ping") => ping(n()),
        Some("handoff") => handoff(&args[1]),
        Some("send-restore") => send_restore(&args[1], &args[2]),
        _ => {
            eprintln!("usage: broker_user ping N | full-pipes N | silent N | handoff GO");
            std::process::exit(2);
        }
    }
}
