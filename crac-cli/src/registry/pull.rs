//! `crac pull REF DIR`: the artifact's manifest, its signature checked against the trusted
//! keys, the host checked against its annotations (CPU, executable build) before any page is
//! downloaded, then every layer streamed, a few at once: each downloaded, digested and
//! decompressed as it arrives, straight into the image files (created `0600` in a private
//! directory, through its descriptor), so no byte is read twice. Nothing is left behind when a
//! check fails.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use oci_client::RegistryOperation;
use tracing::info_span;

use super::artifact::{self, Layout, Piece, key};
use super::connect::{Reach, Remote, failed, remote, runtime};
use super::manifest::{Descriptor, Manifest, check_digest, sha256};
use super::sign::{self, TrustedKeys};
use crate::error::{Error, ErrorKind};
use crate::restore::trust;
use crate::sys;
use crac_criu::image::metadata::Metadata;
use crac_criu::safe_dir::Dir;

/// Whose signatures a pull accepts.
pub enum Trust {
    /// One of these keys must have signed the artifact.
    Keys(TrustedKeys),
    /// No signature is asked for (`--allow-unsigned`).
    Unsigned,
}

/// What `crac pull` is asked.
pub struct PullOptions {
    /// What to pull.
    pub reference: String,
    /// Where to write the image (created, or an empty directory of this user).
    pub dir: PathBuf,
    /// How to reach the registry.
    pub reach: Reach,
    /// Whose signatures count.
    pub trust: Trust,
}

/// What a pull did.
#[derive(Debug)]
pub struct Pulled {
    /// The manifest digest.
    pub digest: String,
    /// Who signed it.
    pub key_id: Option<String>,
    /// Bytes of the image written.
    pub image_bytes: u64,
    /// Bytes downloaded.
    pub downloaded: u64,
    /// Layers.
    pub layers: usize,
    /// Time taken.
    pub took: Duration,
}

/// Layers downloaded at once.
const PARALLEL: usize = 4;
/// The largest signature payload.
const MAX_PAYLOAD: u64 = 1024;

fn refused(msg: String) -> Error {
    Error::new(ErrorKind::Refused, format!("pull refused: {msg}"))
}

/// A manifest that passed every check, with its layout.
struct Checked {
    manifest: Manifest,
    digest: String,
    key_id: Option<String>,
    layout: Layout,
}

/// Pulls the artifact into `opts.dir`.
pub fn pull(opts: &PullOptions, note: &mut dyn FnMut(&str)) -> Result<Pulled, Error> {
    let _span = info_span!("crac_pull", reference = %opts.reference).entered();
    let remote = remote(&opts.reference, &opts.reach)?;
    let rt = runtime()?;
    let c = rt.block_on(checked_manifest(&remote, &opts.trust))?;
    describe(&opts.reference, &c, note);
    let dir = empty_dir(&opts.dir)?;
    rt.block_on(write_image(&remote, &dir, &c))
}

/// Pulls the artifact into `cache/sha256-<hex>` unless an earlier pull put it there (a
/// directory of that name appears only when complete: it is pulled under a temporary name
/// and renamed). Its signature is checked either way. The image directory, and the pull when
/// there was one.
pub fn pull_cached(
    reference: &str,
    reach: &Reach,
    trust: &Trust,
    cache: &Dir,
    note: &mut dyn FnMut(&str),
) -> Result<(PathBuf, Option<Pulled>), Error> {
    let _span = info_span!("crac_pull", reference = %reference).entered();
    let remote = remote(reference, reach)?;
    let rt = runtime()?;
    let c = rt.block_on(checked_manifest(&remote, trust))?;
    let name = super::digest_name(&c.digest);
    let path = cache.path().join(&name);
    if cache.stat(&name).ok().flatten().is_some_and(|m| m.is_dir()) {
        note(&format!(
            "{reference}: {} is here already ({})",
            c.digest,
            path.display()
        ));
        return Ok((path, None));
    }
    describe(reference, &c, note);
    let io =
        |e: io::Error| Error::new(ErrorKind::Other, format!("{}: {e}", cache.path().display()));
    let tmp = cache.make_temp(".pull-").map_err(io)?;
    let r = rt.block_on(write_image(&remote, &tmp, &c));
    if r.is_ok() && sys::renameat(cache.fd(), tmp.name(), &name).is_ok() {
        return r.map(|p| (path, Some(p)));
    }
    // Failed, or another restore renamed its copy first (then that one is used).
    remove_files(&tmp, &c.layout);
    let _ = rustix::fs::unlinkat(cache.fd(), tmp.name(), rustix::fs::AtFlags::REMOVEDIR);
    r.map(|_| (path, None))
}

