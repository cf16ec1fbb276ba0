//! CRIU's kernel probe cache, kept by crac where CRIU does not keep it, and what crac learns
//! about the kernel once per boot instead of at every restore.
//!
//! CRIU probes the kernel (features, device numbers, the zero page…) at every start, 30–150 ms
//! on these machines, unless it can load `/run/criu.kdat`. It writes that file only when `/run`
//! is a tmpfs (so it cannot outlive a reboot), but it loads it from anywhere. Where `/run` is
//! not a tmpfs, crac makes the cache itself: `criu check` runs in a private mount namespace
//! whose `/run` is a fresh tmpfs, and the file it writes there is installed at
//! `/run/criu.kdat`. Neither the dump nor the restore runs in that namespace (a restored
//! process would live in it): only the probe does.
//!
//! A stamp of ours (`/run/crac/criu-kdat.stamp`) records what the cache depends on: the boot
//! (`/proc/sys/kernel/random/boot_id`), the kernel, the criu executable (path, version, inode,
//! size, mtime), and the digest of the file installed. Any of them changing, or the file
//! changing under us, makes the cache again (under a lock, so concurrent restores make it once).
//! The stamp also records whether this kernel can restore lazily (`criu check --feature
//! uffd-noncoop`), so a restore never probes for that either. Only root keeps a cache: CRIU's
//! unprivileged mode reads its own from `$XDG_RUNTIME_DIR` and has no lazy pages.

use std::fmt::Write as _;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::criu::Criu;
use crate::criu::invocation::{Invocation, Launch};
use crate::image::manifest;
use crate::safe_dir::{self, Access, Dir};
use crate::sys;

/// Where CRIU loads its cache from (as root).
pub const KDAT_PATH: &str = "/run/criu.kdat";
const KDAT_NAME: &str = "criu.kdat";
/// Our stamp, in `/run/crac`.
const STAMP: &str = "criu-kdat.stamp";
const LOCK: &str = "criu-kdat.lock";
const FORMAT: &str = "crac-kdat 1";
/// CRIU's cache is a C struct of about a kilobyte; anything much larger is not one.
const MAX_KDAT: u64 = 64 * 1024;
/// How long a restore waits for another one making the cache.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// What a dump or restore can count on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `Ok`: CRIU can restore lazily here; `Err`: why not.
    pub lazy_pages: Result<(), String>,
    /// The state of CRIU's probe cache.
    pub cache: Cache,
}

/// The state of CRIU's probe cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cache {
    /// `/run` is a tmpfs: CRIU keeps `/run/criu.kdat` itself.
    CriuOwn,
    /// Ours, valid: installed at `/run/criu.kdat` (made now, taking this long, or earlier).
    Installed {
        /// `Some(time)` when this call made it.
        made_now: Option<Duration>,
    },
    /// None: CRIU probes the kernel at every start (why).
    Absent(String),
}

/// What the cache depends on, as the stamp writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    boot_id: String,
    kernel: String,
    criu: String,
}

fn read_small(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The criu executable as the stamp names it: the file (device, inode, size, mtime) and path,
/// without the version (`file_id`).
fn file_id(path: &Path) -> io::Result<String> {
    let m = std::fs::metadata(path)?;
    Ok(format!(
        "{}:{} {} {}.{:09} {}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        path.display()
    ))
}

impl Identity {
    fn current(criu: &Criu) -> io::Result<Identity> {
        Ok(Identity {
            boot_id: read_small("/proc/sys/kernel/random/boot_id"),
            kernel: format!(
                "{} {}",
                read_small("/proc/sys/kernel/osrelease"),
                read_small("/proc/sys/kernel/version")
            ),
            criu: format!(
                "{}.{}.{} {}",
                criu.version.0,
                criu.version.1,
                criu.version.2,
                file_id(&criu.path)?
            ),
        })
    }
}

/// Finds criu ([`crate::criu::find`]) without running `criu --version` when the stamp names
/// this very file (same path, inode, size and mtime): a restore then starts no process
/// before CRIU's own.
pub fn find_criu() -> Result<Criu, crate::error::Error> {
    let path = crate::criu::locate()?;
    if sys::euid() == 0
        && let Some(version) = stamped_version(&path)
    {
        return Ok(Criu { path, version });
    }
    crate::criu::find()
}

fn stamped_version(path: &Path) -> Option<crate::criu::Version> {
    let crac = crate::run_dir::open(false).ok()?;
    let text = read_trusted(&crac, STAMP, 4096)?;
    let stamp = Stamp::parse(std::str::from_utf8(&text).ok()?)?;
    let (version, id) = stamp.id.criu.split_once(' ')?;
    if id != file_id(path).ok()? {
        return None;
    }
    let v = crate::criu::parse_version(&format!("Version: {version}"))?;
    ((v.0, v.1) >= crate::criu::MIN_VERSION).then_some(v)
}

/// The stamp's content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    id: Identity,
    /// Digest and size of the installed cache; `Err(why)` when none could be made; `None`
    /// when CRIU keeps its own.
    kdat: Option<Result<(u128, u64), String>>,
    lazy: Result<(), String>,
}

