//! Errors: the engine's ([`crac_criu::Error`]), so what the restore code shares with the
//! engine reports alike.

pub(crate) use crac_criu::error::{Error, ErrorKind};
