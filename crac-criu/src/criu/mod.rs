//! CRIU itself: finding it, its version and the privileges it needs, how long it may run;
//! the RPC it is driven by, its kernel probe (kdat) and its logs.

pub mod invocation;
pub mod kdat;
pub mod log;
pub mod rpc;
pub mod stats;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::settings::{self, CRIU as CRIU_ENV};

/// Oldest CRIU that works on the kernels this project targets.
pub const MIN_VERSION: (u32, u32) = (4, 2);

/// A located, version-checked criu.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criu {
    /// The executable (possibly the wrapper script from `scripts/install-criu`).
    pub path: PathBuf,
    /// `(major, minor, sublevel)`
    pub version: (u32, u32, u32),
}

/// Where `scripts/install-criu` puts its wrapper by default.
pub fn default_install_path() -> Option<PathBuf> {
    settings::criu_root().map(|root| root.join("bin/criu"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Finds criu: `CRAC_CRIU`, else `PATH`, else the install script's default location.
pub fn locate() -> Result<PathBuf, Error> {
    if let Some(p) = settings::criu() {
        if is_executable(&p) {
            return Ok(p);
        }
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "criu not found at {} (from {CRIU_ENV}); run scripts/install-criu and set \
                 {CRIU_ENV} to the path it prints",
                p.display()
            ),
        ));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("criu");
            if is_executable(&p) {
                return Ok(p);
            }
        }
    }
    if let Some(p) = default_install_path().filter(|p| is_executable(p)) {
        return Ok(p);
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "criu not found ({CRIU_ENV} unset, none on PATH, none at {}); run \
             scripts/install-criu and set {CRIU_ENV} to the path it prints",
            default_install_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "~/.cache/crac-rs/criu-root/bin/criu".into())
        ),
    ))
}

/// Parses `Version: 4.2.1` (the first line of `criu --version`).
pub fn parse_version(out: &str) -> Option<(u32, u32, u32)> {
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Version:"))?;
    let mut it = line.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let sub = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    Some((major, minor, sub))
}

/// A CRIU version: major, minor, sublevel.
pub type Version = (u32, u32, u32);

/// Versions already checked, per path: `criu --version` is run once per binary per process.
static CHECKED: Mutex<Option<HashMap<PathBuf, Version>>> = Mutex::new(None);

/// Runs `criu --version` (once per path per process) and refuses versions below
/// [`MIN_VERSION`].
pub fn check_version(path: &Path) -> Result<(u32, u32, u32), Error> {
    if let Some(v) = CHECKED
        .lock()
        .expect("criu version cache")
        .as_ref()
        .and_then(|m| m.get(path))
    {
        return Ok(*v);
    }
    let out = Command::new(path).arg("--version").output().map_err(|e| {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "cannot run {} --version: {e}; run scripts/install-criu",
                path.display()
            ),
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = parse_version(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "{} --version printed no version ({}{}); run scripts/install-criu",
                path.display(),
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        )
    })?;
    if (v.0, v.1) < MIN_VERSION {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "criu {}.{}.{} at {} is too old: need >= {}.{} (older ones cannot dump TCP/UDP \
                 sockets on this kernel); run scripts/install-criu",
                v.0,
                v.1,
                v.2,
                path.display(),
                MIN_VERSION.0,
                MIN_VERSION.1
            ),
        ));
    }
    CHECKED
        .lock()
        .expect("criu version cache")
        .get_or_insert_with(HashMap::new)
        .insert(path.to_owned(), v);
    Ok(v)
}

/// Finds criu and checks its version.
pub fn find() -> Result<Criu, Error> {
    let path = locate()?;
    let version = check_version(&path)?;
    Ok(Criu { path, version })
}

/// Runs `criu check`; an error carries its relevant output (without the harmless RLIMIT and
/// kdat-cache lines) and the fix. `Ok(Some(note))`: it failed only where restores do not
/// depend on it, said in the note.
pub fn run_check(criu: &Criu) -> Result<Option<String>, Error> {
    let (ok, text, status) = criu_check(criu, None)?;
    if ok {
        return Ok(None);
    }
    let relevant: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.contains("RLIMIT_NOFILE") && !l.contains("kdat cache") && !l.trim().is_empty()
        })
        .collect();
    // A container mounts /proc/sys read-only; criu places pids with clone3's set_tid where
    // the kernel has it, and then never writes ns_last_pid.
    if only_ns_last_pid(&relevant)
        && matches!(criu_check(criu, Some("clone3_set_tid")), Ok((true, ..)))
    {
        return Ok(Some(
            "criu check passes but for /proc/sys/kernel/ns_last_pid, which is read-only here \
             (a container); restores do not need it: criu places pids with clone3's set_tid \
             (`criu check --feature clone3_set_tid` passes)"
                .to_owned(),
        ));
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "`{} check` failed ({status}):\n  {}\nfix: run as root on a kernel with \
             CONFIG_CHECKPOINT_RESTORE and the features listed, or install a newer criu with \
             scripts/install-criu",
            criu.path.display(),
            relevant.join("\n  ")
        ),
    ))
}

