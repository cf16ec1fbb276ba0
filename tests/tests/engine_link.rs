//! The engine an application links with `use engine as _;` is really found at run time, and one
//! that is only a dependency is not (inventory entries of an unreferenced crate are dropped).

use std::process::Command;

fn run(exe: &str) -> String {
    let out = Command::new(exe)
        .env_remove("CRAC_ENGINE")
        .output()
        .expect("run test program");
    assert!(out.status.success(), "{exe}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn engine_swap_links_the_engine_its_feature_names() {
    let out = run(env!("CARGO_BIN_EXE_engine-swap"));
    if cfg!(feature = "criu") {
        assert!(out.contains("linked=criu\n"), "{out}");
    } else {
        assert!(out.contains("linked=noop\n"), "{out}");
        assert!(out.contains("selected=noop\n"), "{out}");
    }
}

#[test]
fn the_criu_engine_is_found_when_linked_with_one_line() {
    let out = run(env!("CARGO_BIN_EXE_engine_criu_linked"));
    assert!(out.contains("linked=criu\n"), "{out}");
}

#[test]
fn a_dependency_that_is_never_named_registers_nothing() {
    let out = run(env!("CARGO_BIN_EXE_engine_none"));
    assert!(out.contains("linked=\n"), "{out}");
    assert!(
        out.contains("error=checkpoint/restore unsupported"),
        "{out}"
    );
}
