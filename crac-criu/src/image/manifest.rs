//! The image manifest: a digest of every file of an image, written when the dump is complete
//! (by the dump helper, see `checkpoint/helper.rs`) and checked by `crac restore` before CRIU reads
//! a byte. Together with the ownership rule (the directory and every file owned by the
//! restoring user, writable by nobody else) it means a restore runs exactly the image that was
//! dumped: not one damaged on disk, cut short by a copy, or changed afterwards.
//!
//! The digest is XXH3-128: it reads at memory speed, so sealing and checking cost little next
//! to CRIU's own reading of the pages (`docs/criu-and-trust.md`). It detects damage and
//! change; it is not a signature (whoever may write the directory may rewrite the manifest
//! too, which is what the ownership rule excludes).

use std::fmt::Write as _;
use std::io::{self, Read};
use std::time::{Duration, Instant};

use super::{MANIFEST_FILE, SEAL_LOCK};
use crate::error::{Error, ErrorKind};
use crate::safe_dir::{self, Access, Dir, Untrusted};

const FORMAT: &str = "crac-manifest 1 xxh3-128";
/// A manifest larger than this is not one (an image has tens of files).
const MAX_MANIFEST: u64 = 1 << 20;

/// Files of an image directory that are not part of the image: CRIU's logs (a restore appends
/// its own), restore statistics, the manifest itself, the seal lock, a temporary file.
pub fn is_outside_image(name: &str) -> bool {
    name.ends_with(".log")
        || name == "stats-restore"
        || name == MANIFEST_FILE
        || name == SEAL_LOCK
        || (name.starts_with('.') && name.ends_with(".tmp"))
}

/// One file's size and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    /// Bytes.
    pub size: u64,
    /// XXH3-128 of the content.
    pub hash: u128,
}

/// Reads `f` to its end in 1 MiB pieces and digests it.
pub fn digest(mut f: impl Read) -> io::Result<Digest> {
    let mut h = twox_hash::XxHash3_128::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.write(&buf[..n]);
        size += n as u64;
    }
    Ok(Digest {
        size,
        hash: h.finish_128(),
    })
}

/// What sealing or checking covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Covered {
    /// Files.
    pub files: usize,
    /// Bytes.
    pub bytes: u64,
    /// Time taken.
    pub took: Duration,
}

/// Digests every image file in `dir` and writes the manifest (`0600`, atomically).
pub fn seal(dir: &Dir) -> io::Result<Covered> {
    let t = Instant::now();
    let mut text = format!("{FORMAT}\n");
    let mut covered = Covered::default();
    for name in dir.entries()? {
        if is_outside_image(&name) {
            continue;
        }
        if name.contains('\n') {
            return Err(io::Error::other(format!(
                "a file name with a newline: {name:?}"
            )));
        }
        let f = dir.open_file(&name)?;
        let m = f.metadata()?;
        if !m.is_file() {
            return Err(io::Error::other(format!(
                "{name} is {}",
                safe_dir::kind_of(&m)
            )));
        }
        let d = digest(f)?;
        let _ = writeln!(text, "{:032x} {} {name}", d.hash, d.size);
        covered.files += 1;
        covered.bytes += d.size;
    }
    dir.write_atomic(MANIFEST_FILE, text.as_bytes(), 0o600)?;
    covered.took = t.elapsed();
    Ok(covered)
}

