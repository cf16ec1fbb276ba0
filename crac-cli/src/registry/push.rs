//! `crac push DIR REF`: a sealed image, checked against its manifest, compressed layer by layer
//! (several at once) and pushed as the OCI artifact of `artifact.rs`; signed when a key is given.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use tracing::info_span;

use super::artifact::{self, Layout, key};
use super::connect::{Reach, Remote, failed, remote, runtime};
use super::manifest::{Descriptor, Manifest, sha256};
use super::sign;
use crate::error::{Error, ErrorKind};
use crate::restore::trust;
use crac_criu::image::manifest::{is_outside_image, is_page_file};
use crac_criu::image::metadata::Metadata;
use crac_criu::image::{DUMP_LOG, MANIFEST_FILE};
use crac_criu::safe_dir::Dir;

/// What `crac push` is asked.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// The image directory.
    pub dir: PathBuf,
    /// Where to push it.
    pub reference: String,
    /// How to reach the registry.
    pub reach: Reach,
    /// The signing key (PEM, PKCS#8 ed25519).
    pub sign_key: Option<PathBuf>,
    /// Bytes of page file per layer.
    pub chunk: u64,
    /// zstd level.
    pub level: i32,
}

/// The default piece of a page file per layer: small enough that a 1 GB image downloads in
/// many parallel pieces, large enough that each request's overhead is noise.
pub const DEFAULT_CHUNK: u64 = 32 << 20;
/// zstd's default level: about 300 MB/s per core on pages, a third of their size or better.
pub const DEFAULT_LEVEL: i32 = 3;
/// Layers compressed and uploaded at once.
const PARALLEL: usize = 3;

/// What a push did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// `REPO@sha256:…`, the reference that names exactly this artifact.
    pub pinned: String,
    /// The manifest digest.
    pub digest: String,
    /// Bytes of the image.
    pub image_bytes: u64,
    /// Bytes of its layers and config in the registry.
    pub stored_bytes: u64,
    /// Layers uploaded (the rest were there already).
    pub uploaded: usize,
    /// The signing key's id.
    pub key_id: Option<String>,
    /// Time taken.
    pub took: Duration,
}

/// Pushes the image.
pub fn push(opts: &PushOptions, note: &mut dyn FnMut(&str)) -> Result<Pushed, Error> {
    let t = Instant::now();
    let _span = info_span!("crac_push", reference = %opts.reference).entered();
    // The key is read (and its file's mode checked) before anything is uploaded.
    let key = opts
        .sign_key
        .as_deref()
        .map(sign::SigningKey::from_pem_file)
        .transpose()
        .map_err(|e| Error::new(ErrorKind::Config, e.to_string()))?;
    let (dir, meta) = sealed_image(&opts.dir, note)?;
    let files = image_files(&dir)?;
    let layout = artifact::plan(&files, opts.chunk);
    let annotations = annotations(&dir, &meta, layout.total());
    let remote = remote(&opts.reference, &opts.reach)?;
    let opened = Arc::new(open_all(&dir, &layout)?);
    let rt = runtime()?;
    let mut p = rt.block_on(upload(&remote, &layout, opened, annotations, opts.level))?;
    // The key lives only until the signature is made (the binding ends with this block).
    if let Some(key) = key {
        let repo = remote.reference.repository().to_owned();
        p.key_id = Some(key.key_id());
        rt.block_on(push_signature(&remote, &repo, &p.digest, &key))?;
    }
    p.image_bytes = layout.total();
    p.took = t.elapsed();
    Ok(p)
}

/// Opens the image and checks it against its manifest: only a complete, undamaged image is
/// pushed (a registry would spread a damaged one).
fn sealed_image(path: &Path, note: &mut dyn FnMut(&str)) -> Result<(Dir, Metadata), Error> {
    let (dir, _) =
        trust::verified_image_scoped(path, crac_criu::image::manifest::Scope::All, note)?;
    let meta = Metadata::read(&dir)?;
    Ok((dir, meta))
}

/// The image's files (name, size, whether a page file), its manifest included, its logs not.
fn image_files(dir: &Dir) -> Result<Vec<(String, u64, bool)>, Error> {
    let io = |e: std::io::Error| {
        Error::new(ErrorKind::Other, format!("{}: {e}", dir.path().display())).with_source(e)
    };
    let mut v = Vec::new();
    for name in dir.entries().map_err(io)? {
        if is_outside_image(&name) && name != MANIFEST_FILE {
            continue;
        }
        artifact::check_name(&name).map_err(|e| Error::new(ErrorKind::Config, e))?;
        let size = dir
            .open_file(&name)
            .and_then(|f| f.metadata())
            .map_err(io)?
            .len();
        v.push((name.clone(), size, is_page_file(&name)));
    }
    Ok(v)
}