impl Stamp {
    fn to_text(&self) -> String {
        let mut s = format!("{FORMAT}\n");
        let one_line = |v: &str| v.replace('\n', " ");
        let _ = writeln!(s, "boot_id={}", one_line(&self.id.boot_id));
        let _ = writeln!(s, "kernel={}", one_line(&self.id.kernel));
        let _ = writeln!(s, "criu={}", one_line(&self.id.criu));
        match &self.kdat {
            Some(Ok((hash, size))) => {
                let _ = writeln!(s, "kdat={hash:032x} {size}");
            }
            Some(Err(why)) => {
                let _ = writeln!(s, "kdat=none {}", one_line(why));
            }
            None => {}
        }
        match &self.lazy {
            Ok(()) => s.push_str("lazy=yes\n"),
            Err(why) => {
                let _ = writeln!(s, "lazy=no {}", one_line(why));
            }
        }
        s
    }

    fn parse(text: &str) -> Option<Stamp> {
        let mut lines = text.lines();
        if lines.next() != Some(FORMAT) {
            return None;
        }
        let (mut boot_id, mut kernel, mut criu, mut kdat, mut lazy) =
            (None, None, None, None, None);
        for l in lines {
            let (k, v) = l.split_once('=')?;
            match k {
                "boot_id" => boot_id = Some(v.to_owned()),
                "kernel" => kernel = Some(v.to_owned()),
                "criu" => criu = Some(v.to_owned()),
                "kdat" => {
                    let (h, n) = v.split_once(' ')?;
                    kdat = Some(match h {
                        "none" => Err(n.to_owned()),
                        h => Ok((u128::from_str_radix(h, 16).ok()?, n.parse().ok()?)),
                    });
                }
                "lazy" => {
                    lazy = Some(match v.strip_prefix("no") {
                        Some(why) => Err(why.trim().to_owned()),
                        None if v == "yes" => Ok(()),
                        None => return None,
                    })
                }
                _ => return None,
            }
        }
        Some(Stamp {
            id: Identity {
                boot_id: boot_id?,
                kernel: kernel?,
                criu: criu?,
            },
            kdat,
            lazy: lazy?,
        })
    }
}

/// Reads a small root-owned file nobody else can write, through `dir`; `None` if it is
/// missing or fails any of that.
fn read_trusted(dir: &Dir, name: &str, max: u64) -> Option<Vec<u8>> {
    let f = dir.open_file(name).ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.len() > max || safe_dir::check_owner_mode(&m, 0, Access::Write).is_err() {
        return None;
    }
    let mut data = Vec::new();
    f.take(max).read_to_end(&mut data).ok()?;
    Some(data)
}

fn digest(data: &[u8]) -> u128 {
    manifest::digest(data).map(|d| d.hash).unwrap_or_default()
}

/// Whether `/run` is a tmpfs (where CRIU keeps its cache itself).
pub fn run_is_tmpfs() -> bool {
    mount_fs_type("/run").as_deref() == Some("tmpfs")
}

