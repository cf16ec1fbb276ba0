//! The checkpoint broker (`crac daemon`): a user who may not execute any criu with
//! capabilities (not in their group) checkpoints a service of theirs and restores it through
//! the broker, as that user; what that user can reach does not make them root: a plugin
//! directory in their environment is not loaded, an image edited in the store is refused
//! before CRIU runs, a tree with a setuid-root task is not dumped; the store is out of their
//! reach. Needs root, `CRAC_CRIU` and `CRAC_CRIU_PLAIN` (a criu without capabilities all can
//! run: scripts/test installs it at /opt/crac-rs/criu).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crac_tests::criu_app::{copy_executable, flip_byte, image_file};
use crac_tests::process::{Proc, alive, must, proc_status};
use crac_tests::users::{UserDir, as_user, system_user};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);
/// A user outside the group allowed to execute the capability-bearing criu.
const OUTSIDER: &str = "crac-outsider";

/// A criu without capabilities, where every user can run it.
fn plain_criu() -> String {
    std::env::var("CRAC_CRIU_PLAIN").unwrap_or_else(|_| {
        panic!(
            "CRAC_CRIU_PLAIN is not set: run the tests with scripts/test, or export \
             CRAC_CRIU_PLAIN=$(CRAC_CRIU_ROOT=/opt/crac-rs/criu scripts/install-criu | tail -n1)"
        )
    })
}

/// A broker of the test's own: its socket, store and key under `dir`'s root-owned base.
struct Broker {
    daemon: Proc,
    socket: PathBuf,
    store: PathBuf,
}

impl Broker {
    fn start(dir: &UserDir) -> Broker {
        let socket = dir.base("run/daemon.sock");
        let store = dir.base("store");
        let mut c = Command::new(dir.exe(CRAC));
        c.args(["daemon", "--socket"])
            .arg(&socket)
            .arg("--store")
            .arg(&store)
            .arg("--key")
            .arg(dir.base("key/host.key"))
            .env("CRAC_CRIU", plain_criu());
        let mut daemon = Proc::spawn("crac daemon", &mut c);
        daemon.expect("stderr: crac daemon: listening", T);
        Broker {
            daemon,
            socket,
            store,
        }
    }

    /// Waits for the broker's word that the image `name` is dumped (or why not): the process
    /// ends at the dump, its image is sealed a moment later.
    fn dumped(&mut self, name: &str) -> String {
        let what = format!("checkpoint {name}: ");
        self.daemon
            .expect_where("stderr: crac daemon: uid ", T, |l| l.contains(&what))
    }

    /// `cmd` as the user, told where the broker is.
    fn as_user(&self, uid: u32, gid: u32, cmd: &[&str]) -> Command {
        let mut c = as_user(uid, gid, cmd);
        c.env("CRAC_BROKER_SOCKET", &self.socket)
            .env_remove("CRAC_CRIU");
        c
    }

    /// The test service, as the user, checkpointing itself to the broker's image `name`.
    fn app(&self, dir: &UserDir, uid: u32, gid: u32, name: &str, env: &[(&str, &str)]) -> Proc {
        // In a session of its own (`setsid` execs it, same pid), as a service is started: a
        // session leader outside the PID namespace (a CI runner's) would keep a child of it
        // from being dumped.
        let mut c = self.as_user(uid, gid, &["setsid", &dir.exe(APP)]);
        c.env("CRAC_CHECKPOINT_TO", dir.join(name))
            .env("APP_MB", "8")
            .env("APP_STAY_MS", "100");
        for (k, v) in env {
            c.env(k, v);
        }
        Proc::spawn("criu_app as user", &mut c)
    }

    /// `crac restore --broker NAME ARGS…` as the user, its output through a pipe of the user's
    /// own (CRIU, running as the user, reopens the pipes it hands in), then `crac-exit=N`.
    fn restore(&self, dir: &UserDir, uid: u32, gid: u32, name: &str, args: &[&str]) -> Proc {
        let script = format!(
            "{{ \"$0\" restore --broker {name} {} 2>&1; echo crac-exit=$?; }} | cat",
            args.join(" ")
        );
        let mut c = self.as_user(uid, gid, &["/bin/sh", "-c", &script, &dir.exe(CRAC)]);
        Proc::spawn("crac restore --broker", &mut c)
    }
}