fn open_all(dir: &Dir, layout: &Layout) -> Result<Vec<File>, Error> {
    layout
        .files
        .iter()
        .map(|f| {
            dir.open_file(&f.name).map_err(|e| {
                Error::new(ErrorKind::Other, format!("{}: {e}", f.name)).with_source(e)
            })
        })
        .collect()
}

/// The manifest's annotations: what a host checks before it downloads pages.
fn annotations(dir: &Dir, meta: &Metadata, size: u64) -> BTreeMap<String, String> {
    let (version, host, kernel, arch) = dump_log_facts(dir);
    let mut a = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        a.insert(k.to_owned(), v);
    };
    put(key::CPU_FEATURES, meta.cpu_features.join(","));
    put(key::EXECUTABLE, meta.exe.to_string_lossy().into_owned());
    put(key::BUILD_ID, meta.build_id.clone());
    put(key::SIZE, size.to_string());
    if let Some(t) = meta.checkpoint_time {
        put(key::CREATED, rfc3339(t));
    }
    for (k, v) in [
        (key::CRIU_VERSION, version),
        (key::SOURCE_HOST, host),
        (key::KERNEL, kernel),
        (key::ARCH, arch),
    ] {
        if let Some(v) = v {
            put(k, v);
        }
    }
    a
}

/// CRIU's version, and the host, kernel release and machine of the dump, from the lines CRIU
/// writes at the top of its log (`Version: 4.2.1 …`, `Running on HOST Linux REL … MACHINE`).
fn dump_log_facts(
    dir: &Dir,
) -> (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    use std::io::{BufRead, BufReader, Read};
    let Ok(f) = dir.open_file(DUMP_LOG) else {
        return (None, None, None, None);
    };
    let (mut version, mut host, mut kernel, mut arch) = (None, None, None, None);
    for line in BufReader::new(f.take(64 << 10))
        .lines()
        .take(50)
        .map_while(Result::ok)
    {
        if let Some(v) = line.split("Version: ").nth(1) {
            version = v.split_whitespace().next().map(str::to_owned);
        }
        if let Some(r) = line.split("Running on ").nth(1) {
            let w: Vec<&str> = r.split_whitespace().collect();
            host = w.first().map(|s| s.to_string());
            kernel = w.get(2).map(|s| s.to_string());
            arch = w.last().map(|s| s.to_string());
        }
    }
    (version, host, kernel, arch)
}

/// RFC 3339 in UTC, seconds.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let s = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let (days, rem) = (s.div_euclid(86400), s.rem_euclid(86400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Compresses and uploads every layer (a few at once), then the config and the manifest.
async fn upload(
    remote: &Remote,
    layout: &Layout,
    files: Arc<Vec<File>>,
    annotations: BTreeMap<String, String>,
    level: i32,
) -> Result<Pushed, Error> {
    let r = &remote.reference;
    remote
        .client
        .auth(r, &remote.auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| failed(&format!("log in to {}", r.resolve_registry()), e))?;
    let results: Vec<(Descriptor, bool)> = futures_util::stream::iter(0..layout.layers.len())
        .map(|i| {
            let pieces = layout.layers[i].clone();
            let files = files.clone();
            async move {
                let blob = tokio::task::spawn_blocking(move || compress(&files, &pieces, level))
                    .await
                    .map_err(|e| failed("compress", e))??;
                let media = if i == 0 {
                    artifact::FILES_LAYER_TYPE
                } else {
                    artifact::PAGES_LAYER_TYPE
                };
                upload_blob(remote, blob, media).await
            }
        })
        .buffered(PARALLEL)
        .try_collect()
        .await?;
    let config = serde_json::to_vec(layout).expect("a layout serializes");
    let (config_desc, _) = upload_blob(remote, config, artifact::CONFIG_TYPE).await?;
    let stored = results.iter().map(|(d, _)| d.size).sum::<u64>() + config_desc.size;
    let uploaded = results.iter().filter(|(_, up)| *up).count();
    let layers = results.into_iter().map(|(d, _)| d).collect();
    let m = Manifest::new(artifact::ARTIFACT_TYPE, config_desc, layers, annotations);
    let digest = push_manifest(remote, &m, r.tag().unwrap_or("latest")).await?;
    Ok(Pushed {
        pinned: format!("{}/{}@{digest}", r.resolve_registry(), r.repository()),
        digest,
        image_bytes: 0,
        stored_bytes: stored,
        uploaded,
        key_id: None,
        took: Duration::ZERO,
    })
}

