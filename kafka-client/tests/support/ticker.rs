//! A 1 ms ticker on the current tokio runtime: its longest gap is how long the runtime was kept
//! from running its tasks (the async API's tests: nothing of ours may block a runtime thread).
// Not every test binary that includes `support` ticks.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The longest gap between two ticks since the last [`Ticker::reset`].
pub struct Ticker {
    gap: Arc<Mutex<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Ticker {
    /// Starts ticking on the current runtime.
    pub fn start() -> Ticker {
        let gap = Arc::new(Mutex::new(Duration::ZERO));
        let g = gap.clone();
        let task = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let now = Instant::now();
                let mut m = g.lock();
                *m = (*m).max(now - last);
                last = now;
            }
        });
        Ticker { gap, task }
    }

    /// Forgets the gaps so far (the runtime's start).
    pub fn reset(&self) {
        *self.gap.lock() = Duration::ZERO;
    }

    /// Stops and returns the longest gap.
    pub fn stop(self) -> Duration {
        self.task.abort();
        *self.gap.lock()
    }
}
