//! Cost of registration and of a noop checkpoint cycle as the number of resources grows.
//!
//! `cargo bench -p crac-api --bench registry` prints one row per size: the median of several
//! rounds, total and per resource. Linear growth shows as a flat per-resource column.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crac_api::{Context, Core, Outcome, Resource, ResourceError};
use crac_noop as _;

struct Counter(AtomicU64);

impl Resource for Counter {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a quick round.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let rounds = if quick { 1 } else { 9 };
    println!(
        "| resources | register total | register / resource | noop checkpoint total | checkpoint / resource |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for &n in sizes {
        let mut reg = Vec::new();
        let mut cp = Vec::new();
        for _ in 0..rounds {
            let ctx = Arc::new(Context::new("bench"));
            let resources: Vec<Arc<Counter>> = (0..n)
                .map(|_| Arc::new(Counter(AtomicU64::new(0))))
                .collect();
            let t = Instant::now();
            for r in &resources {
                ctx.register(r);
            }
            reg.push(t.elapsed());
            Core::global_context().register(&ctx);
            let t = Instant::now();
            let outcome = Core::checkpoint_restore().expect("noop checkpoint");
            cp.push(t.elapsed());
            assert_eq!(outcome, Outcome::NoImage);
            assert!(resources.iter().all(|r| r.0.load(Ordering::Relaxed) == 2));
        }
        let (r, c) = (median(reg), median(cp));
        println!(
            "| {n} | {:.3} ms | {:.1} ns | {:.3} ms | {:.1} ns |",
            r.as_secs_f64() * 1e3,
            r.as_nanos() as f64 / n as f64,
            c.as_secs_f64() * 1e3,
            c.as_nanos() as f64 / n as f64
        );
    }
}
