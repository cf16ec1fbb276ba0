//! What the broker allows an image's credentials to be (CRIU records them per task, and a
//! restore gives them back; parsed in [`crac_criu::image::creds`]): checked before it dumps
//! into an image it seals and before it restores one.

pub use crac_criu::image::creds::{Creds, read_all};

/// Why `c` is not what a process of `uid`/`gid` with the supplementary groups `groups` and the
/// bounding set `bnd` (64 bits) may be given: any uid or gid not its own, any capability,
/// securebits, a group it is not in, a bounding set wider than its own.
pub fn check(c: &Creds, uid: u32, gid: u32, groups: &[u32], bnd: u64) -> Result<(), String> {
    if c.uids.iter().any(|u| *u != uid) {
        return Err(format!("its uids are {:?}, not all {uid}", c.uids));
    }
    if c.gids.iter().any(|g| *g != gid) {
        return Err(format!("its gids are {:?}, not all {gid}", c.gids));
    }
    for (set, name) in c.caps.iter().zip(["inheritable", "permitted", "effective"]) {
        if set.iter().any(|w| *w != 0) {
            return Err(format!("it holds {name} capabilities {set:x?}"));
        }
    }
    if c.secbits != 0 {
        return Err(format!("its securebits are {:#x}", c.secbits));
    }
    if let Some(g) = c.groups.iter().find(|g| **g != gid && !groups.contains(g)) {
        return Err(format!("it is in group {g}, which the user is not"));
    }
    let image_bnd = c.bounding();
    if image_bnd & !bnd != 0 {
        return Err(format!(
            "its capability bounding set {image_bnd:#x} is wider than the user's {bnd:#x}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32, cap_eff: u32, groups: &[u32]) -> Creds {
        Creds {
            uids: [uid; 4],
            gids: [100; 4],
            caps: [vec![0], vec![0], vec![cap_eff, 0]],
            cap_bnd: vec![0xffff_ffff, 0x1ff],
            groups: groups.to_vec(),
            ..Creds::default()
        }
    }

    #[test]
    fn credentials_are_checked() {
        let bnd = 0x1ff_ffff_ffffu64;
        let c = creds(1000, 0, &[100, 27]);
        assert_eq!(check(&c, 1000, 100, &[27], bnd), Ok(()));
        let e = check(&c, 1001, 100, &[27], bnd).unwrap_err();
        assert!(e.contains("uids"), "{e}");
        let e = check(&c, 1000, 100, &[], bnd).unwrap_err();
        assert!(e.contains("group 27"), "{e}");
        let e = check(&c, 1000, 100, &[27], 0xff).unwrap_err();
        assert!(e.contains("bounding"), "{e}");
        // The edit of attack (b): CAP_SYS_PTRACE (19) in the effective set.
        let e = check(&creds(1000, 1 << 19, &[]), 1000, 100, &[], bnd).unwrap_err();
        assert!(e.contains("effective"), "{e}");
    }
}
