//! Lazy restores (`crac restore --lazy`): the process runs before its memory is in; the
//! `criu lazy-pages` daemon serves what it touches and streams the rest. Needs root and
//! `CRAC_CRIU` (scripts/test sets both up), and a kernel where `crac check` says restores
//! are lazy (`criu check --feature uffd-noncoop`).
//!
//! What is shown, from outside where possible: the state a restored copy reads after the
//! background load equals the original's at every size; clones restore lazily side by side;
//! a daemon that dies ends the process (which never runs on zeroed pages: `crac restore`
//! holds the userfaultfds); a page file changed after the dump ends the process
//! (`--verify metadata`) or is refused before it runs (`--verify full`); a copy whose checks
//! are not over does not outlive a killed `crac restore`; CRIU loads its kernel probe from the
//! cache crac keeps instead of probing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crac_tests::criu_app::{
    app_command, assert_killed_by_dump, flip_byte, image_file, wait_sealed,
};
use crac_tests::process::{Proc, TempDir, alive, crac_command, must};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(300);

fn crac(args: &[&str]) -> Command {
    crac_command(CRAC, args)
}

/// A stop-mode image of the test program with a table of `mb` MiB; its `ready` line.
fn image(img: &Path, mb: usize, env: &[(&str, &str)]) -> String {
    let mb = mb.to_string();
    let mut env = env.to_vec();
    env.push(("APP_MB", &mb));
    let mut p = Proc::spawn("criu_app", &mut app_command(APP, img, &env));
    let ready = p.expect("ready ", T);
    assert_killed_by_dump(&mut p, T);
    // The tests change images: only once they are sealed.
    wait_sealed(img, T);
    ready
}

/// `crac restore IMG ARGS…` (lazily), the copy waiting for its whole table before it reads it.
fn restore(img: &Path, args: &[&str]) -> Proc {
    let mut a = vec!["restore", img.to_str().unwrap(), "--lazy"];
    a.extend(args);
    a.extend(["--env", "APP_WAIT_RESIDENT=1"]);
    Proc::spawn("crac restore", &mut crac(&a))
}

/// Checks a lazily restored copy to its end: it ran lazily, its table arrived whole through
/// the background load, the checksum it then computed is the original's, every page arrived
/// and the page files matched the manifest.
fn lazily_restored_whole(r: &mut Proc, checksum: &str) {
    let line = r.expect("stderr: crac: restored pid ", T);
    assert!(line.contains("(lazy:"), "{line}");
    let res = r.expect("resident ", T);
    assert!(res.starts_with("resident ms="), "{}", r.transcript());
    let first = r.expect("first_work ", T);
    assert_eq!(must(&first, "checksum"), checksum, "{}", r.transcript());
    let out = r.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert_eq!(must(&out, "checksum"), checksum);
    let all = r.expect("stderr: crac: all pages in memory", T);
    // Every page the daemon had to serve arrived.
    let served = all
        .split('(')
        .nth(1)
        .and_then(|s| s.split(" pages served").next())
        .unwrap_or_else(|| panic!("{all}"));
    let (done, of) = served.split_once(" of ").unwrap_or_else(|| panic!("{all}"));
    assert_eq!(done, of, "{all}");
    r.expect("stderr: crac: page files match the manifest", T);
    r.expect("exit", T);
    assert!(r.wait(T).success(), "{}", r.transcript());
}

/// The last restore log CRIU wrote in `img`.
fn newest_log(img: &Path, prefix: &str) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(img)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| (e.metadata().unwrap().modified().unwrap(), e.path()))
        .collect();
    logs.sort();
    let (_, p) = logs
        .pop()
        .unwrap_or_else(|| panic!("no {prefix}* in {img:?}"));
    std::fs::read_to_string(p).unwrap()
}

