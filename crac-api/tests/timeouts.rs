//! Every wait has a bound: a hook that does not return within its timeout fails the checkpoint
//! by name while everyone else is restored, and an engine that panics is an error, not a skipped
//! `after_restore`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use crac_api::{
    CheckpointError, Context, Core, HookTimedOut, Outcome, Phase, Resource, ResourceError,
};

/// Sleeps "forever" in the hooks chosen (on their first call), and counts its calls.
struct Sleeper {
    name: &'static str,
    hang_before_first: bool,
    hang_after: bool,
    sleep_before: Duration,
    befores: AtomicU64,
    afters: AtomicU64,
}

impl Sleeper {
    fn new(name: &'static str) -> Self {
        Sleeper {
            name,
            hang_before_first: false,
            hang_after: false,
            sleep_before: Duration::ZERO,
            befores: AtomicU64::new(0),
            afters: AtomicU64::new(0),
        }
    }
}

fn forever() -> ! {
    loop {
        std::thread::park();
    }
}

impl Resource for Sleeper {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        let n = self.befores.fetch_add(1, Ordering::SeqCst);
        if self.hang_before_first && n == 0 {
            forever();
        }
        std::thread::sleep(self.sleep_before);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        let n = self.afters.fetch_add(1, Ordering::SeqCst);
        if self.hang_after && n == 0 {
            forever();
        }
        Ok(())
    }
    fn name(&self) -> String {
        self.name.to_owned()
    }
}

fn timed_out(e: &CheckpointError) -> Vec<(String, HookTimedOut)> {
    e.failures()
        .iter()
        .filter_map(|f| {
            let t = f.error.downcast_ref::<HookTimedOut>()?;
            Some((f.resource.clone(), *t))
        })
        .collect()
}

#[test]
fn a_hook_that_never_returns_fails_the_checkpoint_by_name_and_the_next_one_succeeds() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    Core::set_hook_timeout(Duration::from_millis(300));
    let log = Log::default();
    let first = Recorder::new(1, &log);
    Core::global_context().register(&first);
    let hung = Arc::new(Sleeper {
        hang_before_first: true,
        ..Sleeper::new("hangs-once")
    });
    Core::global_context().register(&hung);
    let last = Recorder::new(3, &log);
    Core::global_context().register(&last);

    let calls = ENGINE_CALLS.load(Ordering::SeqCst);
    let t = Instant::now();
    let err = Core::checkpoint_restore().unwrap_err();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let t_out = timed_out(&err);
    assert_eq!(t_out.len(), 1, "{err}");
    assert_eq!(t_out[0].0, "hangs-once");
    assert_eq!(t_out[0].1.phase, Phase::BeforeCheckpoint);
    let msg = err.to_string();
    assert!(
        msg.contains("checkpoint aborted, no image taken")
            && msg.contains("hangs-once failed in before_checkpoint: before_checkpoint did not return within 0.3 s"),
        "{msg}"
    );
    assert_eq!(ENGINE_CALLS.load(Ordering::SeqCst), calls, "no image");
    // Everyone else went through both hooks, in order; the hung one gets no after_restore.
    assert_eq!(befores(&log), vec![3, 1]);
    assert_eq!(afters(&log), vec![1, 3]);
    assert_eq!(hung.afters.load(Ordering::SeqCst), 0);

    // The lock is free and the resource answers now: the next checkpoint succeeds.
    log.lock().clear();
    assert_eq!(Core::checkpoint_restore().unwrap(), Outcome::NoImage);
    assert_eq!(hung.befores.load(Ordering::SeqCst), 2);
    assert_eq!(hung.afters.load(Ordering::SeqCst), 1);
    assert_eq!(befores(&log), vec![3, 1]);
    Core::set_hook_timeout(Duration::from_secs(60));
}

#[test]
fn a_registration_has_its_own_timeout_and_slow_hooks_within_it_are_fine() {
    let _s = SERIAL.lock();
    set_mode(Mode::NoImage);
    Core::set_hook_timeout(Duration::from_secs(30));
    let strict = Arc::new(Sleeper {
        sleep_before: Duration::from_secs(3),
        ..Sleeper::new("strict")
    });
    Core::global_context().register_with_timeout(
        &strict,
        crac_api::Priority::Network,
        Duration::from_millis(100),
    );
    let slow = Arc::new(Sleeper {
        sleep_before: Duration::from_millis(200),
        ..Sleeper::new("slow-but-in-time")
    });
    Core::global_context().register(&slow);
    let t = Instant::now();
    let err = Core::checkpoint_restore().unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let t_out = timed_out(&err);
    assert_eq!(t_out.len(), 1, "{err}");
    assert_eq!(t_out[0].0, "strict");
    assert_eq!(t_out[0].1.after, Duration::from_millis(100));
    assert_eq!(slow.afters.load(Ordering::SeqCst), 1);
    drop(strict);
    // Once the strict one is gone (its hook has returned by now), the slow one alone passes.
    std::thread::sleep(Duration::from_secs(3));
    assert!(Core::checkpoint_restore().is_ok());
    Core::set_hook_timeout(Duration::from_secs(60));
}

#[test]
fn an_after_restore_that_never_returns_is_named_with_the_outcome() {
    let _s = SERIAL.lock();
    set_mode(Mode::Restored);
    Core::set_hook_timeout(Duration::from_millis(200));
    let hung = Arc::new(Sleeper {
        hang_after: true,
        ..Sleeper::new("hangs-after")
    });
    Core::global_context().register(&hung);
    let log = Log::default();
    let other = Recorder::new(7, &log);
    Core::global_context().register(&other);
    let err = Core::checkpoint_restore().unwrap_err();
    assert!(matches!(
        &err,
        CheckpointError::Resources { outcome: Some(o), .. } if o.is_restored()
    ));
    let t_out = timed_out(&err);
    assert_eq!(t_out.len(), 1, "{err}");
    assert_eq!(t_out[0].0, "hangs-after");
    assert_eq!(t_out[0].1.phase, Phase::AfterRestore);
    assert_eq!(afters(&log), vec![7]);
    drop(hung);
    set_mode(Mode::NoImage);
    Core::set_hook_timeout(Duration::from_secs(60));
}

#[test]
fn an_engine_that_panics_is_an_error_and_everyone_is_restored() {
    let _s = SERIAL.lock();
    set_mode(Mode::Panic);
    let log = Log::default();
    let a = Recorder::new(1, &log);
    let b = Recorder::new(2, &log);
    Core::global_context().register(&a);
    Core::global_context().register(&b);
    let generation = Core::management().generation();
    let err = Core::checkpoint_restore().unwrap_err();
    match &err {
        CheckpointError::Engine { error, failures } => {
            assert!(
                error
                    .to_string()
                    .contains("engine panicked: scripted engine panic"),
                "{error}"
            );
            assert!(failures.is_empty());
        }
        e => panic!("expected an engine error, got {e}"),
    }
    assert_eq!(befores(&log), vec![2, 1]);
    assert_eq!(afters(&log), vec![1, 2]);
    assert_eq!(
        Core::management().generation(),
        generation,
        "no generation taken"
    );
    set_mode(Mode::NoImage);
    assert!(Core::checkpoint_restore().is_ok(), "the lock was released");
}
