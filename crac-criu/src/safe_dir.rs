//! Directories handled through descriptors, never re-resolved by path: the image directory
//! and the control channel's runtime directory. A path is resolved once, with `O_NOFOLLOW` on
//! each component this code opens or creates (`mkdirat` in the parent's descriptor), and
//! everything after that (ownership and mode checks, listing, reading, writing, handing it to
//! CRIU) goes through the descriptor, so a symlink swapped in meanwhile is never followed.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::sys;

/// An open directory and the path it was reached by (for messages only).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a mode check forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Group or others may write (the restore rule: nobody else can change the image).
    Write,
    /// Group or others may read or write (the dump rule: an image holds all process memory).
    ReadWrite,
}

impl Access {
    fn mask(self) -> u32 {
        match self {
            Access::Write => 0o022,
            Access::ReadWrite => 0o066,
        }
    }
}

/// Why a file or directory may not be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// Owned by another uid.
    Owner {
        /// Its owner.
        uid: u32,
    },
    /// Group or others have access the rule forbids.
    Mode {
        /// Its permission bits.
        mode: u32,
    },
    /// Not the expected kind (a symlink, a device, a directory where a file belongs).
    Kind(&'static str),
}

/// The kind of a file, in words, from its mode.
pub fn kind_of(m: &fs::Metadata) -> &'static str {
    let t = m.file_type();
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Checks that `m` is owned by `uid` and grants group/others nothing `access` forbids.
pub fn check_owner_mode(m: &fs::Metadata, uid: u32, access: Access) -> Result<(), Untrusted> {
    if m.uid() != uid {
        return Err(Untrusted::Owner { uid: m.uid() });
    }
    let mode = m.mode() & 0o7777;
    if mode & access.mask() != 0 {
        return Err(Untrusted::Mode { mode });
    }
    Ok(())
}

fn split(path: &Path) -> io::Result<(&Path, &str)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a path to a directory entry (it ends in `/`, `.` or `..`)",
        )
    };
    match path.components().next_back() {
        Some(Component::Normal(n)) => {
            Ok((path.parent().ok_or_else(bad)?, n.to_str().ok_or_else(bad)?))
        }
        _ => Err(bad()),
    }
}

/// Pushes the components of `p` onto `todo`, last first (so they pop in order); `/` restarts
/// from the root.
fn push_components(todo: &mut Vec<std::ffi::OsString>, p: &Path) {
    for c in p.components().rev() {
        match c {
            Component::RootDir => todo.push("/".into()),
            Component::ParentDir => todo.push("..".into()),
            Component::Normal(n) => todo.push(n.to_owned()),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

const DIR_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// Opens `path` as a directory (its last component must not be a symlink), creating it and
/// any missing parents `mode` through their parents' descriptors.
fn open_creating(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    match sys::open(path, DIR_FLAGS) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (parent, name) = split(path)?;
            let pfd = open_creating(parent, mode)?;
            mkdir_open(&pfd, name, mode)
        }
        r => r,
    }
}

/// `mkdirat` (an existing entry is fine) then `openat(O_NOFOLLOW|O_DIRECTORY)`.
fn mkdir_open(parent: &OwnedFd, name: &str, mode: u32) -> io::Result<OwnedFd> {
    match sys::mkdirat(parent, name, mode) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    sys::openat(parent, name, DIR_FLAGS, 0)
}

/// The error for an entry that is not a regular file.
pub fn not_regular(m: &fs::Metadata) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("it is {}, not a regular file", kind_of(m)),
    )
}

/// Says "a symbolic link" instead of the kernel's `ELOOP`/`ENOTDIR` for an entry that is one.
fn explain(parent: Option<&OwnedFd>, name: &str, e: io::Error) -> io::Error {
    let is_link = parent
        .and_then(|p| sys::openat(p, name, libc::O_PATH | libc::O_NOFOLLOW, 0).ok())
        .and_then(|fd| fs::File::from(fd).metadata().ok())
        .is_some_and(|m| m.file_type().is_symlink());
    if is_link || e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::other("it is a symbolic link (refused: a link can be swapped to point anywhere)")
    } else {
        e
    }
}

