//! What `crac restore` refuses to trust, each case triggered on purpose on real CRIU images of
//! `src/bin/criu_app.rs`: an image directory others can write or another user owns, an image
//! file changed after the dump, an executable that is not the one the image was taken from, a
//! symlink raced in while the image directory is created, a FIFO planted as an image file, a
//! page file someone holds open for writing (a descriptor opened while it was writable, which
//! a `chmod` does not close), and a restore that CRIU itself refuses (its `Error` lines in the
//! message). Every refusal restores nothing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crac_tests::criu_app::{app_command, assert_killed_by_dump, copy_executable, wait_sealed};
use crac_tests::process::{Proc, TempDir, alive, crac_command, must};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);

fn crac(args: &[&str]) -> Command {
    crac_command(CRAC, args)
}

/// A stop-mode image of `exe` (the test program or a copy of it) in `img`; its pid.
fn image(exe: &str, img: &Path, env: &[(&str, &str)]) -> i32 {
    let mut env = env.to_vec();
    env.push(("APP_STAY_MS", "100"));
    let mut p = Proc::spawn("criu_app", &mut app_command(exe, img, &env));
    let pid = must(&p.expect("ready ", T), "pid").parse().unwrap();
    assert_killed_by_dump(&mut p, T);
    wait_sealed(img, T);
    pid
}

/// `crac restore img --verify full`: refused (exit 2) with every one of `expect` in its
/// message, and nothing restored: no output of the program, its pid not running. (A lazy
/// restore's default, `--verify metadata`, checks the page files' digests while the process
/// runs: tests/criu_lazy.rs.)
fn refused(img: &Path, pid: i32, expect: &[&str]) -> String {
    let o = crac(&["restore", img.to_str().unwrap(), "--verify", "full"])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(o.status.code(), Some(2), "{err}{out}");
    for e in expect {
        assert!(err.contains(e), "expected `{e}` in: {err}");
    }
    assert!(!out.contains("outcome="), "nothing may be restored: {out}");
    assert!(!alive(pid), "pid {pid} must not run");
    err
}

/// Waits (10 s at most) until `pid` does not run.
fn gone(pid: i32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(std::time::Instant::now() < deadline, "pid {pid} still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `crac restore img` restores and the copy ends well.
fn restores(img: &Path) {
    let mut r = Proc::spawn(
        "crac restore",
        &mut crac(&["restore", img.to_str().unwrap()]),
    );
    let out = r.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert!(r.wait(T).success(), "{}", r.transcript());
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn chown_r(p: &Path, uid: u32) {
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}"), p.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn pages_file(img: &Path) -> PathBuf {
    fs::read_dir(img)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pages-"))
        })
        .expect("a pages image")
}

#[test]
fn an_image_others_can_write_or_another_user_owns_is_refused() {
    let dir = TempDir::new("trust-owner");
    let img = dir.join("image");
    let pid = image(APP, &img, &[]);

    chmod(&img, 0o777);
    refused(&img, pid, &["has mode 0777", "cp -r"]);
    chmod(&img, 0o700);

    let pages = pages_file(&img);
    chmod(&pages, 0o666);
    let name = pages.file_name().unwrap().to_string_lossy().into_owned();
    refused(&img, pid, &[&format!("{name} has mode 0666")]);
    chmod(&pages, 0o600);

    // Another user's image (nobody's), as root: never restored with root's credentials.
    chown_r(&img, 65534);
    refused(
        &img,
        pid,
        &["belongs to uid 65534", "not to the restoring user (uid 0)"],
    );
    chown_r(&img, 0);

    // Put back as it was, the same image restores: the refusals were for those reasons alone.
    restores(&img);
}

