//! Signatures of pushed images: ed25519 keys, the signed payload, verification.
//!
//! Why ed25519: small keys and signatures (32 and 64 bytes), no parameters to choose or get
//! wrong, deterministic signing (no per-signature randomness that could leak the key), and
//! every tool speaks it: `openssl genpkey -algorithm ed25519` makes a key, `openssl pkey
//! -pubout` its public half, and `openssl pkeyutl -verify -rawin` checks our signatures.
//!
//! What is signed: a three-line text payload naming the repository and the manifest digest
//! (see [`payload`]). The manifest names the config and every layer by their SHA-256 digests,
//! so one signature over its digest covers every byte of the image; naming the repository
//! stops a signature from being replayed for the same manifest copied to another repository.
//!
//! Why the key is wiped: the private key file's text and its decoded DER are overwritten with
//! zeros before their memory is freed, so a later core dump, a swapped-out page or a reused
//! allocation does not hold the key; [`SigningKey`] itself is dropped right after signing.

use std::fmt;
use std::fs::{self, File, Metadata};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

/// The largest key file read.
const MAX_KEY_FILE: u64 = 64 * 1024;
/// The largest signed payload.
const MAX_PAYLOAD: usize = 1024;
/// The longest repository name in a payload.
const MAX_REPO: usize = 255;
/// The payload's first line.
const HEADER: &str = "crac-rs signature v1";
/// The DER of an ed25519 SubjectPublicKeyInfo up to the 32 key bytes (RFC 8410).
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// The standard base64 alphabet.
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// What went wrong with a key, a payload or a signature.
#[derive(Debug)]
pub(crate) enum SignError {
    /// A key file or directory could not be read.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A key file that is not what it should be (not a regular file, too large, not PEM, not
    /// an ed25519 key).
    BadKeyFile { path: PathBuf, what: String },
    /// A private key file that others may read or write.
    KeyModeTooOpen { path: PathBuf, mode: u32 },
    /// A trusted key file or directory that others may write (and so add a key).
    TrustModeTooOpen { path: PathBuf, mode: u32 },
    /// Signed by a key that is not trusted.
    UntrustedKey { key_id: String },
    /// The signature does not match the payload.
    BadSignature { key_id: String },
    /// A signed payload that is not ours.
    BadPayload { what: String },
    /// Malformed signature text or base64.
    Malformed { what: String },
    /// No trusted key found where keys were expected.
    NoTrustedKeys { path: PathBuf },
}

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::BadKeyFile { path, what } => write!(f, "{}: {what}", path.display()),
            Self::KeyModeTooOpen { path, mode } => write!(
                f,
                "{p}: private key file is accessible by group or others (mode {mode:04o}); \
                 restrict it with `chmod 600 {p}`",
                p = path.display()
            ),
            Self::TrustModeTooOpen { path, mode } => write!(
                f,
                "{p}: writable by group or others (mode {mode:04o}) or owned by another user \
                 than you or root, so they could add a trusted key; fix with `chmod go-w {p}` \
                 and keep it yours or root's",
                p = path.display()
            ),
            Self::UntrustedKey { key_id } => write!(
                f,
                "signed by key {key_id}, which is not a trusted key; if you trust it, add its \
                 public key (`openssl pkey -in KEY -pubout`) to the trusted keys \
                 (--trust or CRAC_TRUSTED_KEYS)"
            ),
            Self::BadSignature { key_id } => write!(
                f,
                "the signature by key {key_id} does not match: the artifact or its signature \
                 was altered"
            ),
            Self::BadPayload { what } => write!(f, "bad signature payload: {what}"),
            Self::Malformed { what } => f.write_str(what),
            Self::NoTrustedKeys { path } if path.as_os_str().is_empty() => {
                f.write_str("no trusted keys given")
            }
            Self::NoTrustedKeys { path } => write!(
                f,
                "no trusted keys in {}: put ed25519 public keys there as NAME.pub or NAME.pem \
                 (`openssl pkey -in KEY -pubout -out NAME.pub`)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SignError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Bytes that held key material: overwritten with zeros when dropped.
struct Secret(Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            *b = 0;
        }
        std::hint::black_box(&self.0);
    }
}