/// The facts for `criu`, making the cache when it is missing or stale (each probe bounded by
/// `timeout`). Never fails: what cannot be cached is probed, and `Cache::Absent` says why.
pub fn facts(criu: &Criu, timeout: Duration) -> Facts {
    let _s = tracing::debug_span!("kdat").entered();
    if super::unprivileged() {
        // Not root, or root without CAP_SYS_ADMIN (a container): criu's unprivileged mode.
        let who = if sys::euid() != 0 {
            "not root"
        } else {
            "root without CAP_SYS_ADMIN"
        };
        return Facts {
            lazy_pages: Err(format!("{who}: CRIU's unprivileged mode has no lazy pages")),
            cache: Cache::Absent(format!(
                "{who}: CRIU keeps its cache in $XDG_RUNTIME_DIR/criu.kdat when that is a tmpfs"
            )),
        };
    }
    let own = run_is_tmpfs();
    let id = match Identity::current(criu) {
        Ok(id) => id,
        Err(e) => {
            let why = format!("cannot stat {}: {e}", criu.path.display());
            return uncached(criu, timeout, why);
        }
    };
    let dirs =
        crate::run_dir::open(true).and_then(|crac| Ok((crac, Dir::open(Path::new("/run"))?)));
    let (crac, run) = match dirs {
        Ok(d) => d,
        Err(e) => return uncached(criu, timeout, format!("no place for the stamp: {e}")),
    };
    if let Some(f) = valid(&crac, &run, &id, own) {
        return f;
    }
    let lock = match crac
        .open_rw(LOCK)
        .and_then(|f| lock_bounded(&f).map(|()| f))
    {
        Ok(f) => f,
        Err(e) => {
            let why = format!("cannot lock /run/crac/{LOCK}: {e}");
            return uncached(criu, timeout, why);
        }
    };
    // Another restore may have made it while we waited for the lock.
    if let Some(f) = valid(&crac, &run, &id, own) {
        return f;
    }
    let t = Instant::now();
    let stamp = make(criu, &run, id, own, timeout);
    // A probe that overran says nothing lasting: the next run tries again.
    if !stamp.transient
        && let Err(e) = crac.write_atomic(STAMP, stamp.stamp.to_text().as_bytes(), 0o644)
    {
        tracing::warn!("cannot write /run/crac/{STAMP}: {e}");
    }
    drop(lock);
    let took = t.elapsed();
    tracing::info!(
        took_ms = took.as_secs_f64() * 1e3,
        "probed the kernel for CRIU"
    );
    facts_of(stamp.stamp, Some(took))
}

/// The facts a stamp records.
fn facts_of(stamp: Stamp, made_now: Option<Duration>) -> Facts {
    Facts {
        lazy_pages: stamp.lazy,
        cache: match stamp.kdat {
            None => Cache::CriuOwn,
            Some(Ok(_)) => Cache::Installed { made_now },
            Some(Err(why)) => Cache::Absent(why),
        },
    }
}

/// The facts from a valid stamp in `crac` (and, when it records one, a cache in `run` that
/// matches it).
fn valid(crac: &Dir, run: &Dir, id: &Identity, own: bool) -> Option<Facts> {
    let text = read_trusted(crac, STAMP, 4096)?;
    let stamp = Stamp::parse(std::str::from_utf8(&text).ok()?)?;
    if stamp.id != *id || own != stamp.kdat.is_none() {
        return None;
    }
    if let Some(Ok((hash, size))) = stamp.kdat {
        let kdat = read_trusted(run, KDAT_NAME, MAX_KDAT)?;
        if kdat.len() as u64 != size || digest(&kdat) != hash {
            return None;
        }
    }
    Some(facts_of(stamp, None))
}