fn describe(reference: &str, c: &Checked, note: &mut dyn FnMut(&str)) {
    note(&format!(
        "{reference}: {}, {}; {} files, {:.1} MB in {} layers",
        c.digest,
        c.key_id
            .as_deref()
            .map(|k| format!("signed by {k}"))
            .unwrap_or_else(|| "unsigned (--allow-unsigned)".to_owned()),
        c.layout.files.len(),
        c.layout.total() as f64 / 1e6,
        c.manifest.layers.len()
    ));
}

/// Creates the files in `dir` and downloads into them; removes them when anything fails.
async fn write_image(remote: &Remote, dir: &Dir, c: &Checked) -> Result<Pulled, Error> {
    let t = Instant::now();
    let files = match create_files(dir, &c.layout) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            remove_files(dir, &c.layout);
            return Err(e);
        }
    };
    if let Err(e) = download(remote, &c.manifest, &c.layout, files).await {
        remove_files(dir, &c.layout);
        return Err(e);
    }
    Ok(Pulled {
        digest: c.digest.clone(),
        key_id: c.key_id.clone(),
        image_bytes: c.layout.total(),
        downloaded: c.manifest.layers.iter().map(|l| l.size).sum(),
        layers: c.manifest.layers.len(),
        took: t.elapsed(),
    })
}

/// The manifest (its digest computed here, never taken from the registry), its signature,
/// the host against its annotations, and the layout from its config.
async fn checked_manifest(remote: &Remote, trust: &Trust) -> Result<Checked, Error> {
    let r = &remote.reference;
    remote
        .client
        .auth(r, &remote.auth, RegistryOperation::Pull)
        .await
        .map_err(|e| failed(&format!("log in to {}", r.resolve_registry()), e))?;
    let (bytes, _) = remote
        .client
        .pull_manifest_raw(r, &remote.auth, &[artifact::MANIFEST_TYPE])
        .await
        .map_err(|e| failed(&format!("fetch the manifest of {r}"), e))?;
    if bytes.len() > artifact::MAX_DOC {
        return Err(refused(format!("its manifest is {} bytes", bytes.len())));
    }
    let digest = sha256(&bytes);
    if let Some(pinned) = r.digest()
        && pinned != digest
    {
        return Err(refused(format!(
            "the registry sent a manifest of digest {digest} for {pinned}"
        )));
    }
    let key_id = match trust {
        Trust::Keys(keys) => Some(check_signature(remote, &digest, keys).await?),
        Trust::Unsigned => None,
    };
    let m = Manifest::parse(&bytes, artifact::ARTIFACT_TYPE)
        .map_err(|e| refused(format!("{r}: {e}")))?;
    check_host(&m)?;
    let layout = fetch_layout(remote, &m).await?;
    Ok(Checked {
        manifest: m,
        digest,
        key_id,
        layout,
    })
}