/// A private signing key, read from a PEM file.
pub(crate) struct SigningKey {
    pair: Ed25519KeyPair,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.key_id())
    }
}

impl SigningKey {
    /// Reads an unencrypted PKCS#8 ed25519 key (`openssl genpkey -algorithm ed25519`; v1 or
    /// v2) from a file only its owner may access.
    pub(crate) fn from_pem_file(path: &Path) -> Result<SigningKey, SignError> {
        let text = read_small(path, Access::Private)?;
        let bad = |what: String| SignError::BadKeyFile {
            path: path.to_owned(),
            what,
        };
        let pem = std::str::from_utf8(&text.0).map_err(|_| bad("not a PEM file".to_owned()))?;
        let der = pem_body(pem, "PRIVATE KEY").map_err(bad)?;
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der.0).map_err(|e| {
            bad(format!(
                "not an ed25519 private key ({e}); make one with \
                 `openssl genpkey -algorithm ed25519 -out KEY`"
            ))
        })?;
        Ok(SigningKey { pair })
    }

    /// The raw public key.
    fn public_key(&self) -> [u8; 32] {
        let mut pk = [0; 32];
        pk.copy_from_slice(self.pair.public_key().as_ref());
        pk
    }

    /// The key's id ([`key_id_of`] its public key).
    pub(crate) fn key_id(&self) -> String {
        key_id_of(&self.public_key())
    }

    /// The public key as `openssl pkey -pubout` writes it.
    #[cfg(test)]
    pub(crate) fn public_key_pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.public_key());
        let b64 = base64_encode(&der);
        let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END PUBLIC KEY-----\n");
        pem
    }

    /// The 64-byte signature of `payload`.
    pub(crate) fn sign(&self, payload: &[u8]) -> Vec<u8> {
        self.pair.sign(payload).as_ref().to_vec()
    }
}

/// A key's id: `ed25519:` and the first 16 hex digits of the SHA-256 of the raw public key.
pub(crate) fn key_id_of(public_key: &[u8; 32]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, public_key);
    let hex: String = d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ed25519:{hex}")
}

/// Who may have a file: a private key only its owner; a trusted key anyone, but only its
/// owner may write it.
#[derive(Clone, Copy)]
enum Access {
    Private,
    Trusted,
}

impl Access {
    /// Refuses a mode that gives others more than this access allows.
    fn check(self, path: &Path, meta: &Metadata) -> Result<(), SignError> {
        let mode = meta.permissions().mode() & 0o7777;
        let path = path.to_owned();
        match self {
            Access::Private if mode & 0o077 != 0 => Err(SignError::KeyModeTooOpen { path, mode }),
            Access::Trusted if mode & 0o022 != 0 => Err(SignError::TrustModeTooOpen { path, mode }),
            // Another user owns it: that user can chmod it and add a key.
            Access::Trusted if meta.uid() != 0 && meta.uid() != crate::sys::euid() => {
                Err(SignError::TrustModeTooOpen { path, mode })
            }
            _ => Ok(()),
        }
    }
}

/// Refuses anything but a regular file of at most 64 KiB with the right mode.
fn check_file(path: &Path, meta: &Metadata, access: Access) -> Result<(), SignError> {
    let bad = |what: &str| SignError::BadKeyFile {
        path: path.to_owned(),
        what: what.to_owned(),
    };
    if !meta.is_file() {
        return Err(bad("not a regular file"));
    }
    if meta.len() > MAX_KEY_FILE {
        return Err(bad("larger than 64 KiB: not a key file"));
    }
    access.check(path, meta)
}

