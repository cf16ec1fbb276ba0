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

/// Our metadata of the image (`metadata.rs`).
pub(crate) const METADATA_FILE: &str = "crac-image.txt";
/// CRIU's log of the dump.
pub(crate) const DUMP_LOG: &str = "dump.log";
/// The manifest that seals the image (`manifest.rs`).
pub(crate) const MANIFEST_FILE: &str = "crac-manifest.txt";
/// The lock the dump helper holds while it seals the image.
pub(crate) const SEAL_LOCK: &str = ".crac-seal.lock";
