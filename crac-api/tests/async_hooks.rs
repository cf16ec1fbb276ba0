//! Async hooks and the awaitable checkpoint on a real tokio runtime (a current-thread one, the
//! hardest case: one thread runs every task): hooks run on the registering runtime, in the
//! context's order, under the same timeout and failure rules as blocking hooks; the runtime is
//! never blocked by the checkpoint (a 1 ms ticker keeps ticking while a hook awaits).

mod common;

use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::*;
use crac_api::{AsyncResource, BoxFuture, CheckpointError, Core, ResourceError, Spawner};
use parking_lot::Mutex;

/// Records its hooks (id, phase, the thread its future ran on); its `before_checkpoint`
/// awaits a timer first.
struct AsyncRecorder {
    id: u64,
    log: Log,
    threads: Arc<Mutex<Vec<ThreadId>>>,
    wait: Duration,
    hang: bool,
}

impl AsyncResource for AsyncRecorder {
    fn before_checkpoint(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>> {
        Box::pin(async move {
            if self.hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(self.wait).await;
            self.threads.lock().push(std::thread::current().id());
            self.log.lock().push(Call::Before(self.id));
            Ok(())
        })
    }

    fn after_restore(self: Arc<Self>) -> BoxFuture<Result<(), ResourceError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.threads.lock().push(std::thread::current().id());
            self.log.lock().push(Call::After(self.id));
            Ok(())
        })
    }

    fn name(&self) -> String {
        format!("async-{}", self.id)
    }
}

fn recorder(
    id: u64,
    log: &Log,
    threads: &Arc<Mutex<Vec<ThreadId>>>,
    wait_ms: u64,
) -> Arc<AsyncRecorder> {
    Arc::new(AsyncRecorder {
        id,
        log: log.clone(),
        threads: threads.clone(),
        wait: Duration::from_millis(wait_ms),
        hang: false,
    })
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn spawner() -> Spawner {
    let handle = tokio::runtime::Handle::current();
    Spawner::new(move |f| {
        handle.spawn(f);
    })
}

#[test]
fn async_hooks_run_on_their_runtime_in_order_while_it_keeps_ticking() {
    let _serial = SERIAL.lock();
    set_mode(Mode::NoImage);
    let rt = current_thread_runtime();
    let runtime_thread = std::thread::current().id();
    rt.block_on(async {
        let log: Log = Arc::default();
        let threads = Arc::default();
        let a = recorder(1, &log, &threads, 60);
        let sync = Recorder::new(2, &log);
        let b = recorder(3, &log, &threads, 60);
        let ctx = Core::global_context();
        ctx.register_async(&a, crac_api::Priority::Application, &spawner());
        ctx.register(&sync);
        ctx.register_async(&b, crac_api::Priority::Application, &spawner());

        // A 1 ms ticker on the same (only) thread: its longest gap is how long the runtime was
        // kept from running tasks.
        let gap = Arc::new(Mutex::new(Duration::ZERO));
        let g = gap.clone();
        let ticker = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let now = Instant::now();
                let mut m = g.lock();
                *m = (*m).max(now - last);
                last = now;
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        *gap.lock() = Duration::ZERO;
        let outcome = Core::checkpoint_restore_async().await;
        ticker.abort();
        assert!(outcome.is_ok(), "{outcome:?}");
        // Reverse registration order before, registration order after; async and blocking
        // hooks interleaved as registered.
        assert_eq!(befores(&log), vec![3, 2, 1]);
        assert_eq!(afters(&log), vec![1, 2, 3]);
        assert!(
            threads.lock().iter().all(|t| *t == runtime_thread),
            "every async hook ran on the registering runtime's thread"
        );
        let gap = *gap.lock();
        assert!(
            gap < Duration::from_millis(20),
            "the runtime was blocked for {gap:?} while two hooks awaited 60 ms each"
        );
    });
}

#[test]
fn an_async_hook_that_never_completes_fails_the_checkpoint_by_name() {
    let _serial = SERIAL.lock();
    set_mode(Mode::NoImage);
    let rt = current_thread_runtime();
    rt.block_on(async {
        let log: Log = Arc::default();
        let hangs = Arc::new(AsyncRecorder {
            id: 7,
            log: log.clone(),
            threads: Arc::default(),
            wait: Duration::ZERO,
            hang: true,
        });
        let ok = Recorder::new(8, &log);
        let ctx = Core::global_context().context(crac_api::Priority::Application);
        ctx.register_async_with_timeout(&hangs, &spawner(), Duration::from_millis(200));
        ctx.register(&ok);
        let started = Instant::now();
        let err = Core::checkpoint_restore_async().await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("async-7"), "{text}");
        assert!(
            matches!(err, CheckpointError::Resources { outcome: None, .. }),
            "no image after a failed before_checkpoint: {err:?}"
        );
        // The other resource was told before and after.
        assert_eq!(befores(&log), vec![8]);
        assert_eq!(afters(&log), vec![8]);
        assert!(started.elapsed() < Duration::from_secs(30));
    });
}

#[test]
fn a_hook_whose_future_is_dropped_fails_at_once_and_a_dropped_resource_is_not_called() {
    let _serial = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log: Log = Arc::default();
    let threads = Arc::default();
    // A runtime that is gone: its spawner drops every future it is given.
    let gone = Spawner::new(drop);
    let r = recorder(9, &log, &threads, 0);
    Core::global_context().register_async(&r, crac_api::Priority::Application, &gone);
    let err = futures_lite_block_on(Core::checkpoint_restore_async()).unwrap_err();
    assert!(err.to_string().contains("dropped"), "{err}");
    drop(r);
    let dropped = recorder(10, &log, &threads, 0);
    Core::global_context().register_async(&dropped, crac_api::Priority::Application, &gone);
    drop(dropped);
    assert!(futures_lite_block_on(Core::checkpoint_restore_async()).is_ok());
    assert!(log.lock().is_empty(), "{:?}", log.lock());
}

/// Runs a future to completion on this thread without a runtime (the checkpoint future needs
/// none: it is woken by the thread that runs the cycle).
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    current_thread_runtime().block_on(f)
}