/// The whole of a small key file, checked before it is opened (a FIFO would block the open)
/// and again once open (the file read is the file checked).
fn read_small(path: &Path, access: Access) -> Result<Secret, SignError> {
    let io = |source| SignError::Io {
        path: path.to_owned(),
        source,
    };
    check_file(path, &fs::metadata(path).map_err(io)?, access)?;
    let file = File::open(path).map_err(io)?;
    check_file(path, &file.metadata().map_err(io)?, access)?;
    // Room for all of it up front: no reallocation leaves a copy behind.
    let mut buf = Secret(Vec::with_capacity(MAX_KEY_FILE as usize + 1));
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut buf.0)
        .map_err(io)?;
    if buf.0.len() as u64 > MAX_KEY_FILE {
        return Err(SignError::BadKeyFile {
            path: path.to_owned(),
            what: "larger than 64 KiB: not a key file".to_owned(),
        });
    }
    Ok(buf)
}

/// The DER of the one PEM block of `text`, which must be labelled `label`; only blank lines
/// may surround it.
fn pem_body(text: &str, label: &str) -> Result<Secret, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let (first, rest) = lines.split_first().ok_or("empty file")?;
    let found = first
        .strip_prefix("-----BEGIN ")
        .and_then(|l| l.strip_suffix("-----"))
        .ok_or("not a PEM file (no -----BEGIN line first)")?;
    if found != label {
        return Err(format!("holds a {found}, not a {label}"));
    }
    let end = format!("-----END {label}-----");
    let (last, body) = rest.split_last().ok_or("PEM block not ended")?;
    if *last != end {
        return Err(format!("does not end with {end}"));
    }
    let mut b64 = Secret(Vec::with_capacity(text.len()));
    for line in body {
        if line.starts_with("-----") {
            return Err("more than one PEM block".to_owned());
        }
        b64.0.extend_from_slice(line.as_bytes());
    }
    decode_b64(&b64.0)
        .map(Secret)
        .map_err(|e| format!("PEM body is not base64 ({e})"))
}

/// The raw key of an ed25519 SubjectPublicKeyInfo.
fn spki_key(der: &[u8]) -> Option<[u8; 32]> {
    let key = der.strip_prefix(&SPKI_PREFIX[..])?;
    key.try_into().ok()
}

/// One trusted public key.
#[derive(Debug)]
struct TrustedKey {
    id: String,
    public: [u8; 32],
}

/// The public keys whose signatures are accepted.
#[derive(Debug)]
pub(crate) struct TrustedKeys {
    keys: Vec<TrustedKey>,
}

impl TrustedKeys {
    /// Every `*.pub` and `*.pem` public key in `dir` (at least one).
    #[cfg(test)]
    pub(crate) fn load_dir(dir: &Path) -> Result<TrustedKeys, SignError> {
        let mut keys = TrustedKeys { keys: Vec::new() };
        keys.add_dir(dir)?;
        Ok(keys)
    }

    /// The keys of a colon-separated list of key files and directories (`CRAC_TRUSTED_KEYS`);
    /// every directory must hold a key.
    pub(crate) fn load(spec: &str) -> Result<TrustedKeys, SignError> {
        let mut keys = TrustedKeys { keys: Vec::new() };
        for part in spec.split(':').filter(|p| !p.is_empty()) {
            let path = Path::new(part);
            let meta = fs::metadata(path).map_err(|source| SignError::Io {
                path: path.to_owned(),
                source,
            })?;
            if meta.is_dir() {
                keys.add_dir(path)?;
            } else {
                keys.add_file(path)?;
            }
        }
        if keys.keys.is_empty() {
            return Err(SignError::NoTrustedKeys {
                path: PathBuf::from(spec),
            });
        }
        Ok(keys)
    }

    /// The ids of the keys.
    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    /// Adds the keys of `dir`, which only its owner may write.
    fn add_dir(&mut self, dir: &Path) -> Result<(), SignError> {
        let io = |source| SignError::Io {
            path: dir.to_owned(),
            source,
        };
        Access::Trusted.check(dir, &fs::metadata(dir).map_err(io)?)?;
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let ext = path.extension().and_then(|e| e.to_str());
            if matches!(ext, Some("pub" | "pem")) {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(SignError::NoTrustedKeys {
                path: dir.to_owned(),
            });
        }
        files.sort();
        files.iter().try_for_each(|f| self.add_file(f))
    }

