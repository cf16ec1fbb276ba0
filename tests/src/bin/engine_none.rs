//! Depends on both engine crates but names neither: the linker drops their registrations. This
//! is the mistake the one `use` line prevents; `tests/engine_link.rs` proves it happens.

fn main() {
    let linked: Vec<&str> = crac_api::spi::linked_engines()
        .iter()
        .map(|r| r.engine.name())
        .collect();
    println!("linked={}", linked.join(","));
    match crac_api::Core::checkpoint_restore() {
        Ok(o) => println!("outcome={o}"),
        Err(e) => println!("error={e}"),
    }
}
