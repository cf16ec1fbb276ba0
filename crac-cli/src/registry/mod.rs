//! Images that travel: an image as an OCI artifact in any OCI distribution registry
//! (`crac push DIR REF`, `crac pull REF DIR`, `crac restore REF`), compressed, and signed with
//! an ed25519 key so that a host restores only what a key it trusts signed.
//!
//! - `artifact.rs`: the format (manifest annotations, the layout config, the layers);
//! - `manifest.rs`: the OCI documents, parsed into exactly the fields we act on;
//! - `connect.rs`: reaching a registry (TLS, `--plain-http`, credentials files);
//! - `sign.rs`: keys, the signed payload, verification;
//! - `push.rs`, `pull.rs`: the two directions; `pull` streams, one pass over the data.

pub(crate) mod artifact;
pub(crate) mod connect;
pub(crate) mod manifest;
pub(crate) mod pull;
pub(crate) mod push;
pub(crate) mod sign;

/// The `artifactType` of a signature.
pub(crate) const SIG_TYPE: &str = "application/vnd.crac-rs.signature.v1";
/// The media type of the signed payload (the signature's one layer).
pub(crate) const SIG_PAYLOAD_TYPE: &str = "application/vnd.crac-rs.signature.payload.v1";
/// The annotation of the payload layer that holds the signature.
pub(crate) const SIG_ANNOTATION: &str = "dev.crac-rs.signature";
/// OCI's empty config (`{}`).
pub(crate) const EMPTY_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// The tag a signature of the manifest `digest` lives under (cosign's convention:
/// `sha256-<hex>.sig`), for registries without the referrers API.
pub(crate) fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest_name(digest))
}

/// A digest as a name a tag or a file may have: `sha256-<hex>`.
pub(crate) fn digest_name(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

/// Whether a `crac restore` argument names a registry artifact rather than a directory: no
/// such path exists and its first component is a registry host (has a `.` or `:`, or is
/// `localhost`), as Docker decides; `oci://` says so explicitly.
pub(crate) fn is_reference(arg: &str) -> Option<&str> {
    if let Some(r) = arg.strip_prefix("oci://") {
        return Some(r);
    }
    if std::path::Path::new(arg).exists() {
        return None;
    }
    let (host, rest) = arg.split_once('/')?;
    let registry = host.contains('.') || host.contains(':') || host == "localhost";
    (registry && !rest.is_empty() && !arg.starts_with('/') && !arg.starts_with('.')).then_some(arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_directories() {
        assert_eq!(is_reference("oci://x/y"), Some("x/y"));
        assert_eq!(
            is_reference("127.0.0.1:5000/crac/demo:1"),
            Some("127.0.0.1:5000/crac/demo:1")
        );
        assert_eq!(is_reference("localhost/a"), Some("localhost/a"));
        assert_eq!(is_reference("/tmp"), None);
        assert_eq!(is_reference("./img"), None);
        assert_eq!(is_reference("img/gen-1"), None);
        assert_eq!(signature_tag("sha256:ab"), "sha256-ab.sig");
    }
}
