//! Whether memory is in: a test program restored lazily waits, without touching it, until
//! every page of its warm state is resident (`/proc/self/pagemap`, bit 63), so the checksum it
//! computes next reads pages the lazy-pages daemon streamed in, not pages its own faults
//! fetched.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
/// Pagemap entries read at once (64 KiB of entries: 32 MiB of memory).
const CHUNK: usize = 8192;

/// How many of the pages of `[addr, addr + len)` are resident, counted from `from` (a page
/// index into the range) up to the first that is not: `(first missing page, pages)`.
fn first_missing(pagemap: &File, addr: usize, len: usize, from: usize) -> std::io::Result<usize> {
    let first = addr / PAGE;
    let pages = (addr + len).div_ceil(PAGE) - first;
    let mut i = from;
    let mut buf = vec![0u8; CHUNK * 8];
    while i < pages {
        let n = (pages - i).min(CHUNK);
        let got = pagemap.read_at(&mut buf[..n * 8], ((first + i) * 8) as u64)?;
        if got < n * 8 {
            return Err(std::io::Error::other("short pagemap read"));
        }
        for k in 0..n {
            let e = u64::from_ne_bytes(buf[k * 8..k * 8 + 8].try_into().expect("8 bytes"));
            if e >> 63 == 0 {
                return Ok(i + k);
            }
        }
        i += n;
    }
    Ok(pages)
}

/// Waits until every page of `[addr, addr + len)` of this process is resident; how long that
/// took. Never touches the memory itself. Errors after `timeout`.
pub fn wait_resident(addr: usize, len: usize, timeout: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    let pagemap = File::open("/proc/self/pagemap").map_err(|e| format!("pagemap: {e}"))?;
    let pages = (addr + len).div_ceil(PAGE) - addr / PAGE;
    let mut from = 0;
    loop {
        from = first_missing(&pagemap, addr, len, from).map_err(|e| format!("pagemap: {e}"))?;
        if from >= pages {
            return Ok(t.elapsed());
        }
        if t.elapsed() > timeout {
            return Err(format!(
                "{from} of {pages} pages resident after {:.0} s",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The address range of a slice's memory.
pub fn range_of<T>(s: &[T]) -> (usize, usize) {
    (s.as_ptr() as usize, std::mem::size_of_val(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_memory_is_resident() {
        let v = vec![1u64; 3 << 17]; // 3 MiB, every page written
        let (a, l) = range_of(&v);
        assert!(wait_resident(a, l, Duration::from_secs(5)).is_ok());
        // A large zeroed allocation is mapped untouched: not resident, and not touched here.
        let z = vec![0u8; 64 << 20];
        let (a, l) = range_of(&z);
        let e = wait_resident(a, l, Duration::from_millis(20)).unwrap_err();
        assert!(e.contains("pages resident after"), "{e}");
        // The allocator writes its header in the first page (and a transparent huge page may
        // bring its neighbours in), so look in the middle, which nothing has touched.
        let pages = (a + l).div_ceil(PAGE) - a / PAGE;
        let mid = pages / 2;
        assert_eq!(
            first_missing(&File::open("/proc/self/pagemap").unwrap(), a, l, mid).unwrap(),
            mid
        );
    }
}
