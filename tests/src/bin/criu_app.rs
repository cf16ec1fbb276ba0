//! Test program for the CRIU tests (`tests/tests/criu_*.rs`): warm state, two threads, a
//! registered resource, and a few behaviours chosen by environment variables.
//!
//! - `APP_MB` (default 200): size of the table built at start (every page touched).
//! - `APP_COST` (default 1): rounds of mixing per table entry: how expensive the state is.
//! - `APP_TRIGGER`: `auto` (default: checkpoint right after start) or `external` (wait for
//!   `crac checkpoint PID`; the resource's hooks report the cycle).
//! - `APP_CONNECT=1`: open a TCP connection to a local listener and hold it in a resource that
//!   closes it in `before_checkpoint` only from the second attempt on.
//! - `APP_LISTEN=1`: hold a listening TCP socket; after the checkpoint, serve one connection.
//! - `APP_OPEN_FILE=PATH`: hold PATH open for writing (not appending) across the checkpoint.
//! - `APP_IO_URING=1`: hold an io_uring instance open (what an io_uring runtime holds),
//!   which the fd check refuses.
//! - `APP_CHILD=1`: start a child (`sleep 3600`, or `APP_CHILD_EXE 3600`) before the
//!   checkpoint: it is dumped and restored with the tree; prints `child pid=N`.
//! - `APP_HANG_ONCE=1`: also register a resource (`hangs-once`) whose first `before_checkpoint`
//!   never returns.
//! - `APP_LOOP=N`: take N checkpoints in a row (for leave-running), one `outcome=` line each.
//! - `APP_STAY_MS` (default 300): how long to keep running after the checkpoint returned; a
//!   restorer may override it for a copy with `crac restore --env APP_STAY_MS=…`.
//! - `APP_EXIT` (restorer only, default 0): the exit status of a restored copy.
//! - `APP_WAIT_RESIDENT=1` (restorer only): before anything else after the restore, wait
//!   without touching the table until every page of it is resident (a lazy restore streams
//!   them in), print `resident ms=…`; the checksums printed next then read streamed pages.
//! - `APP_SPARSE=1`: build the table fast, one nonzero word per page (for tests that need
//!   many pages, not their content).
//!
//! After a restore the outcome line also shows what a clone must draw again: `nonce=` (the
//! restore nonce), `reseeded=` (three draws of a generator re-seeded with `ReseedGuard`) and
//! `copied=` (three draws of one seeded once at start, whose state the image copied).
//!
//! Every line it prints is `key=value` words, flushed at once, so the test can check it.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crac_api::{Context, Core, Outcome, Resource, ResourceError};
use crac_criu as _;

static BUILT: AtomicU64 = AtomicU64::new(0);
static TICKS: AtomicU64 = AtomicU64::new(0);

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// Builds `mb` MiB of state; `cost` rounds of mixing per 8-byte entry stand for how expensive
/// the state is to compute (1: a plain memory fill, the case least favourable to a restore).
fn build_table(mb: usize, cost: u32) -> Vec<u64> {
    BUILT.fetch_add(1, Ordering::SeqCst);
    let n = mb * 1024 * 1024 / 8;
    let mut v = Vec::with_capacity(n);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..n {
        for _ in 0..cost.max(1) {
            // xorshift64: cheap, but the table still has to be built to know it.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
        }
        v.push(x.wrapping_mul(0x2545_f491_4f6c_dd1d));
    }
    v
}

/// `mb` MiB with one nonzero word per 4 KiB page: every page present, built at once.
fn sparse_table(mb: usize) -> Vec<u64> {
    BUILT.fetch_add(1, Ordering::SeqCst);
    let mut v = vec![0u64; mb * 1024 * 1024 / 8];
    for (i, w) in v.iter_mut().enumerate().step_by(512) {
        *w = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    // The table need not start on a page: its last page too.
    if let Some(w) = v.last_mut() {
        *w = 1;
    }
    v
}

/// With `APP_WAIT_RESIDENT=1` from the restorer: waits until the whole table is in.
fn wait_resident(table: &[u64]) {
    if Core::management().restore_var("APP_WAIT_RESIDENT") != Some("1") {
        return;
    }
    let (addr, len) = crac_tests::resident::range_of(table);
    match crac_tests::resident::wait_resident(addr, len, Duration::from_secs(120)) {
        Ok(t) => say(&format!(
            "resident ms={} pages={}",
            t.as_millis(),
            len.div_ceil(4096)
        )),
        Err(e) => say(&format!("resident error={}", e.replace(' ', "_"))),
    }
}

fn checksum(v: &[u64]) -> u64 {
    v.iter().fold(0u64, |a, &b| a.rotate_left(5) ^ b)
}

/// The resource: counts its hooks; optionally owns a TCP connection.
struct App {
    before: AtomicU64,
    after: AtomicU64,
    conn: Mutex<Option<TcpStream>>,
    close_conn: AtomicBool,
}

impl Resource for App {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.before.fetch_add(1, Ordering::SeqCst);
        if self.close_conn.load(Ordering::SeqCst) {
            self.conn.lock().unwrap().take();
        }
        say(&format!(
            "hook=before_checkpoint n={}",
            self.before.load(Ordering::SeqCst)
        ));
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.after.fetch_add(1, Ordering::SeqCst);
        say(&format!(
            "hook=after_restore n={}",
            self.after.load(Ordering::SeqCst)
        ));
        Ok(())
    }

    fn name(&self) -> String {
        "criu-app".into()
    }
}

