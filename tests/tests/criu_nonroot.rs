//! Checkpoints as a non-root user, as CRaC documents them: the service runs as an unprivileged
//! user the test creates, criu carries `cap_checkpoint_restore` and `cap_sys_ptrace` as file
//! capabilities (`scripts/install-criu --setcap`, `CRAC_CRIU_CAPS`) and runs in CRIU's
//! unprivileged mode. The service checkpoints itself and is restored as that user; root
//! checkpoints it from outside; `crac check` says, as that user, what is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crac_tests::criu_app::{assert_killed_by_dump, copy_executable};
use crac_tests::process::{Proc, alive, crac_command, must, proc_status};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);
const USER: &str = "crac-test";

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

/// The test user (created once, a system user without a home or a shell): (uid, gid).
fn user() -> (u32, u32) {
    let id = |flag: &str| {
        let o = Command::new("id").args([flag, USER]).output().unwrap();
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().parse().unwrap())
    };
    if id("-u").is_none() {
        let st = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .unwrap();
        // Another test may have created it meanwhile.
        assert!(st.success() || id("-u").is_some(), "useradd {USER}");
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// A directory the user owns (`0700`) under a root-owned, searchable one that also holds
/// copies of the test programs (the build directory may not be searchable by the user);
/// removed on drop.
struct UserDir(PathBuf);

impl UserDir {
    fn new(name: &str, uid: u32, gid: u32) -> UserDir {
        let base = PathBuf::from(format!("/tmp/crac-nonroot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let run = |args: &[&str]| {
            assert!(
                Command::new(args[0])
                    .args(&args[1..])
                    .status()
                    .unwrap()
                    .success()
            )
        };
        run(&["chmod", "755", base.to_str().unwrap()]);
        let d = base.join("d");
        std::fs::create_dir(&d).unwrap();
        run(&["chown", &format!("{uid}:{gid}"), d.to_str().unwrap()]);
        run(&["chmod", "700", d.to_str().unwrap()]);
        for exe in [APP, CRAC] {
            let to = base.join(Path::new(exe).file_name().unwrap());
            copy_executable(exe, &to);
            run(&["chmod", "755", to.to_str().unwrap()]);
        }
        UserDir(base)
    }

    /// The copy of the program `exe` (`APP` or `CRAC`).
    fn exe(&self, exe: &str) -> String {
        let p = self.0.join(Path::new(exe).file_name().unwrap());
        p.to_str().unwrap().to_owned()
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join("d").join(p)
    }
}

impl Drop for UserDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cmd` as the user, through `setpriv` (no supplementary groups, no capabilities).
fn as_user(uid: u32, gid: u32, cmd: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .args(cmd)
    .env("CRAC_CRIU", criu_caps())
    .env_remove("XDG_RUNTIME_DIR")
    .env_remove("CRAC_ENGINE")
    .env_remove("CRAC_CHECKPOINT_MODE")
    .current_dir("/")
    .stdin(std::process::Stdio::null());
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
    let dir = UserDir::new("self", uid, gid);
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
    let dir = UserDir::new("root", uid, gid);
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
    let (uid, gid) = user();
    let dir = UserDir::new("check", uid, gid);
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
    let plain = dir.0.join("criu-plain");
    copy_executable(criu_caps(), &plain);
    let (code, text) = check(plain.to_str().unwrap());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "has no file capabilities (it needs cap_checkpoint_restore and cap_sys_ptrace)"
        ) && text.contains("scripts/install-criu --setcap"),
        "{text}"
    );
    // A wrapper script: capabilities cannot apply to what it runs.
    let script = dir.0.join("criu-wrapper");
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