/// The signature beside `digest`: present, by a trusted key, over this very manifest of this
/// repository. Its key id, or the refusal naming it.
async fn check_signature(
    remote: &Remote,
    digest: &str,
    keys: &TrustedKeys,
) -> Result<String, Error> {
    let r = &remote.reference;
    let tag = super::signature_tag(digest);
    let sig_ref = oci_client::Reference::with_tag(
        r.registry().to_owned(),
        r.repository().to_owned(),
        tag.clone(),
    );
    let bytes = match remote
        .client
        .pull_manifest_raw(&sig_ref, &remote.auth, &[artifact::MANIFEST_TYPE])
        .await
    {
        Ok((b, _)) => b,
        Err(e) => {
            return Err(refused(format!(
                "{r} is not signed (no signature at tag {tag}: {e}); sign it with \
                 `crac push --sign KEY`, or pull with --allow-unsigned"
            )));
        }
    };
    let m = Manifest::parse(&bytes, super::SIG_TYPE)
        .map_err(|e| refused(format!("its signature at {tag}: {e}")))?;
    let layer = match m.layers.as_slice() {
        [l] if l.media_type == super::SIG_PAYLOAD_TYPE && l.size <= MAX_PAYLOAD => l,
        _ => {
            return Err(refused(format!(
                "its signature at {tag} is not one of ours"
            )));
        }
    };
    let payload = fetch_small(remote, layer, MAX_PAYLOAD).await?;
    let (repo, signed) =
        sign::parse_payload(&payload).map_err(|e| refused(format!("signature payload: {e}")))?;
    if signed != digest || repo != r.repository() {
        return Err(refused(format!(
            "its signature is of {repo}@{signed}, not of {}@{digest}",
            r.repository()
        )));
    }
    let text = layer
        .annotations
        .get(super::SIG_ANNOTATION)
        .ok_or_else(|| refused(format!("its signature at {tag} carries no signature")))?;
    let sig = sign::decode_signature(text).map_err(|e| refused(format!("its signature: {e}")))?;
    keys.verify(&payload, &sig)
        .map_err(|e| refused(format!("{r}: {e}")))?;
    Ok(sig.key_id)
}

/// An error of a blob's stream: the client checks the digest too, at the end of the stream,
/// and returns its `DigestError` inside the `io::Error`; that is a refusal like ours, the rest
/// a registry failure.
fn stream_error(d: &Descriptor, e: io::Error) -> Error {
    let digest = e
        .get_ref()
        .is_some_and(|inner| inner.is::<oci_client::errors::DigestError>());
    if digest {
        refused(format!("blob {} does not match its digest ({e})", d.digest))
    } else {
        failed(&format!("fetch {}", d.digest), e)
    }
}

/// A blob of at most `max` bytes, its digest checked.
async fn fetch_small(remote: &Remote, d: &Descriptor, max: u64) -> Result<Vec<u8>, Error> {
    check_digest(&d.digest).map_err(refused)?;
    if d.size > max {
        return Err(refused(format!("blob {} is {} bytes", d.digest, d.size)));
    }
    let mut s = remote
        .client
        .pull_blob_stream(&remote.reference, d.digest.as_str())
        .await
        .map_err(|e| failed(&format!("fetch {}", d.digest), e))?;
    let mut v = Vec::new();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.map_err(|e| stream_error(d, e))?;
        if v.len() + chunk.len() > max as usize {
            return Err(refused(format!(
                "blob {} is longer than {max} bytes",
                d.digest
            )));
        }
        v.extend_from_slice(&chunk);
    }
    if sha256(&v) != d.digest {
        return Err(refused(format!(
            "blob {} does not match its digest",
            d.digest
        )));
    }
    Ok(v)
}

/// Refuses, before any page is downloaded, an image this host cannot run: a CPU feature or
/// architecture it lacks, an executable that is not the build the image was taken of.
fn check_host(m: &Manifest) -> Result<(), Error> {
    let a = |k: &str| m.annotations.get(k).cloned().unwrap_or_default();
    let arch = a(key::ARCH);
    let here = std::env::consts::ARCH;
    if !arch.is_empty() && arch != here {
        return Err(refused(format!(
            "the image was taken on {arch}, this host is {here}"
        )));
    }
    let meta = Metadata {
        exe: PathBuf::from(a(key::EXECUTABLE)),
        build_id: a(key::BUILD_ID),
        cpu_features: a(key::CPU_FEATURES)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        ..Metadata::default()
    };
    trust::check_cpu(&meta).map_err(|e| refused(e.to_string()))?;
    trust::check_build(&meta).map_err(|e| refused(e.to_string()))
}

