//! The image directory: creating it safely, and the metadata file crac-criu keeps next to
//! CRIU's own images (what fds 0–2 were, the build of the executable, generation, pids).

use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dir::{Access, Dir, Untrusted, check_owner_mode};
use crate::error::{Error, ErrorKind};
use crate::manifest::MANIFEST_FILE;

/// Name of the metadata file inside the image directory.
pub const METADATA_FILE: &str = "crac-image.txt";
/// Name of CRIU's dump log inside the image directory.
pub const DUMP_LOG: &str = "dump.log";
/// The first line of every metadata file.
const FORMAT: &str = "crac-criu-image 1";

fn dir_error(msg: String) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("{msg}; choose a directory of your own (CRAC_CHECKPOINT_TO)"),
    )
}

/// Creates `dir` (and missing parents) `0700`, or checks an existing one: it must be a
/// directory of this user, not readable or writable by group or others, and either empty or an
/// earlier crac image (whose files are then replaced). Everything goes through descriptors
/// ([`Dir::create_private`]): a symlink put in its place is refused, never followed, and the
/// directory checked is the one CRIU is handed.
pub fn prepare_dir(dir: &Path) -> Result<Dir, Error> {
    let shown = dir.display();
    let d = Dir::create_private(dir)
        .map_err(|e| dir_error(format!("cannot use image directory {shown}: {e}")))?;
    let m = d
        .metadata()
        .map_err(|e| dir_error(format!("cannot use image directory {shown}: {e}")))?;
    let uid = crate::sys::euid();
    match check_owner_mode(&m, uid, Access::ReadWrite) {
        Ok(()) => {}
        Err(Untrusted::Mode { mode }) => {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "image directory {0} has mode {mode:04o}: group or others can read or \
                     write it, and an image holds all process memory (secrets included); \
                     run `chmod 700 {0}` or choose another directory",
                    dir.display()
                ),
            ));
        }
        Err(Untrusted::Owner { uid: owner }) => {
            return Err(dir_error(format!(
                "image directory {shown} belongs to uid {owner}, not to this process (uid \
                     {uid})"
            )));
        }
        Err(Untrusted::Kind(k)) => {
            return Err(dir_error(format!("image directory {shown} is {k}")));
        }
    }
    let entries = d
        .entries()
        .map_err(|e| dir_error(format!("cannot read image directory {shown}: {e}")))?;
    if entries.is_empty() {
        return Ok(d);
    }
    if !entries.iter().any(|e| e == METADATA_FILE) {
        return Err(dir_error(format!(
            "image directory {shown} is not empty and holds no crac image; choose an empty or \
             new directory"
        )));
    }
    // An earlier image: replace it, its manifest first, so a half-replaced image never
    // passes as sealed.
    let old = std::iter::once(MANIFEST_FILE.to_owned()).chain(entries.into_iter().filter(|n| {
        n.ends_with(".img") || n.ends_with(".log") || n == METADATA_FILE || n == "stats-dump"
    }));
    for name in old {
        match d.remove(&name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(dir_error(format!(
                    "cannot replace {name} of the earlier image in {shown}: {e}"
                )));
            }
            _ => {}
        }
    }
    Ok(d)
}

/// What one of fds 0–2 was at checkpoint time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdFd {
    /// 0, 1 or 2.
    pub fd: i32,
    /// `readlink /proc/self/fd/N`: `pipe:[ino]`, `socket:[ino]`, `/dev/pts/3`, a path…
    pub target: String,
    /// The open flags from fdinfo (octal), e.g. `02001` for `O_WRONLY|O_APPEND`.
    pub flags: u32,
}

impl StdFd {
    /// Whether the fd was closed at checkpoint time.
    pub fn is_closed(&self) -> bool {
        self.target.is_empty()
    }

    /// A pipe or socket: CRIU cannot reconnect it, the restorer must hand one in.
    pub fn is_stream(&self) -> bool {
        self.target.starts_with("pipe:[") || self.target.starts_with("socket:[")
    }

    /// A terminal.
    pub fn is_tty(&self) -> bool {
        self.target.starts_with("/dev/pts/")
            || self.target.starts_with("/dev/tty")
            || self.target == "/dev/console"
    }

    /// A regular file (not under /dev).
    pub fn is_file(&self) -> bool {
        self.target.starts_with('/') && !self.target.starts_with("/dev/")
    }
}

