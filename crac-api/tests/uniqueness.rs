//! Restore epoch, restore nonce and the reseed guard, through the core's restore path.

mod common;

use common::*;
use crac_api::{Core, ReseedGuard, restore_epoch, restore_nonce};

#[test]
fn every_restore_bumps_the_epoch_draws_a_nonce_and_rearms_the_guards() {
    let _s = SERIAL.lock();
    static GUARD: ReseedGuard = ReseedGuard::new();
    assert!(GUARD.needs_reseed(), "first use");
    assert!(!GUARD.needs_reseed());

    // Neither an image left running nor an aborted checkpoint is a restore.
    let (e0, n0) = (restore_epoch(), restore_nonce());
    set_mode(Mode::Continued);
    Core::checkpoint_restore().unwrap();
    set_mode(Mode::Fail);
    Core::checkpoint_restore().unwrap_err();
    assert_eq!((restore_epoch(), restore_nonce()), (e0, n0));
    assert!(!GUARD.needs_reseed());

    let mut nonces = Vec::new();
    for i in 1..=2 {
        set_mode(Mode::Restored);
        Core::checkpoint_restore().unwrap();
        assert_eq!(restore_epoch(), e0 + i);
        nonces.push(restore_nonce().expect("a nonce after a restore"));
        // Exactly one of several threads asking is told to reseed.
        let told: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| GUARD.needs_reseed())).collect();
            hs.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        assert_eq!(told, 1);
        assert!(!GUARD.needs_reseed());
    }
    assert_ne!(nonces[0], nonces[1]);
    assert_ne!(nonces[0], [0u8; 32]);
    set_mode(Mode::NoImage);
}
