//! With no engine linked, registration works and `checkpoint_restore()` says `Unsupported`.
//! (crac-noop is a dev-dependency of this crate, but this binary never names it: the linker
//! drops its registration, exactly what an application that forgets its one line gets.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crac_api::{CheckpointError, Context, Core, Resource, ResourceError};

struct Flag(AtomicBool);
impl Resource for Flag {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        Ok(())
    }
}

#[test]
fn unsupported_without_an_engine() {
    let r = Arc::new(Flag(AtomicBool::new(false)));
    Core::global_context().register(&r);
    assert_eq!(Core::global_context().len(), 1);
    assert!(crac_api::spi::linked_engines().is_empty());
    assert_eq!(Core::engine_name(), None);
    let err = Core::checkpoint_restore().unwrap_err();
    let CheckpointError::Unsupported(msg) = &err else {
        panic!("expected Unsupported, got {err}");
    };
    assert!(msg.contains("use crac_criu as _;"), "{msg}");
    assert!(
        !r.0.load(Ordering::SeqCst),
        "no hook runs when no engine can take the image"
    );
}
