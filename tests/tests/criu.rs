//! Real CRIU checkpoints of real processes (`src/bin/criu_app.rs`), restored with the `crac`
//! command. Needs root and `CRAC_CRIU` (scripts/test sets both up).
//!
//! Every claim is checked from outside the program where that is possible: the process is gone
//! after the dump, the restored one has the original's pid, memory and threads, answers on the
//! listening socket it had, and its output reaches the restorer's (piped) stdout.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crac_tests::criu_app::{app_command, assert_killed_by_dump as killed_by_dump, copy_executable};
use crac_tests::process::{
    Proc, TempDir, alive, crac_command, field, must, proc_status, size_of_files,
};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);

/// The test program, checkpointing into `dir`, with extra environment.
fn app(dir: &Path, env: &[(&str, &str)]) -> Command {
    app_command(APP, dir, env)
}

/// `crac ARGS…` with the tests' criu.
fn crac(args: &[&str]) -> Command {
    crac_command(CRAC, args)
}

fn assert_killed_by_dump(p: &mut Proc) {
    killed_by_dump(p, T)
}

#[test]
fn warm_state_survives_a_checkpoint_and_a_restore() {
    let dir = TempDir::new("warm");
    let img = dir.join("image");
    let mut orig = Proc::spawn(
        "criu_app",
        &mut app(&img, &[("APP_MB", "200"), ("APP_STAY_MS", "3000")]),
    );
    let ready = orig.expect("ready ", T);
    let pid: i32 = must(&ready, "pid").parse().unwrap();
    let checksum = must(&ready, "checksum").to_owned();
    orig.expect("hook=before_checkpoint n=1", T);
    assert_killed_by_dump(&mut orig);
    assert!(!alive(pid), "pid {pid} must be gone after the dump");

    // The image: private, complete, with the 200 MB table in it.
    let mode = std::fs::metadata(&img).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "image dir mode");
    assert!(img.join("inventory.img").exists());
    let pages = size_of_files(&img, "pages-");
    assert!(pages >= 200 << 20, "pages images hold {pages} bytes");

    // Restore; stdout is a pipe to this test (as under `cargo test`) and must not be lost.
    let mut restored = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    restored.expect("hook=after_restore n=1", T);
    let out = restored.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert_eq!(
        must(&out, "pid"),
        pid.to_string(),
        "same pid as the original"
    );
    assert_eq!(
        must(&out, "checksum"),
        checksum,
        "the table is the one built before"
    );
    assert_eq!(must(&out, "built"), "1", "the table was not rebuilt");
    assert_eq!(must(&out, "before"), "1");
    assert_eq!(must(&out, "after"), "1");
    assert_eq!(must(&out, "gen"), "1");
    assert_eq!(
        must(&out, "worker_advancing"),
        "true",
        "the second thread runs"
    );

    // From the outside: the process under the original pid is the program, a child of the
    // restorer (a subreaper), with its memory and its threads.
    assert!(alive(pid));
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, Path::new(APP));
    assert_eq!(
        proc_status(pid, "PPid").unwrap(),
        restored.pid().to_string(),
        "the restored process is reparented to `crac restore`"
    );
    let rss_kb: u64 = proc_status(pid, "VmRSS")
        .unwrap()
        .trim_end_matches(" kB")
        .parse()
        .unwrap();
    assert!(rss_kb >= 200 * 1024, "VmRSS {rss_kb} kB after restore");
    let threads: u32 = proc_status(pid, "Threads").unwrap().parse().unwrap();
    assert!(threads >= 2, "{threads} threads after restore");

    restored.expect("exit", T);
    restored.expect(
        &format!("stderr: crac: restored pid {pid} exited with status 0"),
        T,
    );
    assert!(restored.wait(T).success());
}

