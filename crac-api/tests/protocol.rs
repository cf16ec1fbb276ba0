//! The checkpoint protocol of DESIGN.md section 1, through `Core::checkpoint_restore()`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use common::*;
use crac_api::{CheckpointError, Context, Core, Outcome, Phase, Priority, Resource, ResourceError};
use parking_lot::Mutex;

fn nested(name: &str) -> Arc<Context> {
    let ctx = Arc::new(Context::new(name));
    Core::global_context().register(&ctx);
    ctx
}

#[test]
fn a_thousand_resources_in_the_promised_order() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let ctx = nested("thousand");
    let rs: Vec<_> = (0..1000).map(|i| Recorder::new(i, &log)).collect();
    for r in &rs {
        ctx.register(r);
    }
    assert_eq!(Core::checkpoint_restore().unwrap(), Outcome::NoImage);
    let expected_before: Vec<u64> = (0..1000).rev().collect();
    let expected_after: Vec<u64> = (0..1000).collect();
    assert_eq!(befores(&log), expected_before);
    assert_eq!(afters(&log), expected_after);
    // Every before comes before every after.
    assert!(matches!(log.lock()[999], Call::Before(0)));
}

#[test]
fn priority_levels_application_first_file_descriptors_last() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let fd = Recorder::new(3, &log);
    let net = Recorder::new(2, &log);
    let app = Recorder::new(1, &log);
    let g = Core::global_context();
    g.register_with_priority(&fd, Priority::FileDescriptors);
    g.register_with_priority(&net, Priority::Network);
    g.register(&app);
    Core::checkpoint_restore().unwrap();
    assert_eq!(befores(&log), vec![1, 2, 3]);
    assert_eq!(afters(&log), vec![3, 2, 1]);
}

#[test]
fn a_dropped_resource_is_never_called() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let ctx = nested("dropping");
    let mut rs: Vec<_> = (0..10).map(|i| Recorder::new(i, &log)).collect();
    for r in &rs {
        ctx.register(r);
    }
    rs.retain(|r| r.id % 2 == 0);
    assert_eq!(ctx.len(), 5);
    Core::checkpoint_restore().unwrap();
    assert_eq!(befores(&log), vec![8, 6, 4, 2, 0]);
    assert_eq!(afters(&log), vec![0, 2, 4, 6, 8]);
}

#[test]
fn one_failing_before_checkpoint_aborts_the_image_and_everyone_is_restored() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let ctx = nested("failing");
    let rs: Vec<_> = (0..100)
        .map(|i| {
            let mut r = Recorder::new(i, &log);
            Arc::get_mut(&mut r).unwrap().fail_before = i == 42;
            r
        })
        .collect();
    for r in &rs {
        ctx.register(r);
    }
    let calls = ENGINE_CALLS.load(Ordering::SeqCst);
    let err = Core::checkpoint_restore().unwrap_err();
    assert_eq!(
        ENGINE_CALLS.load(Ordering::SeqCst),
        calls,
        "no image may be taken"
    );
    assert_eq!(befores(&log).len(), 100, "everyone is notified");
    assert_eq!(
        afters(&log),
        (0..100).collect::<Vec<_>>(),
        "everyone notified is restored"
    );
    let CheckpointError::Resources { outcome, failures } = &err else {
        panic!("unexpected error {err}");
    };
    assert!(outcome.is_none());
    assert!(!err.image_taken());
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].resource, "failing/recorder-42");
    assert_eq!(failures[0].phase, Phase::BeforeCheckpoint);
    assert!(err.to_string().contains("recorder-42"), "{err}");
    assert!(err.to_string().contains("no image taken"), "{err}");
}

#[test]
fn a_panicking_hook_is_reported_and_the_others_still_run() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let ctx = nested("panicking");
    let a = Recorder::new(1, &log);
    let mut b = Recorder::new(2, &log);
    Arc::get_mut(&mut b).unwrap().panic_before = true;
    let c = Recorder::new(3, &log);
    for r in [&a, &b, &c] {
        ctx.register(r);
    }
    let err = Core::checkpoint_restore().unwrap_err();
    assert_eq!(befores(&log), vec![3, 2, 1]);
    assert_eq!(afters(&log), vec![1, 2, 3]);
    assert_eq!(err.failures().len(), 1);
    assert!(
        err.failures()[0]
            .error
            .to_string()
            .contains("panicked: recorder 2 panics")
    );
}