fn parse(text: &str) -> Result<Vec<(String, Digest)>, String> {
    let mut lines = text.lines();
    if lines.next() != Some(FORMAT) {
        return Err(format!("its first line is not `{FORMAT}`"));
    }
    lines
        .map(|l| {
            let bad = || format!("bad line `{l}`");
            let mut it = l.splitn(3, ' ');
            let hash = u128::from_str_radix(it.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
            let size = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let name = it.next().filter(|n| !n.is_empty()).ok_or_else(bad)?;
            Ok((name.to_owned(), Digest { size, hash }))
        })
        .collect()
}

fn refused(msg: String) -> Error {
    Error::new(ErrorKind::Refused, format!("restore refused: {msg}"))
}

/// The message for an entry (or the directory) that fails the ownership rule, with the fix.
pub fn untrusted_message(what: &str, why: &Untrusted, uid: u32) -> String {
    match why {
        Untrusted::Owner { uid: owner } => format!(
            "{what} belongs to uid {owner}, not to the restoring user (uid {uid}): an image \
             runs with the credentials it records, so only its owner's images are restored; \
             restore it as uid {owner}, or, if you trust it, take ownership (`chown -R {uid} \
             DIR`)"
        ),
        Untrusted::Mode { mode } => format!(
            "{what} has mode {mode:04o}: group or others can write it, so anyone could have \
             changed the image, and could still change it through a descriptor opened \
             meanwhile (a `chmod` does not close those); if you trust its content, restore a \
             copy ({COPY_ADVICE}: new files no earlier descriptor reaches), or take a new \
             checkpoint"
        ),
        Untrusted::Kind(kind) => format!("{what} is {kind}, not a regular file"),
    }
}

/// How to make a copy of an image that only its user can write (`DIR` replaced by the caller).
const COPY_ADVICE: &str = "`(umask 077 && cp -r DIR DIR.copy)`";

/// Refuses a file that some process holds open for writing: what it writes after the digest
/// is checked would be what CRIU restores. The mode check keeps others from opening it for
/// writing from now on; this finds a descriptor opened before (while it was writable).
fn check_no_writer(shown: &str, name: &str, f: &std::fs::File) -> Result<(), Error> {
    // A descriptor a fork copied a moment ago (a thread's fork before its exec closed it) is
    // gone within milliseconds; one held on purpose is not: asked again for 100 ms.
    let mut verdict = crate::sys::no_writer(f);
    for _ in 0..10 {
        if !matches!(verdict, Ok(false)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        verdict = crate::sys::no_writer(f);
    }
    match verdict {
        Ok(true) => Ok(()),
        Ok(false) => Err(refused(format!(
            "{shown}/{name} is open for writing in some process: it could change after it is \
             checked and before it is restored; end that process, or, if you trust the \
             image's content, restore a copy ({}: new files no earlier descriptor reaches)",
            COPY_ADVICE.replace("DIR", shown)
        ))),
        // File systems without leases (some network ones): the mode check is all there is.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(
                file = name,
                "this file system cannot tell whether an image file is open for writing"
            );
            Ok(())
        }
        Err(e) => Err(refused(format!(
            "cannot tell whether {shown}/{name} is open for writing (F_SETLEASE: {e})"
        ))),
    }
}

/// What a restore digests before CRIU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every image file.
    #[default]
    All,
    /// Every file but the page files ([`is_page_file`]), whose sizes are checked now and whose
    /// digests are left to [`Deferred::check`].
    ExceptPages,
}

/// CRIU's page files: the process memory, nearly all of an image's bytes.
pub fn is_page_file(name: &str) -> bool {
    name.starts_with("pages-") && name.ends_with(".img")
}

/// A page file whose digest is still to be checked: opened (and its owner, mode and size
/// checked) with the rest, so the digest reads that very file.
#[derive(Debug)]
pub struct Deferred {
    name: String,
    file: std::fs::File,
    want: Digest,
}

impl Deferred {
    /// Its size.
    pub fn size(&self) -> u64 {
        self.want.size
    }

    /// Digests the file and compares it with the manifest (what `verify` does for the others).
    pub fn check(self, shown: &str) -> Result<u64, Error> {
        let got = digest(&self.file)
            .map_err(|e| refused(format!("cannot read {shown}/{}: {e}", self.name)))?;
        if got != self.want {
            return Err(mismatch(shown, &self.name, got, self.want));
        }
        Ok(got.size)
    }
}

fn mismatch(shown: &str, name: &str, got: Digest, want: Digest) -> Error {
    refused(format!(
        "{shown}/{name} does not match the manifest written at dump time ({} bytes, digest \
         {:032x}; recorded {} bytes, {:032x}): the image was damaged or changed after the \
         checkpoint; take a new checkpoint",
        got.size, got.hash, want.size, want.hash
    ))
}

/// Checks, through the directory's descriptor, that `dir` and every file in it belong to `uid`
/// and that nobody else can write them, and that the image files are exactly those of the
/// manifest, each with its recorded size and digest. Nothing is restored when this fails.
#[cfg(test)]
pub fn verify(dir: &Dir, uid: u32) -> Result<Covered, Error> {
    verify_scoped(dir, uid, Scope::All).map(|(c, _)| c)
}