impl Dir {
    /// Creates `path` (`0700`, missing parents too) or opens it if it exists: the parent is
    /// opened `O_NOFOLLOW|O_DIRECTORY`, the directory made with `mkdirat` and opened with
    /// `O_NOFOLLOW`, so a symlink at its place is refused, never followed.
    pub fn create_private(path: &Path) -> io::Result<Dir> {
        let path = std::path::absolute(path)?;
        let (parent, name) = split(&path)?;
        let pfd = open_creating(parent, 0o700).map_err(|e| {
            // Only for the message: the path is looked at again, never used.
            let link = fs::symlink_metadata(parent).is_ok_and(|m| m.file_type().is_symlink());
            let e = if link {
                explain(None, "", io::Error::from_raw_os_error(libc::ELOOP))
            } else {
                e
            };
            io::Error::new(e.kind(), format!("its parent {}: {e}", parent.display()))
        })?;
        let fd = mkdir_open(&pfd, name, 0o700).map_err(|e| explain(Some(&pfd), name, e))?;
        Ok(Dir { fd, path })
    }

    /// Opens an existing directory (following symlinks: what counts is whose directory it
    /// turns out to be, which the caller checks through the descriptor).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let path = std::path::absolute(path)?;
        let fd = sys::open(&path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(Dir { fd, path })
    }

