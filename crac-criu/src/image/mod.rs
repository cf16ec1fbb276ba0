//! The image: the contract between the process that was imaged and the `crac restore` that
//! brings it back. A directory opened through descriptors, CRIU's files, our metadata
//! (`crac-image.txt`), the manifest that seals them, the CPU features and build id the process
//! depends on, the payload the restorer hands the restored process, and the trust check that
//! a restore runs before CRIU reads anything.

pub(crate) mod build_id;
pub(crate) mod cpu;
pub(crate) mod dir;
pub(crate) mod manifest;
pub(crate) mod metadata;
pub(crate) mod payload;
pub(crate) mod trust;
