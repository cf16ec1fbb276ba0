//! Images that travel through a real OCI registry (Debian's `docker-registry`, started by
//! `scripts/registry`): a real CRIU image of `src/bin/criu_app.rs` pushed with `crac push`,
//! signed with an ed25519 key made by openssl, and restored with `crac restore REF` with the
//! state it had; and every refusal of a pull (unsigned, signed by a key not trusted, a byte
//! flipped in a page layer or in the config as the registry stores them, a CPU feature this
//! host lacks), each before CRIU runs, with nothing restored and no image file left.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crac_tests::criu_app::{app_command, assert_killed_by_dump, flip_byte, wait_sealed};
use crac_tests::process::{Proc, TempDir, alive, crac_command, must};
use crac_tests::registry::{Registry, keypair};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(120);

/// A stop-mode image of the test program in `img`: its pid and the checksum of its state.
fn image(img: &Path) -> (i32, String) {
    let env = [("APP_STAY_MS", "100"), ("APP_MB", "64")];
    let mut p = Proc::spawn("criu_app", &mut app_command(APP, img, &env));
    let ready = p.expect("ready ", T);
    assert_killed_by_dump(&mut p, T);
    wait_sealed(img, T);
    (
        must(&ready, "pid").parse().unwrap(),
        must(&ready, "checksum").to_owned(),
    )
}

fn run(c: &mut Command) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `crac ARGS` with the TLS registry's CA and credentials in the environment.
fn crac(reg: &Registry, args: &[&str]) -> Command {
    let mut c = crac_command(CRAC, args);
    c.env("REGISTRY_AUTH_FILE", reg.auth_file())
        .env("CRAC_REGISTRY_CA", reg.ca())
        .env_remove("CRAC_TRUSTED_KEYS")
        .env_remove("CRAC_SIGNING_KEY");
    c
}

/// `crac push` and the pinned reference it prints.
fn push(reg: &Registry, img: &Path, reference: &str, extra: &[&str]) -> String {
    let mut args = vec!["push", img.to_str().unwrap(), reference];
    args.extend_from_slice(extra);
    let o = run(&mut crac(reg, &args));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// `crac restore REF …` refused (exit 2) before CRIU ran, with `expect` in its message; nothing
/// restored and no image file left where it pulled.
fn refused(reg: &Registry, args: &[&str], pid: i32, pulled: &Path, expect: &str) {
    let o = crac(reg, args).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}{out}");
    assert!(err.contains(expect), "expected `{expect}` in: {err}");
    assert!(!err.contains("restored pid"), "{err}");
    assert!(!out.contains("outcome="), "nothing may be restored: {out}");
    assert!(!alive(pid), "pid {pid} must not run");
    let left: Vec<_> = fs::read_dir(pulled)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "files left in {}: {left:?}",
        pulled.display()
    );
}

/// Restores `args` (a `crac restore REF …`) and checks the copy has the original's state.
fn restores_with_state(reg: &Registry, args: &[&str], pid: i32, checksum: &str) -> String {
    let mut r = Proc::spawn("crac restore", &mut crac(reg, args));
    let out = r.expect("outcome=", T);
    assert_eq!(must(&out, "outcome"), "restored", "{out}");
    assert_eq!(must(&out, "pid"), pid.to_string());
    assert_eq!(
        must(&out, "checksum"),
        checksum,
        "the state is the original's"
    );
    assert_eq!(must(&out, "built"), "1", "the table was not rebuilt");
    assert!(r.wait(T).success(), "{}", r.transcript());
    r.transcript()
}

#[test]
fn a_signed_image_pushed_and_pulled_through_both_registries_restores_with_its_state() {
    let reg = Registry::start("roundtrip");
    let dir = TempDir::new("registry-roundtrip");
    let img = dir.join("image");
    let (pid, checksum) = image(&img);
    let (key, trust) = keypair(dir.path(), "a");
    let trust = trust.to_str().unwrap();
    let image_bytes: u64 = fs::read_dir(&img)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.metadata().unwrap().len())
        .sum();

    // Plain HTTP, small layers so the pages travel in several.
    let plain = format!("{}/crac/app:v1", reg.plain());
    let key_s = key.to_str().unwrap();
    let pinned = push(
        &reg,
        &img,
        &plain,
        &["--plain-http", "--sign", key_s, "--chunk-mb", "8"],
    );
    assert!(pinned.contains("@sha256:"), "{pinned}");
    let manifest = reg.plain_manifest("crac/app", "v1");
    assert!(
        manifest.contains("application/vnd.crac-rs.image.v1"),
        "{manifest}"
    );
    assert!(manifest.contains("dev.crac-rs.cpu.features"), "{manifest}");
    // 64 MiB of state: at least 8 page layers, compressed (the table is random, the rest not).
    assert!(manifest.matches("pages.v1+zstd").count() >= 8, "{manifest}");

    let pulled = dir.join("pulled");
    let out = run(&mut crac(
        &reg,
        &[
            "pull",
            &pinned,
            pulled.to_str().unwrap(),
            "--plain-http",
            "--trust",
            trust,
        ],
    ));
    assert!(String::from_utf8_lossy(&out.stderr).contains("signed by ed25519:"));
    let pulled_bytes: u64 = fs::read_dir(&pulled)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| {
            let m = e.metadata().unwrap();
            assert_eq!(
                m.permissions().mode() & 0o077,
                0,
                "{:?} private",
                e.file_name()
            );
            m.len()
        })
        .sum();
    assert!(pulled_bytes > 60 << 20 && pulled_bytes <= image_bytes);
    let p = pulled.to_str().unwrap();
    restores_with_state(&reg, &["restore", p, "--eager"], pid, &checksum);

    // TLS with basic auth (credentials from REGISTRY_AUTH_FILE, the CA from CRAC_REGISTRY_CA),
    // restored straight from the reference, lazily.
    let tls = format!("{}/crac/app:v1", reg.tls());
    push(&reg, &img, &tls, &["--sign", key_s]);
    let cache = dir.join("cache");
    let log = restores_with_state(
        &reg,
        &[
            "restore",
            &tls,
            "--trust",
            trust,
            "--pull-to",
            cache.join("x").to_str().unwrap(),
        ],
        pid,
        &checksum,
    );
    assert!(log.contains("signed by ed25519:"), "{log}");

    // Without credentials the TLS registry answers 401: the push fails, saying so.
    let o = crac(&reg, &["push", img.to_str().unwrap(), &tls])
        .env("REGISTRY_AUTH_FILE", dir.join("none.json"))
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
}

