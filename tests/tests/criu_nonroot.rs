//! Checkpoints as a non-root user, as CRaC documents them: the service runs as an unprivileged
//! user the test creates, criu carries `cap_checkpoint_restore` and `cap_sys_ptrace` as file
//! capabilities (`scripts/install-criu --setcap --group G`, `CRAC_CRIU_CAPS`) and runs in
//! CRIU's unprivileged mode. That criu is `0750 root:G`: the test's user is in G (which is
//! root-equivalent), another user it creates is not and cannot execute it. The service
//! checkpoints itself and is restored as that user; root checkpoints it from outside;
//! `crac check` says, as that user, what is missing, and as root, that a capability-bearing
//! criu others can execute is critical.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crac_tests::criu_app::{assert_killed_by_dump, copy_executable};
use crac_tests::process::{Proc, alive, crac_command, must, proc_status};
use crac_tests::users::{self, UserDir, system_user};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);
const USER: &str = "crac-test";
/// A user outside the group allowed to execute the capability-bearing criu.
const OUTSIDER: &str = "crac-outsider";

/// The criu with file capabilities, which the user can run.
fn criu_caps() -> String {
    std::env::var("CRAC_CRIU_CAPS").unwrap_or_else(|_| {
        panic!(
            "CRAC_CRIU_CAPS is not set: run the tests with scripts/test, or export \
             CRAC_CRIU_CAPS=$(CRAC_CRIU_ROOT=/opt/crac-rs/criu-caps scripts/install-criu \
             --setcap | tail -n1)"
        )
    })
}

/// The group whose members may execute the capability-bearing criu (root-equivalent).
fn caps_group() -> String {
    std::env::var("CRAC_CRIU_CAPS_GROUP").unwrap_or_else(|_| {
        panic!(
            "CRAC_CRIU_CAPS_GROUP is not set: run the tests with scripts/test, which makes the \
             group and the criu only its members can execute"
        )
    })
}

/// The test user (created once, a system user without a home or a shell, in the group that
/// may execute the capability-bearing criu): (uid, gid).
fn user() -> (u32, u32) {
    system_user(USER, &[&caps_group()])
}

/// `cmd` as the user, with the criu that carries capabilities.
fn as_user(uid: u32, gid: u32, cmd: &[&str]) -> Command {
    let mut c = users::as_user(uid, gid, cmd);
    c.env("CRAC_CRIU", criu_caps());
    c
}

fn uid_of(pid: i32) -> String {
    proc_status(pid, "Uid")
        .and_then(|u| u.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default()
}

fn app_as_user(dir: &UserDir, uid: u32, gid: u32, img: &Path, env: &[(&str, &str)]) -> Proc {
    let mut c = as_user(uid, gid, &[&dir.exe(APP)]);
    c.env("CRAC_CHECKPOINT_TO", img).env("APP_MB", "8");
    for (k, v) in env {
        c.env(k, v);
    }
    Proc::spawn("criu_app as user", &mut c)
}

#[test]
fn a_service_of_an_unprivileged_user_checkpoints_itself_and_is_restored_as_that_user() {
    let (uid, gid) = user();
    let dir = UserDir::new("self", uid, gid, &[APP, CRAC]);
    let img = dir.join("image");
    let mut p = app_as_user(&dir, uid, gid, &img, &[("APP_STAY_MS", "100")]);
    let pid: i32 = must(&p.expect("ready ", T), "pid").parse().unwrap();
    assert_eq!(uid_of(pid), uid.to_string(), "the service runs as the user");
    p.expect("hook=before_checkpoint", T);
    assert_killed_by_dump(&mut p, T);
    let owner = std::fs::metadata(&img).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    assert_eq!(owner.ok(), Some(uid), "the image is the user's");

    // Restored by the user; its output goes through a pipe of the user's own (CRIU reopens
    // the restorer's stdout, which must be the user's to reopen).
    let script = format!(
        "{} restore {} --env APP_STAY_MS=3000 2>&1 | cat",
        dir.exe(CRAC),
        img.display()
    );
    let mut r = Proc::spawn(
        "crac restore as user",
        &mut as_user(uid, gid, &["sh", "-c", &script]),
    );
    let out = r.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{}", r.transcript());
    assert_eq!(must(&out, "pid"), pid.to_string());
    assert!(alive(pid), "the restored copy runs");
    assert_eq!(uid_of(pid), uid.to_string(), "restored as the user");
    r.expect("exit", T);
    assert!(r.wait(T).success(), "{}", r.transcript());
}

#[test]
fn root_checkpoints_a_service_of_an_unprivileged_user() {
    let (uid, gid) = user();
    let dir = UserDir::new("root", uid, gid, &[APP, CRAC]);
    let img = dir.join("image");
    let mut p = app_as_user(
        &dir,
        uid,
        gid,
        &img,
        &[("APP_TRIGGER", "external"), ("APP_STAY_MS", "100")],
    );
    let pid: i32 = must(&p.expect("ready ", T), "pid").parse().unwrap();
    let o = crac_command(CRAC, &["checkpoint", &pid.to_string(), "--leave-running"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("continued"), "{err}");
    let out = p.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "continued", "{out}");
    assert!(img.join("crac-manifest.txt").exists(), "a sealed image");
    // Its channel is the user's own: made by root for it, private.
    let chan = std::fs::metadata(format!("/run/crac/{uid}")).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        (chan.uid(), chan.permissions().mode() & 0o777),
        (uid, 0o700)
    );
    assert!(p.wait(T).success(), "{}", p.transcript());
}

