//! The image: the contract between the process that was imaged and the `crac restore` that
//! brings it back. A directory (opened through descriptors, [`crate::safe_dir`]) of CRIU's
//! files, our metadata (`crac-image.txt`), the manifest that seals them, the CPU features and
//! build id the process depends on, and the payload the restorer hands the restored process.
//! The trust check a restore runs before CRIU reads anything is the `crac` program's.

pub mod build_id;
pub mod cpu;
pub mod creds;
pub mod manifest;
pub mod metadata;
pub mod payload;

/// Our metadata of the image (`metadata.rs`).
pub const METADATA_FILE: &str = "crac-image.txt";
/// CRIU's log of the dump.
pub const DUMP_LOG: &str = "dump.log";
/// The manifest that seals the image (`manifest.rs`).
pub const MANIFEST_FILE: &str = "crac-manifest.txt";
/// The lock the dump helper holds while it seals the image.
pub const SEAL_LOCK: &str = ".crac-seal.lock";