fn uid_of(pid: i32) -> String {
    proc_status(pid, "Uid")
        .and_then(|u| u.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default()
}

fn killed_by_dump(p: &mut Proc) {
    use std::os::unix::process::ExitStatusExt;
    let st = p.wait(T);
    assert_eq!(st.signal(), Some(9), "{}", p.transcript());
}

/// A user in no criu group checkpoints a service through the broker and restores it: the copy
/// runs as that user and its status comes back; the user cannot read the store.
#[test]
fn a_user_outside_the_criu_group_checkpoints_and_restores_through_the_broker() {
    let (uid, gid) = system_user(OUTSIDER, &[]);
    let dir = UserDir::new("broker", uid, gid, &[APP, CRAC]);
    let mut b = Broker::start(&dir);
    let mut p = b.app(&dir, uid, gid, "svc", &[]);
    let pid: i32 = must(&p.expect("ready ", T), "pid").parse().unwrap();
    killed_by_dump(&mut p);
    let said = b.dumped("svc");
    assert!(said.contains("crac-dumped ok"), "{said}");
    let image = b.store.join(uid.to_string()).join("svc");
    assert!(
        image.join("crac-seal.txt").exists(),
        "a sealed image in the store"
    );

    let mut r = b.restore(
        &dir,
        uid,
        gid,
        "svc",
        &["--env", "APP_STAY_MS=3000", "--env", "APP_EXIT=3"],
    );
    r.expect("crac: restored pid=", T);
    let out = r.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{}", r.transcript());
    assert_eq!(must(&out, "pid"), pid.to_string());
    assert!(alive(pid));
    assert_eq!(uid_of(pid), uid.to_string(), "restored as the user");
    assert_eq!(
        r.expect("crac-exit=", T),
        "crac-exit=3",
        "{}",
        r.transcript()
    );

    // The image restores again: criu's outputs (its statistics, its log) went to the
    // broker's work directory, so the sealed image is as it was.
    let left: Vec<String> = std::fs::read_dir(&image)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with("stats-") && n != "stats-dump" || n.ends_with(".log") && n != "dump.log"
        })
        .collect();
    assert!(
        left.is_empty(),
        "criu wrote into the sealed image: {left:?}"
    );
    let mut again = b.restore(
        &dir,
        uid,
        gid,
        "svc",
        &["--env", "APP_STAY_MS=0", "--env", "APP_EXIT=4"],
    );
    again.expect("crac: restored pid=", T);
    assert_eq!(
        again.expect("crac-exit=", T),
        "crac-exit=4",
        "{}",
        again.transcript()
    );

    // `crac check`, as the user, says the broker answers.
    let o = b
        .as_user(uid, gid, &[&dir.exe(CRAC), "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("checkpoint broker at") && text.contains("answers (pong"),
        "{text}"
    );

    // The store is the broker's: the user reaches nothing in it.
    let o = b
        .as_user(uid, gid, &["ls", image.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
}

/// What the user can reach does not make them root: a plugin directory in their environment
/// (CRIU_LIBS_DIR: CRIU would load it inside itself, with its capabilities) is never loaded;
/// an image edited in the store (its credentials, as attack (b) does) is refused before
/// CRIU runs; a tree holding a setuid-root task is not dumped.
#[test]
fn what_the_user_can_reach_does_not_make_them_root() {
    let (uid, gid) = system_user(OUTSIDER, &[]);
    let dir = UserDir::new("broker-attacks", uid, gid, &[APP, CRAC]);
    let mut b = Broker::start(&dir);

    // (a) A plugin that leaves a mark when loaded, in a directory the user owns.
    let plugins = dir.join("plugins");
    let mark = dir.join("loaded");
    plugin(&plugins, &mark, uid);
    let mut p = b.app(
        &dir,
        uid,
        gid,
        "svc",
        &[("CRIU_LIBS_DIR", plugins.to_str().unwrap())],
    );
    p.expect("ready ", T);
    killed_by_dump(&mut p);
    assert!(b.dumped("svc").contains("crac-dumped ok"));
    assert!(!mark.exists(), "the plugin was loaded");

    // The criu the user can execute is the broker's plain one: no file capabilities, not
    // setuid; a plugin it loads for the user runs with the user's rights alone.
    let plain = plain_criu();
    let o = Command::new("getcap").arg(&plain).output().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).trim().is_empty(),
        "{plain} has capabilities"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&plain).unwrap().permissions().mode();
    assert_eq!(mode & 0o6000, 0, "{plain} is setuid or setgid");

    // (b) Edited in the store (root does it here: the user cannot even reach it).
    let image = b.store.join(uid.to_string()).join("svc");
    let core = image_file(&image, "core-");
    let half = std::fs::metadata(&core).unwrap().len() as usize / 2;
    flip_byte(&core, half);
    let mut r = b.restore(&dir, uid, gid, "svc", &[]);
    let e = r.expect("crac: error", T);
    assert!(
        e.contains("does not match its seal") && e.contains("core-"),
        "{e}"
    );
    assert_eq!(r.expect("crac-exit=", T), "crac-exit=2");
    assert!(
        !b.daemon.transcript().contains("restore svc: pid"),
        "nothing was restored: {}",
        b.daemon.transcript()
    );

    // (c) A setuid-root child in the tree.
    let suid = dir.base("suid-sleep");
    copy_executable("/bin/sleep", &suid);
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mut p = b.app(
        &dir,
        uid,
        gid,
        "tree",
        &[
            ("APP_CHILD", "1"),
            ("APP_CHILD_EXE", suid.to_str().unwrap()),
        ],
    );
    let child: i32 = must(&p.expect("child ", T), "pid").parse().unwrap();
    let out = p.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "error", "{out}");
    assert!(
        out.contains("the checkpoint broker refused") && out.contains("uids"),
        "{out}"
    );
    assert!(!b.store.join(uid.to_string()).join("tree").exists());
    let _ = Command::new("kill").arg(child.to_string()).status();
    assert!(p.wait(T).success(), "{}", p.transcript());
}

/// Builds a CRIU plugin that creates `mark` when loaded, into `dir` (the user's).
fn plugin(dir: &Path, mark: &Path, uid: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("mark.c");
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void mark(void) {{\n\
             int fd = open(\"{}\", O_CREAT | O_WRONLY, 0666); if (fd >= 0) close(fd); }}\n",
            mark.display()
        ),
    )
    .unwrap();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("mark.so"))
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "gcc");
    let st = Command::new("chown")
        .args(["-R", &uid.to_string()])
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success());
}