/// `criu check` (of one feature): whether it passed, its output, its exit status.
fn criu_check(
    criu: &Criu,
    feature: Option<&str>,
) -> Result<(bool, String, std::process::ExitStatus), Error> {
    let mut inv = invocation::Invocation::check();
    if let Some(f) = feature {
        inv = inv.feature(f);
    }
    let out = inv
        .command(&criu.path, &invocation::Launch::Direct)
        .output()
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot run {} check: {e}", criu.path.display()),
            )
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = out.status.success()
        && match feature {
            None => text.contains("Looks good"),
            Some(f) => text.contains(&format!("{f} is supported")),
        };
    Ok((ok, text, out.status))
}

/// Whether every error `criu check` printed is about `ns_last_pid`.
fn only_ns_last_pid(lines: &[&str]) -> bool {
    let errors: Vec<&&str> = lines.iter().filter(|l| l.contains("Error")).collect();
    !errors.is_empty() && errors.iter().all(|l| l.contains("ns_last_pid"))
}

/// Bit of `CAP_SYS_PTRACE` in the capability sets.
const CAP_SYS_PTRACE: u32 = 19;
/// Bit of `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// Bit of `CAP_CHECKPOINT_RESTORE` (Linux 5.9).
const CAP_CHECKPOINT_RESTORE: u32 = 40;

/// A capability set of this process from `/proc/self/status` (`CapEff:`, `CapBnd:`,
/// `CapAmb:`).
fn own_caps(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// The effective capability set of this process.
pub fn effective_caps() -> u64 {
    own_caps("CapEff:")
}

/// Whether a criu this process executes holds `CAP_CHECKPOINT_RESTORE` without carrying it
/// itself: as root, whose programs start with the bounding set, when the bounding set has it
/// (a container given `--cap-add CHECKPOINT_RESTORE` and no `CAP_SYS_ADMIN`); as any user, when
/// it is an ambient capability (podman's `--user N --cap-add …`, systemd's
/// `AmbientCapabilities=`). criu then runs in its unprivileged mode with what it inherits.
pub fn inherits_checkpoint_restore() -> bool {
    inherits_cap(
        crate::sys::euid(),
        own_caps("CapBnd:"),
        own_caps("CapAmb:"),
        CAP_CHECKPOINT_RESTORE,
    )
}

/// [`inherits_checkpoint_restore`] for a process of `euid` with the bounding and ambient sets
/// `bnd` and `amb`.
fn inherits_cap(euid: u32, bnd: u64, amb: u64, bit: u32) -> bool {
    let bit = 1u64 << bit;
    (euid == 0 && bnd & bit != 0) || amb & bit != 0
}

/// The capability sets of this process that decide what a program it executes starts with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnCaps {
    /// Effective uid.
    pub euid: u32,
    /// Inheritable set.
    pub inheritable: u64,
    /// Permitted set.
    pub permitted: u64,
    /// Bounding set.
    pub bounding: u64,
    /// Ambient set.
    pub ambient: u64,
    /// `no_new_privs`.
    pub no_new_privs: bool,
}

/// What a program starts with after `execve`: the sets criu's restorer works with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecCaps {
    /// Permitted set: what criu may hold and so give a restored task.
    pub permitted: u64,
    /// Inheritable set (unchanged by `execve`).
    pub inheritable: u64,
    /// Bounding set (unchanged by `execve`).
    pub bounding: u64,
}

impl OwnCaps {
    /// This process's sets (`/proc/self/status`).
    pub fn current() -> OwnCaps {
        OwnCaps {
            euid: crate::sys::euid(),
            inheritable: own_caps("CapInh:"),
            permitted: own_caps("CapPrm:"),
            bounding: own_caps("CapBnd:"),
            ambient: own_caps("CapAmb:"),
            no_new_privs: no_new_privs(),
        }
    }

