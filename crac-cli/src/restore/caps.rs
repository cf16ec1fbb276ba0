//! Whether criu can give the restored process the credentials its image recorded, checked
//! before criu runs. criu's restorer sets them last, from its own: a capability it does not
//! hold, a bounding set it may not trim (that needs `CAP_SETPCAP`), a uid it may not take, and
//! the restorer hits a `BUG()` and hangs until `CRAC_CRIU_TIMEOUT` ("Unable to restore
//! capabilities", "Unable to drop capability N"). In a container that is the everyday case: the
//! restoring container was given fewer capabilities than the checkpointed one had.

use std::path::Path;

use crate::error::{Error, ErrorKind};
use crac_criu::criu::{self, ExecCaps};
use crac_criu::image::creds::{self, Creds, cap_names};
use crac_criu::safe_dir::Dir;

/// `CAP_SETGID`, `CAP_SETUID`, `CAP_SETPCAP`.
const SETGID: u64 = 1 << 6;
const SETUID: u64 = 1 << 7;
const SETPCAP: u64 = 1 << 8;

/// Who restores: the ids and groups criu runs with (this process's) and the capability sets it
/// starts with.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restorer {
    /// Real, effective, saved, file-system uid.
    pub uids: [u32; 4],
    /// Real, effective, saved, file-system gid.
    pub gids: [u32; 4],
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// What criu starts with.
    pub caps: ExecCaps,
}