/// The config blob: the layout, checked against the manifest.
async fn fetch_layout(remote: &Remote, m: &Manifest) -> Result<Layout, Error> {
    if m.config.media_type != artifact::CONFIG_TYPE {
        return Err(refused(format!("config of type {}", m.config.media_type)));
    }
    let bytes = fetch_small(remote, &m.config, artifact::MAX_DOC as u64).await?;
    let layout: Layout =
        serde_json::from_slice(&bytes).map_err(|e| refused(format!("its layout: {e}")))?;
    layout
        .check(m.layers.len())
        .map_err(|e| refused(format!("its layout: {e}")))?;
    for (i, l) in m.layers.iter().enumerate() {
        let want = if i == 0 {
            artifact::FILES_LAYER_TYPE
        } else {
            artifact::PAGES_LAYER_TYPE
        };
        let raw = layout.layer_len(i);
        if l.media_type != want || l.size > compress_bound(raw) {
            return Err(refused(format!(
                "layer {i} ({} bytes of {}) does not fit its layout",
                l.size, l.media_type
            )));
        }
    }
    if layout.layer_len(0) > artifact::MAX_SMALL_BYTES {
        return Err(refused("its small files are too large".to_owned()));
    }
    Ok(layout)
}

/// The most bytes zstd makes of `n` (ZSTD_COMPRESSBOUND), plus room for a frame header.
fn compress_bound(n: u64) -> u64 {
    n + n / 256
        + 128
        + (if n < (128 << 10) {
            ((128 << 10) - n) >> 11
        } else {
            0
        })
}

/// Creates the directory (private) or opens an existing empty one of this user's.
fn empty_dir(path: &std::path::Path) -> Result<Dir, Error> {
    let cfg = |e: String| Error::new(ErrorKind::Config, format!("{}: {e}", path.display()));
    let d = Dir::create_private(path).map_err(|e| cfg(e.to_string()))?;
    crac_criu::safe_dir::check_owner_mode(
        &d.metadata().map_err(|e| cfg(e.to_string()))?,
        sys::euid(),
        crac_criu::safe_dir::Access::ReadWrite,
    )
    .map_err(|why| cfg(format!("{why:?}")))?;
    if !d.entries().map_err(|e| cfg(e.to_string()))?.is_empty() {
        return Err(cfg("not empty: pull into a new directory".to_owned()));
    }
    Ok(d)
}

/// Every file, new (`O_EXCL`, `0600`), at its final size (sparse until written), after a check
/// that the file system has room.
fn create_files(dir: &Dir, layout: &Layout) -> Result<Vec<File>, Error> {
    let st = rustix::fs::fstatvfs(dir.fd())
        .map_err(|e| Error::new(ErrorKind::Other, format!("statvfs: {e}")))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if layout.total() > free {
        return Err(refused(format!(
            "the image is {:.1} MB, {} has {:.1} MB free",
            layout.total() as f64 / 1e6,
            dir.path().display(),
            free as f64 / 1e6
        )));
    }
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    layout
        .files
        .iter()
        .map(|f| {
            let file = File::from(sys::openat(dir.fd(), &f.name, flags, 0o600)?);
            file.set_len(f.size)?;
            Ok(file)
        })
        .collect::<io::Result<_>>()
        .map_err(|e| Error::new(ErrorKind::Other, format!("{}: {e}", dir.path().display())))
}

fn remove_files(dir: &Dir, layout: &Layout) {
    for f in &layout.files {
        let _ = dir.remove(&f.name);
    }
}

/// Downloads every layer, a few at once.
async fn download(
    remote: &Remote,
    m: &Manifest,
    layout: &Layout,
    files: Arc<Vec<File>>,
) -> Result<(), Error> {
    futures_util::stream::iter(m.layers.iter().enumerate())
        .map(|(i, d)| layer(remote, d, layout.layers[i].clone(), files.clone()))
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await
}

