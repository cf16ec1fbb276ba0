//! Errors: the engine uses [`crac_api::spi::EngineError`] throughout, so a failure deep in the
//! restore or dump code reaches the application with its kind intact.

pub use crac_api::spi::EngineError as Error;
pub use crac_api::spi::EngineErrorKind as ErrorKind;