/// A FIFO in place of a page file: refused at once (a plain open would wait for a writer
/// forever). A page file a process holds open for writing, opened while others could write it
/// and kept across the `chmod` that made the image look private: refused, naming the file;
/// the copy the refusal advises restores, whatever the old descriptor writes.
#[test]
fn a_fifo_in_an_image_or_a_page_file_held_open_for_writing_is_refused() {
    let dir = TempDir::new("trust-fifo");
    let img = dir.join("image");
    let pid = image(APP, &img, &[]);
    let pages = pages_file(&img);
    let name = pages.file_name().unwrap().to_string_lossy().into_owned();
    let aside = dir.join("pages-aside");
    fs::rename(&pages, &aside).unwrap();
    let st = Command::new("mkfifo").arg(&pages).status().unwrap();
    assert!(st.success());
    let t = std::time::Instant::now();
    refused(
        &img,
        pid,
        &[
            &format!("cannot read {name} in"),
            "it is a FIFO, not a regular file",
        ],
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    fs::remove_file(&pages).unwrap();
    fs::rename(&aside, &pages).unwrap();

    // The attack: the page file is writable by others for a while; someone opens it then.
    // What it writes later is the file's first byte inverted: a change whatever the page held
    // (a fixed byte left the file as it was when the dumped page began with it).
    chmod(&pages, 0o666);
    let first = fs::read(&pages).unwrap()[0];
    let changed = format!("\\{:03o}", !first);
    let go = dir.join("go");
    let mut writer = Proc::spawn(
        "writer",
        Command::new("sh").args([
            "-c",
            "exec 3<>\"$0\"; echo open; while [ ! -e \"$1\" ]; do sleep 0.01; done; \
             printf \"$2\" >&3; echo wrote; exec sleep 60",
            pages.to_str().unwrap(),
            go.to_str().unwrap(),
            &changed,
        ]),
    );
    writer.expect("open", T);
    chmod(&pages, 0o600);
    refused(
        &img,
        pid,
        &[&format!("{name} is open for writing"), "cp -r"],
    );
    // The advice: a copy only this user can write, made while the image is still as dumped.
    let copy = dir.join("copy");
    let st = Command::new("sh")
        .args(["-c", "umask 077 && cp -r \"$0\" \"$1\""])
        .args([&img, &copy])
        .status()
        .unwrap();
    assert!(st.success());
    fs::write(&go, b"").unwrap();
    writer.expect("wrote", T);
    restores(&copy);
    // The old file did change, through the descriptor the chmod left open.
    refused(&img, pid, &[&format!("{name} is open for writing")]);
    drop(writer);
    refused(&img, pid, &[&format!("{name} does not match the manifest")]);
}

#[test]
fn a_flipped_byte_or_a_foreign_executable_is_refused() {
    let dir = TempDir::new("trust-content");
    let img = dir.join("image");
    // A copy of the program, so the test can replace its executable.
    let exe = dir.join("app-copy");
    copy_executable(APP, &exe);
    let pid = image(exe.to_str().unwrap(), &img, &[]);

    let pages = pages_file(&img);
    let mut data = fs::read(&pages).unwrap();
    let at = data.len() / 2;
    data[at] ^= 0x40;
    fs::write(&pages, &data).unwrap();
    let name = pages.file_name().unwrap().to_string_lossy().into_owned();
    refused(
        &img,
        pid,
        &[&format!(
            "{name} does not match the manifest written at dump time"
        )],
    );
    data[at] ^= 0x40;
    fs::write(&pages, &data).unwrap();

    // The executable replaced by something that is not a regular file: never read.
    fs::rename(&exe, dir.join("app-saved")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &exe).unwrap();
    refused(
        &img,
        pid,
        &["cannot be read", "a device, not a regular file"],
    );
    fs::remove_file(&exe).unwrap();
    // ... or by another program.
    copy_executable(CRAC, &exe);
    refused(&img, pid, &["the image was taken from another build"]);
    fs::remove_file(&exe).unwrap();

    fs::rename(dir.join("app-saved"), &exe).unwrap();
    restores(&img);
}

#[test]
fn a_symlink_raced_in_while_the_image_directory_is_created_is_never_followed() {
    // Another user's trick: while the program creates its image directory, put a symlink to a
    // directory of the attacker's choice at that path. Raced over many checkpoints.
    let dir = TempDir::new("trust-race");
    let img = dir.join("image");
    let victim = dir.join("victim");
    fs::create_dir(&victim).unwrap();
    chmod(&victim, 0o755);
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, img, victim) = (stop.clone(), img.clone(), victim.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if std::os::unix::fs::symlink(&victim, &img).is_ok() {
                    swaps += 1;
                }
                std::thread::yield_now();
                let _ = fs::remove_file(&img);
                // A directory the program made: moved away (its dump goes on through the
                // descriptor, into the moved directory), so the path is free to race again.
                if fs::symlink_metadata(&img).is_ok_and(|m| m.is_dir()) {
                    let _ = fs::rename(&img, img.with_extension(swaps.to_string()));
                }
                // Free windows of varying length, so that checkpoints meet every stage.
                std::thread::sleep(Duration::from_micros(swaps % 11 * 40));
            }
            swaps
        })
    };
    let rounds = 25;
    let mut p = Proc::spawn(
        "criu_app",
        &mut app_command(
            APP,
            &img,
            &[
                ("CRAC_CHECKPOINT_MODE", "leave-running"),
                ("APP_LOOP", &rounds.to_string()),
                ("APP_STAY_MS", "0"),
            ],
        ),
    );
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..rounds {
        let out = p.expect("outcome=", T);
        match must(&out, "outcome") {
            "continued" => ok += 1,
            "error" => refused += 1,
            o => panic!("unexpected outcome {o}: {out}"),
        }
        if out.contains("symbolic link") {
            assert!(out.contains("cannot use image directory"), "{out}");
        }
        if std::env::var_os("SHOW_RACE").is_some() {
            eprintln!("{out}");
        }
    }
    p.expect("exit", T);
    assert!(
        p.wait(T).success(),
        "the program goes on: {}",
        p.transcript()
    );
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    let inside: Vec<_> = fs::read_dir(&victim).unwrap().collect();
    assert!(
        inside.is_empty(),
        "the symlink's target got files: {inside:?}"
    );
    let mode = fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the symlink's target was chmod'ed");
    eprintln!(
        "{rounds} checkpoints raced by {swaps} symlink swaps: {ok} images, {refused} refused"
    );
}

