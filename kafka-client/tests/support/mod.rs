//! Helpers shared by the integration tests (and `benches/decoders.rs`).

pub mod clients;
pub mod fake_broker;
pub mod hostile;
pub mod ticker;
