//! The credentials CRIU recorded for each task of an image (`core-PID.img`: `core_entry`
//! field 5 `thread_core`, its field 10 `creds`): what a restore gives the restored process,
//! and so what the broker checks before it dumps into an image it seals and before it
//! restores one. An image is hostile input: every length is checked, the sizes are bounded.

use crac_criu::criu::rpc::{Reader, Value};
use crac_criu::safe_dir::Dir;

/// CRIU's image magics: the common prefix (`IMG_COMMON_MAGIC`, or `IMG_SERVICE_MAGIC`), then
/// the core image's (`CORE_MAGIC`).
const IMG_COMMON_MAGIC: u32 = 0x5456_4319;
const IMG_SERVICE_MAGIC: u32 = 0x5510_5940;
const CORE_MAGIC: u32 = 0x5505_3847;

/// The largest core image read (they are a few KB).
const MAX_CORE: u64 = 1 << 20;

/// One task's credentials (`creds_entry`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Creds {
    /// real, effective, saved, file-system uid.
    pub uids: [u32; 4],
    /// real, effective, saved, file-system gid.
    pub gids: [u32; 4],
    /// Inheritable, permitted, effective capability sets, each as 32-bit words.
    pub caps: [Vec<u32>; 3],
    /// The bounding set.
    pub cap_bnd: Vec<u32>,
    /// `securebits`.
    pub secbits: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The credentials of every task of the image in `dir` (one per `core-*.img`), by file name.
pub fn read_all(dir: &Dir) -> Result<Vec<(String, Creds)>, String> {
    let names = dir
        .entries()
        .map_err(|e| format!("cannot list the image: {e}"))?;
    let mut out = Vec::new();
    for name in names
        .iter()
        .filter(|n| n.starts_with("core-") && n.ends_with(".img"))
    {
        let f = dir.open_file(name).map_err(|e| format!("{name}: {e}"))?;
        let mut data = Vec::new();
        use std::io::Read;
        f.take(MAX_CORE + 1)
            .read_to_end(&mut data)
            .map_err(|e| format!("{name}: {e}"))?;
        if data.len() as u64 > MAX_CORE {
            return Err(format!("{name} is larger than {MAX_CORE} bytes"));
        }
        out.push((
            name.clone(),
            parse_core(&data).map_err(|e| format!("{name}: {e}"))?,
        ));
    }
    if out.is_empty() {
        return Err("the image has no core-*.img".into());
    }
    Ok(out)
}

/// The credentials in a core image: its magics, then the `core_entry`, length-prefixed.
pub fn parse_core(data: &[u8]) -> Result<Creds, String> {
    let word = |at: usize| -> Result<u32, String> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(|| "truncated".to_owned())
    };
    if !matches!(word(0)?, IMG_COMMON_MAGIC | IMG_SERVICE_MAGIC) || word(4)? != CORE_MAGIC {
        return Err("not a CRIU core image (magic)".into());
    }
    let len = word(8)? as usize;
    let entry = data
        .get(12..12 + len)
        .ok_or("the core entry runs past the end")?;
    let thread_core = field_bytes(entry, 5)?.ok_or("no thread_core")?;
    let creds = field_bytes(thread_core, 10)?.ok_or("no creds")?;
    parse_creds(creds)
}

/// The last occurrence of length-delimited field `want` of a message.
fn field_bytes(msg: &[u8], want: u32) -> Result<Option<&[u8]>, String> {
    let mut r = Reader::new(msg);
    let mut found = None;
    while let Some((f, v)) = r.next_field().map_err(|e| e.0.to_owned())? {
        if let (true, Value::Bytes(b)) = (f == want, v) {
            found = Some(b);
        }
    }
    Ok(found)
}

/// Decodes a `creds_entry`. Repeated integers come packed or one per field; both are read.
fn parse_creds(msg: &[u8]) -> Result<Creds, String> {
    let mut c = Creds::default();
    let mut r = Reader::new(msg);
    while let Some((f, v)) = r.next_field().map_err(|e| e.0.to_owned())? {
        let is_int = matches!(v, Value::Int(_));
        let ints = match v {
            Value::Int(i) => vec![u32::try_from(i).map_err(|_| format!("field {f}: {i}"))?],
            Value::Bytes(b) => packed(b)?,
        };
        let one = || ints.first().copied().unwrap_or(0);
        match f {
            1..=8 if is_int => {
                // uid gid euid egid suid sgid fsuid fsgid
                let i = (f - 1) as usize;
                let slot = if i.is_multiple_of(2) {
                    &mut c.uids
                } else {
                    &mut c.gids
                };
                slot[i / 2] = one();
            }
            9..=11 => c.caps[(f - 9) as usize].extend(&ints),
            12 => c.cap_bnd.extend(&ints),
            13 => c.secbits = one(),
            14 => {
                if c.groups.len() + ints.len() > 65_536 {
                    return Err("more than 65536 groups".into());
                }
                c.groups.extend(&ints);
            }
            _ => {}
        }
    }
    Ok(c)
}

