//! Property test: random register / drop / checkpoint sequences against a model of the promised
//! order and weak-reference rules.

mod common;

use std::sync::Arc;

use common::*;
use crac_api::{Context, Core};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Register a new resource (in the nested context, or directly in the global one).
    Register { global: bool },
    /// Drop the n-th live resource (modulo the live count).
    Drop(usize),
    /// Run a checkpoint; the resource with this index (modulo) fails `before_checkpoint`.
    Checkpoint { fail: Option<usize> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(|global| Op::Register { global }),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => proptest::option::weighted(0.3, any::<usize>()).prop_map(|fail| Op::Checkpoint { fail }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn order_and_weak_references(ops in proptest::collection::vec(op(), 1..60)) {
        let _s = SERIAL.lock();
        set_mode(Mode::NoImage);
        let ctx = Arc::new(Context::new("prop"));
        Core::global_context().register(&ctx);
        let log = Log::default();
        // Model: live resources in registration order, split by where they were registered.
        let mut live: Vec<(Arc<Recorder>, bool)> = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Register { global } => {
                    let r = Recorder::new(next, &log);
                    next += 1;
                    if global {
                        Core::global_context().register(&r);
                    } else {
                        ctx.register(&r);
                    }
                    live.push((r, global));
                }
                Op::Drop(i) => {
                    if !live.is_empty() {
                        let i = i % live.len();
                        live.remove(i);
                    }
                }
                Op::Checkpoint { fail } => {
                    // Recorders are immutable once shared: make a failing one by replacing the
                    // chosen resource with a failing twin registered in the same place.
                    let failing = fail.filter(|_| !live.is_empty()).map(|f| f % live.len());
                    if let Some(i) = failing {
                        let (old, global) = live.remove(i);
                        let mut twin = Recorder::new(next, &log);
                        next += 1;
                        Arc::get_mut(&mut twin).unwrap().fail_before = true;
                        drop(old);
                        if global {
                            Core::global_context().register(&twin);
                        } else {
                            ctx.register(&twin);
                        }
                        live.push((twin, global));
                    }
                    log.lock().clear();
                    let calls = ENGINE_CALLS.load(std::sync::atomic::Ordering::SeqCst);
                    let result = Core::checkpoint_restore();
                    let took = ENGINE_CALLS.load(std::sync::atomic::Ordering::SeqCst) - calls;
                    // The nested context was registered first in the application level, so the
                    // global ones (registered after it) come first in before_checkpoint order.
                    let globals: Vec<u64> = live.iter().filter(|(_, g)| *g).map(|(r, _)| r.id).collect();
                    let nested: Vec<u64> = live.iter().filter(|(_, g)| !*g).map(|(r, _)| r.id).collect();
                    let mut expected_before: Vec<u64> = globals.iter().rev().copied().collect();
                    expected_before.extend(nested.iter().rev());
                    let expected_after: Vec<u64> = expected_before.iter().rev().copied().collect();
                    prop_assert_eq!(befores(&log), expected_before);
                    prop_assert_eq!(afters(&log), expected_after);
                    prop_assert_eq!(result.is_err(), failing.is_some());
                    prop_assert_eq!(took, u64::from(failing.is_none()));
                    if failing.is_some() {
                        // The failing twin has served; dropping it also tests the weak rule.
                        live.pop();
                    }
                }
            }
        }
        drop(live);
        // Everything dropped: a last checkpoint calls none of them.
        log.lock().clear();
        Core::checkpoint_restore().unwrap();
        prop_assert!(log.lock().is_empty());
        prop_assert_eq!(ctx.len(), 0);
    }
}
