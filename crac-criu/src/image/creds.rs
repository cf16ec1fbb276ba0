//! The credentials CRIU recorded for each task of an image (`core-PID.img`: `core_entry`
//! field 5 `thread_core`, its field 10 `creds`): what a restore gives the restored process.
//! The broker checks them before it dumps into an image it seals and before it restores one;
//! `crac restore` checks that criu can give them back at all (a capability criu lacks makes its
//! restorer hang). An image is hostile input: every length is checked, the sizes are bounded.

use crate::criu::rpc::{Reader, Value};
use crate::safe_dir::Dir;

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
    /// The ambient set (criu 3.19 and newer record it).
    pub cap_amb: Vec<u32>,
    /// `no_new_privs`, where criu recorded it.
    pub no_new_privs: Option<bool>,
}

impl Creds {
    /// The inheritable, permitted and effective sets as 64-bit masks.
    pub fn sets(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| mask(&self.caps[i]))
    }

    /// The bounding set as a 64-bit mask.
    pub fn bounding(&self) -> u64 {
        mask(&self.cap_bnd)
    }
}

/// A capability set recorded as 32-bit words, as one mask (capabilities 0–63).
pub fn mask(words: &[u32]) -> u64 {
    words
        .iter()
        .take(2)
        .enumerate()
        .fold(0u64, |acc, (i, w)| acc | (u64::from(*w) << (32 * i)))
}

/// The capabilities' names as `--cap-add` takes them, by number (`CAP_` left off).
const CAP_NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The names of the capabilities in `set`, lowest first (`cap N` for one this list lacks).
pub fn cap_names(set: u64) -> Vec<String> {
    (0..64)
        .filter(|b| set & (1u64 << b) != 0)
        .map(|b| match CAP_NAMES.get(b) {
            Some(n) => (*n).to_owned(),
            None => format!("cap {b}"),
        })
        .collect()
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
            18 if is_int => c.no_new_privs = Some(one() != 0),
            19 => c.cap_amb.extend(&ints),
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
        // secbits, then no_new_privs and the ambient set (criu 4 writes them after the groups,
        // field numbers decide).
        for (f, v) in [(13, 0), (18, 1), (19, 1 << 19), (19, 0)] {
            field(&mut creds, f, 0);
            varint(&mut creds, v);
        }
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
    fn credentials_are_read() {
        let c = parse_core(&core(1000, 0, &[100, 27])).unwrap();
        assert_eq!(c.uids, [1000; 4]);
        assert_eq!(c.gids, [100; 4]);
        assert_eq!(c.groups, vec![100, 27]);
        assert_eq!(c.bounding(), 0x1ff_ffff_ffff);
        assert_eq!(c.sets(), [0; 3]);
        assert_eq!((c.no_new_privs, mask(&c.cap_amb)), (Some(true), 1 << 19));
        let c = parse_core(&core(1000, 1 << 19, &[])).unwrap();
        assert_eq!(c.sets()[2], 1 << 19);
        assert_eq!(
            cap_names(1 << 19 | 1 << 40 | 1 << 50),
            ["SYS_PTRACE", "CHECKPOINT_RESTORE", "cap 50"]
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
