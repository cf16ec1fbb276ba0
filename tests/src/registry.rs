//! Real OCI registries for end-to-end tests: Debian's `docker-registry` (the CNCF distribution
//! registry), started by `scripts/registry` on 127.0.0.1, one plain HTTP and one with TLS (a
//! throwaway CA) and basic auth, on ports free at run time. Stopped (by pid) and deleted when
//! dropped; a registry shared by a test binary's tests (`static OnceLock`) is left to the
//! watchdog the script starts, which stops it when the test process is gone.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Two registries and what a client needs to reach them.
pub struct Registry {
    dir: PathBuf,
    env: BTreeMap<String, String>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/registry")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Registry {
    /// Starts both registries in a new directory.
    pub fn start(name: &str) -> Registry {
        Registry::start_also(name, &[])
    }

    /// Starts both registries, the plain one also on the addresses `also` (same port, same
    /// storage): how test networks that do not reach 127.0.0.1 reach it.
    pub fn start_also(name: &str, also: &[&str]) -> Registry {
        let dir = std::env::temp_dir().join(format!(
            "crac-registry-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let o = Command::new(script())
            .arg("start")
            .arg(&dir)
            .env("CRAC_REGISTRY_PLAIN_PORT", free_port().to_string())
            .env("CRAC_REGISTRY_TLS_PORT", free_port().to_string())
            .env("CRAC_REGISTRY_WATCH_PID", std::process::id().to_string())
            .env("CRAC_REGISTRY_PLAIN_ALSO", also.join(" "))
            .output()
            .expect("run scripts/registry");
        assert!(
            o.status.success(),
            "scripts/registry start failed (run scripts/install-registry?):\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(dir.join("env")).expect("the registry's env file");
        let env = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| {
                (
                    k.to_owned(),
                    v.trim_matches('\'').trim_matches('"').to_owned(),
                )
            })
            .collect();
        Registry { dir, env }
    }

    fn var(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing in {}/env", self.dir.display()))
    }

    /// `127.0.0.1:PORT` of the plain HTTP registry.
    pub fn plain(&self) -> &str {
        self.var("CRAC_REGISTRY_PLAIN")
    }

    /// The port of the plain registry.
    pub fn plain_port(&self) -> &str {
        self.plain().rsplit(':').next().unwrap_or_default()
    }

    /// `127.0.0.1:PORT` of the TLS registry with basic auth.
    pub fn tls(&self) -> &str {
        self.var("CRAC_REGISTRY_TLS")
    }

    /// The CA certificate of the TLS registry.
    pub fn ca(&self) -> PathBuf {
        PathBuf::from(self.var("CRAC_REGISTRY_CA"))
    }

    /// A Docker-style credentials file for the TLS registry (`REGISTRY_AUTH_FILE`).
    pub fn auth_file(&self) -> PathBuf {
        PathBuf::from(self.var("CRAC_REGISTRY_AUTH_FILE"))
    }

    /// Where the plain registry keeps the blob `digest` (`sha256:…`): the file a test changes
    /// to stand for a registry (or a path to it) that serves other bytes.
    pub fn plain_blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .join("plain/data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The manifest (JSON) of `repo:tag` in the plain registry, read from its storage.
    pub fn plain_manifest(&self, repo: &str, tag: &str) -> String {
        let v2 = self.dir.join("plain/data/docker/registry/v2/repositories");
        let link = v2
            .join(repo)
            .join("_manifests/tags")
            .join(tag)
            .join("current/link");
        let digest =
            std::fs::read_to_string(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
        std::fs::read_to_string(self.plain_blob(digest.trim())).expect("manifest blob")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// An ed25519 key pair made by openssl in `dir`: the private key `NAME.pem` (0600) and a
/// directory `trust-NAME` (0700) holding only its public key, as `crac pull --trust` reads it.
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.pem"));
    let trust = dir.join(format!("trust-{name}"));
    std::fs::create_dir_all(&trust).unwrap();
    std::fs::set_permissions(&trust, std::fs::Permissions::from_mode(0o700)).unwrap();
    openssl(
        Command::new("openssl")
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(&key),
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    openssl(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&key)
            .arg("-out")
            .arg(trust.join(format!("{name}.pub"))),
    );
    (key, trust)
}

fn openssl(c: &mut Command) {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