/// [`verify`], but with [`Scope::ExceptPages`] the page files' digests are returned for
/// later (their presence, owner, mode and size are checked now).
pub fn verify_scoped(dir: &Dir, uid: u32, scope: Scope) -> Result<(Covered, Vec<Deferred>), Error> {
    let t = Instant::now();
    let shown = dir.path().display().to_string();
    let io = |what: &str, e: io::Error| refused(format!("cannot read {what} in {shown}: {e}"));
    let m = dir.metadata().map_err(|e| io("the directory", e))?;
    safe_dir::check_owner_mode(&m, uid, Access::Write).map_err(|why| {
        refused(
            untrusted_message(&format!("image directory {shown}"), &why, uid)
                .replace("DIR", &shown),
        )
    })?;
    let file_rule = |name: &str, m: &std::fs::Metadata| -> Result<(), Error> {
        let why = if m.is_file() {
            safe_dir::check_owner_mode(m, uid, Access::Write).err()
        } else {
            Some(Untrusted::Kind(safe_dir::kind_of(m)))
        };
        match why {
            None => Ok(()),
            Some(why) => Err(refused(
                untrusted_message(&format!("{shown}/{name}"), &why, uid).replace("DIR", &shown),
            )),
        }
    };
    let names = dir.entries().map_err(|e| io("the entries", e))?;
    let has = |f: &str| names.iter().any(|n| n == f);
    if !has(MANIFEST_FILE) && !has(super::METADATA_FILE) {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "{shown} is not a crac image: it has neither {} nor {MANIFEST_FILE}",
                super::METADATA_FILE
            ),
        ));
    }
    if !has(MANIFEST_FILE) {
        return Err(refused(format!(
            "{shown} has no {MANIFEST_FILE}: the image was not sealed when its dump ended (an \
             interrupted dump, or an image from an older crac-criu); take a new checkpoint"
        )));
    }
    let mf = dir
        .open_file(MANIFEST_FILE)
        .map_err(|e| io(MANIFEST_FILE, e))?;
    file_rule(
        MANIFEST_FILE,
        &mf.metadata().map_err(|e| io(MANIFEST_FILE, e))?,
    )?;
    check_no_writer(&shown, MANIFEST_FILE, &mf)?;
    let mut text = String::new();
    mf.take(MAX_MANIFEST)
        .read_to_string(&mut text)
        .map_err(|e| io(MANIFEST_FILE, e))?;
    let listed = parse(&text)
        .map_err(|e| refused(format!("{shown}/{MANIFEST_FILE} is not a manifest: {e}")))?;
    let mut covered = Covered::default();
    let mut deferred = Vec::new();
    for name in &names {
        if is_outside_image(name) {
            // Not part of the image, but CRIU writes next to them: same ownership rule.
            if let Some(m) = dir.stat(name).map_err(|e| io(name, e))? {
                file_rule(name, &m)?;
            }
            continue;
        }
        let Some((_, want)) = listed.iter().find(|(n, _)| n == name) else {
            return Err(refused(format!(
                "{shown}/{name} is not in the image's manifest: a file was added after the \
                 dump; remove it if you know what it is, or take a new checkpoint"
            )));
        };
        let f = dir.open_file(name).map_err(|e| io(name, e))?;
        let m = f.metadata().map_err(|e| io(name, e))?;
        file_rule(name, &m)?;
        check_no_writer(&shown, name, &f)?;
        if scope == Scope::ExceptPages && is_page_file(name) {
            if m.len() != want.size {
                let got = Digest {
                    size: m.len(),
                    hash: 0,
                };
                return Err(mismatch(&shown, name, got, *want));
            }
            deferred.push(Deferred {
                name: name.clone(),
                file: f,
                want: *want,
            });
            continue;
        }
        let got = digest(f).map_err(|e| io(name, e))?;
        if got != *want {
            return Err(mismatch(&shown, name, got, *want));
        }
        covered.files += 1;
        covered.bytes += got.size;
    }
    if let Some((missing, _)) = listed.iter().find(|(n, _)| !names.contains(n)) {
        return Err(refused(format!(
            "{shown}/{missing} is missing: the manifest lists it (an incomplete copy of the \
             image?); copy the whole directory, or take a new checkpoint"
        )));
    }
    covered.took = t.elapsed();
    Ok((covered, deferred))
}