/// Its first `before_checkpoint` (when armed) never returns.
struct HangOnce(AtomicBool);

impl Resource for HangOnce {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        if self.0.swap(false, Ordering::SeqCst) {
            say("hook=hanging");
            loop {
                std::thread::park();
            }
        }
        Ok(())
    }

    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }

    fn name(&self) -> String {
        "hangs-once".into()
    }
}

fn env_flag(k: &str) -> bool {
    std::env::var(k).is_ok_and(|v| v == "1")
}

/// A generator seeded from the OS; with a guard, seeded again after every restore.
struct Gen {
    state: Mutex<u64>,
    guard: Option<crac_api::ReseedGuard>,
}

impl Gen {
    fn new(guarded: bool) -> Self {
        Gen {
            state: Mutex::new(crac_api::os_random_u64() | 1),
            guard: guarded.then(crac_api::ReseedGuard::new),
        }
    }

    fn draws(&self) -> String {
        let mut s = self.state.lock().unwrap();
        if self.guard.as_ref().is_some_and(|g| g.needs_reseed()) {
            *s = crac_api::os_random_u64() | 1;
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            *s ^= *s << 13;
            *s ^= *s >> 7;
            *s ^= *s << 17;
            out.push(format!("{:x}", *s));
        }
        out.join(",")
    }
}

static RESEEDED: std::sync::LazyLock<Gen> = std::sync::LazyLock::new(|| Gen::new(true));
static COPIED: std::sync::LazyLock<Gen> = std::sync::LazyLock::new(|| Gen::new(false));

