//! Freeing large buffers without moving glibc's mmap threshold.
//!
//! glibc maps allocations above its mmap threshold (128 KiB at start) on their own, and freeing
//! one raises the threshold to its size. From then on, buffers up to that size (batches grown
//! to 1 MiB, their callback lists) come from the heap arenas, whose holes glibc keeps: peak
//! RSS of a producer with growing batches went 4-15 MB past `buffer.memory` (bench_producer,
//! 1 broker, 32 MiB). Shrunk to one element first (`mremap` of the mapping to one page), a
//! large buffer is unmapped without moving the threshold. Other allocators pay one `realloc`.

/// Buffers from this size on are mapped by glibc at its initial threshold.
const LARGE: usize = 128 * 1024;

/// Empties `v` and, if its allocation is large, shrinks it to one element, so that the drop
/// that follows frees a small block.
pub(crate) fn release_large<T>(v: &mut Vec<T>) {
    v.clear();
    if v.capacity().saturating_mul(std::mem::size_of::<T>()) >= LARGE {
        v.shrink_to(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_shrink_small_ones_stay() {
        let mut big = vec![7u8; LARGE];
        release_large(&mut big);
        assert!(big.is_empty() && big.capacity() < 64, "{}", big.capacity());
        let mut small: Vec<u64> = Vec::with_capacity(100);
        small.push(1);
        release_large(&mut small);
        assert!(small.is_empty() && small.capacity() == 100);
    }
}
