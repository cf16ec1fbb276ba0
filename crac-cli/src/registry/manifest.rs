//! The OCI manifest documents we write and read: our own small types rather than a general
//! OCI model, so that what a registry sends is parsed into exactly the fields we act on, with
//! their bounds checked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::artifact::{MANIFEST_TYPE, MAX_LAYERS};

/// An OCI content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type.
    pub media_type: String,
    /// `sha256:…` of the content.
    pub digest: String,
    /// Bytes of the content.
    pub size: u64,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST_TYPE`].
    pub media_type: String,
    /// What the artifact is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers, in order.
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    /// A manifest of ours.
    pub fn new(
        artifact_type: &str,
        config: Descriptor,
        layers: Vec<Descriptor>,
        annotations: BTreeMap<String, String>,
    ) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: MANIFEST_TYPE.to_owned(),
            artifact_type: Some(artifact_type.to_owned()),
            config,
            layers,
            annotations,
        }
    }

    /// Parses a manifest a registry sent and checks it is one of `artifact_type`.
    pub fn parse(bytes: &[u8], artifact_type: &str) -> Result<Manifest, String> {
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| format!("not an OCI manifest: {e}"))?;
        if m.schema_version != 2 || m.media_type != MANIFEST_TYPE {
            return Err(format!(
                "schema {} of media type {}: not an OCI image manifest",
                m.schema_version, m.media_type
            ));
        }
        if m.artifact_type.as_deref() != Some(artifact_type) {
            return Err(format!(
                "its artifact type is {}, not {artifact_type}: not what crac push writes",
                m.artifact_type.as_deref().unwrap_or("(none)")
            ));
        }
        if m.layers.len() > MAX_LAYERS {
            return Err(format!("{} layers", m.layers.len()));
        }
        for d in m.layers.iter().chain([&m.config]) {
            check_digest(&d.digest)?;
        }
        Ok(m)
    }

    /// The JSON bytes (the digest is of exactly these).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest serializes")
    }
}

/// `sha256:` and 64 lowercase hex digits.
pub fn check_digest(d: &str) -> Result<(), String> {
    let hex = d.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(format!("digest {d:?} is not sha256:<64 hex>"))
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    let mut c = ring::digest::Context::new(&ring::digest::SHA256);
    c.update(data);
    digest_string(c)
}

/// `sha256:<hex>` of what a context digested.
pub fn digest_string(c: ring::digest::Context) -> String {
    let d = c.finish();
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d.as_ref() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(d: &str) -> Descriptor {
        Descriptor {
            media_type: "x".into(),
            digest: d.into(),
            size: 1,
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let d = sha256(b"x");
        let m = Manifest::new("a/b", desc(&d), vec![desc(&d)], BTreeMap::new());
        let bytes = m.to_bytes();
        assert_eq!(Manifest::parse(&bytes, "a/b").unwrap(), m);
        assert!(
            Manifest::parse(&bytes, "a/c")
                .unwrap_err()
                .contains("artifact type")
        );
        let bad = String::from_utf8(bytes).unwrap().replace(&d, "sha256:00");
        assert!(
            Manifest::parse(bad.as_bytes(), "a/b")
                .unwrap_err()
                .contains("digest")
        );
        assert!(Manifest::parse(b"[]", "a/b").is_err());
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
