//! Waiting for this process's own pages: a process restored lazily must not be imaged again
//! before its lazy-pages daemon has brought every page in. It runs in the imaged process,
//! before the dump.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};

/// Memory regions of this process whose pages may still be missing: registered with a
/// userfaultfd for missing pages (`um` in `/proc/self/smaps`' `VmFlags`). A lazily restored
/// process has them until its daemon has streamed every page in and let go; CRIU would dump
/// their absent pages as holes, so a checkpoint must not start before they are gone.
fn missing_page_regions(smaps: &str) -> usize {
    smaps
        .lines()
        .filter_map(|l| l.strip_prefix("VmFlags:"))
        .filter(|flags| flags.split_whitespace().any(|f| f == "um"))
        .count()
}

/// Waits (at most `timeout`) until none of this process's memory is still arriving from a lazy
/// restore (memory registered with a userfaultfd for missing pages); a process never
/// restored lazily returns at once. Call it before reading every page of a large state in a
/// restored copy, so the reads do not compete with the lazy-pages daemon's stream.
pub fn wait_own_memory_in(timeout: Duration) -> Result<(), Error> {
    let t = Instant::now();
    loop {
        let smaps = std::fs::read_to_string("/proc/self/smaps").map_err(|e| {
            Error::new(
                ErrorKind::Other,
                format!("cannot read /proc/self/smaps: {e}"),
            )
        })?;
        let left = missing_page_regions(&smaps);
        if left == 0 {
            if t.elapsed() > Duration::from_millis(1) {
                tracing::info!(
                    waited_ms = t.elapsed().as_secs_f64() * 1e3,
                    "waited for the lazy restore's pages before the dump"
                );
            }
            return Ok(());
        }
        if t.elapsed() >= timeout {
            return Err(Error::new(
                ErrorKind::Snapshot,
                format!(
                    "checkpoint refused: this process was restored lazily and {left} memory                      region(s) still wait for pages from its lazy-pages daemon after {:.0} s                      ({}): CRIU would dump the missing pages as zeros; see the daemon's log in                      the image directory it was restored from",
                    timeout.as_secs_f64(),
                    crate::settings::CRIU_TIMEOUT
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// This process's resident memory in bytes (`/proc/self/statm`), if it can be read.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Before the dump, as a JVM collects its garbage before a CRaC checkpoint: memory the
/// allocator holds free (a backlog's buffers, freed after it drained, in the middle of the
/// heap) goes back to the kernel, so the image does not carry it and the process running on
/// does not keep it resident.
pub(crate) fn release_free_heap() {
    // /proc is read only for the debug line (the checkpoint path pays nothing for it otherwise).
    if !tracing::enabled!(tracing::Level::DEBUG) {
        crate::sys::release_free_heap();
        return;
    }
    let before = resident_bytes();
    let t = Instant::now();
    let released = crate::sys::release_free_heap();
    let after = resident_bytes();
    tracing::debug!(
        released,
        resident_before = before,
        resident_after = after,
        took_ms = t.elapsed().as_secs_f64() * 1e3,
        "free heap given back before the dump"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_still_waiting_for_pages_are_counted() {
        let smaps = "\
7f00-7f10 rw-p 00000000 00:00 0
Size:                 64 kB
VmFlags: rd wr mr mw me ac um
7f10-7f20 rw-p 00000000 00:00 0
VmFlags: rd wr mr mw me ac sd
7f20-7f30 rw-p 00000000 00:00 0
VmFlags: rd wr um mr
";
        assert_eq!(missing_page_regions(smaps), 2);
        assert_eq!(missing_page_regions("VmFlags: rd wr umx uw\n"), 0);
        // This test process was not restored: nothing to wait for.
        assert_eq!(
            missing_page_regions(&std::fs::read_to_string("/proc/self/smaps").unwrap()),
            0
        );
        assert!(wait_own_memory_in(Duration::ZERO).is_ok());
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn free_memory_in_the_middle_of_the_heap_goes_back_before_the_dump() {
        // 100 MiB in heap-sized blocks (under glibc's mmap threshold), every 16th kept so
        // that what is freed lies between blocks in use: free() alone gives none of it back.
        let mut blocks: Vec<Vec<u8>> = (0..1600).map(|_| vec![1u8; 64 * 1024]).collect();
        let mut i = 0;
        blocks.retain(|_| {
            i += 1;
            i % 16 == 0
        });
        let before = resident_bytes().unwrap();
        release_free_heap();
        let after = resident_bytes().unwrap();
        assert!(
            before.saturating_sub(after) >= 60 << 20,
            "resident {before} bytes before, {after} after"
        );
        assert_eq!(blocks.len(), 100);
    }
}
