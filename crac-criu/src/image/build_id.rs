//! The build id of an executable: what a restore compares to tell that the program on disk is
//! the one the image was taken of.

use std::fs;
use std::io::Read;
use std::path::Path;

/// Executables larger than this without a build-id note are not digested whole.
const MAX_UNNOTED_EXE: u64 = 1 << 30;

/// The build id of an executable: its GNU build-id note as hex (only the ELF header, program
/// headers and notes are read, each piece bounded), or, for a file without one, `xxh3:` and a
/// digest of the file (at most 1 GiB). Anything but a regular file is refused, so a path that
/// names a device or a FIFO is never read.
pub fn build_id(path: &Path) -> std::io::Result<String> {
    // O_NONBLOCK: a FIFO at that path must not block the open (its type is checked next).
    let f = fs::File::from(crate::sys::open(path, libc::O_RDONLY | libc::O_NONBLOCK)?);
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(crate::safe_dir::not_regular(&m));
    }
    if let Some(id) = elf_build_id(&f) {
        return Ok(id);
    }
    if m.len() > MAX_UNNOTED_EXE {
        return Err(std::io::Error::other(format!(
            "it has no build-id note and is larger than {} MiB",
            MAX_UNNOTED_EXE >> 20
        )));
    }
    let d = super::manifest::digest(f.take(MAX_UNNOTED_EXE))?;
    Ok(format!("xxh3:{:032x}", d.hash))
}

/// The build id of this process's executable, computed once.
pub fn own_build_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| build_id(Path::new("/proc/self/exe")).unwrap_or_else(|_| "unknown".into()))
}

/// The GNU build-id note of a 64-bit little-endian ELF file (x86_64, aarch64), read piecewise:
/// header, program headers, then the `PT_NOTE` segments. Anything else: `None`.
fn elf_build_id(f: &fs::File) -> Option<String> {
    use std::os::unix::fs::FileExt;
    // Notes and header tables are small; a corrupt size must not make us read the whole file.
    const MAX_PIECE: u64 = 1 << 20;
    let read = |off: u64, len: u64| -> Option<Vec<u8>> {
        if len > MAX_PIECE {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    };
    let h = read(0, 64)?;
    if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let u16_at = |d: &[u8], o: usize| d.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |d: &[u8], o: usize| {
        d.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    };
    let u64_at = |d: &[u8], o: usize| {
        d.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
    };
    let phoff = u64_at(&h, 0x20)?;
    let phentsize = u64::from(u16_at(&h, 0x36)?);
    let phnum = u64::from(u16_at(&h, 0x38)?);
    if phentsize < 56 {
        return None;
    }
    let phs = read(phoff, phentsize * phnum)?;
    for i in 0..phnum as usize {
        let ph = &phs[i * phentsize as usize..];
        if u32_at(ph, 0)? != 4 {
            continue; // not PT_NOTE
        }
        let notes = read(u64_at(ph, 8)?, u64_at(ph, 32)?)?;
        let mut p = 0;
        while p + 12 <= notes.len() {
            let namesz = u32_at(&notes, p)? as usize;
            let descsz = u32_at(&notes, p + 4)? as usize;
            let ty = u32_at(&notes, p + 8)?;
            let name_off = p + 12;
            let desc_off = name_off + namesz.div_ceil(4) * 4;
            if ty == 3 && notes.get(name_off..name_off + namesz)? == b"GNU\0" {
                let desc = notes.get(desc_off..desc_off + descsz)?;
                return Some(desc.iter().map(|b| format!("{b:02x}")).collect());
            }
            p = desc_off + descsz.div_ceil(4) * 4;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_build_id_is_stable() {
        let a = own_build_id();
        assert!(!a.is_empty() && a != "unknown");
        assert_eq!(build_id(Path::new("/proc/self/exe")).unwrap(), a);
        // The linker here writes a GNU build-id note (SHA-1: 40 hex digits); it is what we read.
        assert_eq!(a.len(), 40, "{a}");
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn files_without_a_note_are_hashed() {
        let p = std::env::temp_dir().join(format!("crac-buildid-{}", std::process::id()));
        std::fs::write(&p, b"#!/bin/sh\necho hi\n").unwrap();
        let a = build_id(&p).unwrap();
        std::fs::write(&p, b"#!/bin/sh\necho ho\n").unwrap();
        let b = build_id(&p).unwrap();
        std::fs::remove_file(&p).ok();
        assert!(a.starts_with("xxh3:") && b.starts_with("xxh3:"));
        assert_ne!(a, b);
    }
}