    /// Opens an existing directory by walking `path` one component at a time from `/`, each
    /// opened through its parent's descriptor without following it; a symbolic link on the
    /// way is followed only when root or `uid` owns it (whoever owns a link chooses where it
    /// points, so another user's link would let that user pick what is opened). At most 40
    /// links, as the kernel allows.
    pub fn open_trusted(path: &Path, uid: u32) -> io::Result<Dir> {
        let shown = std::path::absolute(path)?;
        let mut todo: Vec<std::ffi::OsString> = Vec::new();
        push_components(&mut todo, &shown);
        let mut cur = sys::open(Path::new("/"), DIR_FLAGS)?;
        let mut links = 0;
        while let Some(name) = todo.pop() {
            let name = name
                .to_str()
                .ok_or_else(|| io::Error::other(format!("{name:?}: not UTF-8")))?
                .to_owned();
            if name == "/" {
                cur = sys::open(Path::new("/"), DIR_FLAGS)?;
                continue;
            }
            let probe = sys::openat(&cur, &name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
            let m = fs::File::from(probe).metadata()?;
            if !m.file_type().is_symlink() {
                cur = sys::openat(&cur, &name, DIR_FLAGS, 0)?;
                continue;
            }
            if m.uid() != 0 && m.uid() != uid {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{name} on the way is a symbolic link of uid {} (only root's or your own \
                         links are followed: another user's link picks what is opened)",
                        m.uid()
                    ),
                ));
            }
            links += 1;
            if links > 40 {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            push_components(&mut todo, Path::new(&sys::readlinkat(&cur, &name)?));
        }
        Ok(Dir {
            fd: cur,
            path: shown,
        })
    }

    /// Makes a new private (`0700`) directory `PREFIX` + random suffix in this one: `mkdirat`
    /// fails if the name exists, so a directory someone else made first is never used, even
    /// in a directory all can write (`/tmp` is sticky: nobody can swap ours once made).
    pub fn make_temp(&self, prefix: &str) -> io::Result<Dir> {
        use std::hash::{BuildHasher, Hasher};
        for _ in 0..100 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            );
            let name = format!("{prefix}{:016x}", h.finish());
            match sys::mkdirat(&self.fd, &name, 0o700) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            let d = Dir {
                fd: sys::openat(&self.fd, &name, DIR_FLAGS, 0)?,
                path: self.path.join(&name),
            };
            check_owner_mode(&d.metadata()?, sys::euid(), Access::ReadWrite)
                .map_err(|why| io::Error::other(format!("{}: {why:?}", d.path.display())))?;
            return Ok(d);
        }
        Err(io::Error::other(format!(
            "no free name {prefix}… in {} after 100 tries",
            self.path.display()
        )))
    }

    /// A directory this process holds a descriptor of (its path read back from /proc).
    pub fn from_fd(fd: OwnedFd) -> io::Result<Dir> {
        let path = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        Ok(Dir { fd, path })
    }

    /// The descriptor.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The path it was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last component of that path: for a directory [`make_temp`](Self::make_temp) made,
    /// the name it chose, to rename it in its parent.
    pub fn name(&self) -> &str {
        self.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
    }

    /// `/proc/self/fd/N`: a path that always means this very directory (for programs that
    /// take paths, such as `criu -D`, in this process or a child that inherits the fd).
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// The directory's own metadata (`fstat`).
    pub fn metadata(&self) -> io::Result<fs::Metadata> {
        fs::File::from(self.fd.try_clone()?).metadata()
    }

    /// The names in the directory.
    pub fn entries(&self) -> io::Result<Vec<String>> {
        let mut v = Vec::new();
        for e in fs::read_dir(self.proc_path())? {
            let name = e?.file_name();
            match name.into_string() {
                Ok(n) => v.push(n),
                Err(n) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a file name that is not UTF-8: {n:?}"),
                    ));
                }
            }
        }
        v.sort();
        Ok(v)
    }

    /// Metadata of an entry, not following a symlink; `None` when there is none.
    pub fn stat(&self, name: &str) -> io::Result<Option<fs::Metadata>> {
        match sys::openat(&self.fd, name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fs::File::from(fd).metadata().map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens a regular file entry for reading, refusing a symlink and, without blocking,
    /// anything but a regular file: a FIFO someone planted would block a plain `open` until
    /// a writer came, and a device could be anything. `O_NONBLOCK` means nothing for the
    /// regular file it then is.
    pub fn open_file(&self, name: &str) -> io::Result<fs::File> {
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let f = fs::File::from(
            sys::openat(&self.fd, name, flags, 0).map_err(|e| explain(Some(&self.fd), name, e))?,
        );
        let m = f.metadata()?;
        if !m.is_file() {
            return Err(not_regular(&m));
        }
        Ok(f)
    }

    /// Opens (creating `0600`) an entry for reading and writing, refusing a symlink.
    pub fn open_rw(&self, name: &str) -> io::Result<fs::File> {
        sys::openat(
            &self.fd,
            name,
            libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW,
            0o600,
        )
        .map(fs::File::from)
    }

    /// Writes an entry `mode` atomically (a temporary entry renamed over it).
    pub fn write_atomic(&self, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        let tmp = format!(".{name}.tmp");
        let _ = sys::unlinkat(&self.fd, &tmp);
        let fd = sys::openat(
            &self.fd,
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            mode,
        )?;
        let mut f = fs::File::from(fd);
        f.write_all(data)?;
        f.sync_data()?;
        sys::renameat(&self.fd, &tmp, name)
    }

    /// Removes a file entry.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        sys::unlinkat(&self.fd, name)
    }

    /// Creates (`0700`) or opens the subdirectory `name`, refusing a symlink.
    pub fn subdir(&self, name: &str) -> io::Result<Dir> {
        self.subdir_mode(name, 0o700)
    }

    /// Creates (`mode`, less the umask) or opens the subdirectory `name`, refusing a symlink.
    pub fn subdir_mode(&self, name: &str, mode: u32) -> io::Result<Dir> {
        let fd = mkdir_open(&self.fd, name, mode).map_err(|e| explain(Some(&self.fd), name, e))?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
        })
    }

    /// Opens the existing subdirectory `name`, refusing a symlink.
    pub fn open_subdir(&self, name: &str) -> io::Result<Dir> {
        let fd = sys::openat(&self.fd, name, DIR_FLAGS, 0)
            .map_err(|e| explain(Some(&self.fd), name, e))?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("crac-dir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn creates_missing_parents_private_and_works_through_the_descriptor() {
        let base = scratch("create");
        let d = Dir::create_private(&base.join("a/b/img")).unwrap();
        for p in [base.join("a"), base.join("a/b"), base.join("a/b/img")] {
            let m = fs::symlink_metadata(&p).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.mode() & 0o077, 0, "{}", p.display());
        }
        d.write_atomic("x.txt", b"hello", 0o600).unwrap();
        assert_eq!(d.entries().unwrap(), vec!["x.txt".to_owned()]);
        // Renaming the directory away does not change what the descriptor reaches.
        fs::rename(base.join("a/b/img"), base.join("a/b/moved")).unwrap();
        assert!(d.stat("x.txt").unwrap().is_some());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_directory_is_refused() {
        let base = scratch("link");
        let victim = base.join("victim");
        fs::create_dir_all(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, base.join("img")).unwrap();
        let e = Dir::create_private(&base.join("img")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A symlinked parent (its last component) is refused too.
        std::os::unix::fs::symlink(&victim, base.join("parent")).unwrap();
        let e = Dir::create_private(&base.join("parent/img")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_symlink_raced_in_during_creation_is_never_followed() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = scratch("race");
        let victim = base.join("victim");
        fs::create_dir_all(&victim).unwrap();
        let img = base.join("img");
        let victim_ino = fs::metadata(&victim).unwrap().ino();
        // Both outcomes, each made to happen once, so the race below is not vacuous: a link in
        // place is refused, and with none the directory is made.
        std::os::unix::fs::symlink(&victim, &img).unwrap();
        assert!(
            Dir::create_private(&img).is_err(),
            "a link in place is refused"
        );
        fs::remove_file(&img).unwrap();
        let d = Dir::create_private(&img).unwrap();
        assert_ne!(d.metadata().unwrap().ino(), victim_ino);
        fs::remove_dir_all(&img).unwrap();
        // Then the race: however the scheduler interleaves the two threads (who wins how
        // often is not the point), no attempt follows the link.
        let stop = Arc::new(AtomicBool::new(false));
        let racer = {
            let (stop, img, victim) = (stop.clone(), img.clone(), victim.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::os::unix::fs::symlink(&victim, &img);
                    let _ = fs::remove_file(&img);
                    let _ = fs::rename(&img, img.with_extension(n.to_string()));
                    n += 1;
                }
            })
        };
        for i in 0..2000 {
            if let Ok(d) = Dir::create_private(&img) {
                assert_ne!(d.metadata().unwrap().ino(), victim_ino, "followed the link");
                d.write_atomic(&format!("f{i}"), b"x", 0o600).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        assert_eq!(
            fs::read_dir(&victim).unwrap().count(),
            0,
            "wrote into the link's target"
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_fifo_or_a_symlink_is_refused_at_once_never_opened_for_reading() {
        let base = scratch("fifo");
        let d = Dir::create_private(&base).unwrap();
        let st = std::process::Command::new("mkfifo")
            .arg(base.join("pages-1.img"))
            .status()
            .unwrap();
        assert!(st.success());
        std::os::unix::fs::symlink("/etc/passwd", base.join("link")).unwrap();
        // A plain open would block here until a writer came.
        let e = d.open_file("pages-1.img").unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        let e = d.open_file("link").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        d.write_atomic("ok", b"x", 0o600).unwrap();
        assert!(d.open_file("ok").is_ok());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn only_root_s_or_one_s_own_links_are_followed_on_the_way() {
        let base = scratch("walk");
        fs::create_dir_all(base.join("real/img")).unwrap();
        std::os::unix::fs::symlink("real", base.join("mine")).unwrap();
        std::os::unix::fs::symlink(base.join("real/img"), base.join("abs")).unwrap();
        let uid = crate::sys::euid();
        let ino = fs::metadata(base.join("real/img")).unwrap().ino();
        for p in ["mine/img", "abs", "real/../real/img", "mine/../mine/./img"] {
            let d = Dir::open_trusted(&base.join(p), uid).unwrap();
            assert_eq!(d.metadata().unwrap().ino(), ino, "{p}");
        }
        if uid != 0 {
            return; // giving a link to another user takes root
        }
        // Owned by another user (what chown does to a link: lchown).
        let other = uid + 4242;
        std::os::unix::fs::lchown(base.join("mine"), Some(other), None).unwrap();
        let e = Dir::open_trusted(&base.join("mine/img"), uid).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("symbolic link of uid {other}")),
            "{e}"
        );
        // The link's owner itself may follow it.
        assert!(Dir::open_trusted(&base.join("mine/img"), other).is_ok());
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        assert!(Dir::open_trusted(&base.join("loop"), uid).is_err());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_temporary_directory_is_always_a_new_one() {
        let base = scratch("temp");
        let parent = Dir::create_private(&base).unwrap();
        let a = parent.make_temp("w-").unwrap();
        let b = parent.make_temp("w-").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(a.metadata().unwrap().mode() & 0o777, 0o700);
        assert_eq!(parent.entries().unwrap().len(), 2);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn owner_and_mode_rules() {
        let base = scratch("mode");
        fs::create_dir_all(&base).unwrap();
        let uid = crate::sys::euid();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        let m = fs::metadata(&base).unwrap();
        assert_eq!(check_owner_mode(&m, uid, Access::Write), Ok(()));
        assert_eq!(
            check_owner_mode(&m, uid, Access::ReadWrite),
            Err(Untrusted::Mode { mode: 0o755 })
        );
        assert_eq!(
            check_owner_mode(&m, uid + 1, Access::Write),
            Err(Untrusted::Owner { uid })
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
