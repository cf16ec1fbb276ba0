//! Checkpoint and restore in podman containers with the fewest capabilities
//! (docs/containers.md): real podman (scripts/install-podman), real CRIU (the project's 4.2.1 in
//! the image), the container image built by scripts/container-image from this test build's
//! programs. Needs root; skipped, saying why, only where podman cannot be installed.
//!
//! One image, `criu_app` checkpointing itself under `container_init` (pids pushed to 1000) in a
//! container with only `CHECKPOINT_RESTORE` (seccomp unconfined, no-new-privileges), is
//! restored by `crac restore` as PID 1 of fresh containers with only `CHECKPOINT_RESTORE`,
//! podman's default seccomp profile and the image volume read-only: three at once, each with
//! the original's memory and the exit status asked; one stopped by `podman stop`; and a second
//! image, taken with `SYS_PTRACE` too, refused in a container without it before criu runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crac_tests::process::{Proc, TempDir, must};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const INIT: &str = env!("CARGO_BIN_EXE_container_init");
const T: Duration = Duration::from_secs(120);

/// What every checkpointing container gets: CRIU cannot dump a process under a seccomp filter
/// without SYS_ADMIN, and no-new-privileges spares the restore SETPCAP.
const CHECKPOINT_OPTS: [&str; 5] = [
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "no-new-privileges",
    "--cap-drop=all",
];

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