#[test]
fn leave_running_goes_on_and_three_copies_run_beside_it() {
    let dir = TempDir::new("leave");
    let img = dir.join("image");
    let mut orig = Proc::spawn(
        "criu_app",
        &mut app(
            &img,
            &[
                ("CRAC_CHECKPOINT_MODE", "leave-running"),
                ("APP_STAY_MS", "60000"),
            ],
        ),
    );
    let ready = orig.expect("ready ", T);
    let pid: i32 = must(&ready, "pid").parse().unwrap();
    let checksum = must(&ready, "checksum").to_owned();
    let out = orig.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "continued", "{out}");
    assert_eq!(must(&out, "worker_advancing"), "true");
    assert!(alive(pid), "the original goes on");

    // The original holds the pid: a plain restore is refused with a clear error.
    let o = crac(&["restore", img.to_str().unwrap(), "--pid-wait", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "PID {pid} of the image is taken by a running process"
        )) && err.contains("--pidns"),
        "{err}"
    );
    assert!(alive(pid), "the original is untouched");

    // Three copies at once, each in its own PID namespace, each told who it is.
    let mut copies: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::spawn(
                &format!("copy {i}"),
                &mut crac(&[
                    "restore",
                    img.to_str().unwrap(),
                    "--pidns",
                    "--env",
                    &format!("COPY={i}"),
                    "--env",
                    "APP_STAY_MS=4000",
                ]),
            )
        })
        .collect();
    let mut host_pids = Vec::new();
    let mut outs = Vec::new();
    for (i, c) in copies.iter_mut().enumerate() {
        let line = c.expect("stderr: crac: restored pid ", T);
        let host: i32 = line
            .split_whitespace()
            .nth(4)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert_ne!(host, pid);
        let out = c.expect("outcome=", T);
        assert_eq!(must(&out, "outcome"), "restored", "{out}");
        assert_eq!(
            must(&out, "pid"),
            pid.to_string(),
            "the image's pid, in its namespace"
        );
        assert_eq!(must(&out, "checksum"), checksum);
        assert_eq!(must(&out, "worker_advancing"), "true");
        assert!(
            must(&out, "env").contains(&format!("COPY:{i}")),
            "copy {i} got its configuration: {out}"
        );
        host_pids.push(host);
        outs.push(out);
    }
    // Each clone drew its own nonce and re-seeded its guarded generator; the generator
    // whose state the image copied draws the same numbers in all three.
    let field_of =
        |k: &str| -> Vec<String> { outs.iter().map(|o| must(o, k).to_owned()).collect() };
    let distinct = |v: &[String]| v.iter().collect::<std::collections::HashSet<_>>().len();
    assert_eq!(distinct(&field_of("nonce")), 3, "{outs:?}");
    assert_eq!(field_of("nonce")[0].len(), 64, "{outs:?}");
    assert_eq!(distinct(&field_of("reseeded")), 3, "{outs:?}");
    assert_eq!(distinct(&field_of("copied")), 1, "{outs:?}");
    // All three and the original are alive at the same moment.
    for &h in &host_pids {
        assert!(alive(h), "copy {h} runs");
    }
    assert!(alive(pid), "the original runs");
    for mut c in copies {
        c.expect("exit", T);
        assert!(c.wait(T).success(), "{}", c.transcript());
    }
    assert!(alive(pid), "the original still runs");
}