    /// Adds the ed25519 public key of the PEM file `path`.
    fn add_file(&mut self, path: &Path) -> Result<(), SignError> {
        let text = read_small(path, Access::Trusted)?;
        let bad = |what: String| SignError::BadKeyFile {
            path: path.to_owned(),
            what,
        };
        let pem = std::str::from_utf8(&text.0).map_err(|_| bad("not a PEM file".to_owned()))?;
        let der = pem_body(pem, "PUBLIC KEY").map_err(bad)?;
        let public = spki_key(&der.0).ok_or_else(|| {
            bad("not an ed25519 public key (only ed25519 keys can be trusted)".to_owned())
        })?;
        if !self.keys.iter().any(|k| k.public == public) {
            let id = key_id_of(&public);
            self.keys.push(TrustedKey { id, public });
        }
        Ok(())
    }

    /// Checks that a trusted key with the signature's id signed `payload`.
    pub(crate) fn verify(&self, payload: &[u8], sig: &Signature) -> Result<(), SignError> {
        let key_id = || sig.key_id.clone();
        let mut keys = self.keys.iter().filter(|k| k.id == sig.key_id).peekable();
        if keys.peek().is_none() {
            return Err(SignError::UntrustedKey { key_id: key_id() });
        }
        let ok = keys.any(|k| {
            UnparsedPublicKey::new(&ED25519, &k.public)
                .verify(payload, &sig.signature)
                .is_ok()
        });
        ok.then_some(())
            .ok_or_else(|| SignError::BadSignature { key_id: key_id() })
    }
}

/// The payload a signature covers: the repository and the manifest digest.
pub(crate) fn payload(reference_repo: &str, manifest_digest: &str) -> Vec<u8> {
    format!("{HEADER}\nrepository {reference_repo}\nmanifest {manifest_digest}\n").into_bytes()
}

/// The repository and manifest digest of a payload exactly as [`payload`] writes it.
pub(crate) fn parse_payload(bytes: &[u8]) -> Result<(String, String), SignError> {
    let bad = |what: &str| SignError::BadPayload {
        what: what.to_owned(),
    };
    if bytes.len() > MAX_PAYLOAD {
        return Err(bad("larger than 1 KiB"));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
    let body = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("does not end with a line feed"))?;
    let mut lines = body.split('\n');
    if lines.next() != Some(HEADER) {
        return Err(bad("first line is not `crac-rs signature v1`"));
    }
    let repo = field(lines.next(), "repository")?;
    let digest = field(lines.next(), "manifest")?;
    if lines.next().is_some() {
        return Err(bad("more lines than the repository and manifest"));
    }
    check_repo(repo)?;
    check_digest(digest)?;
    Ok((repo.to_owned(), digest.to_owned()))
}

/// The value of the line `NAME VALUE`.
fn field<'a>(line: Option<&'a str>, name: &str) -> Result<&'a str, SignError> {
    line.and_then(|l| l.strip_prefix(name))
        .and_then(|v| v.strip_prefix(' '))
        .ok_or_else(|| SignError::BadPayload {
            what: format!("expected the line `{name} ...`"),
        })
}

/// A repository name: 1–255 bytes of `[a-z0-9._/:-]`.
fn check_repo(repo: &str) -> Result<(), SignError> {
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._/-:".contains(&c);
    if repo.is_empty() || repo.len() > MAX_REPO || !repo.bytes().all(ok) {
        return Err(SignError::BadPayload {
            what: "repository is not 1-255 characters of [a-z0-9._/:-]".to_owned(),
        });
    }
    Ok(())
}

/// A manifest digest: `sha256:` and 64 lowercase hex digits.
fn check_digest(digest: &str) -> Result<(), SignError> {
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    match digest.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(hex) => Ok(()),
        _ => Err(SignError::BadPayload {
            what: "manifest is not sha256: and 64 lowercase hex digits".to_owned(),
        }),
    }
}

/// A signature and the id of the key that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) key_id: String,
    pub(crate) signature: Vec<u8>,
}