    /// The sets of a program it executes whose file carries the permitted capabilities
    /// `file` (capabilities(7), "Transformation of capabilities during execve()", without
    /// securebits): root's programs start with the bounding set, others' with the ambient set
    /// or the file's; under no_new_privs nothing is gained.
    pub fn after_exec(&self, file: Option<u64>) -> ExecCaps {
        let all = u64::MAX;
        let (file_p, file_i) = match (self.euid, file) {
            (0, _) => (all, all),
            (_, Some(p)) => (p, 0),
            (_, None) => (0, 0),
        };
        // Ambient capabilities survive only the exec of a file without capabilities.
        let amb = match (self.euid, file) {
            (0, _) | (_, Some(_)) => 0,
            _ => self.ambient,
        };
        let mut permitted = (self.inheritable & file_i) | (file_p & self.bounding) | amb;
        if self.no_new_privs {
            permitted &= self.permitted;
        }
        ExecCaps {
            permitted,
            inheritable: self.inheritable,
            bounding: self.bounding,
        }
    }
}

/// The sets a criu at `path` starts with when this process executes it.
pub fn criu_caps(path: &Path) -> ExecCaps {
    let file = file_caps(path).ok().flatten().map(|(p, _)| p);
    OwnCaps::current().after_exec(file)
}

/// Whether this process is root with `CAP_SYS_ADMIN`: criu runs in its privileged mode. Root
/// without it (a container) cannot: criu's kernel probe creates a network namespace ("Unable
/// create a network namespace: Operation not permitted").
fn privileged_root() -> bool {
    crate::sys::euid() == 0 && effective_caps() & (1u64 << CAP_SYS_ADMIN) != 0
}

/// Whether this process has no_new_privs set (file capabilities are then ignored at exec).
fn no_new_privs() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NoNewPrivs:"))
                .map(|v| v.trim() == "1")
        })
        .unwrap_or(false)
}

/// The file capabilities of `path` (`security.capability`): `(permitted, effective flag)`.
pub fn file_caps(path: &Path) -> std::io::Result<Option<(u64, bool)>> {
    let mut buf = [0u8; 32];
    let n = match crate::sys::getxattr(path, "security.capability", &mut buf) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => return Ok(None),
        Err(e) => return Err(e),
    };
    // vfs_cap_data: magic_etc, then (permitted, inheritable) for the low and high 32 bits.
    if n < 20 {
        return Ok(None);
    }
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    let permitted = u64::from(word(4)) | u64::from(word(12)) << 32;
    Ok(Some((permitted, word(0) & 1 != 0)))
}

/// What keeps a non-root process from checkpointing with the criu at `path`, each with its fix
/// (empty: nothing). CRaC's non-root model: criu carries `cap_checkpoint_restore` and
/// `cap_sys_ptrace` as file capabilities and runs in its unprivileged mode.
pub fn unprivileged_problems(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if last_cap < CAP_CHECKPOINT_RESTORE {
        out.push(
            "this kernel has no CAP_CHECKPOINT_RESTORE (Linux 5.9 or newer has it): run as root"
                .to_owned(),
        );
    }
    if no_new_privs() {
        out.push(
            "this process runs with no_new_privs (NoNewPrivs: 1; systemd NoNewPrivileges=, \
             docker --security-opt no-new-privileges), so criu's file capabilities are \
             ignored: start it without"
                .to_owned(),
        );
    }
    let mut head = [0u8; 2];
    match std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)) {
        Err(e) => {
            out.push(format!(
                "{} cannot be read by this user ({e}): install criu where the users allowed \
                 to checkpoint can run it (as root: CRAC_CRIU_ROOT=/opt/crac-rs/criu \
                 scripts/install-criu --setcap --group GROUP, with this user in GROUP, which \
                 is root-equivalent)",
                path.display()
            ));
            return out;
        }
        Ok(()) if &head == b"#!" => {
            out.push(format!(
                "{} is a script: file capabilities belong to the program executed, never to a \
                 script or the loader it runs; run scripts/install-criu --setcap, which makes \
                 criu itself executable and gives it the capabilities",
                path.display()
            ));
            return out;
        }
        Ok(()) => {}
    }
    // Never advise a bare setcap: a capability-bearing criu others can execute is root for all.
    let fix = format!(
        "as root: CRAC_CRIU_ROOT=<its root> scripts/install-criu --setcap --group GROUP, which \
         makes {} 0750 root:GROUP with the capabilities; put this user in GROUP (GROUP is \
         root-equivalent: only users you would give root)",
        path.display()
    );
    match file_caps(path) {
        Ok(None) => out.push(format!(
            "{} has no file capabilities (it needs cap_checkpoint_restore and cap_sys_ptrace): {fix}",
            path.display()
        )),
        Err(e) => out.push(format!(
            "cannot read the file capabilities of {} ({e})",
            path.display()
        )),
        Ok(Some((perm, effective))) => {
            let has = |bit: u32| perm & (1u64 << bit) != 0;
            let mut lacking = Vec::new();
            if !has(CAP_CHECKPOINT_RESTORE) && !has(CAP_SYS_ADMIN) {
                lacking.push("cap_checkpoint_restore");
            }
            if !has(CAP_SYS_PTRACE) {
                lacking.push("cap_sys_ptrace");
            }
            if !lacking.is_empty() {
                out.push(format!(
                    "{} has file capabilities without {}: {fix}",
                    path.display(),
                    lacking.join(" and ")
                ));
            } else if !effective {
                out.push(format!(
                    "{}'s file capabilities lack the effective flag (+e): {fix}",
                    path.display()
                ));
            }
        }
    }
    out
}

