//! The engine swap an application writes: one `use` line per engine behind a cargo feature.
//!
//! Prints the engines linked into this program and runs one checkpoint with what is chosen.
//! `cargo run -p crac-tests --bin engine-swap` links noop; `--features criu` links CRIU.

#[cfg(feature = "criu")]
use crac_criu as _;
#[cfg(not(feature = "criu"))]
use crac_noop as _;

fn main() {
    let linked: Vec<&str> = crac_api::spi::linked_engines()
        .iter()
        .map(|r| r.engine.name())
        .collect();
    println!("linked={}", linked.join(","));
    println!(
        "selected={}",
        crac_api::Core::engine_name().unwrap_or("none")
    );
}