/// The signature as text: `ed25519 KEY_ID BASE64`.
pub(crate) fn encode_signature(sig: &Signature) -> String {
    format!("ed25519 {} {}", sig.key_id, base64_encode(&sig.signature))
}

/// The signature of the text [`encode_signature`] writes (and nothing else).
pub(crate) fn decode_signature(text: &str) -> Result<Signature, SignError> {
    let bad = |what: &str| SignError::Malformed {
        what: format!("malformed signature: {what}"),
    };
    let parts: Vec<&str> = text.split(' ').collect();
    let [alg, key_id, b64] = parts[..] else {
        return Err(bad("expected `ed25519 KEY_ID BASE64`"));
    };
    if alg != "ed25519" {
        return Err(bad("not an ed25519 signature"));
    }
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    match key_id.strip_prefix("ed25519:") {
        Some(h) if h.len() == 16 && h.bytes().all(hex) => {}
        _ => return Err(bad("key id is not ed25519: and 16 lowercase hex digits")),
    }
    let signature = base64_decode(b64)?;
    if signature.len() != 64 {
        return Err(bad("not 64 bytes"));
    }
    Ok(Signature {
        key_id: key_id.to_owned(),
        signature,
    })
}

/// Standard base64 with padding.
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            let c = B64[((n >> (18 - 6 * i)) & 63) as usize];
            out.push(if i <= chunk.len() { char::from(c) } else { '=' });
        }
    }
    out
}

/// Strict standard base64: padded to a multiple of 4, no whitespace, no other alphabet, no
/// stray bits in the last character.
pub(crate) fn base64_decode(text: &str) -> Result<Vec<u8>, SignError> {
    decode_b64(text.as_bytes()).map_err(|e| SignError::Malformed {
        what: format!("bad base64: {e}"),
    })
}