/// One layer: bytes from the network handed to a blocking thread that digests, decompresses
/// and writes them; at most `size` bytes are taken from the registry.
async fn layer(
    remote: &Remote,
    d: &Descriptor,
    pieces: Vec<Piece>,
    files: Arc<Vec<File>>,
) -> Result<(), Error> {
    let mut s = remote
        .client
        .pull_blob_stream(&remote.reference, d.digest.as_str())
        .await
        .map_err(|e| failed(&format!("fetch {}", d.digest), e))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let want = d.clone();
    let writer = tokio::task::spawn_blocking(move || write_layer(rx, &want, &pieces, &files));
    let mut got = 0u64;
    while let Some(chunk) = s.next().await {
        let chunk = chunk.map_err(|e| stream_error(d, e))?;
        got += chunk.len() as u64;
        if got > d.size || tx.send(chunk).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(|e| failed("write", e))??;
    if got != d.size {
        return Err(refused(format!(
            "layer {} is {got} bytes or more, its descriptor says {}",
            d.digest, d.size
        )));
    }
    Ok(())
}

/// Reads compressed bytes from a channel, digesting them as they pass.
struct Incoming {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    cur: bytes::Bytes,
    digest: ring::digest::Context,
    bytes: u64,
}

impl Read for Incoming {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => {
                    self.digest.update(&b);
                    self.bytes += b.len() as u64;
                    self.cur = b;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

/// Decompresses one layer into its pieces, then checks that the frame ended exactly where
/// the layout says, nothing follows it, and the bytes match the layer's digest.
fn write_layer(
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    d: &Descriptor,
    pieces: &[Piece],
    files: &[File],
) -> Result<(), Error> {
    let bad = |what: &str| refused(format!("layer {}: {what}", d.digest));
    let io = |e: io::Error| refused(format!("layer {}: {e}", d.digest));
    let incoming = Incoming {
        rx,
        cur: bytes::Bytes::new(),
        digest: ring::digest::Context::new(&ring::digest::SHA256),
        bytes: 0,
    };
    let mut dec = zstd::stream::read::Decoder::new(incoming).map_err(io)?;
    // Our pushes use a window of a few MB; a larger one is refused rather than allocated.
    dec.window_log_max(27).map_err(io)?;
    let mut dec = dec.single_frame();
    let mut buf = vec![0u8; 1 << 20];
    for p in pieces {
        let (f, mut at, end) = (&files[p.file], p.offset, p.offset + p.len);
        while at < end {
            let want = buf.len().min((end - at) as usize);
            let n = dec.read(&mut buf[..want]).map_err(io)?;
            if n == 0 {
                return Err(bad("ends before its layout does"));
            }
            f.write_all_at(&buf[..n], at).map_err(io)?;
            at += n as u64;
        }
    }
    if dec.read(&mut buf[..1]).map_err(io)? != 0 {
        return Err(bad("decompresses to more than its layout says"));
    }
    let mut rest = dec.finish();
    let trailing = io::copy(&mut rest, &mut io::sink()).map_err(io)?;
    if trailing != 0 {
        return Err(bad("data after its zstd frame"));
    }
    let Incoming { digest, .. } = rest.into_inner();
    if super::manifest::digest_string(digest) != d.digest {
        return Err(bad("its bytes do not match its digest"));
    }
    Ok(())
}

/// Writes a short report of a pull.
pub fn report(p: &Pulled, out: &mut dyn FnMut(&str)) {
    out(&format!(
        "pulled {} ({}; {:.1} MB downloaded, {:.1} MB of image, {} layers) in {:.2} s",
        p.digest,
        p.key_id
            .as_deref()
            .map(|k| format!("signed by {k}"))
            .unwrap_or_else(|| "unsigned".to_owned()),
        p.downloaded as f64 / 1e6,
        p.image_bytes as f64 / 1e6,
        p.layers,
        p.took.as_secs_f64()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's digest check is a refusal; any other stream error a registry failure,
    /// whatever its text says.
    #[test]
    fn a_stream_error_is_a_refusal_only_when_the_client_says_the_digest_differs() {
        let d = Descriptor {
            media_type: "application/octet-stream".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            size: 1,
            annotations: Default::default(),
        };
        let mismatch = io::Error::other(oci_client::errors::DigestError::VerificationError {
            expected: d.digest.clone(),
            actual: "sha256:00".into(),
        });
        assert_eq!(stream_error(&d, mismatch).kind(), ErrorKind::Refused);
        let reset = io::Error::other("connection reset while reading the digest header");
        assert_eq!(stream_error(&d, reset).kind(), ErrorKind::Other);
    }

    #[test]
    fn compress_bound_holds_for_incompressible_data() {
        for n in [0usize, 1, 1000, 200_000, 3 << 20] {
            let data: Vec<u8> = (0..n)
                .map(|i| ((i as u64 * 2654435761) >> 13) as u8)
                .collect();
            let c = zstd::bulk::compress(&data, 3).unwrap();
            assert!(
                c.len() as u64 <= compress_bound(n as u64),
                "{n}: {}",
                c.len()
            );
        }
    }

    /// Two scratch files of 3000 and 1000 bytes, and the pieces of a layer covering the
    /// second half of the first and all of the second.
    fn scratch(name: &str) -> (std::path::PathBuf, Vec<File>, Vec<Piece>) {
        let d = std::env::temp_dir().join(format!("crac-pull-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let files = ["a", "b"]
            .iter()
            .zip([3000u64, 1000])
            .map(|(n, len)| {
                let f = File::create(d.join(n)).unwrap();
                f.set_len(len).unwrap();
                f
            })
            .collect();
        let pieces = vec![
            Piece {
                file: 0,
                offset: 1500,
                len: 1500,
            },
            Piece {
                file: 1,
                offset: 0,
                len: 1000,
            },
        ];
        (d, files, pieces)
    }

    /// Feeds `compressed` (in pieces, as a network would) to `write_layer` for a descriptor of
    /// digest `digest`.
    fn feed(
        compressed: &[u8],
        digest: &str,
        pieces: &[Piece],
        files: &[File],
    ) -> Result<(), Error> {
        let (tx, rx) = tokio::sync::mpsc::channel(compressed.len() / 100 + 2);
        for c in compressed.chunks(100) {
            tx.try_send(bytes::Bytes::copy_from_slice(c)).unwrap();
        }
        drop(tx);
        let d = Descriptor {
            media_type: artifact::PAGES_LAYER_TYPE.into(),
            digest: digest.into(),
            size: compressed.len() as u64,
            annotations: Default::default(),
        };
        write_layer(rx, &d, pieces, files)
    }

    #[test]
    fn a_layer_is_written_into_its_pieces_and_refused_when_it_does_not_fit_them() {
        let (dir, files, pieces) = scratch("layer");
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let z = zstd::bulk::compress(&data, 3).unwrap();
        feed(&z, &sha256(&z), &pieces, &files).unwrap();
        let a = std::fs::read(dir.join("a")).unwrap();
        let b = std::fs::read(dir.join("b")).unwrap();
        assert_eq!(&a[1500..], &data[..1500]);
        assert!(
            a[..1500].iter().all(|&x| x == 0),
            "nothing outside the piece"
        );
        assert_eq!(&b[..], &data[1500..]);

        let why = |r: Result<(), Error>| r.unwrap_err().to_string();
        // One byte more, one byte less than the layout says.
        let more = zstd::bulk::compress(&[&data[..], &[1]].concat(), 3).unwrap();
        assert!(why(feed(&more, &sha256(&more), &pieces, &files)).contains("more than its layout"));
        let less = zstd::bulk::compress(&data[..2499], 3).unwrap();
        assert!(why(feed(&less, &sha256(&less), &pieces, &files)).contains("ends before"));
        // Anything after the frame, a digest that differs, bytes that are not zstd.
        let trailing = [&z[..], b"junk"].concat();
        let e = why(feed(&trailing, &sha256(&trailing), &pieces, &files));
        assert!(e.contains("after its zstd frame"), "{e}");
        let e = why(feed(&z, &sha256(b"other"), &pieces, &files));
        assert!(e.contains("do not match its digest"), "{e}");
        let noise: Vec<u8> = (0..500u32).map(|i| (i * 31) as u8).collect();
        assert!(feed(&noise, &sha256(&noise), &pieces, &files).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_frame_asking_for_a_huge_window_is_refused_not_allocated() {
        let (dir, files, pieces) = scratch("window");
        // A streamed frame (no content size) that declares a 1 GiB window.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.set_parameter(zstd::zstd_safe::CParameter::WindowLog(30))
            .unwrap();
        std::io::Write::write_all(&mut enc, &[7u8; 2500]).unwrap();
        let z = enc.finish().unwrap();
        let e = feed(&z, &sha256(&z), &pieces, &files).unwrap_err();
        assert!(e.to_string().contains("layer"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
