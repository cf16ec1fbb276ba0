//! criu run as the caller, the way the broker runs it for every request.
//!
//! criu runs with the caller's uid, gid and groups (those the kernel recorded when the caller
//! connected) and three capabilities only, `cap_checkpoint_restore`, `cap_sys_ptrace` and
//! `cap_setpcap` (ambient, through util-linux `setpriv`), in CRIU's unprivileged mode: it can
//! do to the caller's processes what they could do to themselves, reopens their files with
//! the caller's permissions (a symlink the user swaps in cannot make it open a file the user
//! may not), and no process of the caller can trace it (it holds capabilities they lack). Its
//! environment is cleared, its plugin directory an empty one of root's, no action script is
//! given.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crac_criu::criu::invocation::{Invocation, Launch};

use super::children::{Child, Children};
use super::tree::Caller;
use crate::sys;

/// `setpriv` and its options: what makes criu the caller's, with its three capabilities.
fn setpriv(caller: &Caller) -> Vec<OsString> {
    let groups: Vec<String> = caller.groups.iter().map(u32::to_string).collect();
    // cap_setpcap: the restorer drops from each task's bounding set what the image's lacks.
    let caps = "-all,+checkpoint_restore,+sys_ptrace,+setpcap";
    [
        "setpriv".to_owned(),
        format!("--reuid={}", caller.uid),
        format!("--regid={}", caller.gid),
        if groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            format!("--groups={}", groups.join(","))
        },
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        "--".to_owned(),
    ]
    .map(OsString::from)
    .into()
}

/// The command that runs `inv` with `criu` as the caller, started as `launch` says: in
/// CRIU's unprivileged mode, with the empty plugin directory `no_plugins` (a
/// `/proc/self/fd/N` path), a cleared environment, no terminal, in a process group of its
/// own (what it leaves behind is ended with the group).
pub(crate) fn command(
    caller: &Caller,
    criu: &std::path::Path,
    inv: Invocation,
    no_plugins: &std::path::Path,
    launch: &Launch,
) -> Command {
    let inv = inv.unprivileged(true).plugins(no_plugins);
    let mut cmd = inv.command_under(criu, launch, &setpriv(caller));
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    cmd
}

/// Serializes spawns: descriptors made inheritable for one criu must not leak into another
/// spawned meanwhile by another request's thread.
static SPAWN: Mutex<()> = Mutex::new(());

/// Spawns `cmd` as an owned child of `children` with `keep` inherited (their close-on-exec
/// flag cleared for the spawn alone).
pub(crate) fn spawn(
    children: &Children,
    cmd: &mut Command,
    keep: &[&OwnedFd],
) -> Result<Child, String> {
    let _g = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    for fd in keep {
        sys::set_cloexec(*fd, false).map_err(|e| format!("fcntl: {e}"))?;
    }
    let child = children.spawn(cmd);
    for fd in keep {
        let _ = sys::set_cloexec(*fd, true);
    }
    child.map_err(|e| format!("cannot run {:?} (util-linux): {e}", cmd.get_program()))
}