/// The value of a base64 character.
fn b64_value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// [`base64_decode`] of bytes, into a vector allocated once.
fn decode_b64(s: &[u8]) -> Result<Vec<u8>, &'static str> {
    if !s.len().is_multiple_of(4) {
        return Err("length is not a multiple of 4");
    }
    let pad = s.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err("too much padding");
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (i, quad) in s.chunks_exact(4).enumerate() {
        let used = if (i + 1) * 4 == s.len() { 4 - pad } else { 4 };
        let mut n = 0u32;
        for (j, &c) in quad.iter().enumerate() {
            let v = if j < used {
                b64_value(c).ok_or("not a base64 character")?
            } else {
                0
            };
            n = (n << 6) | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        if bytes[used - 1..].iter().any(|&b| b != 0) {
            return Err("stray bits before the padding");
        }
        out.extend_from_slice(&bytes[..used - 1]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A temporary directory, removed when dropped.
    struct Tmp(PathBuf);

    impl Tmp {
        fn new(name: &str) -> Tmp {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p =
                std::env::temp_dir().join(format!("crac-sign-{name}-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir(&p).unwrap();
            chmod(&p, 0o700);
            Tmp(p)
        }
        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn have_openssl() -> bool {
        let ok = Command::new("openssl")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("note: openssl not found, test skipped");
        }
        ok
    }

    fn openssl(args: &[&str]) {
        let out = Command::new("openssl").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `NAME.key` (mode 0600) and `NAME.pub` in `dir`, made by openssl.
    fn openssl_key(dir: &Tmp, name: &str) -> (PathBuf, PathBuf) {
        let (key, public) = (
            dir.path(&format!("{name}.key")),
            dir.path(&format!("{name}.pub")),
        );
        let (k, p) = (key.to_str().unwrap(), public.to_str().unwrap());
        openssl(&["genpkey", "-algorithm", "ed25519", "-out", k]);
        chmod(&key, 0o600);
        openssl(&["pkey", "-in", k, "-pubout", "-out", p]);
        (key, public)
    }

    fn digest() -> String {
        format!("sha256:{}", "0123456789abcdef".repeat(4))
    }

    #[test]
    fn public_key_pem_and_key_id_match_openssl() {
        if !have_openssl() {
            return;
        }
        let tmp = Tmp::new("pem");
        let (key, public) = openssl_key(&tmp, "a");
        let k = SigningKey::from_pem_file(&key).unwrap();
        assert_eq!(k.public_key_pem(), fs::read_to_string(&public).unwrap());
        let trusted = TrustedKeys::load_dir(&tmp.0).unwrap();
        assert_eq!(trusted.ids(), vec![k.key_id()]);
        assert!(k.key_id().starts_with("ed25519:") && k.key_id().len() == 24);
    }

    #[test]
    fn sign_verify_and_tampering() {
        if !have_openssl() {
            return;
        }
        let tmp = Tmp::new("rt");
        let (key, _) = openssl_key(&tmp, "a");
        let k = SigningKey::from_pem_file(&key).unwrap();
        let trusted = TrustedKeys::load_dir(&tmp.0).unwrap();
        let p = payload("crac/demo", &digest());
        let sig = Signature {
            key_id: k.key_id(),
            signature: k.sign(&p),
        };
        trusted.verify(&p, &sig).unwrap();
        let sig = decode_signature(&encode_signature(&sig)).unwrap();
        trusted.verify(&p, &sig).unwrap();
        let mut flipped = p.clone();
        flipped[30] ^= 1;
        let e = trusted.verify(&flipped, &sig).unwrap_err();
        assert!(
            matches!(&e, SignError::BadSignature { key_id } if *key_id == k.key_id()),
            "{e}"
        );
        let mut bad_sig = sig.clone();
        bad_sig.signature[0] ^= 0x80;
        assert!(matches!(
            trusted.verify(&p, &bad_sig),
            Err(SignError::BadSignature { .. })
        ));
    }

    #[test]
    fn key_outside_the_trust_dir_is_untrusted() {
        if !have_openssl() {
            return;
        }
        let (trust, other) = (Tmp::new("trust"), Tmp::new("other"));
        openssl_key(&trust, "a");
        fs::remove_file(trust.path("a.key")).unwrap();
        let (key, _) = openssl_key(&other, "b");
        let k = SigningKey::from_pem_file(&key).unwrap();
        let p = payload("crac/demo", &digest());
        let sig = Signature {
            key_id: k.key_id(),
            signature: k.sign(&p),
        };
        let e = TrustedKeys::load_dir(&trust.0)
            .unwrap()
            .verify(&p, &sig)
            .unwrap_err();
        assert!(matches!(&e, SignError::UntrustedKey { key_id } if *key_id == k.key_id()));
        assert!(e.to_string().contains(&k.key_id()), "{e}");
        // Both, named as a file and a directory.
        let spec = format!("{}:{}", other.path("b.pub").display(), trust.0.display());
        let both = TrustedKeys::load(&spec).unwrap();
        assert_eq!(both.ids().len(), 2);
        both.verify(&p, &sig).unwrap();
    }

    #[test]
    fn open_modes_are_refused() {
        if !have_openssl() {
            return;
        }
        let tmp = Tmp::new("mode");
        let (key, public) = openssl_key(&tmp, "a");
        chmod(&key, 0o644);
        let e = SigningKey::from_pem_file(&key).unwrap_err();
        assert!(matches!(e, SignError::KeyModeTooOpen { mode: 0o644, .. }));
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("chmod 600 {}", key.display())),
            "{msg}"
        );
        fs::remove_file(&key).unwrap();
        chmod(&tmp.0, 0o777);
        let e = TrustedKeys::load_dir(&tmp.0).unwrap_err();
        assert!(matches!(&e, SignError::TrustModeTooOpen { path, mode: 0o777 } if *path == tmp.0));
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        chmod(&tmp.0, 0o755);
        chmod(&public, 0o664);
        let e = TrustedKeys::load(public.to_str().unwrap()).unwrap_err();
        assert!(matches!(&e, SignError::TrustModeTooOpen { path, .. } if *path == public));
    }

    #[test]
    fn bad_key_files_are_named() {
        if !have_openssl() {
            return;
        }
        let tmp = Tmp::new("bad");
        let e = SigningKey::from_pem_file(&tmp.0).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = tmp.path("big.key");
        fs::write(&big, vec![b'A'; 64 * 1024 + 1]).unwrap();
        chmod(&big, 0o600);
        assert!(
            SigningKey::from_pem_file(&big)
                .unwrap_err()
                .to_string()
                .contains("64 KiB")
        );
        // A P-256 public key and a private key among the trusted keys.
        let ec = tmp.path("ec.key");
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            ec.to_str().unwrap(),
        ]);
        let ec_pub = tmp.path("ec.pub");
        openssl(&[
            "pkey",
            "-in",
            ec.to_str().unwrap(),
            "-pubout",
            "-out",
            ec_pub.to_str().unwrap(),
        ]);
        let e = TrustedKeys::load_dir(&tmp.0).unwrap_err();
        assert!(
            matches!(&e, SignError::BadKeyFile { path, .. } if *path == ec_pub),
            "{e}"
        );
        assert!(e.to_string().contains("not an ed25519 public key"), "{e}");
        fs::remove_file(&ec_pub).unwrap();
        fs::rename(&ec, tmp.path("ec.pem")).unwrap();
        let e = TrustedKeys::load_dir(&tmp.0).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds a PRIVATE KEY, not a PUBLIC KEY"),
            "{e}"
        );
        chmod(&tmp.path("ec.pem"), 0o600);
        let e = SigningKey::from_pem_file(&tmp.path("ec.pem")).unwrap_err();
        assert!(e.to_string().contains("not an ed25519 private key"), "{e}");
    }

    #[test]
    fn empty_trust_dir_is_refused() {
        let tmp = Tmp::new("empty");
        fs::write(tmp.path("README"), "not a key").unwrap();
        let e = TrustedKeys::load_dir(&tmp.0).unwrap_err();
        assert!(matches!(&e, SignError::NoTrustedKeys { path } if *path == tmp.0));
        assert!(matches!(
            TrustedKeys::load(""),
            Err(SignError::NoTrustedKeys { .. })
        ));
    }

    #[test]
    fn pkcs8_v2_key_is_accepted() {
        let rng = ring::rand::SystemRandom::new();
        let der = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap();
        let tmp = Tmp::new("v2");
        let key = tmp.path("k.pem");
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64_encode(der.as_ref())
        );
        fs::write(&key, pem).unwrap();
        chmod(&key, 0o600);
        let k = SigningKey::from_pem_file(&key).unwrap();
        let pk: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
        assert_eq!(k.key_id(), key_id_of(&pk));
        fs::write(tmp.path("k.pub"), k.public_key_pem()).unwrap();
        fs::remove_file(&key).unwrap();
        let p = payload("a/b", &digest());
        let sig = Signature {
            key_id: k.key_id(),
            signature: k.sign(&p),
        };
        TrustedKeys::load_dir(&tmp.0)
            .unwrap()
            .verify(&p, &sig)
            .unwrap();
    }

    #[test]
    fn openssl_signatures_verify_and_ours_verify_in_openssl() {
        if !have_openssl() {
            return;
        }
        let tmp = Tmp::new("interop");
        let (key, public) = openssl_key(&tmp, "a");
        let k = SigningKey::from_pem_file(&key).unwrap();
        let p = payload("127.0.0.1:5000/crac/demo", &digest());
        let (pf, sf) = (tmp.path("payload"), tmp.path("sig"));
        fs::write(&pf, &p).unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        openssl(&[
            "pkeyutl",
            "-sign",
            "-rawin",
            "-inkey",
            &s(&key),
            "-in",
            &s(&pf),
            "-out",
            &s(&sf),
        ]);
        let sig = Signature {
            key_id: k.key_id(),
            signature: fs::read(&sf).unwrap(),
        };
        assert_eq!(sig.signature, k.sign(&p), "ed25519 is deterministic");
        TrustedKeys::load_dir(&tmp.0)
            .unwrap()
            .verify(&p, &sig)
            .unwrap();
        fs::write(&sf, k.sign(&p)).unwrap();
        openssl(&[
            "pkeyutl",
            "-verify",
            "-rawin",
            "-pubin",
            "-inkey",
            &s(&public),
            "-in",
            &s(&pf),
            "-sigfile",
            &s(&sf),
        ]);
    }

    #[test]
    fn payload_round_trip() {
        let p = payload("crac/demo", &digest());
        let text = format!(
            "crac-rs signature v1\nrepository crac/demo\nmanifest {}\n",
            digest()
        );
        assert_eq!(p, text.as_bytes());
        assert_eq!(
            parse_payload(&p).unwrap(),
            ("crac/demo".to_owned(), digest())
        );
    }

    #[test]
    fn payload_parser_is_strict() {
        let d = digest();
        let bad = [
            format!("crac-rs signature v2\nrepository a\nmanifest {d}\n"),
            format!("crac-rs signature v1\nrepository a\nmanifest {d}\nextra x\n"),
            format!("crac-rs signature v1\nrepository a\nmanifest {d}\n\n"),
            format!("crac-rs signature v1\nrepository a\nmanifest {d}"),
            format!("crac-rs signature v1\nmanifest {d}\nrepository a\n"),
            format!("crac-rs signature v1\nrepository A\nmanifest {d}\n"),
            format!("crac-rs signature v1\nrepository \nmanifest {d}\n"),
            format!("crac-rs signature v1\nrepository  a\nmanifest {d}\n"),
            format!("crac-rs signature v1\r\nrepository a\nmanifest {d}\n"),
            format!(
                "crac-rs signature v1\nrepository a\nmanifest {}\n",
                d.to_uppercase()
            ),
            format!(
                "crac-rs signature v1\nrepository a\nmanifest sha256:{}\n",
                &d[8..]
            ),
            format!(
                "crac-rs signature v1\nrepository a\nmanifest sha512:{}\n",
                &d[7..]
            ),
            format!(
                "crac-rs signature v1\nrepository {}\nmanifest {d}\n",
                "a".repeat(256)
            ),
            format!(
                "crac-rs signature v1\nrepository a\nmanifest {d}\n{}",
                "x".repeat(1024)
            ),
        ];
        for b in &bad {
            let r = parse_payload(b.as_bytes());
            assert!(
                matches!(r, Err(SignError::BadPayload { .. })),
                "{b:?}: {r:?}"
            );
        }
        let max = format!(
            "crac-rs signature v1\nrepository {}\nmanifest {d}\n",
            "a".repeat(255)
        );
        assert!(parse_payload(max.as_bytes()).is_ok());
    }

    #[test]
    fn base64_is_standard_and_strict() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, enc) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), plain.as_bytes());
        }
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 250) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&data)).unwrap(), data);
        }
        assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
        for bad in [
            "Zg", "Zg=", "Z===", "====", "Zh==", "Zm9=", "Zm9v\n", "Zm-v", "Zm_v", "=Zm9",
            "Zg==Zg==", " Zm9v", "Zm9v====",
        ] {
            assert!(
                matches!(base64_decode(bad), Err(SignError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn signature_text_is_strict() {
        let sig = Signature {
            key_id: "ed25519:0123456789abcdef".to_owned(),
            signature: vec![7; 64],
        };
        let text = encode_signature(&sig);
        assert!(text.starts_with("ed25519 ed25519:0123456789abcdef "));
        assert_eq!(decode_signature(&text).unwrap(), sig);
        let b64 = base64_encode(&[7; 64]);
        for bad in [
            format!("rsa ed25519:0123456789abcdef {b64}"),
            format!("ed25519 ed25519:0123456789ABCDEF {b64}"),
            format!("ed25519 ed25519:0123456789abcde {b64}"),
            format!("ed25519  ed25519:0123456789abcdef {b64}"),
            format!("ed25519 ed25519:0123456789abcdef {b64}\n"),
            format!(
                "ed25519 ed25519:0123456789abcdef {}",
                base64_encode(&[7; 63])
            ),
            "ed25519 ed25519:0123456789abcdef".to_owned(),
        ] {
            assert!(decode_signature(&bad).is_err(), "{bad:?}");
        }
    }
}