/// At each size (8 MB, 200 MB, 1 GB; `CRAC_TEST_LAZY_MB=4096,…` for others), a copy restored
/// lazily waits, without touching its table, until the daemon has streamed all of it in, then
/// computes its checksum: the original's.
#[test]
fn a_lazily_restored_state_equals_the_original_after_the_background_load() {
    let sizes: Vec<usize> = std::env::var("CRAC_TEST_LAZY_MB")
        .map(|v| v.split(',').map(|s| s.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![8, 200, 1024]);
    for mb in sizes {
        let dir = TempDir::new(&format!("lazy-{mb}"));
        let img = dir.join("image");
        let ready = image(&img, mb, &[]);
        let checksum = must(&ready, "checksum");
        let mut r = restore(&img, &[]);
        lazily_restored_whole(&mut r, checksum);
        // Neither the dump nor the lazy-pages daemon probed the kernel: CRIU loaded its cache
        // (`criu restore` reads the same one; its log is in the restore's work directory,
        // removed once the restore worked).
        for log in ["dump.log", "lazy-pages-"] {
            let text = newest_log(&img, log);
            assert!(
                text.contains("Loaded kdat cache from"),
                "{mb} MB: {log} does not load the kdat cache:\n{}",
                text.lines().take(8).collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// Three clones of one image restored lazily at once, each in its own PID namespace with its
/// own daemon; then one with `--detach`, which returns once the memory is in while the copy
/// runs on.
#[test]
fn clones_restore_lazily_side_by_side_and_detach_waits_for_the_memory() {
    let dir = TempDir::new("lazy-clones");
    let img = dir.join("image");
    let ready = image(&img, 128, &[("APP_SPARSE", "1")]);
    let checksum = must(&ready, "checksum");
    let mut copies: Vec<Proc> = (0..3)
        .map(|i| restore(&img, &["--pidns", "--env", &format!("COPY={i}")]))
        .collect();
    for c in &mut copies {
        lazily_restored_whole(c, checksum);
    }

    let mut d = Proc::spawn(
        "crac restore --detach",
        &mut crac(&[
            "restore",
            img.to_str().unwrap(),
            "--lazy",
            "--detach",
            "--pidns",
            "--env",
            "APP_STAY_MS=5000",
        ]),
    );
    let line = d.expect("stderr: crac: restored pid ", T);
    let host: i32 = line
        .split_whitespace()
        .nth(4)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    d.expect("stderr: crac: all pages in memory", T);
    assert!(d.wait(T).success(), "{}", d.transcript());
    // `crac restore` is gone (its stdout stays open in the copy), the copy runs on.
    assert!(alive(host), "the detached copy runs on: {}", d.transcript());
}

/// The pid of the `criu lazy-pages` child of `crac restore`.
fn lazy_daemon_of(crac_pid: i32) -> i32 {
    let deadline = Instant::now() + T;
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{crac_pid}/task/{crac_pid}/children"))
            .unwrap_or_default();
        for k in kids.split_whitespace() {
            let cmd = std::fs::read(format!("/proc/{k}/cmdline")).unwrap_or_default();
            if cmd.split(|b| *b == 0).any(|w| w == b"lazy-pages") {
                return k.parse().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "no lazy-pages daemon");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn holds_userfaultfd(pid: i32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .any(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[userfaultfd]")
        })
}

/// The daemon stopped while the copy reads its table, then killed: the copy waits on its
/// missing page (crac restore holds the userfaultfd, so it never reads a zeroed one), then
/// `crac restore` ends it and reports the daemon's failure.
#[test]
fn a_lazy_pages_daemon_that_dies_ends_the_restored_process() {
    let dir = TempDir::new("lazy-daemon-dies");
    let img = dir.join("image");
    let ready = image(&img, 512, &[("APP_SPARSE", "1")]);
    let pid: i32 = must(&ready, "pid").parse().unwrap();
    // Straight to the checksum: the copy faults its table in page by page.
    let mut r = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap(), "--lazy"]),
    );
    let daemon = lazy_daemon_of(r.pid());
    r.expect("stderr: crac: restored pid ", T);
    Command::new("kill")
        .args(["-STOP", &daemon.to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let so_far = r.transcript();
    assert!(
        !so_far.contains("all pages in memory"),
        "the load ended before the daemon was stopped; nothing shown:\n{so_far}"
    );
    assert!(holds_userfaultfd(r.pid()), "crac restore holds the uffd");
    assert!(alive(pid), "the copy waits for its page");
    assert!(!so_far.contains("first_work"), "{so_far}");

    Command::new("kill")
        .args(["-KILL", &daemon.to_string()])
        .status()
        .unwrap();
    let e = r.expect(
        "stderr: crac: error: lazy restore: the lazy-pages daemon failed",
        T,
    );
    assert!(e.contains("the restored process was ended"), "{e}");
    let st = r.wait(T);
    assert_eq!(st.code(), Some(137), "{}", r.transcript());
    assert!(!alive(pid), "the copy is gone");
    let all = r.transcript();
    assert!(
        !all.contains("first_work") && !all.contains("outcome="),
        "the copy computed nothing on missing pages:\n{all}"
    );
}

/// A byte of the page file flipped after the dump: by default (lazy, `--verify metadata`) the
/// copy starts and is ended when the page file's digest fails; with `--verify full` nothing
/// runs. A file others can write is refused before anything runs in both modes.
#[test]
fn a_page_file_changed_after_the_dump_ends_a_lazy_copy_or_is_refused_first() {
    let dir = TempDir::new("lazy-verify");
    let img = dir.join("image");
    let ready = image(&img, 64, &[("APP_STAY_MS", "5000")]);
    let pid: i32 = must(&ready, "pid").parse().unwrap();
    let pages = image_file(&img, "pages-");
    let name = pages.file_name().unwrap().to_string_lossy().into_owned();
    let mut data = std::fs::read(&pages).unwrap();
    let at = data.len() - 4096 * 3 + 17;
    data[at] ^= 0x01;
    std::fs::write(&pages, &data).unwrap();

    let o = crac(&["restore", img.to_str().unwrap(), "--lazy"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(137), "{err}");
    assert!(
        err.contains(&format!("{name} does not match the manifest"))
            && err.contains("the restored process was ended"),
        "{err}"
    );
    assert!(!alive(pid));

    for mode in ["--lazy", "--eager"] {
        let o = crac(&["restore", img.to_str().unwrap(), mode, "--verify", "full"])
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(2), "{mode}: {err}");
        assert!(err.contains(&format!("{name} does not match")), "{err}");
        assert!(!out.contains("outcome="), "nothing ran: {out}");
    }

    data[at] ^= 0x01;
    std::fs::write(&pages, &data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pages, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = crac(&["restore", img.to_str().unwrap(), "--lazy"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{name} has mode 0666")), "{err}");
}

/// Every descendant of `pid` (through `/proc/PID/task/*/children`).
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<i32>().ok())
            {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// `crac restore` killed (SIGKILL) while a tampered image's copy runs before its checks are
/// over (lazy, `--verify metadata`: its pages still streaming in, its page file's digest not
/// yet compared): within a second the copy, the child it forked before the checkpoint, the
/// lazy-pages daemon (and with `--pidns` the namespace) are gone, and so is the daemon's work
/// directory. Without the guard the copy would run on, its missing pages read as zeros.
#[test]
fn a_copy_whose_checks_are_not_over_does_not_outlive_crac_restore() {
    for pidns in [false, true] {
        let dir = TempDir::new("lazy-guard");
        let img = dir.join("image");
        let env = [("APP_SPARSE", "1"), ("APP_CHILD", "1"), ("APP_MB", "512")];
        // In a session of its own, as a service with children is started: a session leader
        // outside the PID namespace (a CI runner's) would keep its child from being dumped.
        let mut c = app_command("setsid", &img, &env);
        let mut p = Proc::spawn("criu_app", c.arg(APP));
        let child: i32 = must(&p.expect("child ", T), "pid").parse().unwrap();
        p.expect("ready ", T);
        assert_killed_by_dump(&mut p, T);
        wait_sealed(&img, T);
        // The dump killed the child too; its pid is free once PID 1 has reaped it (slowly).
        let deadline = Instant::now() + T;
        while Path::new(&format!("/proc/{child}")).exists() {
            assert!(Instant::now() < deadline, "pid {child} not freed");
            std::thread::sleep(Duration::from_millis(10));
        }
        flip_byte(&image_file(&img, "pages-"), 4096 * 3 - 17);

        let mut args = vec!["restore", img.to_str().unwrap(), "--lazy"];
        if pidns {
            args.push("--pidns");
        }
        args.extend(["--env", "APP_STAY_MS=60000"]);
        let mut r = Proc::spawn("crac restore", &mut crac(&args));
        let daemon = lazy_daemon_of(r.pid());
        let work = cmdline(daemon)
            .windows(2)
            .find(|w| w[0] == "--work-dir")
            .map(|w| std::path::PathBuf::from(&w[1]))
            .expect("the daemon's --work-dir");
        r.expect("stderr: crac: restored pid ", T);
        let tree: Vec<i32> = descendants(r.pid())
            .into_iter()
            .filter(|&p| !cmdline(p).iter().any(|w| w == "__restore-guard"))
            .collect();
        let so_far = r.transcript();
        assert!(
            !so_far.contains("all pages in memory") && !so_far.contains("page files match"),
            "the checks ended before crac restore could be killed; nothing shown:\n{so_far}"
        );
        // The copy, its child and the daemon at least (with --pidns: unshare and the init too).
        assert!(tree.len() >= 3, "pidns={pidns}: {tree:?}");
        Command::new("kill")
            .args(["-KILL", &r.pid().to_string()])
            .status()
            .unwrap();
        let killed = Instant::now();
        r.wait(T);
        let deadline = killed + Duration::from_secs(1);
        while (tree.iter().any(|&p| alive(p)) || work.exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left: Vec<(i32, Vec<String>)> = tree
            .iter()
            .filter(|&&p| alive(p))
            .map(|&p| (p, cmdline(p)))
            .collect();
        // Not left running past this test if the assertion fails.
        for (p, _) in &left {
            let _ = Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .status();
        }
        assert!(
            left.is_empty(),
            "pidns={pidns}: still running 1 s after: {left:?}"
        );
        assert!(!work.exists(), "pidns={pidns}: {} left", work.display());
        let out = r.transcript();
        assert!(
            !out.contains("first_work"),
            "the copy computed nothing: {out}"
        );
    }
}

/// `crac check` says restores are lazy here and that crac keeps CRIU's kernel probe.
#[test]
fn crac_check_says_restores_are_lazy_and_the_probe_is_cached() {
    let o = crac(&["check"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("ok      restores are lazy"), "{out}");
    assert!(
        out.contains("crac keeps criu's kernel probe in /run/criu.kdat")
            || out.contains("/run is a tmpfs"),
        "{out}"
    );
}

/// A copy checkpointed again while its pages are still arriving (its daemon stopped): the dump
/// waits until every page is in (CRIU would write the missing ones as holes), and the image it
/// then takes holds every page of the table and restores.
#[test]
fn a_checkpoint_of_a_copy_still_loading_waits_for_its_pages() {
    let dir = TempDir::new("lazy-recheckpoint");
    let img = dir.join("image");
    let again = dir.join("again");
    let ready = image(&img, 512, &[("APP_SPARSE", "1")]);
    let pid = must(&ready, "pid").to_owned();
    let mut r = Proc::spawn(
        "crac restore",
        &mut crac(&[
            "restore",
            img.to_str().unwrap(),
            "--lazy",
            "--env",
            "APP_STAY_MS=15000",
        ]),
    );
    let daemon = lazy_daemon_of(r.pid());
    r.expect("stderr: crac: restored pid ", T);
    let signal = |sig: &str| {
        let st = Command::new("kill")
            .args([sig, &daemon.to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig} {daemon}");
    };
    signal("-STOP");
    let so_far = r.transcript();
    assert!(
        !so_far.contains("all pages in memory"),
        "the load ended before the daemon was stopped; nothing shown:\n{so_far}"
    );
    let mut ck = Proc::spawn(
        "crac checkpoint",
        &mut crac(&[
            "checkpoint",
            &pid,
            "--dir",
            again.to_str().unwrap(),
            "--timeout",
            "300",
        ]),
    );
    // The request is taken and the dump waits: nothing is written while pages are missing.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !again.join("inventory.img").exists(),
        "dumped while pages were missing:\n{}",
        r.transcript()
    );
    signal("-CONT");
    r.expect("stderr: crac: all pages in memory", T);
    assert!(ck.wait(T).success(), "{}", ck.transcript());
    // The dump killed the copy (stop mode).
    assert_eq!(r.wait(T).code(), Some(137), "{}", r.transcript());
    // Every page of the table is in the new image: written while some were missing, their
    // place would be a hole.
    let pages: u64 = std::fs::read_dir(&again)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pages-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        pages >= 512 << 20,
        "{pages} bytes of pages in the new image"
    );
    let mut copy = Proc::spawn(
        "crac restore again",
        &mut crac(&["restore", again.to_str().unwrap(), "--env", "APP_STAY_MS=0"]),
    );
    copy.expect("stderr: crac: restored pid ", T);
    copy.expect("stderr: crac: all pages in memory", T);
    // It sleeps out the rest of its stay (the dump caught it within it) and exits.
    assert!(copy.wait(T).success(), "{}", copy.transcript());
}
