//! What `WipeOnFree` costs: an allocation and its free, and a `Vec` grown by pushes (every
//! growth a `realloc`), with the system allocator alone and wrapped. Medians of 9 runs; a
//! markdown table on stdout.
//!
//! ```text
//! cargo bench -p crac-api --bench wipe
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::{Duration, Instant};

use crac_api::WipeOnFree;

/// Median time of `n` calls of `f`, over 9 runs.
fn median(n: u32, mut f: impl FnMut()) -> Duration {
    let mut runs: Vec<Duration> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed() / n
        })
        .collect();
    runs.sort();
    runs[4]
}

/// One allocation of `size` bytes, touched, then freed.
fn alloc_free(a: &impl GlobalAlloc, size: usize) {
    let l = Layout::from_size_align(size, 8).expect("layout");
    // SAFETY: a nonzero-size layout; written inside it and freed with it.
    unsafe {
        let p = a.alloc(l);
        assert!(!p.is_null());
        p.write_volatile(1);
        a.dealloc(black_box(p), l);
    }
}

/// A vector grown from empty to `size` bytes by doubling reallocations, then freed.
fn grow(a: &impl GlobalAlloc, size: usize) {
    let mut cap = 64;
    let mut l = Layout::from_size_align(cap, 8).expect("layout");
    // SAFETY: every block is used with the layout it was allocated or reallocated with.
    unsafe {
        let mut p = a.alloc(l);
        while cap < size {
            p = a.realloc(p, l, cap * 2);
            cap *= 2;
            l = Layout::from_size_align(cap, 8).expect("layout");
            p.add(cap - 1).write_volatile(1);
        }
        a.dealloc(black_box(p), l);
    }
}

fn row(what: &str, plain: Duration, wiped: Duration) {
    println!(
        "| {what} | {} ns | {} ns | {:.2}x |",
        plain.as_nanos(),
        wiped.as_nanos(),
        wiped.as_secs_f64() / plain.as_secs_f64()
    );
}

fn main() {
    let wiping = WipeOnFree(System);
    println!("| operation | system | WipeOnFree | ratio |");
    println!("|---|---|---|---|");
    for size in [64usize, 1024, 16 * 1024, 1024 * 1024] {
        let n = (64 * 1024 * 1024 / size).clamp(16, 100_000) as u32;
        row(
            &format!("alloc+free {size} B"),
            median(n, || alloc_free(&System, size)),
            median(n, || alloc_free(&wiping, size)),
        );
        row(
            &format!("Vec grown to {size} B"),
            median(n, || grow(&System, size)),
            median(n, || grow(&wiping, size)),
        );
    }
}
