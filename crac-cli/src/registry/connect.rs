//! Reaching a registry: the reference, TLS (the system's roots, plus a CA the user names or
//! keeps where Docker and Podman look: `/etc/{containers,docker}/certs.d/HOST/`), plain HTTP only
//! when asked (`--plain-http`, as oras and skopeo ask), and credentials from the files the
//! container tools already write (`REGISTRY_AUTH_FILE`, Podman's `auth.json`,
//! `~/.docker/config.json`), never from the image or the command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::error::{Error, ErrorKind};

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Plain HTTP instead of TLS.
    pub plain_http: bool,
    /// A CA certificate (PEM) to trust besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// A registry client for one reference, with its credentials.
pub struct Remote {
    /// The client.
    pub client: Client,
    /// What is pushed or pulled.
    pub reference: Reference,
    /// Its credentials (anonymous when none are stored for its registry).
    pub auth: RegistryAuth,
}

/// The most bytes of a credentials file read.
const MAX_AUTH_FILE: u64 = 1 << 20;

/// Parses `reference` and makes a client for its registry.
pub fn remote(reference: &str, reach: &Reach) -> Result<Remote, Error> {
    let reference: Reference = reference.parse().map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("{reference}: not an image reference ({e}); expected HOST[:PORT]/REPO[:TAG]"),
        )
    })?;
    // rustls with ring, as the Kafka client uses; a second install (another caller first) is
    // harmless.
    let _ =
        rustls::crypto::CryptoProvider::install_default(rustls::crypto::ring::default_provider());
    let host = reference.resolve_registry().to_owned();
    let mut config = ClientConfig {
        protocol: if reach.plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        max_concurrent_download: 4,
        max_concurrent_upload: 4,
        ..ClientConfig::default()
    };
    for pem in ca_files(&host, reach.ca_file.as_deref())? {
        config.extra_root_certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: pem,
        });
    }
    let auth = credentials(&host)?;
    Ok(Remote {
        client: Client::new(config),
        reference,
        auth,
    })
}

/// The CA certificates for `host`: the one named, then those in the certs.d directories.
fn ca_files(host: &str, named: Option<&Path>) -> Result<Vec<Vec<u8>>, Error> {
    let mut out = Vec::new();
    if let Some(p) = named {
        out.push(read_small(p).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("CA certificate {}: {e}", p.display()),
            )
        })?);
    }
    for base in ["/etc/containers/certs.d", "/etc/docker/certs.d"] {
        let Ok(rd) = std::fs::read_dir(Path::new(base).join(host)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "crt")
                && let Ok(pem) = read_small(&p)
            {
                out.push(pem);
            }
        }
    }
    Ok(out)
}

fn read_small(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(p)?
        .take(MAX_AUTH_FILE)
        .read_to_end(&mut v)?;
    Ok(v)
}

/// The credentials files, in the order the container tools read them.
fn auth_files() -> Vec<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut v = Vec::new();
    if let Some(f) = env("REGISTRY_AUTH_FILE") {
        v.push(f);
    }
    if let Some(d) = env("XDG_RUNTIME_DIR") {
        v.push(d.join("containers/auth.json"));
    }
    if let Some(d) = env("DOCKER_CONFIG") {
        v.push(d.join("config.json"));
    } else if let Some(h) = env("HOME") {
        v.push(h.join(".docker/config.json"));
    }
    v
}

/// The stored credentials for `host`, or anonymous.
fn credentials(host: &str) -> Result<RegistryAuth, Error> {
    for f in auth_files() {
        let Ok(text) = read_small(&f) else { continue };
        match credentials_in(&text, host) {
            Ok(Some(auth)) => return Ok(auth),
            Ok(None) => {}
            Err(why) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("credentials file {}: {why}", f.display()),
                ));
            }
        }
    }
    Ok(RegistryAuth::Anonymous)
}

/// The entry for `host` in a Docker/Podman credentials file (`auths` → `auth`, base64 of
/// `user:password`, or `username` and `password`).
fn credentials_in(text: &[u8], host: &str) -> Result<Option<RegistryAuth>, String> {
    let doc: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(auths) = doc.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let entry = auths.iter().find(|(k, _)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        k.split('/').next() == Some(host)
    });
    let Some((key, entry)) = entry else {
        return Ok(None);
    };
    let field = |name: &str| entry.get(name).and_then(|v| v.as_str());
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Ok(Some(RegistryAuth::Basic(u.to_owned(), p.to_owned())));
    }
    let Some(b64) = field("auth") else {
        return Ok(None);
    };
    let raw = super::sign::base64_decode(b64.trim())
        .map_err(|_| format!("auths.\"{key}\".auth is not base64"))?;
    let text = String::from_utf8(raw).map_err(|_| format!("auths.\"{key}\".auth is not UTF-8"))?;
    let (u, p) = text
        .split_once(':')
        .ok_or_else(|| format!("auths.\"{key}\".auth is not user:password"))?;
    Ok(Some(RegistryAuth::Basic(u.to_owned(), p.to_owned())))
}

/// A tokio runtime for one command (the registry client is async; the rest of `crac` is not).
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorKind::Other, format!("tokio runtime: {e}")).with_source(e))
}

/// A registry error with what was being done.
pub fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("registry: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_from_docker_and_podman_files() {
        let f = br#"{"auths":{"127.0.0.1:5443":{"auth":"Y3JhYzpzM2NyZXQ="},
                     "https://other:1":{"username":"u","password":"p"}}}"#;
        match credentials_in(f, "127.0.0.1:5443").unwrap() {
            Some(RegistryAuth::Basic(u, p)) => {
                assert_eq!((u.as_str(), p.as_str()), ("crac", "s3cret"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            credentials_in(f, "other:1").unwrap(),
            Some(RegistryAuth::Basic(..))
        ));
        assert!(credentials_in(f, "127.0.0.1:5000").unwrap().is_none());
        assert!(credentials_in(b"{}", "x").unwrap().is_none());
        assert!(credentials_in(b"nope", "x").unwrap_err().contains("JSON"));
        let bad = br#"{"auths":{"h":{"auth":"!!"}}}"#;
        assert!(credentials_in(bad, "h").unwrap_err().contains("base64"));
        let nocolon = br#"{"auths":{"h":{"auth":"YWJj"}}}"#;
        assert!(
            credentials_in(nocolon, "h")
                .unwrap_err()
                .contains("user:password")
        );
    }
}
