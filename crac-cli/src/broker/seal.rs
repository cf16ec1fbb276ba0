//! The broker's seal on an image it wrote: the SHA-256 of every image file, the uid it was
//! taken for and its name, under an HMAC-SHA256 with a key of this host that only root reads.
//! A restore through the broker recomputes it all before CRIU reads a byte: an image edited
//! (a byte of memory, the credentials in a core image), copied from another user's store or
//! another host, or renamed is refused. (The manifest's XXH3 catches accidents; anyone can
//! forge it. This cannot be forged without the key.)

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ring::{digest, hmac};

use crate::sys;
use crac_criu::image::manifest;
use crac_criu::safe_dir::Dir;

/// The seal's file in the image directory.
pub const SEAL_FILE: &str = "crac-seal.txt";

/// Files in the image directory the seal does not cover: CRIU's logs of later restores go
/// elsewhere, so only the seal itself.
fn covered(name: &str) -> bool {
    name != SEAL_FILE && !name.starts_with('.')
}

/// The host key: 32 random bytes in `path` (`0400`, root's), made on first use.
pub fn host_key(path: &Path) -> Result<hmac::Key, String> {
    let shown = path.display();
    let parent = Dir::create_private(path.parent().unwrap_or(Path::new("/")))
        .map_err(|e| format!("{shown}: {e}"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{shown}: not a file path"))?;
    let f = match parent.open_file(name) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            crac_api::os_random(&mut key);
            parent
                .write_atomic(name, &key, 0o400)
                .map_err(|e| format!("cannot write the host key {shown}: {e}"))?;
            parent
                .open_file(name)
                .map_err(|e| format!("{shown}: {e}"))?
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let m = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if m.uid() != 0 || m.mode() & 0o077 != 0 || m.len() != 32 {
        return Err(format!(
            "the host key {shown} must be root's, 32 bytes, mode 0400 (it is uid {}, {} bytes, \
             mode {:04o}); remove it and a new one is made (images sealed with it are then \
             refused)",
            m.uid(),
            m.len(),
            m.mode() & 0o7777
        ));
    }
    let mut key = [0u8; 32];
    (&f).read_exact(&mut key)
        .map_err(|e| format!("{shown}: {e}"))?;
    let k = hmac::Key::new(hmac::HMAC_SHA256, &key);
    key.fill(0);
    Ok(k)
}

/// The seal's first line: version 2 adds the identity of each page file (`ident` lines).
const VERSION: &str = "crac-seal 2";

/// What the seal says of the image's content: the uid, the name and a line per file (its
/// size and SHA-256). `taken` gives the line of a file not to read now (see [`verify`]).
fn statement(
    dir: &Dir,
    uid: u32,
    name: &str,
    taken: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut text = format!("uid={uid}\nname={name}\n");
    for file in dir.entries().map_err(|e| e.to_string())? {
        if !covered(&file) {
            continue;
        }
        match taken(&file) {
            Some(line) => text.push_str(&line),
            None => text.push_str(&file_line(dir, &file)?),
        }
        text.push('\n');
    }
    Ok(text)
}

/// `NAME SIZE SHA256` of one file, read whole.
fn file_line(dir: &Dir, file: &str) -> Result<String, String> {
    let f = dir.open_file(file).map_err(|e| format!("{file}: {e}"))?;
    let mut ctx = digest::Context::new(&digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    let mut r = &f;
    loop {
        let n = r.read(&mut buf).map_err(|e| format!("{file}: {e}"))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
        size += n as u64;
    }
    Ok(format!("{file} {size} {}", hex(ctx.finish().as_ref())))
}

/// A file's identity on this host: device, inode, size, modification and change times to
/// the nanosecond. Writing the file changes its change time, which no one but root (setting
/// the clock) can set back; a copy or a move to another directory is another inode.
fn ident(m: &std::fs::Metadata) -> String {
    format!(
        "{} {} {} {}.{:09} {}.{:09}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Seals the image in `dir`, taken for `uid` under `name`.
pub fn seal(dir: &Dir, key: &hmac::Key, uid: u32, name: &str) -> Result<(), String> {
    let mut text = format!("{VERSION}\n{}", statement(dir, uid, name, &|_| None)?);
    for file in dir.entries().map_err(|e| e.to_string())? {
        if manifest::is_page_file(&file) {
            let m = dir
                .stat(&file)
                .ok()
                .flatten()
                .ok_or(format!("{file}: gone"))?;
            text.push_str(&format!("ident {file} {}\n", ident(&m)));
        }
    }
    let tag = hmac::sign(key, text.as_bytes());
    let sealed = format!("{text}mac={}\n", hex(tag.as_ref()));
    dir.write_atomic(SEAL_FILE, sealed.as_bytes(), 0o400)
        .map_err(|e| format!("cannot write {SEAL_FILE}: {e}"))?;
    let _ = sys::fchmod(dir.fd(), 0o700);
    Ok(())
}

/// Page files whose content [`verify`] took on their identity, to be read against the seal
/// later ([`check_deferred`]): each with its sealed line.
#[derive(Debug, Default)]
pub struct Deferred(Vec<(String, String)>);

impl Deferred {
    /// Whether every file was read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Checks the seal of the image in `dir` for `uid` and `name`: the MAC right, every file as
/// sealed, nothing added or removed. With `defer_pages` (a lazy restore, which must not read
/// gigabytes first), a page file whose identity on this host ([`ident`]) is the one sealed is
/// not read now but returned, to be read while the restored copy runs; every other file is.
pub fn verify(
    dir: &Dir,
    key: &hmac::Key,
    uid: u32,
    name: &str,
    defer_pages: bool,
) -> Result<Deferred, String> {
    let mut sealed = String::new();
    dir.open_file(SEAL_FILE)
        .map_err(|e| {
            format!("the image has no usable {SEAL_FILE} ({e}): not sealed by this broker")
        })?
        .take(1 << 20)
        .read_to_string(&mut sealed)
        .map_err(|e| format!("{SEAL_FILE}: {e}"))?;
    let (text, mac) = sealed
        .rsplit_once("mac=")
        .ok_or_else(|| format!("{SEAL_FILE} has no mac line"))?;
    let mac = unhex(mac.trim()).ok_or_else(|| format!("{SEAL_FILE}: the mac is not hex"))?;
    hmac::verify(key, text.as_bytes(), &mac).map_err(|_| {
        format!("{SEAL_FILE}: the MAC does not match: not sealed by this host's broker, or edited")
    })?;
    // Version 1 (before idents) is the same statement without them.
    let body = text
        .strip_prefix(&format!("{VERSION}\n"))
        .or_else(|| text.strip_prefix("crac-seal 1\n"))
        .ok_or_else(|| format!("{SEAL_FILE}: not a seal of a known version"))?;
    let (was, idents) = split_idents(body);
    let deferred = std::cell::RefCell::new(Vec::new());
    let take = |file: &str| -> Option<String> {
        let sealed_ident = idents.get(file)?;
        let now = ident(&dir.stat(file).ok().flatten()?);
        let line = was.lines().find(|l| l.split(' ').next() == Some(file))?;
        (defer_pages && *sealed_ident == now).then(|| {
            deferred
                .borrow_mut()
                .push((file.to_owned(), line.to_owned()));
            line.to_owned()
        })
    };
    let now = statement(dir, uid, name, &take)?;
    if now != was {
        return Err(format!(
            "the image does not match its seal ({}): it was edited after the dump, or it was \
             sealed for another user or name",
            differences(&was, &now)
        ));
    }
    Ok(Deferred(deferred.into_inner()))
}

/// The statement's lines, and the `ident FILE …` lines apart (by file).
fn split_idents(body: &str) -> (String, std::collections::HashMap<String, String>) {
    let mut rest = String::new();
    let mut idents = std::collections::HashMap::new();
    for l in body.lines() {
        match l.strip_prefix("ident ").and_then(|r| r.split_once(' ')) {
            Some((file, id)) => {
                idents.insert(file.to_owned(), id.to_owned());
            }
            None => {
                rest.push_str(l);
                rest.push('\n');
            }
        }
    }
    (rest, idents)
}

/// Reads the files [`verify`] deferred: `Err` names each one whose content is not the
/// sealed one.
pub fn check_deferred(dir: &Dir, deferred: &Deferred) -> Result<(), String> {
    let bad: Vec<&str> = deferred
        .0
        .iter()
        .filter(|(file, line)| file_line(dir, file).ok().as_ref() != Some(line))
        .map(|(file, _)| file.as_str())
        .collect();
    match bad.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "the image's pages do not match its seal ({} changed)",
            bad.join(", ")
        )),
    }
}

/// What differs between the sealed statement and the image now, by name: the header lines
/// (uid, name) and each file changed, added or removed.
fn differences(sealed: &str, now: &str) -> String {
    use std::collections::BTreeMap;
    let entries = |t: &str| -> BTreeMap<String, String> {
        t.lines()
            .map(|l| match l.split_once(['=', ' ']) {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (l.to_owned(), String::new()),
            })
            .collect()
    };
    let (was, is) = (entries(sealed), entries(now));
    let mut out = Vec::new();
    for (k, v) in &was {
        match is.get(k) {
            None => out.push(format!("{k} removed")),
            Some(w) if w != v => out.push(format!("{k} changed")),
            Some(_) => {}
        }
    }
    out.extend(
        is.keys()
            .filter(|k| !was.contains_key(*k))
            .map(|k| format!("{k} added")),
    );
    out.join(", ")
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_image_verifies_and_any_change_is_refused() {
        let base = std::env::temp_dir().join(format!("crac-seal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let d = Dir::create_private(&base).unwrap();
        d.write_atomic("core-1.img", b"core", 0o600).unwrap();
        d.write_atomic("pages-1.img", &vec![7u8; 3 << 20], 0o600)
            .unwrap();
        let key = hmac::Key::new(hmac::HMAC_SHA256, &[1u8; 32]);
        seal(&d, &key, 1000, "svc").unwrap();
        verify(&d, &key, 1000, "svc", false).unwrap();
        assert!(
            verify(&d, &key, 1001, "svc", false)
                .unwrap_err()
                .contains("another user")
        );
        assert!(verify(&d, &key, 1000, "other", false).is_err());
        let other = hmac::Key::new(hmac::HMAC_SHA256, &[2u8; 32]);
        assert!(
            verify(&d, &other, 1000, "svc", false)
                .unwrap_err()
                .contains("MAC")
        );
        d.write_atomic("core-1.img", b"corf", 0o600).unwrap();
        let e = verify(&d, &key, 1000, "svc", false).unwrap_err();
        assert!(e.contains("(core-1.img changed)"), "{e}");
        d.write_atomic("core-1.img", b"core", 0o600).unwrap();
        verify(&d, &key, 1000, "svc", false).unwrap();
        // A file CRIU would add (its statistics) is named, not the file that sorts after it.
        d.write_atomic("zz-last.img", b"z", 0o600).unwrap();
        seal(&d, &key, 1000, "svc").unwrap();
        d.write_atomic("stats-restore", b"x", 0o600).unwrap();
        let e = verify(&d, &key, 1000, "svc", false).unwrap_err();
        assert!(e.contains("(stats-restore added)"), "{e}");
        d.remove("stats-restore").unwrap();
        d.remove("zz-last.img").unwrap();
        let e = verify(&d, &key, 1000, "svc", false).unwrap_err();
        assert!(e.contains("(zz-last.img removed)"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_lazy_check_defers_only_page_files_whose_identity_holds() {
        let base = std::env::temp_dir().join(format!("crac-seal-lazy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let d = Dir::create_private(&base).unwrap();
        d.write_atomic("core-1.img", b"core", 0o600).unwrap();
        d.write_atomic("pages-1.img", &[7u8; 8192], 0o600).unwrap();
        let key = hmac::Key::new(hmac::HMAC_SHA256, &[1u8; 32]);
        seal(&d, &key, 1000, "svc").unwrap();
        let deferred = verify(&d, &key, 1000, "svc", true).unwrap();
        assert_eq!(deferred.0.len(), 1);
        assert_eq!(deferred.0[0].0, "pages-1.img");
        check_deferred(&d, &deferred).unwrap();
        assert!(verify(&d, &key, 1000, "svc", false).unwrap().is_empty());
        // Written again, the same bytes: another identity, so read now (and it matches).
        d.write_atomic("pages-1.img", &[7u8; 8192], 0o600).unwrap();
        assert!(verify(&d, &key, 1000, "svc", true).unwrap().is_empty());
        // Other bytes: refused before anything runs, the file named.
        d.write_atomic("pages-1.img", &[8u8; 8192], 0o600).unwrap();
        let e = verify(&d, &key, 1000, "svc", true).unwrap_err();
        assert!(e.contains("(pages-1.img changed)"), "{e}");
        // What the check while the copy runs says of a file that differs.
        let e = check_deferred(&d, &deferred).unwrap_err();
        assert!(e.contains("pages-1.img changed"), "{e}");
        // A seal of version 1 (no identities) still verifies, in full.
        let text = format!(
            "crac-seal 1\n{}",
            statement(&d, 1000, "svc", &|_| None).unwrap()
        );
        let mac = hex(hmac::sign(&key, text.as_bytes()).as_ref());
        d.write_atomic(SEAL_FILE, format!("{text}mac={mac}\n").as_bytes(), 0o600)
            .unwrap();
        assert!(verify(&d, &key, 1000, "svc", true).unwrap().is_empty());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