#[test]
fn failing_after_restore_is_reported_with_the_outcome() {
    let _s = SERIAL.lock();
    set_mode(Mode::Continued);
    let log = Log::default();
    let ctx = nested("after-fail");
    let mut a = Recorder::new(1, &log);
    Arc::get_mut(&mut a).unwrap().fail_after = true;
    let b = Recorder::new(2, &log);
    ctx.register(&a);
    ctx.register(&b);
    let err = Core::checkpoint_restore().unwrap_err();
    set_mode(Mode::NoImage);
    assert_eq!(afters(&log), vec![1, 2]);
    assert!(err.image_taken());
    assert_eq!(err.failures()[0].phase, Phase::AfterRestore);
}

#[test]
fn an_engine_failure_restores_everyone_and_takes_no_generation() {
    let _s = SERIAL.lock();
    let log = Log::default();
    let ctx = nested("engine-fail");
    let a = Recorder::new(1, &log);
    ctx.register(&a);
    let generation = Core::management().generation();
    set_mode(Mode::Fail);
    let err = Core::checkpoint_restore().unwrap_err();
    set_mode(Mode::NoImage);
    assert!(matches!(err, CheckpointError::Engine { .. }), "{err}");
    assert!(err.to_string().contains("scripted failure"));
    assert_eq!(afters(&log), vec![1]);
    assert_eq!(Core::management().generation(), generation);
}

#[test]
fn restored_outcome_updates_management() {
    let _s = SERIAL.lock();
    let before = Core::management();
    set_mode(Mode::Restored);
    let outcome = Core::checkpoint_restore().unwrap();
    set_mode(Mode::NoImage);
    let Outcome::Restored(r) = outcome else {
        panic!("expected restored, got {outcome}");
    };
    assert_eq!(r.generation, before.generation() + 1);
    assert_eq!(
        GENERATION_DURING.load(std::sync::atomic::Ordering::SeqCst),
        before.generation(),
        "the new generation is published only after the snapshot"
    );
    assert_eq!(
        r.image_dir.as_deref(),
        Some(std::path::Path::new("/images/test"))
    );
    let m = Core::management();
    assert_eq!(m.generation(), r.generation);
    assert_eq!(m.restore_count(), before.restore_count() + 1);
    assert_eq!(m.restore_time(), Some(r.restore_time));
    assert_eq!(m.frozen_duration(), Some(r.frozen));
    assert!(m.uptime_since_restore().is_some());
    assert_eq!(m.restore_var("A"), Some("2"), "the last value given wins");
    assert!(m.last_checkpoint_duration().is_some());
}

struct Reentrant {
    result: Mutex<Option<CheckpointError>>,
}

impl Resource for Reentrant {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        *self.result.lock() = Core::checkpoint_restore().err();
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

#[test]
fn a_hook_that_calls_checkpoint_restore_gets_an_error_not_a_hang() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let r = Arc::new(Reentrant {
        result: Mutex::new(None),
    });
    Core::global_context().register(&r);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(Core::checkpoint_restore().is_ok()).unwrap());
    let outer_ok = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("recursive checkpoint deadlocked");
    assert!(outer_ok);
    assert!(matches!(*r.result.lock(), Some(CheckpointError::Recursive)));
}

/// Holds its `before_checkpoint` open until other threads have registered.
struct Gate {
    entered: Arc<Barrier>,
    release: Arc<Barrier>,
}