impl Restorer {
    /// This process, executing the criu at `criu`.
    fn current(criu: &Path) -> Restorer {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let ids = |key: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| {
                    v.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let four = |v: Vec<u32>| -> [u32; 4] { v.try_into().unwrap_or([u32::MAX; 4]) };
        Restorer {
            uids: four(ids("Uid:")),
            gids: four(ids("Gid:")),
            groups: ids("Groups:"),
            caps: criu::criu_caps(criu),
        }
    }
}

/// Refuses, before criu runs, an image whose credentials criu could not give back here,
/// naming what to add.
pub(crate) fn check(dir: &Dir, criu: &Path) -> Result<(), Error> {
    let tasks = creds::read_all(dir).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!(
                "{}: cannot read the credentials the image recorded: {e}",
                dir.path().display()
            ),
        )
    })?;
    let me = Restorer::current(criu);
    let last_cap = last_cap();
    for (file, c) in &tasks {
        if let Some(why) = lacks(c, &me, last_cap) {
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "restore refused ({file} of {}): {why}",
                    dir.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// The highest capability this kernel knows (`/proc/sys/kernel/cap_last_cap`).
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// How to add capabilities to a container, for the message.
fn how_to_add(names: &[String]) -> String {
    format!(
        "add {} to the restoring container (podman/docker {}; Kubernetes \
         securityContext.capabilities.add: [{}])",
        names.join(", "),
        names
            .iter()
            .map(|n| format!("--cap-add {n}"))
            .collect::<Vec<_>>()
            .join(" "),
        names.join(", ")
    )
}

/// Why criu, running as `r`, could not give a task the credentials `c` (`None`: it can). In
/// the order criu's restorer works: ids, the bounding set, then the capability sets.
pub(crate) fn lacks(c: &Creds, r: &Restorer, last_cap: u32) -> Option<String> {
    let held = r.caps.permitted;
    let mut need = 0u64;
    if c.uids != r.uids {
        need |= SETUID;
    }
    if c.gids != r.gids || c.groups != r.groups {
        need |= SETGID;
    }
    if need & !held != 0 {
        let names = cap_names(need & !held);
        return Some(format!(
            "the image's process ran as uids {:?}, gids {:?}, groups {:?}, and this restore \
             runs as uids {:?}, gids {:?}, groups {:?}: criu needs {} to change them; restore \
             as the user the image was taken as, or {}",
            c.uids,
            c.gids,
            c.groups,
            r.uids,
            r.gids,
            r.groups,
            names.join(", "),
            how_to_add(&names)
        ));
    }
    let valid = if last_cap >= 63 {
        u64::MAX
    } else {
        (1u64 << (last_cap + 1)) - 1
    };
    // criu drops from the restored task's bounding set each capability the image's lacks,
    // and dropping needs CAP_SETPCAP; without it, a failure is let pass only when the task
    // had no_new_privs and does not hold the capability.
    let [inh, prm, eff] = c.sets();
    let to_drop = !c.bounding() & valid;
    let tolerated = match c.no_new_privs {
        Some(true) => to_drop & !prm,
        _ => 0,
    };
    if held & SETPCAP == 0 && to_drop & !tolerated != 0 {
        let names = cap_names(to_drop & !tolerated);
        return Some(format!(
            "the image's capability bounding set lacks {} ({}), which criu must drop from the \
             restored process's, and dropping needs SETPCAP, which this restore does not \
             have: {}, or take the checkpoint in a container with no-new-privileges (podman/docker \
             --security-opt no-new-privileges; Kubernetes allowPrivilegeEscalation: false), \
             under which criu may leave them",
            shorten(&names),
            if c.no_new_privs == Some(true) {
                "capabilities the process also holds"
            } else {
                "the image was taken without no-new-privileges"
            },
            how_to_add(&["SETPCAP".to_owned()])
        ));
    }
    // The capability sets are set last (capset), and none may exceed what criu holds.
    let missing = (prm | eff | inh) & !(held | r.caps.inheritable);
    if missing != 0 {
        let names = cap_names(missing);
        return Some(format!(
            "the image's process holds capabilities this restore does not have: {} (criu \
             gives a restored process only capabilities it holds itself, and would hang \
             trying); {}, or checkpoint the service without them",
            names.join(", "),
            how_to_add(&names)
        ));
    }
    None
}

/// A long list of names cut to its first few and a count.
fn shorten(names: &[String]) -> String {
    const SHOWN: usize = 6;
    if names.len() <= SHOWN {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..SHOWN].join(", "),
        names.len() - SHOWN
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CR: u64 = 1 << 40;
    const PTRACE: u64 = 1 << 19;
    /// Podman's default set.
    const PODMAN: u64 = 0x8004_05fb;
    const LAST: u32 = 40;
    const ALL: u64 = (1 << 41) - 1;

    fn words(m: u64) -> Vec<u32> {
        vec![m as u32, (m >> 32) as u32]
    }

    /// The credentials of a root task checkpointed in a container with `caps`.
    fn image(caps: u64, nnp: bool) -> Creds {
        Creds {
            caps: [words(0), words(caps), words(caps)],
            cap_bnd: words(caps),
            no_new_privs: Some(nnp),
            ..Creds::default()
        }
    }

    /// Root restoring in a container with `caps`.
    fn root(caps: u64) -> Restorer {
        Restorer {
            caps: ExecCaps {
                permitted: caps,
                inheritable: 0,
                bounding: caps,
            },
            ..Restorer::default()
        }
    }

    /// Each row of docs/containers.md's capability table, as criu 4.2.1 did it.
    #[test]
    fn what_the_restoring_container_must_have() {
        // Checkpointed with CHECKPOINT_RESTORE and no-new-privileges: it alone restores.
        assert_eq!(lacks(&image(CR, true), &root(CR), LAST), None);
        // The image also holds SYS_PTRACE: the restore must have it.
        let e = lacks(&image(CR | PTRACE, true), &root(CR), LAST).unwrap();
        assert!(
            e.contains("holds capabilities") && e.contains("--cap-add SYS_PTRACE"),
            "{e}"
        );
        assert_eq!(
            lacks(&image(CR | PTRACE, true), &root(CR | PTRACE), LAST),
            None
        );
        // Without no-new-privileges criu must trim the bounding set: SETPCAP.
        let e = lacks(&image(CR, false), &root(CR), LAST).unwrap();
        assert!(
            e.contains("--cap-add SETPCAP") && e.contains("no-new-privileges"),
            "{e}"
        );
        assert!(
            e.contains("CHOWN, DAC_OVERRIDE") && e.contains("more"),
            "{e}"
        );
        assert_eq!(lacks(&image(CR, false), &root(CR | SETPCAP), LAST), None);
        // Podman's default set in the image, a restore with fewer: refused, naming them.
        let e = lacks(&image(PODMAN | CR, false), &root(CR | SETPCAP), LAST).unwrap();
        assert!(e.contains("--cap-add CHOWN") && e.contains("KILL"), "{e}");
        assert_eq!(
            lacks(&image(PODMAN | CR, false), &root(PODMAN | CR), LAST),
            None
        );
        // A host's root restoring a host's root image: everything is there.
        assert_eq!(lacks(&image(ALL, false), &root(ALL), LAST), None);
    }

    #[test]
    fn a_user_restores_its_own_image_or_is_told_why_not() {
        let user = Restorer {
            uids: [1000; 4],
            gids: [1000; 4],
            caps: ExecCaps {
                permitted: CR,
                inheritable: 0,
                bounding: ALL,
            },
            ..Restorer::default()
        };
        let mine = Creds {
            uids: [1000; 4],
            gids: [1000; 4],
            caps: [words(0), words(0), words(0)],
            cap_bnd: words(ALL),
            ..Creds::default()
        };
        assert_eq!(lacks(&mine, &user, LAST), None);
        let other = Creds {
            uids: [1001; 4],
            ..mine.clone()
        };
        let e = lacks(&other, &user, LAST).unwrap();
        assert!(e.contains("SETUID") && e.contains("1001"), "{e}");
        // A bounding set wider than the kernel knows is no reason to drop anything.
        let wide = Creds {
            cap_bnd: words(u64::MAX),
            ..mine
        };
        assert_eq!(lacks(&wide, &user, LAST), None);
    }
}
