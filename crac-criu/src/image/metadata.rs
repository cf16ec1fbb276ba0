//! The image directory: creating it safely, and the metadata file crac-criu keeps next to
//! CRIU's own images (what fds 0–2 were, the build of the executable, generation, pids).

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{MANIFEST_FILE, METADATA_FILE};
use crate::error::{Error, ErrorKind};
use crate::safe_dir::{Access, Dir, Untrusted, check_owner_mode};

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
    /// The image directory as the dumped process had it open (its path, without the leading
    /// `/`: CRIU's key for `--inherit-fd`). The engine holds it open while CRIU dumps, so it
    /// is in the image; a restore hands in its own descriptor of the directory instead, so an
    /// image restores wherever it was moved or copied to.
    pub image_dir: Option<String>,
    /// The CPU features the process may use ([`crate::image::cpu::host_features`] at dump time).
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
        if let Some(d) = &self.image_dir {
            let _ = writeln!(s, "image_dir={}", esc(d));
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
                "image_dir" => m.image_dir = Some(unesc(v)),
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
            image_dir: Some("tmp/img \nx".into()),
            cpu_features: vec!["sse2".into(), "avx2".into()],
        };
        assert_eq!(Metadata::from_text(&m.to_text()).unwrap(), m);
        assert!(Metadata::from_text("junk").is_err());
    }
}