/// A restored copy that ends at once is a success, and `crac restore` exits with its status,
/// with and without `--pidns` (the restore is over when criu says so, not when a poll sees it).
#[test]
fn a_copy_that_ends_at_once_is_a_success_with_its_own_status() {
    let dir = TempDir::new("ends-at-once");
    let img = dir.join("image");
    let mut orig = Proc::spawn("criu_app", &mut app(&img, &[]));
    orig.expect("ready ", T);
    assert_killed_by_dump(&mut orig);
    let img = img.to_str().unwrap();
    for (i, (pidns, code)) in [
        (true, 0),
        (true, 3),
        (false, 3),
        (true, 0),
        (true, 7),
        (false, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let mut args = vec!["restore", img, "--env", "APP_STAY_MS=0"];
        let exit = format!("APP_EXIT={code}");
        args.extend(["--env", &exit]);
        if pidns {
            args.push("--pidns");
        }
        let o = crac(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        let what = format!("restore {i} (--pidns {pidns}, exit {code}):\n{out}{err}");
        assert_eq!(o.status.code(), Some(code), "{what}");
        assert!(!err.contains("error"), "{what}");
        assert!(out.contains("outcome=restored"), "the copy ran: {what}");
        assert!(
            err.contains(&format!("exited with status {code}")),
            "{what}"
        );
    }
}

#[test]
fn a_listening_socket_serves_after_restore() {
    let dir = TempDir::new("listen");
    let img = dir.join("image");
    let mut orig = Proc::spawn(
        "criu_app",
        &mut app(&img, &[("APP_LISTEN", "1"), ("APP_STAY_MS", "100")]),
    );
    let port: u16 = must(&orig.expect("listening ", T), "port").parse().unwrap();
    let pid: i32 = must(&orig.expect("ready ", T), "pid").parse().unwrap();
    assert_killed_by_dump(&mut orig);

    let mut restored = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    restored.expect("serving", T);
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the restored listener");
    s.set_read_timeout(Some(T)).unwrap();
    writeln!(s, "hello").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("pong {pid} hello"));
    restored.expect("exit", T);
    assert!(restored.wait(T).success());
}

#[test]
fn the_fd_check_names_a_connected_socket_and_the_process_goes_on() {
    let dir = TempDir::new("fdcheck");
    let img = dir.join("image");
    let mut orig = Proc::spawn("criu_app", &mut app(&img, &[("APP_CONNECT", "1")]));
    let conn = orig.expect("connected ", T);
    let (local, peer) = (must(&conn, "local"), must(&conn, "peer"));
    // First attempt, connection open: refused before CRIU runs, naming the socket.
    let out = orig.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "error", "{out}");
    let expected = format!("TCP {local} -> {peer} is still open");
    assert!(out.contains(&expected), "expected `{expected}` in {out}");
    assert!(out.contains("fd "), "{out}");
    assert_eq!(
        must(&out, "worker_advancing"),
        "true",
        "the process goes on"
    );
    assert!(
        !img.join("inventory.img").exists(),
        "no image after a refused checkpoint"
    );
    // Second attempt: the resource closed it; the checkpoint succeeds and restores.
    orig.expect("hook=before_checkpoint n=2", T);
    assert_killed_by_dump(&mut orig);
    let mut restored = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    let out = restored.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert_eq!(must(&out, "before"), "2");
    assert!(restored.wait(T).success());
}

#[test]
fn the_fd_check_refuses_an_io_uring_instance_with_the_fix() {
    let dir = TempDir::new("io-uring");
    let img = dir.join("image");
    let mut orig = Proc::spawn("criu_app", &mut app(&img, &[("APP_IO_URING", "1")]));
    let out = orig.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "error", "{out}");
    assert!(
        out.contains("anon_inode:[io_uring] is open") && out.contains("epoll-based runtime"),
        "{out}"
    );
    assert_eq!(
        must(&out, "worker_advancing"),
        "true",
        "the process goes on"
    );
    assert!(!img.join("inventory.img").exists(), "no image");
    assert!(orig.wait(T).success(), "{}", orig.transcript());
}