/// Waits (up to `timeout`) until no dump helper holds the seal lock of `dir`: a dump whose
/// process is gone may still be sealing its image. Returns at once when there is no lock.
pub fn wait_sealed(dir: &Dir, timeout: Duration) -> Result<(), Error> {
    let lock = match dir.stat(SEAL_LOCK) {
        Ok(Some(m)) if m.is_file() => dir.open_file(SEAL_LOCK),
        _ => return Ok(()),
    };
    let Ok(lock) = lock else { return Ok(()) };
    let deadline = Instant::now() + timeout;
    loop {
        match crate::sys::flock(&lock, libc::LOCK_SH | libc::LOCK_NB) {
            Ok(true) | Err(_) => return Ok(()),
            Ok(false) if Instant::now() >= deadline => {
                return Err(Error::new(
                    ErrorKind::Refused,
                    format!(
                        "the image in {} is still being sealed after {:.0} s (its dump helper \
                         holds {SEAL_LOCK}); try again later",
                        dir.path().display(),
                        timeout.as_secs_f64()
                    ),
                ));
            }
            Ok(false) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn image(name: &str) -> (std::path::PathBuf, Dir) {
        let p = std::env::temp_dir().join(format!("crac-manifest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        let d = Dir::create_private(&p).unwrap();
        d.write_atomic("pages-1.img", &vec![7u8; 300_000], 0o600)
            .unwrap();
        d.write_atomic("inventory.img", b"inv", 0o600).unwrap();
        d.write_atomic("dump.log", b"log", 0o600).unwrap();
        d.write_atomic(crate::image::METADATA_FILE, b"meta", 0o600)
            .unwrap();
        (p, d)
    }

    #[test]
    fn a_sealed_image_verifies_and_every_change_is_named() {
        let (p, d) = image("verify");
        let c = seal(&d).unwrap();
        assert_eq!((c.files, c.bytes), (3, 300_007));
        let uid = crate::sys::euid();
        assert_eq!(verify(&d, uid).unwrap().files, 3);
        // Logs may change.
        std::fs::write(p.join("dump.log"), "more").unwrap();
        verify(&d, uid).unwrap();
        // A flipped byte.
        let mut pages = std::fs::read(p.join("pages-1.img")).unwrap();
        pages[1234] ^= 1;
        std::fs::write(p.join("pages-1.img"), &pages).unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(e.contains("pages-1.img does not match the manifest"), "{e}");
        pages[1234] ^= 1;
        std::fs::write(p.join("pages-1.img"), &pages).unwrap();
        verify(&d, uid).unwrap();
        // An added file, a missing one.
        std::fs::write(p.join("extra.img"), "x").unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(
            e.contains("extra.img is not in the image's manifest"),
            "{e}"
        );
        std::fs::remove_file(p.join("extra.img")).unwrap();
        std::fs::remove_file(p.join("inventory.img")).unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(e.contains("inventory.img is missing"), "{e}");
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn page_digests_can_be_checked_later_but_sizes_are_checked_at_once() {
        let (p, d) = image("scoped");
        seal(&d).unwrap();
        let uid = crate::sys::euid();
        let mut pages = std::fs::read(p.join("pages-1.img")).unwrap();
        pages[99] ^= 1;
        std::fs::write(p.join("pages-1.img"), &pages).unwrap();
        // Everything but the pages checks out now; the pages' digest fails later.
        let (c, later) = verify_scoped(&d, uid, Scope::ExceptPages).unwrap();
        assert_eq!((c.files, later.len()), (2, 1));
        assert_eq!(
            (later[0].name.as_str(), later[0].size()),
            ("pages-1.img", 300_000)
        );
        let shown = p.display().to_string();
        let e = later.into_iter().next().unwrap().check(&shown).unwrap_err();
        assert!(e.to_string().contains("pages-1.img does not match"), "{e}");
        // A page file of the wrong size is refused before anything runs.
        std::fs::write(p.join("pages-1.img"), &pages[..1000]).unwrap();
        let e = verify_scoped(&d, uid, Scope::ExceptPages).unwrap_err();
        assert!(e.to_string().contains("(1000 bytes"), "{e}");
        pages[99] ^= 1;
        std::fs::write(p.join("pages-1.img"), &pages).unwrap();
        let (_, later) = verify_scoped(&d, uid, Scope::ExceptPages).unwrap();
        assert_eq!(
            later.into_iter().next().unwrap().check(&shown).unwrap(),
            300_000
        );
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn ownership_and_mode_are_checked_for_the_directory_and_its_files() {
        let (p, d) = image("mode");
        seal(&d).unwrap();
        let uid = crate::sys::euid();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(
            e.contains("has mode 0777") && e.contains("cp -r") && !e.contains("chmod -R"),
            "{e}"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(
            p.join("pages-1.img"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(e.contains("pages-1.img has mode 0666"), "{e}");
        let e = verify(&d, uid + 1).unwrap_err().to_string();
        assert!(e.contains(&format!("belongs to uid {uid}")), "{e}");
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn a_file_someone_holds_open_for_writing_is_refused() {
        let (p, d) = image("writer");
        seal(&d).unwrap();
        let uid = crate::sys::euid();
        // A descriptor opened while the file was writable survives any later chmod.
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(p.join("pages-1.img"))
            .unwrap();
        let e = verify(&d, uid).unwrap_err().to_string();
        assert!(
            e.contains("pages-1.img is open for writing") && e.contains("cp -r"),
            "{e}"
        );
        drop(w);
        verify(&d, uid).unwrap();
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn an_unsealed_image_is_refused() {
        let (p, d) = image("unsealed");
        let e = verify(&d, crate::sys::euid()).unwrap_err().to_string();
        assert!(e.contains("has no crac-manifest.txt"), "{e}");
        std::fs::remove_dir_all(&p).unwrap();
    }
}