impl Resource for Gate {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.entered.wait();
        self.release.wait();
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

struct Count(AtomicUsize);
impl Resource for Count {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn eight_threads_registering_during_a_checkpoint() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let ctx = nested("concurrent");
    let entered = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let gate = Arc::new(Gate {
        entered: entered.clone(),
        release: release.clone(),
    });
    ctx.register(&gate);
    let (tx, rx) = mpsc::channel();
    let cp = std::thread::spawn(move || tx.send(Core::checkpoint_restore().is_ok()).unwrap());
    entered.wait(); // the checkpoint is inside a hook now
    let counters: Vec<Arc<Count>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let ctx = &ctx;
                s.spawn(move || {
                    let mine: Vec<_> = (0..1000)
                        .map(|_| Arc::new(Count(AtomicUsize::new(0))))
                        .collect();
                    for c in &mine {
                        ctx.register(c);
                        Core::global_context().register(c);
                    }
                    mine
                })
            })
            .flat_map(|h| h.join().unwrap())
            .collect();
        hs
    });
    release.wait();
    assert!(rx.recv_timeout(Duration::from_secs(20)).expect("deadlock"));
    cp.join().unwrap();
    assert_eq!(counters.len(), 8000);
    assert!(
        counters.iter().all(|c| c.0.load(Ordering::SeqCst) == 0),
        "late resources are not called in the running cycle"
    );
    assert_eq!(ctx.len(), 8001, "no registration lost");
    // Next cycle: each is registered twice (nested context and global), so 4 calls each.
    drop(gate);
    Core::checkpoint_restore().unwrap();
    assert!(counters.iter().all(|c| c.0.load(Ordering::SeqCst) == 4));
}

struct SelfRegistering {
    ctx: Arc<Context>,
    child: Mutex<Option<Arc<Count>>>,
}

impl Resource for SelfRegistering {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        self.ctx.register(&c);
        *self.child.lock() = Some(c);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

#[test]
fn registering_from_inside_a_hook_does_not_deadlock() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let ctx = nested("self-registering");
    let r = Arc::new(SelfRegistering {
        ctx: ctx.clone(),
        child: Mutex::new(None),
    });
    ctx.register(&r);
    Core::checkpoint_restore().unwrap();
    let child = r.child.lock().clone().unwrap();
    assert_eq!(child.0.load(Ordering::SeqCst), 0);
    assert_eq!(ctx.len(), 2);
}

#[test]
fn nested_contexts_keep_order_and_name_failures_by_path() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let log = Log::default();
    let outer = nested("outer");
    let inner = Arc::new(Context::new("inner"));
    let a = Recorder::new(1, &log);
    let mut b = Recorder::new(2, &log);
    Arc::get_mut(&mut b).unwrap().fail_before = true;
    let c = Recorder::new(3, &log);
    outer.register(&a);
    outer.register(&inner);
    inner.register(&b);
    outer.register(&c);
    let err = Core::checkpoint_restore().unwrap_err();
    assert_eq!(befores(&log), vec![3, 2, 1]);
    assert_eq!(afters(&log), vec![1, 2, 3]);
    assert_eq!(err.failures()[0].resource, "outer/inner/recorder-2");
}

#[test]
fn checkpoints_from_two_threads_run_one_at_a_time() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    struct Exclusive(AtomicBool, AtomicUsize);
    impl Resource for Exclusive {
        fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
            assert!(
                !self.0.swap(true, Ordering::SeqCst),
                "two checkpoints overlap"
            );
            std::thread::sleep(Duration::from_millis(5));
            Ok(())
        }
        fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
            self.0.store(false, Ordering::SeqCst);
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
    let r = Arc::new(Exclusive(AtomicBool::new(false), AtomicUsize::new(0)));
    Core::global_context().register(&r);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..5 {
                    Core::checkpoint_restore().unwrap();
                }
            });
        }
    });
    assert_eq!(r.1.load(Ordering::SeqCst), 20);
}

struct StaticRes(AtomicUsize);
impl Resource for StaticRes {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
static STATIC_RES: StaticRes = StaticRes(AtomicUsize::new(0));
crac_api::register_static!(Priority::Network, STATIC_RES);

#[test]
fn compile_time_registration_through_inventory() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    let n = STATIC_RES.0.load(Ordering::SeqCst);
    Core::checkpoint_restore().unwrap();
    assert_eq!(STATIC_RES.0.load(Ordering::SeqCst), n + 2);
}