#[test]
fn crac_checkpoint_pid_checkpoints_a_running_program() {
    let dir = TempDir::new("external");
    let img = dir.join("image");
    let other = dir.join("other");
    // Leave-running first: the program answers and goes on.
    let mut orig = Proc::spawn(
        "criu_app",
        &mut app(&img, &[("APP_TRIGGER", "external"), ("APP_STAY_MS", "100")]),
    );
    let pid: i32 = must(&orig.expect("ready ", T), "pid").parse().unwrap();
    let o = crac(&[
        "checkpoint",
        &pid.to_string(),
        "--leave-running",
        "--dir",
        other.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("continued"), "{err}");
    // Where its time went: the engine's checks, criu, CRIU's own account, the seal.
    for part in [
        "checks ",
        "criu ",
        "frozen ",
        "pages copied out ",
        "sealed files=",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
    assert!(other.join("inventory.img").exists(), "image in --dir");
    let out = orig.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "continued", "{out}");
    assert!(orig.wait(T).success());

    // Stop mode (the default): the program is gone and the image restores.
    let mut orig = Proc::spawn(
        "criu_app",
        &mut app(&img, &[("APP_TRIGGER", "external"), ("APP_STAY_MS", "100")]),
    );
    let pid: i32 = must(&orig.expect("ready ", T), "pid").parse().unwrap();
    let o = crac(&["checkpoint", &pid.to_string()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("and stopped (criu: frozen "), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        std::fs::canonicalize(&img).unwrap().to_str().unwrap(),
        "prints the image directory"
    );
    assert_killed_by_dump(&mut orig);
    let mut restored = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    let out = restored.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert!(restored.wait(T).success());

    // A pid that is not a crac program's: a clear error, not a hang.
    let o = crac(&["checkpoint", "999999999"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no running process"));
}

#[test]
fn crac_checkpoint_never_signals_a_process_without_the_handler() {
    // The listener is off: the signal would kill the program. Refused, and it runs on.
    let dir = TempDir::new("nohandler");
    let img = dir.join("image");
    let mut p = Proc::spawn(
        "criu_app",
        &mut app(
            &img,
            &[("APP_TRIGGER", "external"), ("CRAC_CHECKPOINT_SIGNAL", "0")],
        ),
    );
    let pid: i32 = must(&p.expect("ready ", T), "pid").parse().unwrap();
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    for target in [pid, sleeper.id() as i32] {
        let o = crac(&["checkpoint", &target.to_string()]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("process {target} has no handler"))
                && err.contains("it was not signalled"),
            "{err}"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(alive(target), "pid {target} must still run");
    }
    assert!(!img.exists(), "no image");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn a_log_file_that_grew_after_the_dump_does_not_break_the_restore() {
    let dir = TempDir::new("logfile");
    let img = dir.join("image");
    let log = dir.join("app.log");
    // stdout to a file opened with `>` (no O_APPEND): CRIU checks such a file's size on
    // restore. The original keeps writing after the dump, so the file grows.
    let f = std::fs::File::create(&log).unwrap();
    let mut c = app(
        &img,
        &[
            ("CRAC_CHECKPOINT_MODE", "leave-running"),
            ("APP_STAY_MS", "100"),
        ],
    );
    let st = c
        .stdout(f)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("outcome=continued") && text.ends_with("exit\n"),
        "{text}"
    );

    // The restorer's stdout is the same log, opened for appending: the copy writes there.
    let f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let o = crac(&["restore", img.to_str().unwrap(), "--pidns"])
        .stdout(f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("outcome=restored"), "{text}");
}

#[test]
fn a_session_leader_outside_the_pid_namespace_does_not_stop_a_checkpoint() {
    // A supervisor that starts a PID namespace without a session of its own (`unshare --pid
    // --fork`, no `setsid`) leaves the program's session leader outside it, which CRIU refuses
    // to dump. The engine then makes the program lead its own session.
    let dir = TempDir::new("session");
    let img = dir.join("image");
    // In the new namespace: files inherited from outside it (other than the pipes to us) are
    // closed, since CRIU cannot dump them (the fd check names them); stdin is opened inside.
    let in_pidns = |exec: &str| {
        format!(
            "for fd in $(ls /proc/$$/fd); do [ \"$fd\" -gt 2 ] && eval \"exec $fd>&-\"; done; \
             {exec} \"$0\" </dev/null"
        )
    };
    let unshare_with = |img: &Path, extra: &[(&str, &str)], script: &str| {
        let mut env = vec![("CRAC_CHECKPOINT_MODE", "leave-running")];
        env.extend_from_slice(extra);
        outcome_of(
            img,
            &env,
            Some(&[
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "bash",
                "-c",
                script,
            ]),
        )
    };
    let unshare = |script: &str| unshare_with(&img, &[], script);
    // The shell stays PID 1, the reaper CRIU's detached helper is handed to.
    let out = unshare(&in_pidns(""));
    assert_eq!(must(&out, "outcome"), "continued", "{out}");
    assert!(img.join("inventory.img").exists());
    // Its children started in the old session, which leading a new one does not move: said
    // so, with the fix, instead of CRIU's words.
    let out = unshare_with(
        &dir.join("image-children"),
        &[("APP_CHILD", "1")],
        &in_pidns(""),
    );
    assert!(
        out.contains("outcome=error") && out.contains("(sleep)") && out.contains("`setsid`"),
        "{out}"
    );
    // The program as PID 1 itself cannot work: CRIU's helper would be its child. Said so.
    let out = unshare(&in_pidns("exec"));
    assert!(
        out.contains("outcome=error") && out.contains("PID 1 of its PID namespace"),
        "{out}"
    );
}

/// Runs the app once with `env` and returns its outcome line; asserts it went on afterwards
/// (printed `exit`, status 0).
fn outcome_of(dir: &Path, env: &[(&str, &str)], wrap: Option<&[&str]>) -> String {
    let mut c = match wrap {
        Some(w) => {
            let mut c = Command::new(w[0]);
            c.args(&w[1..]).arg(APP);
            let base = app(dir, env);
            for (k, v) in base.get_envs() {
                match v {
                    Some(v) => c.env(k, v),
                    None => c.env_remove(k),
                };
            }
            c
        }
        None => app(dir, env),
    };
    let mut p = Proc::spawn("criu_app", &mut c);
    let out = p.expect("outcome=", T);
    p.expect("exit", T);
    assert!(p.wait(T).success(), "{}", p.transcript());
    out
}

fn fake_criu(dir: &TempDir, name: &str, script: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.to_str().unwrap().to_owned()
}

#[test]
fn each_error_names_its_cause_and_the_process_goes_on() {
    let dir = TempDir::new("errors");
    let img = dir.join("image");

    // criu missing.
    let out = outcome_of(&img, &[("CRAC_CRIU", "/nonexistent/criu")], None);
    assert_eq!(must(&out, "outcome"), "error");
    assert!(
        out.contains("criu not found at /nonexistent/criu") && out.contains("scripts/install-criu"),
        "{out}"
    );

    // A criu that never finishes the dump: stopped after CRAC_CRIU_TIMEOUT, the process goes on.
    let hangs = fake_criu(
        &dir,
        "hanging-criu",
        "case \"$1\" in --version) echo 'Version: 4.2.1';; *) exec sleep 1000;; esac",
    );
    let t = Instant::now();
    let out = outcome_of(
        &img,
        &[("CRAC_CRIU", &hangs), ("CRAC_CRIU_TIMEOUT", "2")],
        None,
    );
    assert!(
        out.contains("criu did not finish the dump within 2 s (CRAC_CRIU_TIMEOUT) and was stopped"),
        "{out}"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());

    // criu too old.
    let old = fake_criu(&dir, "old-criu", "echo 'Version: 3.17.1'");
    let out = outcome_of(&img, &[("CRAC_CRIU", &old)], None);
    assert!(
        out.contains("criu 3.17.1") && out.contains("too old"),
        "{out}"
    );

    // `criu check` failing, as `crac check` reports it.
    let broken = fake_criu(
        &dir,
        "broken-criu",
        "case \"$1\" in --version) echo 'Version: 4.2.1';; check) echo 'Error (cr-check.c:1): seccomp not supported' >&2; exit 1;; esac",
    );
    let o = Command::new(CRAC)
        .arg("check")
        .env("CRAC_CRIU", &broken)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("PROBLEM") && text.contains("seccomp not supported") && text.contains("fix:"),
        "{text}"
    );
    // ... and with the real criu it is fine.
    let o = crac(&["check"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("criu check: Looks good"), "{text}");

    // Not root.
    let out = outcome_of(
        &img,
        &[],
        Some(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]),
    );
    assert!(
        out.contains("not root") && out.contains("CAP_CHECKPOINT_RESTORE"),
        "{out}"
    );

    // No image directory configured.
    let mut c = app(&img, &[]);
    c.env_remove("CRAC_CHECKPOINT_TO");
    let mut p = Proc::spawn("criu_app", &mut c);
    let out = p.expect("outcome=", T);
    assert!(
        out.contains("no image directory: set CRAC_CHECKPOINT_TO"),
        "{out}"
    );
    assert!(p.wait(T).success());

    // An image directory others can read.
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = outcome_of(&open, &[], None);
    assert!(
        out.contains("has mode 0755") && out.contains("chmod 700"),
        "{out}"
    );
    // A path that cannot be a directory.
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = outcome_of(&file.join("image"), &[], None);
    assert!(
        out.contains("cannot use image directory") && out.contains("Not a directory"),
        "{out}"
    );

    // An image taken from another build of the program.
    let exe = dir.join("app-copy");
    copy_executable(APP, &exe);
    let base = app(&img, &[]);
    let mut p = Proc::spawn(
        "criu_app copy",
        Command::new(&exe).envs(base.get_envs().filter_map(|(k, v)| Some((k, v?)))),
    );
    p.expect("hook=before_checkpoint", T);
    assert_killed_by_dump(&mut p);
    // "Rebuild": another executable at the same path.
    std::fs::remove_file(&exe).unwrap();
    copy_executable(CRAC, &exe);
    let o = crac(&["restore", img.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the image was taken from another build"),
        "{err}"
    );

    // Not an image at all.
    let o = crac(&["restore", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a crac image"), "{err}");
}

#[test]
fn a_hook_that_never_returns_fails_the_checkpoint_by_name_and_the_next_one_is_taken() {
    let dir = TempDir::new("hang");
    let img = dir.join("image");
    let mut p = Proc::spawn(
        "criu_app",
        &mut app(
            &img,
            &[
                ("APP_HANG_ONCE", "1"),
                ("CRAC_HOOK_TIMEOUT", "1.5"),
                ("CRAC_CHECKPOINT_MODE", "leave-running"),
                ("APP_LOOP", "2"),
                ("APP_STAY_MS", "0"),
            ],
        ),
    );
    p.expect("hook=hanging", T);
    let first = p.expect("outcome=", T);
    assert_eq!(must(&first, "outcome"), "error", "{first}");
    assert!(
        first.contains(
            "hangs-once failed in before_checkpoint: before_checkpoint did not return \
                        within 1.5 s"
        ),
        "{first}"
    );
    // The other resource got both hooks; no image was taken.
    assert_eq!(
        (must(&first, "before"), must(&first, "after")),
        ("1", "1"),
        "{first}"
    );
    let second = p.expect("outcome=", T);
    assert_eq!(must(&second, "outcome"), "continued", "{second}");
    assert_eq!(must(&second, "gen"), "1", "{second}");
    p.expect("exit", T);
    assert!(p.wait(T).success());
}

#[test]
fn a_pid_held_by_an_unreaped_process_is_waited_for() {
    // The dumped process is our child: until we reap it, its pid is a zombie's. `crac restore`
    // says so and waits instead of failing with CRIU's "File exists".
    let dir = TempDir::new("zombie");
    let img = dir.join("image");
    let mut c = app(&img, &[("APP_STAY_MS", "100")]);
    // stdout a pipe (left unread): the restored copy then writes to the restorer's stdout.
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let deadline = Instant::now() + T;
    while proc_status(pid, "State").is_some_and(|s| !s.starts_with('Z')) {
        assert!(Instant::now() < deadline, "not dumped in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(img.join("inventory.img").exists());
    let mut restore = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    let line = restore.expect("stderr: crac: waiting for PID", T);
    assert!(line.contains("not yet reaped"), "{line}");
    child.wait().unwrap(); // reap: the pid is free now
    let out = restore.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored");
    assert_eq!(field(&out, "pid"), Some(pid.to_string().as_str()));
    assert!(restore.wait(T).success());
}
