//! CRIU's own account of a dump (`stats-dump` in the image directory: `stats_entry`, its
//! `dump_stats_entry`): how long the process was being frozen, frozen, and how long its pages
//! took to be copied out and written. Read to report where a checkpoint's time goes. The file
//! is hostile input like every image file: its size is bounded and every length checked.

use std::io::Read;

use super::rpc::{Reader, Value};
use crate::safe_dir::Dir;

/// CRIU's magics of a service image (`IMG_SERVICE_MAGIC`) and of the stats image.
const IMG_SERVICE_MAGIC: u32 = 0x5510_5940;
const STATS_MAGIC: u32 = 0x5709_3306;

/// The largest stats image read (it is tens of bytes).
const MAX_STATS: u64 = 4096;

/// What CRIU measured of a dump (its times in microseconds, as it records them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Freezing the tree (the freezer or `PTRACE_INTERRUPT`s) until it was frozen.
    pub freezing_us: u64,
    /// The tree frozen: from frozen until it was let run again (leave-running) or killed.
    pub frozen_us: u64,
    /// Copying the pages out of the process (into pipes, `vmsplice`).
    pub memdump_us: u64,
    /// Writing the pages to the image.
    pub memwrite_us: u64,
    /// Pages looked at.
    pub pages_scanned: u64,
    /// Pages written.
    pub pages_written: u64,
}

impl DumpStats {
    /// CRIU's account of the dump in `dir`, if it left one that parses.
    pub fn read(dir: &Dir) -> Option<DumpStats> {
        let mut data = Vec::new();
        dir.open_file("stats-dump")
            .ok()?
            .take(MAX_STATS)
            .read_to_end(&mut data)
            .ok()?;
        parse(&data)
    }

    /// One line for a log or a terminal: where the frozen time went.
    pub fn summary(&self) -> String {
        let ms = |us: u64| us as f64 / 1e3;
        format!(
            "frozen {:.1} ms (freezing {:.1}, pages copied out {:.1}, written {:.1}; {} pages)",
            ms(self.frozen_us),
            ms(self.freezing_us),
            ms(self.memdump_us),
            ms(self.memwrite_us),
            self.pages_written
        )
    }
}

/// Parses a stats image: its two magics, then the `stats_entry`, length-prefixed.
fn parse(data: &[u8]) -> Option<DumpStats> {
    let word = |at: usize| {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    if word(0)? != IMG_SERVICE_MAGIC || word(4)? != STATS_MAGIC {
        return None;
    }
    let len = word(8)? as usize;
    let entry = data.get(12..12usize.checked_add(len)?)?;
    let mut r = Reader::new(entry);
    let mut dump = None;
    while let Some((f, v)) = r.next_field().ok()? {
        if let (1, Value::Bytes(b)) = (f, v) {
            dump = Some(b);
        }
    }
    let mut s = DumpStats::default();
    let mut r = Reader::new(dump?);
    while let Some((f, v)) = r.next_field().ok()? {
        let Value::Int(x) = v else { continue };
        match f {
            1 => s.freezing_us = x,
            2 => s.frozen_us = x,
            3 => s.memdump_us = x,
            4 => s.memwrite_us = x,
            5 => s.pages_scanned = x,
            7 => s.pages_written = x,
            _ => {}
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `stats-dump` CRIU 4.2.1 wrote here (a 8 MB test service).
    const SEEN: [u8; 49] = [
        0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0x25, 0x00, 0x00, 0x00, 0x0a, 0x23, 0x08,
        0xed, 0x02, 0x10, 0xbc, 0xc4, 0x01, 0x18, 0x86, 0x52, 0x20, 0xe4, 0x2d, 0x28, 0xf7, 0x10,
        0x30, 0x00, 0x38, 0xd6, 0x10, 0x40, 0x00, 0x48, 0x00, 0x50, 0x08, 0x58, 0x08, 0x60, 0x00,
        0x68, 0x00, 0x70, 0x00,
    ];

    #[test]
    fn criu_s_stats_are_read() {
        let s = parse(&SEEN).unwrap();
        assert_eq!(
            s,
            DumpStats {
                freezing_us: 365,
                frozen_us: 25148,
                memdump_us: 10502,
                memwrite_us: 5860,
                pages_scanned: 2167,
                pages_written: 2134,
            }
        );
        assert!(
            s.summary().starts_with("frozen 25.1 ms (freezing 0.4"),
            "{}",
            s.summary()
        );
    }

    #[test]
    fn every_cut_and_a_wrong_magic_are_none_never_a_panic() {
        for n in 0..SEEN.len() {
            let _ = parse(&SEEN[..n]);
        }
        assert!(parse(&SEEN[..20]).is_none());
        let mut wrong = SEEN;
        wrong[4] ^= 1;
        assert!(parse(&wrong).is_none());
        let mut long = SEEN;
        long[8] = 0xff;
        assert!(parse(&long).is_none());
    }
}
