//! Links the CRIU engine with the one line an application writes, whatever the features.

use crac_criu as _;

fn main() {
    let linked: Vec<&str> = crac_api::spi::linked_engines()
        .iter()
        .map(|r| r.engine.name())
        .collect();
    println!("linked={}", linked.join(","));
}