#[test]
fn crac_check_says_what_an_unprivileged_user_lacks() {
    use std::os::unix::fs::PermissionsExt;
    let (uid, gid) = user();
    let dir = UserDir::new("check", uid, gid, &[APP, CRAC]);
    let check = |criu: &str| {
        let o = as_user(uid, gid, &[&dir.exe(CRAC), "check"])
            .env("CRAC_CRIU", criu)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    // The criu with capabilities: everything is there.
    let (code, text) = check(&criu_caps());
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("ok      privileges: not root"), "{text}");
    // A copy without them (copying drops file capabilities): named, with the fix.
    let plain = dir.base("criu-plain");
    copy_executable(criu_caps(), &plain);
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, text) = check(plain.to_str().unwrap());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "has no file capabilities (it needs cap_checkpoint_restore and cap_sys_ptrace)"
        ) && text.contains("scripts/install-criu --setcap"),
        "{text}"
    );
    // A wrapper script: capabilities cannot apply to what it runs.
    let script = dir.base("criu-wrapper");
    std::fs::write(&script, format!("#!/bin/sh\nexec {} \"$@\"\n", criu_caps())).unwrap();
    assert!(
        Command::new("chmod")
            .args(["755", script.to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
    let (code, text) = check(script.to_str().unwrap());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("is a script: file capabilities belong to the program executed"),
        "{text}"
    );
}

#[test]
fn a_user_outside_the_group_cannot_execute_the_criu_with_capabilities() {
    let (uid, gid) = system_user(OUTSIDER, &[]);
    let dir = UserDir::new("outsider", uid, gid, &[APP, CRAC]);
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(criu_caps()).unwrap();
    assert_eq!(m.uid(), 0, "root owns the criu with capabilities");
    assert_eq!(
        m.permissions().mode() & 0o7777,
        0o750,
        "nobody else may execute it"
    );
    let o = as_user(uid, gid, &[&criu_caps(), "--version"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the outsider ran criu: {err}");
    assert!(err.contains("Permission denied"), "{err}");
    // Its `crac check` says the criu is out of its reach and how a member gets it.
    let o = as_user(uid, gid, &[&dir.exe(CRAC), "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot be read by this user") && text.contains("--group GROUP"),
        "{text}"
    );
}

#[test]
fn crac_check_says_a_criu_with_capabilities_others_can_execute_is_critical() {
    // Root's own view of the installed criu: only the group may execute it, and it says so.
    let o = crac_command(CRAC, &["check"])
        .env("CRAC_CRIU", criu_caps())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("members of group {}", caps_group()))
            && text.contains("root-equivalent")
            && !text.contains("CRITICAL"),
        "{text}"
    );
    // A program with a capability and mode 0755: made inside a directory only root can enter
    // (so no other user can reach it even for the moment it exists), and a harmless program
    // (`true`) with a harmless capability.
    let base = PathBuf::from(format!("/tmp/crac-exposed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir(&base).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    let exposed = base.join("criu");
    std::fs::copy("/bin/true", &exposed).unwrap();
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = Command::new("setcap")
        .args(["cap_wake_alarm+ep", exposed.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success(), "setcap");
    let o = crac_command(CRAC, &["check"])
        .env("CRAC_CRIU", &exposed)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&base);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("PROBLEM CRITICAL")
            && text.contains("every local user can execute it")
            && text.contains("chmod o-rwx")
            && text.contains("--group GROUP"),
        "{text}"
    );
}

/// A process of a user outside the group that catches the request signal but is no crac
/// program: a shell that answers each request in its channel (`/run/crac/UID`) the way `how`
/// says, as an attacker would.
fn hostile_target(uid: u32, gid: u32, how: &str) -> (Proc, i32) {
    let script = format!(
        "trap 'true' {sig}; echo ready pid=$$; \
         while :; do for f in /run/crac/{uid}/*.req; do [ -e \"$f\" ] || continue; \
         base=\"${{f%.req}}\"; {how}; done; sleep 0.01; done",
        sig = 34 + 6 // SIGRTMIN+6 (glibc's SIGRTMIN is 34)
    );
    let mut p = Proc::spawn(
        "hostile target",
        &mut as_user(uid, gid, &["/bin/sh", "-c", &script]),
    );
    let pid = must(&p.expect("ready ", T), "pid").parse().unwrap();
    (p, pid)
}

/// Root's `crac checkpoint PID` of a hostile process: a FIFO planted as the answer fails the
/// request within its timeout (an `open` of it would block forever); an answer with escape
/// sequences reaches root's terminal escaped; an image directory the target reports that is
/// not its user's is refused, never printed as the checkpoint's image.
#[test]
fn root_s_checkpoint_request_survives_a_hostile_target() {
    let (uid, gid) = system_user(OUTSIDER, &[]);
    let checkpoint = |pid: i32| {
        let t = std::time::Instant::now();
        let o = crac_command(CRAC, &["checkpoint", &pid.to_string(), "--timeout", "5"])
            .output()
            .unwrap();
        let took = t.elapsed();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(took < Duration::from_secs(10), "took {took:?}: {text}");
        (o.status.code(), o.stdout, text)
    };

    let (p, pid) = hostile_target(uid, gid, "[ -e \"$base.res\" ] || mkfifo \"$base.res\"");
    let (code, _, text) = checkpoint(pid);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("a FIFO, not a regular file"), "{text}");
    drop(p); // each target answers every request in the channel

    let (p, pid) = hostile_target(
        uid,
        gid,
        "printf 'ok\\n\\033]0;owned\\007\\033[2J\\n' > \"$base.res.tmp\"; \
         mv \"$base.res.tmp\" \"$base.res\"; rm -f \"$f\"",
    );
    let (code, _, text) = checkpoint(pid);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("\\u{1b}]0;owned"), "{text}");
    drop(p);

    // Root's own directory, reported as the image of a process that then exits.
    let root_dir = TempDirOf::new();
    let (mut p, pid) = hostile_target(
        uid,
        gid,
        &format!(
            "printf 'dir={}\\n' > \"$base.ack.tmp\"; mv \"$base.ack.tmp\" \"$base.ack\"; exit 0",
            root_dir.0.display()
        ),
    );
    let (code, stdout, text) = checkpoint(pid);
    p.wait(T);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("which belongs to uid 0: refused"), "{text}");
    assert!(stdout.is_empty(), "nothing printed as an image: {text}");
}

/// A directory of root's (`0755`), removed on drop.
struct TempDirOf(PathBuf);

impl TempDirOf {
    fn new() -> TempDirOf {
        let p = PathBuf::from(format!("/tmp/crac-root-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap();
        TempDirOf(p)
    }
}

impl Drop for TempDirOf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