/// podman with the project's containers.conf, and the containers this test made (removed on
/// drop, whatever happened: a `podman run` client killed by a failing test leaves its
/// container running).
struct Podman {
    conf: String,
    /// The image built for this test.
    image: String,
    prefix: String,
    named: std::sync::Mutex<Vec<String>>,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf);
        c
    }

    /// `podman run --rm --name PREFIX-ROLE OPTS… IMAGE ARGS…`, not started.
    fn run(&self, role: &str, opts: &[&str], image: &str, args: &[&str]) -> Command {
        let name = format!("{}-{role}", self.prefix);
        self.named.lock().unwrap().push(name.clone());
        let mut c = self.cmd();
        c.args(["run", "--rm", "--name", &name])
            .args(opts)
            .arg(image)
            .args(args);
        c
    }

    /// The output of `podman ARGS…`, which must succeed.
    fn out(&self, args: &[&str]) -> String {
        let o = self
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("podman");
        assert!(
            o.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The containers of this test still there.
    fn left(&self) -> Vec<String> {
        self.out(&[
            "ps",
            "-a",
            "--filter",
            &format!("name=^{}-", self.prefix),
            "--format",
            "{{.Names}}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let names = self.named.lock().unwrap().clone();
        if !names.is_empty() {
            let _ = self
                .cmd()
                .args(["rm", "-f", "-t", "0", "--ignore"])
                .args(&names)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // Each build of the tests is an image of its own: not kept.
        let _ = self
            .cmd()
            .args(["rmi", "--ignore", &self.image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Installs podman (scripts/install-podman) and builds the image from this build's programs;
/// `None` (the test is skipped) only where podman cannot be installed.
fn setup() -> Option<(Podman, String)> {
    let install = Command::new(scripts().join("install-podman"))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/install-podman");
    if !install.status.success() {
        eprintln!(
            "SKIPPED: podman cannot be installed here (scripts/install-podman, as root): {}",
            String::from_utf8_lossy(&install.stderr).trim()
        );
        return None;
    }
    let conf = String::from_utf8_lossy(&install.stdout)
        .lines()
        .last()
        .expect("install-podman prints containers.conf's path")
        .to_owned();
    let started = Instant::now();
    let built = Command::new(scripts().join("container-image"))
        .args(["--exe", &format!("crac={CRAC}")])
        .args(["--exe", &format!("container_init={INIT}")])
        .args(["--exe", &format!("criu_app={APP}")])
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/container-image");
    assert!(
        built.status.success(),
        "scripts/container-image: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = String::from_utf8_lossy(&built.stdout)
        .lines()
        .last()
        .expect("container-image prints the image")
        .to_owned();
    eprintln!(
        "image {image} built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let podman = Podman {
        conf,
        image: image.clone(),
        prefix: format!("crac-test-{}", std::process::id()),
        named: Default::default(),
    };
    Some((podman, image))
}

/// Starts a container checkpointing `criu_app` (32 MB of state) with `caps` into
/// `/images/NAME` ([`checkpointed`] waits for it).
fn checkpoint(p: &Podman, image: &str, volume: &str, name: &str, caps: &str) -> Proc {
    let to = format!("CRAC_CHECKPOINT_TO=/images/{name}");
    let add = format!("--cap-add={caps}");
    let mut opts: Vec<&str> = CHECKPOINT_OPTS.to_vec();
    opts.extend([add.as_str(), "-v", volume, "-e", "APP_MB=32", "-e", &to]);
    Proc::spawn(
        &format!("checkpoint {name}"),
        &mut p.run(
            &format!("ck-{name}"),
            &opts,
            image,
            &["container_init", "1000", "/usr/local/bin/criu_app"],
        ),
    )
}

/// The original's checksum, once its container is gone and the image sealed.
fn checkpointed(c: &mut Proc, images: &Path, name: &str) -> String {
    let ready = c.expect("ready ", T);
    assert_eq!(
        must(&ready, "pid"),
        "1000",
        "container_init pushed pids to 1000"
    );
    let st = c.wait(T);
    assert_eq!(
        st.code(),
        Some(137),
        "stop mode: criu kills the service, container_init exits 128+9; it printed:\n{}",
        c.transcript()
    );
    assert!(
        images.join(name).join("crac-manifest.txt").exists(),
        "container_init waits for the dump helper: the image is sealed when it ends"
    );
    must(&ready, "checksum").to_owned()
}

/// What every restoring container gets: CHECKPOINT_RESTORE alone, podman's default seccomp
/// profile, the images read-only.
fn restore_opts(ro_volume: &str) -> Vec<&str> {
    vec![
        "--cap-drop=all",
        "--cap-add=CHECKPOINT_RESTORE",
        "-v",
        ro_volume,
    ]
}

#[test]
fn restored_in_containers_with_checkpoint_restore_alone() {
    let Some((p, image)) = setup() else { return };
    let started = Instant::now();
    let volumes_before = p.out(&["volume", "ls", "-q"]);
    let dir = TempDir::new("containers");
    let images = dir.path();
    let volume = format!("{}:/images", images.display());
    let ro_volume = format!("{volume}:ro");

    // Two images at once: `a` with CHECKPOINT_RESTORE, `b` also holding SYS_PTRACE.
    let mut ck_a = checkpoint(&p, &image, &volume, "a", "CHECKPOINT_RESTORE");
    let mut ck_b = checkpoint(&p, &image, &volume, "b", "CHECKPOINT_RESTORE,SYS_PTRACE");
    let checksum = checkpointed(&mut ck_a, images, "a");
    checkpointed(&mut ck_b, images, "b");
    eprintln!(
        "checkpoints done at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Three copies at once, each asked for its own exit status; `crac check` beside them.
    let mut copies: Vec<(Proc, i32)> = (0..3)
        .map(|i| {
            let code = 10 + i;
            let exit = format!("APP_EXIT={code}");
            let cmd = &mut p.run(
                &format!("copy{i}"),
                &restore_opts(&ro_volume),
                &image,
                &["crac", "restore", "--env", &exit, "/images/a"],
            );
            (Proc::spawn(&format!("copy {i}"), cmd), code)
        })
        .collect();
    let check = p
        .run(
            "check",
            &restore_opts(&ro_volume),
            &image,
            &["crac", "check"],
        )
        .output()
        .expect("podman run crac check");
    for (c, code) in &mut copies {
        let out = c.expect("outcome=", T);
        assert_eq!(must(&out, "outcome"), "restored", "{}", c.transcript());
        assert_eq!(must(&out, "pid"), "1000");
        assert_eq!(must(&out, "checksum"), checksum, "the original's memory");
        let st = c.wait(T);
        assert_eq!(st.code(), Some(*code), "{}", c.transcript());
        c.expect(
            &format!("stderr: crac: restored pid 1000 exited with status {code}"),
            T,
        );
    }
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok") && l.contains("ns_last_pid")),
        "crac check says a read-only ns_last_pid is no problem:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("PROBLEM") && l.contains("ns_last_pid")),
        "{text}"
    );
    eprintln!(
        "three copies done at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    stopped_and_refused(&p, &image, &ro_volume, &checksum);
    eprintln!(
        "stop and refusal done at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let left = p.left();
    assert!(left.is_empty(), "containers left: {left:?}");
    assert_eq!(
        p.out(&["volume", "ls", "-q"]),
        volumes_before,
        "no volume made"
    );
}

/// A running copy ends with its status within seconds of `podman stop` (crac restore, its
/// PID 1, forwards SIGTERM); image `b` is refused, naming SYS_PTRACE, in a container without
/// it, before criu runs (criu's restorer hung until CRAC_CRIU_TIMEOUT).
fn stopped_and_refused(p: &Podman, image: &str, ro_volume: &str, checksum: &str) {
    let mut running = Proc::spawn(
        "stopped copy",
        &mut p.run(
            "stopped",
            &restore_opts(ro_volume),
            image,
            &[
                "crac",
                "restore",
                "--env",
                "APP_STAY_MS=600000",
                "/images/a",
            ],
        ),
    );
    let mut refused = Proc::spawn(
        "refused",
        &mut p.run(
            "refused",
            &restore_opts(ro_volume),
            image,
            &["crac", "restore", "/images/b"],
        ),
    );
    let out = running.expect("outcome=", T);
    assert_eq!(must(&out, "checksum"), checksum);
    let asked = Instant::now();
    p.out(&["stop", "-t", "10", &format!("{}-stopped", p.prefix)]);
    let st = running.wait(T);
    let took = asked.elapsed();
    assert_eq!(st.code(), Some(128 + 15), "{}", running.transcript());
    assert!(
        took < Duration::from_secs(5),
        "podman stop took {took:?}: SIGTERM was not forwarded"
    );
    running.expect("stderr: crac: restored pid 1000 exited with status 143", T);

    let st = refused.wait(T);
    let text = refused.transcript();
    assert_ne!(st.code(), Some(0), "{text}");
    assert!(
        text.contains("restore refused")
            && text.contains("SYS_PTRACE")
            && text.contains("--cap-add SYS_PTRACE"),
        "the refusal names the capability and how to add it:\n{text}"
    );
    assert!(!text.contains("did not finish within"), "{text}");
}