/// What the ownership and mode of a capability-bearing criu hand to other users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// No file capabilities, or only root can execute it.
    None,
    /// Only root and the members of one group can execute it: they are root-equivalent.
    Group {
        /// The group whose members may execute it.
        gid: u32,
    },
    /// Every local user can execute it, or its owner is not root (who may then `chmod` it):
    /// they all hold its capabilities, which is root (a CRIU plugin loaded with `-L`, or an
    /// image whose recorded credentials were edited, runs with them). The text says why.
    Everyone(String),
}

/// Classifies who may execute a file with `mode` and `owner` that carries the capabilities
/// `caps` (permitted set; 0 or `None`: none).
pub fn exposure_of(mode: u32, owner: u32, gid: u32, caps: Option<u64>) -> Exposure {
    if caps.unwrap_or(0) == 0 {
        return Exposure::None;
    }
    if owner != 0 {
        return Exposure::Everyone(format!("its owner is uid {owner}, not root"));
    }
    if mode & 0o001 != 0 {
        return Exposure::Everyone(format!(
            "mode {:04o}: every local user can execute it",
            mode & 0o7777
        ));
    }
    if mode & 0o010 != 0 {
        return Exposure::Group { gid };
    }
    Exposure::None
}

/// [`exposure_of`] for the file at `path`.
pub fn exposure(path: &Path) -> std::io::Result<Exposure> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    let caps = file_caps(path)?.map(|(perm, _)| perm);
    Ok(exposure_of(m.mode(), m.uid(), m.gid(), caps))
}

/// The name of group `gid` from `/etc/group` (the number when it has none there).
pub fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let id: u32 = f.nth(1)?.parse().ok()?;
                (id == gid).then(|| name.to_owned())
            })
        })
        .unwrap_or_else(|| gid.to_string())
}

/// The critical problem a capability-bearing criu that others can execute is, with the fix;
/// `None` when it is not one.
pub fn exposure_problem(path: &Path) -> Option<String> {
    match exposure(path).ok()? {
        Exposure::Everyone(why) => Some(format!(
            "CRITICAL: {} carries file capabilities and {why}: that makes every local user \
             root (a CRIU plugin loaded with -L, or an image whose recorded credentials were \
             edited, runs with its capabilities). fix at once, as root: chmod o-rwx {0}; then \
             scripts/install-criu --setcap --group GROUP (CRAC_CRIU_ROOT set to its root) to \
             make it 0750 root:GROUP, and put into GROUP only users you would give root",
            path.display()
        )),
        _ => None,
    }
}

/// `crac check`'s note on who holds a capability-bearing criu's capabilities, if a group does.
pub fn exposure_note(path: &Path) -> Option<String> {
    match exposure(path).ok()? {
        Exposure::Group { gid } => Some(format!(
            "{} carries file capabilities and members of group {} (gid {gid}) can execute it: \
             they are root-equivalent (as Docker's group is)",
            path.display(),
            group_name(gid)
        )),
        _ => None,
    }
}

/// Checks that this process may checkpoint: as root, or, as any other user, with a criu that
/// carries `cap_checkpoint_restore` and `cap_sys_ptrace` itself (file capabilities), which the
/// engine then runs in CRIU's unprivileged mode.
pub fn check_privileges() -> Result<(), Error> {
    if privileged_root() || inherits_checkpoint_restore() {
        return Ok(());
    }
    let problems = match locate() {
        Ok(path) => unprivileged_problems(&path),
        Err(e) => vec![e.to_string()],
    };
    if let Some(p) = locate().ok().and_then(|p| exposure_problem(&p)) {
        tracing::error!("{p}");
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "{}, so criu itself must carry CAP_CHECKPOINT_RESTORE and CAP_SYS_PTRACE: {}",
            if crate::sys::euid() == 0 {
                "root without CAP_SYS_ADMIN, and CAP_CHECKPOINT_RESTORE is not in the \
                 bounding set (a container: add CHECKPOINT_RESTORE)"
                    .to_owned()
            } else {
                format!(
                    "not root (euid {}) and CAP_CHECKPOINT_RESTORE is not ambient",
                    crate::sys::euid()
                )
            },
            problems.join("; ")
        ),
    ))
}