/// Waits (at most [`LOCK_WAIT`]) for the exclusive lock on `f`.
fn lock_bounded(f: &std::fs::File) -> io::Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        if sys::flock(f, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other("held by another crac for too long"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Without a place to keep facts: probe lazy-pages support now, and say why nothing is cached.
fn uncached(criu: &Criu, timeout: Duration, why: String) -> Facts {
    tracing::warn!(%why, "CRIU's kernel probe is not cached");
    Facts {
        lazy_pages: probe_lazy(criu, timeout).map_err(|p| p.why),
        cache: Cache::Absent(why),
    }
}

/// A probe's failure: why, and whether it only ran out of time (then nothing is recorded).
struct Failed {
    why: String,
    transient: bool,
}

impl From<String> for Failed {
    fn from(why: String) -> Failed {
        Failed {
            why,
            transient: false,
        }
    }
}

/// A stamp made now.
struct Made {
    stamp: Stamp,
    transient: bool,
}

/// Makes the cache in `run` (unless CRIU keeps its own) and probes lazy pages.
fn make(criu: &Criu, run: &Dir, id: Identity, own: bool, timeout: Duration) -> Made {
    let mut transient = false;
    let mut settle = |f: Failed| {
        transient |= f.transient;
        f.why
    };
    let kdat = (!own).then(|| {
        probe_in_private_run(criu, timeout)
            .and_then(|data| {
                run.write_atomic(KDAT_NAME, &data, 0o600)
                    .map_err(|e| Failed::from(format!("cannot install {KDAT_PATH}: {e}")))?;
                Ok((digest(&data), data.len() as u64))
            })
            .map_err(&mut settle)
    });
    // With the cache in place this check loads it instead of probing.
    let lazy = probe_lazy(criu, timeout).map_err(&mut settle);
    Made {
        stamp: Stamp { id, kdat, lazy },
        transient,
    }
}

/// Runs `criu check` in a private mount namespace with a tmpfs on `/run` and returns the cache
/// it wrote there.
fn probe_in_private_run(criu: &Criu, timeout: Duration) -> Result<Vec<u8>, Failed> {
    // The shell mounts the tmpfs inside the namespace `unshare` made; `cat` hands the file out
    // before the namespace (and the tmpfs with it) is gone.
    let script = "mount -t tmpfs -o size=4m,mode=0755 crac-kdat /run || exit 97; \
                  \"$0\" check >/dev/null 2>&1; exec cat /run/criu.kdat";
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
    ])
    .arg(&criu.path)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let out = run_bounded(cmd, timeout)?;
    if !out.status.success() || out.stdout.is_empty() || out.stdout.len() as u64 > MAX_KDAT {
        return Err(Failed::from(format!(
            "`unshare --mount sh -c 'mount -t tmpfs … /run; criu check; cat /run/criu.kdat'` \
             gave no cache ({}, {} bytes): {}",
            out.status,
            out.stdout.len(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Whether `criu check --feature uffd-noncoop` passes: what a lazy restore of a process that
/// may fork, map and unmap while its pages arrive needs.
fn probe_lazy(criu: &Criu, timeout: Duration) -> Result<(), Failed> {
    let mut cmd = Invocation::check()
        .feature("uffd-noncoop")
        .unprivileged(false)
        .command(&criu.path, &Launch::Direct);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_bounded(cmd, timeout)?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let why: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error") || l.contains("not supported"))
        .take(3)
        .collect();
    Err(Failed::from(format!(
        "`criu check --feature uffd-noncoop` fails ({}): {}",
        out.status,
        if why.is_empty() {
            text.trim().to_owned()
        } else {
            why.join("; ")
        }
    )))
}

/// Runs `cmd` to its end, stopping it after `timeout`.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<std::process::Output, Failed> {
    let shown = format!("{:?}", cmd.get_program());
    // Its own process group, so that stopping it stops what it started too.
    let mut child = cmd
        .process_group(0)
        .spawn()
        .map_err(|e| Failed::from(format!("cannot run {shown}: {e}")))?;
    let pid = child.id() as i32;
    // The pipes are read on threads (each to its bound), so the wait itself has one; a
    // stopped child closes them.
    let reader = |pipe: Option<Box<dyn Read + Send>>, max: u64| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(max).read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _), MAX_KDAT + 1);
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _), 64 * 1024);
    let deadline = Instant::now() + timeout;
    while !(out.is_finished() && err.is_finished()) {
        if Instant::now() >= deadline {
            let _ = sys::kill(-pid, libc::SIGKILL);
            let _ = child.wait();
            return Err(Failed {
                why: format!(
                    "{shown} did not finish within {:.1} s and was stopped",
                    timeout.as_secs_f64()
                ),
                transient: true,
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = child
        .wait()
        .map_err(|e| Failed::from(format!("wait for {shown}: {e}")))?;
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// The filesystem type of the mount at exactly `mount_point` in this mount namespace (the last
/// one, which hides those below it), from /proc/self/mountinfo.
pub fn mount_fs_type(mount_point: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    fs_type_in_mountinfo(&text, mount_point)
}

fn fs_type_in_mountinfo(text: &str, mount_point: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| {
            // "id parent major:minor root mount-point options [optional…] - type source super"
            let (fields, rest) = line.split_once(" - ")?;
            let point = fields.split(' ').nth(4)?;
            (point == mount_point).then(|| rest.split(' ').next().map(str::to_owned))?
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_type_comes_from_the_last_mount_at_that_point() {
        let info = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:23 / /run rw,nosuid shared:5 - ext4 /dev/sda2 rw
26 25 0:24 / /run rw,nosuid shared:6 - tmpfs tmpfs rw,mode=755
27 26 0:25 / /run/lock rw master:3 - tmpfs tmpfs rw
";
        assert_eq!(fs_type_in_mountinfo(info, "/run").as_deref(), Some("tmpfs"));
        assert_eq!(fs_type_in_mountinfo(info, "/").as_deref(), Some("ext4"));
        assert_eq!(fs_type_in_mountinfo(info, "/srv"), None);
        assert_eq!(fs_type_in_mountinfo("garbage\n", "/run"), None);
    }

    #[test]
    fn a_stamp_holds_for_its_boot_kernel_criu_and_cache_only() {
        if sys::euid() != 0 {
            return; // the files must be root's
        }
        let base = std::env::temp_dir().join(format!("crac-kdat-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let crac = Dir::create_private(&base.join("crac")).unwrap();
        let run = Dir::create_private(&base.join("run")).unwrap();
        let id = Identity {
            boot_id: "boot-1".into(),
            kernel: "6.1 #1".into(),
            criu: "4.2.1 1:2 3 4.000000005 /c".into(),
        };
        let data = b"a kdat".to_vec();
        run.write_atomic(KDAT_NAME, &data, 0o600).unwrap();
        let stamp = Stamp {
            id: id.clone(),
            kdat: Some(Ok((digest(&data), data.len() as u64))),
            lazy: Ok(()),
        };
        crac.write_atomic(STAMP, stamp.to_text().as_bytes(), 0o644)
            .unwrap();
        let installed = Facts {
            lazy_pages: Ok(()),
            cache: Cache::Installed { made_now: None },
        };
        assert_eq!(valid(&crac, &run, &id, false), Some(installed.clone()));
        // Another boot, kernel or criu; /run now a tmpfs: made again.
        for other in [
            Identity {
                boot_id: "boot-2".into(),
                ..id.clone()
            },
            Identity {
                kernel: "6.2 #1".into(),
                ..id.clone()
            },
            Identity {
                criu: "4.2.1 1:2 3 9.000000005 /c".into(),
                ..id.clone()
            },
        ] {
            assert_eq!(valid(&crac, &run, &other, false), None);
        }
        assert_eq!(valid(&crac, &run, &id, true), None);
        // The cache changed under us, or others can write it.
        run.write_atomic(KDAT_NAME, b"a kdaT", 0o600).unwrap();
        assert_eq!(valid(&crac, &run, &id, false), None);
        run.write_atomic(KDAT_NAME, &data, 0o600).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let perm = |m| std::fs::Permissions::from_mode(m);
        let kdat = base.join("run").join(KDAT_NAME);
        std::fs::set_permissions(&kdat, perm(0o602)).unwrap();
        assert_eq!(valid(&crac, &run, &id, false), None);
        std::fs::set_permissions(&kdat, perm(0o600)).unwrap();
        assert_eq!(valid(&crac, &run, &id, false), Some(installed));
        // A cache that could not be made is recorded as such: no probe per restore.
        let failed = Stamp {
            kdat: Some(Err("no unshare".into())),
            lazy: Err("no uffd".into()),
            ..stamp
        };
        crac.write_atomic(STAMP, failed.to_text().as_bytes(), 0o644)
            .unwrap();
        assert_eq!(
            valid(&crac, &run, &id, false),
            Some(Facts {
                lazy_pages: Err("no uffd".into()),
                cache: Cache::Absent("no unshare".into()),
            })
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn stamps_round_trip_and_garbage_is_no_stamp() {
        let id = Identity {
            boot_id: "b".into(),
            kernel: "6.1 #1 SMP".into(),
            criu: "4.2.1 1:2 3 4.000000005 /c".into(),
        };
        for (kdat, lazy) in [
            (Some(Ok((0xabcu128, 912))), Ok(())),
            (Some(Err("no unshare".to_owned())), Ok(())),
            (None, Err("`criu check` fails: no uffd".to_owned())),
        ] {
            let s = Stamp {
                id: id.clone(),
                kdat,
                lazy,
            };
            assert_eq!(Stamp::parse(&s.to_text()), Some(s));
        }
        assert_eq!(Stamp::parse("garbage"), None);
        assert_eq!(Stamp::parse(&format!("{FORMAT}\nboot_id=b\n")), None);
        assert_eq!(
            Stamp::parse(&format!(
                "{FORMAT}\nboot_id=b\nkernel=k\ncriu=c\nlazy=maybe\n"
            )),
            None
        );
    }
}
