//! An opt-in allocator that overwrites every block with zeros when it is given back, so that
//! what a program freed (a parsed private key, a decrypted token, a password's copies) is not
//! in the next checkpoint's image.
//!
//! Why an allocator: secrets pass through code that is not ours (a TLS library parses a key
//! into big-number limbs in blocks of its own and frees them unwiped), and the heap keeps
//! freed bytes until they are reused. An image copies the heap whole. `zeroize` covers the
//! buffers one owns; this covers the rest. The cost is a zeroing write of every freed block
//! (and a copy on every `realloc`, which must not free the old block unwiped): measure it on
//! your workload.
//!
//! What it does not cover: bytes still in use (a connection's live key: close connections
//! before a checkpoint, as the Kafka client does), stacks (a secret in a dead stack frame),
//! memory a library maps itself, and blocks freed by code that bypasses the global allocator.

use std::alloc::{GlobalAlloc, Layout, System};

/// A global allocator that zeroes each block before the inner allocator (the system's by
/// default) takes it back, so a freed secret is not in an image. The cost is a zeroing write
/// of every freed block and a copy on every `realloc`. Not covered: memory still in use,
/// stacks, memory a library maps itself.
///
/// ```
/// #[global_allocator]
/// static ALLOC: crac_api::WipeOnFree = crac_api::WipeOnFree(std::alloc::System);
/// # fn main() { let v = vec![1u8; 64]; drop(v); }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct WipeOnFree<A = System>(pub A);

// SAFETY: every method forwards to the inner allocator with the caller's own pointer and
// layout, which `GlobalAlloc`'s contract makes valid; `dealloc` first writes zeros to exactly
// the `layout.size()` bytes of the block the caller hands back (allocated with that layout, so
// ours to write), and `realloc` copies the overlapping prefix between two live blocks.
unsafe impl<A: GlobalAlloc> GlobalAlloc for WipeOnFree<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` is a live block of `layout` (the caller's guarantee), ours until freed.
        unsafe {
            wipe(ptr, layout.size());
            self.0.dealloc(ptr, layout);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Not the inner `realloc`: it may move the block and free the old one unwiped.
        // SAFETY: `new_size` with the old alignment is a valid layout (`realloc`'s contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid, nonzero-size layout (the contract again).
        let new = unsafe { self.0.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct; the prefix fits both.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Writes zeros over `n` bytes at `ptr` with volatile stores (word by word where aligned),
/// which the compiler may not drop although the block is freed right after.
///
/// # Safety
/// `ptr..ptr + n` must be writable.
unsafe fn wipe(ptr: *mut u8, n: usize) {
    let mut i = 0;
    // SAFETY (all three loops): every address written is inside `ptr..ptr + n`.
    while i < n && (ptr as usize + i) % 8 != 0 {
        unsafe { ptr.add(i).write_volatile(0) };
        i += 1;
    }
    while i + 8 <= n {
        unsafe { ptr.add(i).cast::<u64>().write_volatile(0) };
        i += 8;
    }
    while i < n {
        unsafe { ptr.add(i).write_volatile(0) };
        i += 1;
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An inner allocator that records what each block held when it was given back.
    struct Recording(Mutex<Vec<Vec<u8>>>);

    // SAFETY: forwards to the system allocator; reads a block only before freeing it.
    unsafe impl GlobalAlloc for Recording {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let seen = unsafe { std::slice::from_raw_parts(ptr, layout.size()) }.to_vec();
            self.0.lock().unwrap().push(seen);
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[test]
    fn every_block_is_zero_when_the_inner_allocator_gets_it_back() {
        let a = WipeOnFree(Recording(Mutex::new(Vec::new())));
        for (size, align) in [(1, 1), (7, 1), (64, 8), (4096, 16), (100_003, 8)] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a nonzero-size layout; the block is written inside its size and freed
            // with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                std::ptr::write_bytes(p, 0xA5, size);
                // Grown, then shrunk: the old blocks go back wiped too.
                let p = a.realloc(p, l, size * 2);
                std::ptr::write_bytes(p, 0x5A, size * 2);
                let l2 = Layout::from_size_align(size * 2, align).unwrap();
                let p = a.realloc(p, l2, size);
                assert_eq!(*p, 0x5A);
                a.dealloc(p, l);
            }
        }
        let seen = a.0.0.lock().unwrap();
        assert_eq!(seen.len(), 15);
        for b in seen.iter() {
            assert!(b.iter().all(|x| *x == 0), "a block of {} bytes", b.len());
        }
    }
}