fn report(outcome: &Result<Outcome, crac_api::CheckpointError>, table: &[u64], app: &App) {
    let (kind, detail) = match outcome {
        Ok(Outcome::Restored(r)) => (
            "restored",
            format!(
                "nonce={} reseeded={} copied={} gen={} frozen_ms={} env={}",
                crac_api::restore_nonce()
                    .map(|n| n.iter().map(|b| format!("{b:02x}")).collect::<String>())
                    .unwrap_or_default(),
                RESEEDED.draws(),
                COPIED.draws(),
                r.generation,
                r.frozen.as_millis(),
                r.new_env
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
        Ok(Outcome::Continued { generation, .. }) => ("continued", format!("gen={generation}")),
        Ok(Outcome::NoImage) => ("noimage", String::new()),
        Err(e) => (
            "error",
            format!("msg={}", e.to_string().replace('\n', " | ")),
        ),
    };
    // The worker thread runs on if its tick count moves; wait for that event (a loaded
    // machine may not schedule it within a fixed 50 ms), bounded so a dead worker still shows.
    let t0 = TICKS.load(Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TICKS.load(Ordering::SeqCst) == t0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = TICKS.load(Ordering::SeqCst);
    say(&format!(
        "outcome={kind} pid={} checksum={:016x} built={} before={} after={} worker_advancing={} {detail}",
        std::process::id(),
        checksum(table),
        BUILT.load(Ordering::SeqCst),
        app.before.load(Ordering::SeqCst),
        app.after.load(Ordering::SeqCst),
        t1 > t0,
    ));
}

fn main() {
    let mb: usize = std::env::var("APP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let stay = Duration::from_millis(
        std::env::var("APP_STAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    );
    let t = Instant::now();
    let cost: u32 = std::env::var("APP_COST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let table = if env_flag("APP_SPARSE") {
        sparse_table(mb)
    } else {
        build_table(mb, cost)
    };
    // Both generators take their first state now, before any checkpoint.
    let _ = (RESEEDED.draws(), COPIED.draws());
    let build_ms = t.elapsed().as_millis();

    // The second thread.
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(|| {
            loop {
                TICKS.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .unwrap();

    let app = Arc::new(App {
        before: AtomicU64::new(0),
        after: AtomicU64::new(0),
        conn: Mutex::new(None),
        close_conn: AtomicBool::new(false),
    });
    Core::global_context().register(&app);
    let hang = Arc::new(HangOnce(AtomicBool::new(env_flag("APP_HANG_ONCE"))));
    Core::global_context().register(&hang);

    let mut peer = None;
    if env_flag("APP_CONNECT") {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        say(&format!(
            "connected local={} peer={}",
            c.local_addr().unwrap(),
            c.peer_addr().unwrap()
        ));
        *app.conn.lock().unwrap() = Some(c);
        // The accepted end is closed too: only the client fd is the test's subject.
        peer = Some((l, a));
    }
    let listener = env_flag("APP_LISTEN").then(|| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        say(&format!(
            "listening port={}",
            l.local_addr().unwrap().port()
        ));
        l
    });

    // A child process, dumped and restored with the tree (`sleep`, or `APP_CHILD_EXE` given
    // `3600`; its stdio /dev/null).
    let _child = env_flag("APP_CHILD").then(|| {
        let exe = std::env::var("APP_CHILD_EXE").unwrap_or_else(|_| "sleep".into());
        let c = std::process::Command::new(exe)
            .arg("3600")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        say(&format!("child pid={}", c.id()));
        c
    });
    let _ring = env_flag("APP_IO_URING").then(io_uring);
    let _held = std::env::var_os("APP_OPEN_FILE").map(|p| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .unwrap();
        f.write_all(b"held\n").unwrap();
        f
    });
    say(&format!(
        "ready pid={} checksum={:016x} built={} build_ms={build_ms}",
        std::process::id(),
        checksum(&table),
        BUILT.load(Ordering::SeqCst)
    ));

    if std::env::var("APP_TRIGGER").as_deref() == Ok("external") {
        // Wait for `crac checkpoint PID`: the control thread runs the cycle; the hooks tell.
        let deadline = Instant::now() + Duration::from_secs(60);
        while app.after.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let restored = Core::management().restore_count() > 0;
        let outcome = if restored {
            Ok(Outcome::Restored(crac_api::Restored {
                generation: Core::management().generation(),
                restore_time: Core::management().restore_time().unwrap(),
                frozen: Core::management().frozen_duration().unwrap_or_default(),
                image_dir: None,
                new_env: Core::management().restore_env().to_vec(),
            }))
        } else {
            Ok(Outcome::Continued {
                generation: Core::management().generation(),
                image_dir: Default::default(),
            })
        };
        report(&outcome, &table, &app);
    } else {
        if let Some((l, a)) = peer.take() {
            // First attempt with the connection open: must be refused, process goes on.
            let r = Core::checkpoint_restore();
            report(&r, &table, &app);
            app.close_conn.store(true, Ordering::SeqCst);
            drop(a);
            drop(l);
        }
        let rounds: u32 = std::env::var("APP_LOOP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        for _ in 1..rounds {
            let r = Core::checkpoint_restore();
            report(&r, &table, &app);
        }
        say(&format!("checkpointing wall_ns={}", wall_ns()));
        let r = Core::checkpoint_restore();
        wait_resident(&table);
        // First work after the checkpoint returns: read the whole table.
        say(&format!(
            "first_work checksum={:016x} wall_ns={}",
            checksum(&table),
            wall_ns()
        ));
        report(&r, &table, &app);
    }

    if let Some(l) = listener {
        // Serve one connection on the listener that went through the checkpoint.
        l.set_nonblocking(false).unwrap();
        say("serving");
        if let Ok((s, _)) = l.accept() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let mut s = s;
            let _ = writeln!(s, "pong {} {}", std::process::id(), line.trim());
        }
    }
    // A restorer can change how long a copy stays (`crac restore --env APP_STAY_MS=…`).
    let stay = Core::management()
        .restore_var("APP_STAY_MS")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(stay);
    std::thread::sleep(stay);
    say("exit");
    // And with which status (`--env APP_EXIT=3`): the restorer must report it.
    let code = Core::management()
        .restore_var("APP_EXIT")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::process::exit(code);
}

/// Opens an io_uring instance of 4 entries, as an io_uring runtime does at start.
fn io_uring() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // struct io_uring_params is 120 bytes; zeroed asks for the defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup(2) writes at most sizeof(struct io_uring_params) bytes into
    // `params`, which is that large, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    assert!(
        fd >= 0,
        "io_uring_setup: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the descriptor was just created and is owned by nobody else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
}