/// One layer: its pieces read in order and compressed into one zstd frame.
fn compress(files: &[File], pieces: &[artifact::Piece], level: i32) -> Result<Vec<u8>, Error> {
    let io = |e: std::io::Error| failed("compress", e);
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level).map_err(io)?;
    let mut buf = vec![0u8; 1 << 20];
    for p in pieces {
        let f = &files[p.file];
        let mut at = p.offset;
        let end = p.offset + p.len;
        while at < end {
            let want = buf.len().min((end - at) as usize);
            let n = f.read_at(&mut buf[..want], at).map_err(io)?;
            if n == 0 {
                return Err(failed(
                    "read",
                    "a file of the image got shorter while pushed",
                ));
            }
            enc.write_all(&buf[..n]).map_err(io)?;
            at += n as u64;
        }
    }
    enc.finish().map_err(io)
}

/// Uploads a blob unless the registry has it; its descriptor, and whether it was uploaded.
async fn upload_blob(
    remote: &Remote,
    data: Vec<u8>,
    media_type: &str,
) -> Result<(Descriptor, bool), Error> {
    let digest = sha256(&data);
    let d = Descriptor {
        media_type: media_type.to_owned(),
        digest: digest.clone(),
        size: data.len() as u64,
        annotations: BTreeMap::new(),
    };
    let r = &remote.reference;
    if remote.client.blob_exists(r, &digest).await.unwrap_or(false) {
        return Ok((d, false));
    }
    remote
        .client
        .push_blob(r, data, &digest)
        .await
        .map_err(|e| failed(&format!("upload {digest}"), e))?;
    Ok((d, true))
}

/// Pushes a manifest under `tag` and returns its digest (of the bytes sent).
async fn push_manifest(remote: &Remote, m: &Manifest, tag: &str) -> Result<String, Error> {
    let bytes = m.to_bytes();
    let digest = sha256(&bytes);
    let r = &remote.reference;
    let tagged = oci_client::Reference::with_tag(
        r.registry().to_owned(),
        r.repository().to_owned(),
        tag.to_owned(),
    );
    let ct = http_header(artifact::MANIFEST_TYPE);
    remote
        .client
        .push_manifest_raw(&tagged, bytes, ct)
        .await
        .map_err(|e| failed(&format!("push the manifest of {tagged}"), e))?;
    Ok(digest)
}

fn http_header(v: &'static str) -> http::HeaderValue {
    http::HeaderValue::from_static(v)
}

/// Signs the manifest digest and pushes the signature beside it, cosign's way: an artifact of
/// its own under the tag `sha256-<hex>.sig`, its one layer the signed payload and the
/// signature in that layer's annotation.
async fn push_signature(
    remote: &Remote,
    repo: &str,
    digest: &str,
    key: &sign::SigningKey,
) -> Result<(), Error> {
    let payload = sign::payload(repo, digest);
    let sig = sign::Signature {
        key_id: key.key_id(),
        signature: key.sign(&payload),
    };
    let (mut layer, _) = upload_blob(remote, payload, super::SIG_PAYLOAD_TYPE).await?;
    layer.annotations.insert(
        super::SIG_ANNOTATION.to_owned(),
        sign::encode_signature(&sig),
    );
    let (config, _) = upload_blob(remote, b"{}".to_vec(), super::EMPTY_TYPE).await?;
    let m = Manifest::new(super::SIG_TYPE, config, vec![layer], BTreeMap::new());
    push_manifest(remote, &m, &super::signature_tag(digest)).await?;
    Ok(())
}

/// Writes a short report of a push to `out`.
pub fn report(p: &Pushed, out: &mut dyn FnMut(&str)) {
    out(&format!(
        "pushed {:.1} MB of image as {:.1} MB ({} of its blobs uploaded) in {:.2} s{}",
        p.image_bytes as f64 / 1e6,
        p.stored_bytes as f64 / 1e6,
        p.uploaded,
        p.took.as_secs_f64(),
        p.key_id
            .as_deref()
            .map(|k| format!(", signed by {k}"))
            .unwrap_or_default()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_times() {
        let t = |s: u64| std::time::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339(t(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(t(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(t(1_796_428_800 + 3661)), "2026-12-05T01:01:01Z");
    }
}
