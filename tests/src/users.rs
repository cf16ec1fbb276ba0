//! Test users: system users the tests create (no home, no shell), commands run as them, and
//! directories they own beside copies of the test programs (the build directory may not be
//! searchable by them).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::criu_app::copy_executable;

/// A system user without a home or a shell (created once), a member of `groups` besides its
/// own: (uid, gid).
///
/// One at a time in a test binary (scripts/test runs the binaries one after another): two
/// `useradd`s at once lost one's entry (seen in CI: a test got uid 999 for its user, the
/// other's `useradd` rewrote `/etc/passwd` with the user at 995, and `setpriv` then found no
/// uid 999).
pub fn system_user(name: &str, groups: &[&str]) -> (u32, u32) {
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    let id = |flag: &str| {
        let o = Command::new("id").args([flag, name]).output().unwrap();
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
                name,
            ])
            .status()
            .unwrap();
        assert!(st.success(), "useradd {name}");
    }
    if !groups.is_empty() {
        let groups = groups.join(",");
        let st = Command::new("usermod")
            .args(["--append", "--groups", &groups, name])
            .status()
            .unwrap();
        assert!(st.success(), "usermod --append --groups {groups} {name}");
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// A directory the user owns (`0700`) under a root-owned, searchable one that also holds
/// copies of the test programs (the build directory may not be searchable by the user);
/// removed on drop.
pub struct UserDir(PathBuf);

impl UserDir {
    /// A directory of the user's under a new root-owned one that also holds copies of `exes`.
    pub fn new(name: &str, uid: u32, gid: u32, exes: &[&str]) -> UserDir {
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
        for exe in exes {
            let to = base.join(Path::new(exe).file_name().unwrap());
            copy_executable(exe, &to);
            run(&["chmod", "755", to.to_str().unwrap()]);
        }
        UserDir(base)
    }

    /// The copy of the program `exe`.
    pub fn exe(&self, exe: &str) -> String {
        let p = self.0.join(Path::new(exe).file_name().unwrap());
        p.to_str().unwrap().to_owned()
    }

    /// A path in the root-owned base (beside the copies of the programs).
    pub fn base(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    /// A path in the user's own directory.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join("d").join(p)
    }
}

impl Drop for UserDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cmd` as the user, through `setpriv` (its supplementary groups from `/etc/group`, so the
/// test user's include the criu group and the outsider's do not; no capabilities).
pub fn as_user(uid: u32, gid: u32, cmd: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--init-groups",
        "--inh-caps=-all",
        // setpriv keeps root's capabilities until its own exec, so the kernel checks that
        // exec's permissions as root's: a shell, already the user, makes the real one.
        "/bin/sh",
        "-c",
        "exec \"$0\" \"$@\"",
    ])
    .args(cmd)
    .env_remove("XDG_RUNTIME_DIR")
    .env_remove("CRAC_ENGINE")
    .env_remove("CRAC_CHECKPOINT_MODE")
    .current_dir("/")
    .stdin(std::process::Stdio::null());
    c
}