#[test]
fn unsigned_untrusted_and_tampered_artifacts_are_refused_before_criu_runs() {
    let reg = Registry::start("refusals");
    let dir = TempDir::new("registry-refusals");
    let img = dir.join("image");
    let (pid, _) = image(&img);
    let (key_a, trust_a) = keypair(dir.path(), "a");
    let (key_b, _) = keypair(dir.path(), "b");
    let trust_a = trust_a.to_str().unwrap();
    let r = reg.plain();
    let pulled = dir.join("pulled");
    let to = pulled.to_str().unwrap();
    let restore = |reference: &str| {
        vec![
            "restore".to_owned(),
            reference.to_owned(),
            "--plain-http".into(),
            "--trust".into(),
            trust_a.to_owned(),
            "--pull-to".into(),
            to.to_owned(),
        ]
    };
    let refuse = |reference: &str, expect: &str| {
        let args = restore(reference);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&reg, &args, pid, &pulled, expect);
    };

    let unsigned = format!("{r}/crac/unsigned:v1");
    push(&reg, &img, &unsigned, &["--plain-http"]);
    refuse(&unsigned, "is not signed");

    let by_b = format!("{r}/crac/by-b:v1");
    push(
        &reg,
        &img,
        &by_b,
        &["--plain-http", "--sign", key_b.to_str().unwrap()],
    );
    refuse(&by_b, "which is not a trusted key");

    // A byte flipped in a page layer as the registry stores it.
    let signed = format!("{r}/crac/signed:v1");
    let a = key_a.to_str().unwrap();
    push(
        &reg,
        &img,
        &signed,
        &["--plain-http", "--sign", a, "--chunk-mb", "16"],
    );
    let m: serde_json::Value =
        serde_json::from_str(&reg.plain_manifest("crac/signed", "v1")).unwrap();
    let page_layer = m["layers"][1]["digest"].as_str().unwrap().to_owned();
    let config = m["config"]["digest"].as_str().unwrap().to_owned();
    flip_byte(&reg.plain_blob(&page_layer), 1000);
    refuse(&signed, &page_layer);
    flip_byte(&reg.plain_blob(&page_layer), 1000);

    // … and in the config (the layout).
    flip_byte(&reg.plain_blob(&config), 10);
    refuse(&signed, "does not match its digest");
    flip_byte(&reg.plain_blob(&config), 10);

    // Put back, the same artifact restores: the refusals were for those reasons alone.
    let args = restore(&signed);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut ok = Proc::spawn("crac restore", &mut crac(&reg, &args));
    assert_eq!(must(&ok.expect("outcome=", T), "outcome"), "restored");
    assert!(ok.wait(T).success(), "{}", ok.transcript());
}

#[test]
fn an_image_whose_cpu_features_this_host_lacks_is_refused_before_its_pages_download() {
    let reg = Registry::start("cpu");
    let dir = TempDir::new("registry-cpu");
    let img = dir.join("image");
    let (pid, _) = image(&img);
    let (key, trust) = keypair(dir.path(), "a");
    // A feature this CPU lacks, recorded as if the image came from a newer CPU; the image
    // sealed again so that only the feature differs.
    let host = crac_criu::image::cpu::host_features();
    let lacking = [
        "avx512vp2intersect",
        "amx-tile",
        "avx512fp16",
        "sse4a",
        "tbm",
    ]
    .into_iter()
    .find(|f| !host.contains(f))
    .expect("a feature this CPU lacks");
    let meta = img.join("crac-image.txt");
    let text = fs::read_to_string(&meta).unwrap();
    let text = text.replace("cpu_features=", &format!("cpu_features={lacking},"));
    fs::write(&meta, text).unwrap();
    crac_criu::image::manifest::seal(&crac_criu::safe_dir::Dir::open(&img).unwrap()).unwrap();

    let reference = format!("{}/crac/newer-cpu:v1", reg.plain());
    push(
        &reg,
        &img,
        &reference,
        &["--plain-http", "--sign", key.to_str().unwrap()],
    );
    let pulled = dir.join("pulled");
    let o = crac(
        &reg,
        &[
            "pull",
            &reference,
            pulled.to_str().unwrap(),
            "--plain-http",
            "--trust",
            trust.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("this CPU lacks {lacking}")), "{err}");
    // Refused from the manifest's annotations: no image file was made.
    assert!(
        fs::read_dir(&pulled)
            .map(|d| d.count() == 0)
            .unwrap_or(true)
    );
    assert!(!alive(pid));
}