/// A packed run of varints.
fn packed(b: &[u8]) -> Result<Vec<u32>, String> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while !r.is_empty() {
        let v = r.varint().map_err(|e| e.0.to_owned())?;
        out.push(u32::try_from(v).map_err(|_| format!("{v} is not 32-bit"))?);
    }
    Ok(out)
}

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
    let image_bnd = c
        .cap_bnd
        .iter()
        .take(2)
        .enumerate()
        .fold(0u64, |acc, (i, w)| acc | (u64::from(*w) << (32 * i)));
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

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn field(out: &mut Vec<u8>, f: u32, wire: u8) {
        varint(out, u64::from(f << 3 | u32::from(wire)));
    }

    fn bytes(out: &mut Vec<u8>, f: u32, b: &[u8]) {
        field(out, f, 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    /// A core image with these credentials, the way CRIU lays it out.
    fn core(uid: u32, cap_eff: u32, groups: &[u32]) -> Vec<u8> {
        let mut creds = Vec::new();
        for f in 1..=8 {
            field(&mut creds, f, 0);
            varint(&mut creds, u64::from(if f % 2 == 1 { uid } else { 100 }));
        }
        for (f, w) in [
            (9, 0),
            (10, 0),
            (10, 0),
            (11, cap_eff),
            (11, 0),
            (12, 0xffff_ffff),
            (12, 0x1ff),
        ] {
            field(&mut creds, f, 0);
            varint(&mut creds, u64::from(w));
        }
        field(&mut creds, 13, 0);
        varint(&mut creds, 0);
        let mut g = Vec::new();
        for x in groups {
            varint(&mut g, u64::from(*x));
        }
        bytes(&mut creds, 14, &g);
        let mut thread = Vec::new();
        field(&mut thread, 1, 0);
        varint(&mut thread, 0);
        bytes(&mut thread, 10, &creds);
        let mut entry = Vec::new();
        field(&mut entry, 1, 0);
        varint(&mut entry, 1);
        bytes(&mut entry, 5, &thread);
        let mut img = Vec::new();
        img.extend(IMG_COMMON_MAGIC.to_le_bytes());
        img.extend(CORE_MAGIC.to_le_bytes());
        img.extend((entry.len() as u32).to_le_bytes());
        img.extend(entry);
        img
    }

    #[test]
    fn credentials_are_read_and_checked() {
        let bnd = 0x1ff_ffff_ffffu64;
        let c = parse_core(&core(1000, 0, &[100, 27])).unwrap();
        assert_eq!(c.uids, [1000; 4]);
        assert_eq!(c.gids, [100; 4]);
        assert_eq!(c.groups, vec![100, 27]);
        assert_eq!(check(&c, 1000, 100, &[27], bnd), Ok(()));
        assert!(
            check(&c, 1001, 100, &[27], bnd)
                .unwrap_err()
                .contains("uids")
        );
        assert!(
            check(&c, 1000, 100, &[], bnd)
                .unwrap_err()
                .contains("group 27")
        );
        assert!(
            check(&c, 1000, 100, &[27], 0xff)
                .unwrap_err()
                .contains("bounding")
        );
        // The edit of attack (b): CAP_SYS_PTRACE (19) in the effective set.
        let c = parse_core(&core(1000, 1 << 19, &[])).unwrap();
        assert!(
            check(&c, 1000, 100, &[], bnd)
                .unwrap_err()
                .contains("effective")
        );
    }

    #[test]
    fn every_cut_of_a_core_image_is_an_error_never_a_panic() {
        let img = core(1000, 0, &[1, 2, 3]);
        for n in 0..img.len() {
            let _ = parse_core(&img[..n]);
        }
        assert!(parse_core(&img[..img.len() - 1]).is_err());
        assert!(parse_core(b"not an image at all").is_err());
    }
}
