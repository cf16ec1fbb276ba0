//! Large buffers that neither move glibc's mmap threshold nor get mapped per batch: lists
//! that grow in chunks under the threshold ([`Chunked`]), and a release for what is large.
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

/// Chunks after a list's first allocation hold this many bytes: under glibc's mmap threshold,
/// so they come from the heap and the next batches reuse them warm.
const CHUNK_BYTES: usize = 64 * 1024;

/// A list kept in pieces: a first allocation sized by its owner, then chunks of
/// [`CHUNK_BYTES`] each (a run of elements larger than that gets a chunk of its own size).
///
/// A batch held back while its broker's window is full keeps growing (`batch.grow.max.bytes`,
/// to 1 MiB by default). As one `Vec` past 128 KiB, each such batch was a mapping of its own,
/// faulted in page by page and unmapped after its acknowledgement: 3x the page faults and 30 %
/// more CPU per record at 100 B (bench_producer, 6a5c3d0 against fc36e44). In chunks, growing
/// copies nothing, and the memory a batch holds is what it wrote plus one chunk's slack. The
/// chunks are all of one size so that any freed one fits the next: grown by a quarter of the
/// list (4 KiB to 64 KiB), the holes between the chunks of batches freed at different times
/// kept peak RSS 2 MiB higher (6 partitions, 1 KB records, acks=all, 32 MiB buffer).
#[derive(Debug)]
pub(crate) struct Chunked<T> {
    first: Vec<T>,
    rest: Vec<Vec<T>>,
    /// Elements and capacity of every chunk but the last, so `len` and `capacity` cost no
    /// walk over the chunks.
    closed_len: usize,
    closed_capacity: usize,
}

impl<T> Chunked<T> {
    /// An empty list whose first chunk has room for `capacity` elements.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            first: Vec::with_capacity(capacity),
            rest: Vec::new(),
            closed_len: 0,
            closed_capacity: 0,
        }
    }

    fn last(&self) -> &Vec<T> {
        self.rest.last().unwrap_or(&self.first)
    }

    /// Elements held.
    pub(crate) fn len(&self) -> usize {
        self.closed_len + self.last().len()
    }

    /// Elements allocated.
    pub(crate) fn capacity(&self) -> usize {
        self.closed_capacity + self.last().capacity()
    }

    /// Elements the next [`room`](Self::room)`(n)` allocates: 0 when the last chunk has room.
    pub(crate) fn growth(&self, n: usize) -> usize {
        let last = self.last();
        if last.capacity() - last.len() >= n {
            return 0;
        }
        n.max((CHUNK_BYTES / std::mem::size_of::<T>().max(1)).max(1))
    }

    /// The chunk that takes `n` more elements side by side without moving any: the last one,
    /// or a new one.
    pub(crate) fn room(&mut self, n: usize) -> &mut Vec<T> {
        let grow = self.growth(n);
        if grow > 0 {
            let (len, capacity) = (self.last().len(), self.last().capacity());
            self.closed_len += len;
            self.closed_capacity += capacity;
            self.rest.push(Vec::with_capacity(grow));
        }
        self.rest.last_mut().unwrap_or(&mut self.first)
    }

    /// Adds one element.
    pub(crate) fn push(&mut self, value: T) {
        self.room(1).push(value);
    }

    /// The first chunk (always allocated, possibly empty).
    pub(crate) fn first_mut(&mut self) -> &mut Vec<T> {
        &mut self.first
    }

    /// The first chunk and the others, as [`BatchBytes`](crate::protocol::record::BatchBytes)
    /// borrows them.
    pub(crate) fn parts(&self) -> (&[T], &[Vec<T>]) {
        (&self.first, &self.rest)
    }

    /// Moves every element out, in order, into `f`; the chunks are freed as they empty.
    pub(crate) fn drain_with(&mut self, mut f: impl FnMut(T)) {
        self.first.drain(..).for_each(&mut f);
        release_large(&mut self.first);
        for mut chunk in std::mem::take(&mut self.rest) {
            chunk.drain(..).for_each(&mut f);
            release_large(&mut chunk);
        }
        self.closed_len = 0;
        self.closed_capacity = 0;
    }
}

impl<T> Drop for Chunked<T> {
    /// A chunk past the threshold (a first allocation that large, a record larger than a
    /// chunk) is freed without moving it.
    fn drop(&mut self) {
        release_large(&mut self.first);
        self.rest.iter_mut().for_each(release_large);
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

    #[test]
    fn a_chunked_list_grows_by_chunks_under_the_threshold_and_moves_nothing() {
        let mut list: Chunked<u64> = Chunked::with_capacity(100);
        let first = list.parts().0.as_ptr();
        for i in 0..100_000u64 {
            let before = list.capacity();
            let growth = list.growth(1);
            list.push(i);
            assert_eq!(list.capacity(), before + growth);
        }
        assert_eq!(list.len(), 100_000);
        assert_eq!(list.parts().0.as_ptr(), first, "the first chunk moved");
        let (head, rest) = list.parts();
        assert_eq!(head.len(), 100);
        for chunk in rest {
            assert!(chunk.capacity() * 8 <= CHUNK_BYTES, "{}", chunk.capacity());
        }
        // Slack: at most one chunk's.
        assert!(list.capacity() - list.len() <= CHUNK_BYTES / 8);
        let mut next = 0;
        list.drain_with(|v| {
            assert_eq!(v, next);
            next += 1;
        });
        // The first chunk stays (the small one it was), the others are freed.
        assert_eq!((next, list.len(), list.capacity()), (100_000, 0, 100));
    }

    #[test]
    fn a_run_larger_than_a_chunk_gets_a_chunk_of_its_own() {
        let mut list: Chunked<u8> = Chunked::with_capacity(16);
        list.room(10).extend_from_slice(&[1; 10]);
        let run = list.room(200_000);
        assert!(run.is_empty() && run.capacity() >= 200_000);
        run.extend_from_slice(&[2; 200_000]);
        list.room(6).extend_from_slice(&[3; 6]);
        assert_eq!(list.len(), 200_016);
        let (head, rest) = list.parts();
        assert_eq!((head.len(), rest.len(), rest[0].len()), (10, 2, 200_000));
    }
}