/// The metadata of an image, written by the engine before CRIU runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metadata {
    /// Build id of the executable (GNU build-id note, else a hash of the file).
    pub build_id: String,
    /// The executable's path at checkpoint time.
    pub exe: PathBuf,
    /// The checkpointed process's pid.
    pub pid: i32,
    /// Every thread id (the pids a restore needs free).
    pub tids: Vec<i32>,
    /// The image's generation (1 for the first checkpoint of a line).
    pub generation: u64,
    /// Wall time of the checkpoint.
    pub checkpoint_time: Option<SystemTime>,
    /// Whether the original went on running.
    pub leave_running: bool,
    /// fds 0, 1, 2.
    pub stdio: Vec<StdFd>,
    /// The fd of the pipe the restorer can feed new configuration through, and its key for
    /// `--inherit-fd` (`pipe:[ino]`).
    pub env_fd: Option<(i32, String)>,
    /// `--external` resources of the dump (unix sockets of fds 0–2).
    pub external: Vec<String>,
    /// The CPU features the process may use ([`crate::cpu::host_features`] at dump time).
    pub cpu_features: Vec<String>,
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unesc(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Metadata {
    /// The text form (`key=value` lines).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{FORMAT}");
        let _ = writeln!(s, "build_id={}", esc(&self.build_id));
        let _ = writeln!(s, "exe={}", esc(&self.exe.to_string_lossy()));
        let _ = writeln!(s, "pid={}", self.pid);
        let tids: Vec<String> = self.tids.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(s, "tids={}", tids.join(","));
        let _ = writeln!(s, "generation={}", self.generation);
        if let Some(t) = self.checkpoint_time {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            let _ = writeln!(s, "checkpoint_time_ns={}", d.as_nanos());
        }
        let _ = writeln!(s, "leave_running={}", self.leave_running);
        for f in &self.stdio {
            let _ = writeln!(s, "stdio.{}={:o} {}", f.fd, f.flags, esc(&f.target));
        }
        if let Some((fd, key)) = &self.env_fd {
            let _ = writeln!(s, "env_fd={fd} {}", esc(key));
        }
        for e in &self.external {
            let _ = writeln!(s, "external={}", esc(e));
        }
        let _ = writeln!(s, "cpu_features={}", self.cpu_features.join(","));
        s
    }

    /// Parses [`to_text`](Self::to_text).
    pub fn from_text(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        if lines.next() != Some(FORMAT) {
            return Err(format!(
                "not a crac image metadata file (expected `{FORMAT}`)"
            ));
        }
        let mut m = Metadata::default();
        for line in lines {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let bad = || format!("bad metadata line `{line}`");
            match k {
                "build_id" => m.build_id = unesc(v),
                "exe" => m.exe = PathBuf::from(unesc(v)),
                "pid" => m.pid = v.parse().map_err(|_| bad())?,
                "tids" => {
                    m.tids = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.parse().map_err(|_| bad()))
                        .collect::<Result<_, _>>()?
                }
                "generation" => m.generation = v.parse().map_err(|_| bad())?,
                "checkpoint_time_ns" => {
                    let ns: u128 = v.parse().map_err(|_| bad())?;
                    m.checkpoint_time = Some(
                        UNIX_EPOCH
                            + Duration::new(
                                (ns / 1_000_000_000) as u64,
                                (ns % 1_000_000_000) as u32,
                            ),
                    );
                }
                "leave_running" => m.leave_running = v == "true",
                "env_fd" => {
                    let (fd, key) = v.split_once(' ').ok_or_else(bad)?;
                    m.env_fd = Some((fd.parse().map_err(|_| bad())?, unesc(key)));
                }
                "external" => m.external.push(unesc(v)),
                "cpu_features" => {
                    m.cpu_features = v
                        .split(',')
                        .filter(|f| !f.is_empty())
                        .map(str::to_owned)
                        .collect()
                }
                k if k.starts_with("stdio.") => {
                    let fd = k["stdio.".len()..].parse().map_err(|_| bad())?;
                    let (flags, target) = v.split_once(' ').unwrap_or((v, ""));
                    m.stdio.push(StdFd {
                        fd,
                        target: unesc(target),
                        flags: u32::from_str_radix(flags, 8).map_err(|_| bad())?,
                    });
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// Writes the metadata file (`0600`, atomically) into `dir`.
    pub fn write(&self, dir: &Dir) -> Result<(), Error> {
        dir.write_atomic(METADATA_FILE, self.to_text().as_bytes(), 0o600)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "cannot write {}: {e}",
                        dir.path().join(METADATA_FILE).display()
                    ),
                )
            })
    }

    /// Reads the metadata of the image in `dir` (at most 1 MiB: it is a few hundred bytes).
    pub fn read(dir: &Dir) -> Result<Self, Error> {
        let path = dir.path().join(METADATA_FILE);
        let mut text = String::new();
        dir.open_file(METADATA_FILE)
            .and_then(|f| f.take(1 << 20).read_to_string(&mut text))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "{} is not a crac image: cannot read {}: {e}",
                        dir.path().display(),
                        path.display()
                    ),
                )
            })?;
        Self::from_text(&text)
            .map_err(|e| Error::new(ErrorKind::Config, format!("{}: {e}", path.display())))
    }
}

/// Executables larger than this without a build-id note are not digested whole.
const MAX_UNNOTED_EXE: u64 = 1 << 30;

/// The build id of an executable: its GNU build-id note as hex (only the ELF header, program
/// headers and notes are read, each piece bounded), or, for a file without one, `xxh3:` and a
/// digest of the file (at most 1 GiB). Anything but a regular file is refused, so a path that
/// names a device or a FIFO is never read.
pub fn build_id(path: &Path) -> std::io::Result<String> {
    let f = fs::File::open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(std::io::Error::other(format!(
            "it is {}, not a regular file",
            crate::dir::kind_of(&m)
        )));
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
    let d = crate::manifest::digest(f.take(MAX_UNNOTED_EXE))?;
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
    fn metadata_round_trip() {
        let m = Metadata {
            build_id: "abc".into(),
            exe: "/x/y z".into(),
            pid: 42,
            tids: vec![42, 43],
            generation: 2,
            checkpoint_time: Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5)),
            leave_running: true,
            stdio: vec![StdFd {
                fd: 1,
                target: "pipe:[77]".into(),
                flags: 0o2001,
            }],
            env_fd: Some((9, "pipe:[88]".into())),
            external: vec!["unix[5]".into()],
            cpu_features: vec!["sse2".into(), "avx2".into()],
        };
        assert_eq!(Metadata::from_text(&m.to_text()).unwrap(), m);
        assert!(Metadata::from_text("junk").is_err());
    }

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