/// Whether CRIU must run in its unprivileged mode (`--unprivileged`): not root, or root
/// without `CAP_SYS_ADMIN` (a container).
pub fn unprivileged() -> bool {
    !privileged_root()
}

/// How long a dump or restore may take ([`settings::criu_timeout`]).
pub fn criu_timeout() -> Result<Duration, Error> {
    settings::criu_timeout()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criu_inherits_checkpoint_restore() {
        let cr = 1u64 << CAP_CHECKPOINT_RESTORE;
        // Root in a container with CHECKPOINT_RESTORE added: its programs start with it.
        assert!(inherits_cap(0, cr, 0, CAP_CHECKPOINT_RESTORE));
        // Root without it in the bounding set: no.
        assert!(!inherits_cap(
            0,
            1 << CAP_SYS_PTRACE,
            0,
            CAP_CHECKPOINT_RESTORE
        ));
        // A user: only an ambient capability passes to what it executes.
        assert!(!inherits_cap(1000, cr, 0, CAP_CHECKPOINT_RESTORE));
        assert!(inherits_cap(1000, cr, cr, CAP_CHECKPOINT_RESTORE));
    }

    #[test]
    fn what_criu_starts_with() {
        let cr = 1u64 << CAP_CHECKPOINT_RESTORE;
        let ptrace = 1u64 << CAP_SYS_PTRACE;
        // Root in a container given CHECKPOINT_RESTORE alone: its bounding set.
        let root = OwnCaps {
            euid: 0,
            permitted: cr,
            bounding: cr,
            ..OwnCaps::default()
        };
        assert_eq!(root.after_exec(None).permitted, cr);
        // A user with it ambient (podman --user N --cap-add): the ambient set.
        let user = OwnCaps {
            euid: 1000,
            permitted: cr,
            bounding: u64::MAX >> 23,
            ambient: cr,
            ..OwnCaps::default()
        };
        assert_eq!(user.after_exec(None).permitted, cr);
        // A user on a host, criu carrying file capabilities: the file's.
        let host = OwnCaps {
            ambient: 0,
            permitted: 0,
            ..user
        };
        assert_eq!(host.after_exec(Some(cr | ptrace)).permitted, cr | ptrace);
        // ... which no_new_privs makes the kernel ignore.
        let nnp = OwnCaps {
            no_new_privs: true,
            ..host
        };
        assert_eq!(nnp.after_exec(Some(cr | ptrace)).permitted, 0);
    }

    #[test]
    fn a_read_only_ns_last_pid_alone_is_no_problem() {
        // What `criu check --unprivileged` printed in a podman container.
        let container = [
            "Error (criu/cr-check.c:160): sys/kernel/ns_last_pid sysctl is inaccessible: \
             Read-only file system",
        ];
        assert!(only_ns_last_pid(&container));
        let more = [
            container[0],
            "Error (criu/cr-check.c:1234): Kernel doesn't support PTRACE_O_SUSPEND_SECCOMP",
        ];
        assert!(!only_ns_last_pid(&more));
        assert!(!only_ns_last_pid(&[
            "Warn (criu/kerndat.c:1200): something"
        ]));
    }

    #[test]
    fn who_may_execute_a_criu_with_capabilities() {
        let caps = Some(1u64 << CAP_SYS_PTRACE);
        assert_eq!(exposure_of(0o100755, 0, 0, None), Exposure::None);
        assert_eq!(exposure_of(0o100755, 0, 0, Some(0)), Exposure::None);
        assert_eq!(exposure_of(0o100700, 0, 0, caps), Exposure::None);
        assert_eq!(
            exposure_of(0o100750, 0, 997, caps),
            Exposure::Group { gid: 997 }
        );
        assert!(
            matches!(exposure_of(0o100755, 0, 0, caps), Exposure::Everyone(w) if w.contains("0755"))
        );
        assert!(matches!(
            exposure_of(0o100701, 0, 0, caps),
            Exposure::Everyone(_)
        ));
        assert!(
            matches!(exposure_of(0o100700, 1000, 0, caps), Exposure::Everyone(w) if w.contains("uid 1000"))
        );
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("Version: 4.2.1\nGitID: x\n"), Some((4, 2, 1)));
        assert_eq!(parse_version("Version: 4.2\n"), Some((4, 2, 0)));
        assert_eq!(parse_version("nothing"), None);
    }
}