#[test]
fn a_restore_criu_refuses_carries_criu_s_error_lines() {
    // A file the program holds open for writing (not appending) that grew after the dump:
    // CRIU refuses to restore it. The message must carry CRIU's own Error lines.
    let dir = TempDir::new("trust-criu-error");
    let img = dir.join("image");
    let held = dir.join("held.txt");
    let pid = image(APP, &img, &[("APP_OPEN_FILE", held.to_str().unwrap())]);
    fs::write(&held, "held\nand grown since\n").unwrap();
    let o = crac(&["restore", img.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("Error ("), "CRIU's Error lines: {err}");
    eprintln!("{err}");
    assert!(err.contains("held.txt"), "the file CRIU refused: {err}");
    // CRIU kills the half-restored process; it may take a moment to go.
    gone(pid);
}

#[test]
fn an_image_that_needs_a_cpu_feature_this_host_lacks_is_refused() {
    let dir = TempDir::new("trust-cpu");
    let img = dir.join("image");
    let pid = image(APP, &img, &[]);
    let meta = img.join("crac-image.txt");
    let text = fs::read_to_string(&meta).unwrap();
    let host = crac_criu::image::cpu::host_features();
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu_features="))
        .expect("the image records its CPU features")
        .to_owned();
    for f in &host {
        assert!(line.contains(f), "{f} recorded: {line}");
    }
    // A real extension this CPU does not have (a fictitious one on a CPU that has them all).
    let lacking = [
        "avx512fp16",
        "avx512vp2intersect",
        "avx512bf16",
        "avx512f",
        "sha",
        "avx2",
    ]
    .into_iter()
    .find(|f| !host.contains(f))
    .unwrap_or("crac-test-feature");
    // Recorded as the image's owner would: the metadata changed, then sealed again.
    fs::write(&meta, text.replace(&line, &format!("{line},{lacking}"))).unwrap();
    let d = crac_criu::safe_dir::Dir::open(&img).unwrap();
    crac_criu::image::manifest::seal(&d).unwrap();
    refused(
        &img,
        pid,
        &[
            &format!("this CPU lacks {lacking} that the image's process may use"),
            "restore on a CPU with them",
        ],
    );
    fs::write(&meta, &text).unwrap();
    crac_criu::image::manifest::seal(&d).unwrap();
    restores(&img);
}
