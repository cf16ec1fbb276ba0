//! The command line of `crac push`, `crac pull` and `crac restore REF` (feature `registry`).
//! Without the feature the types below are empty, so that the command line has no registry
//! commands or options while its clap types keep one shape (clap's derive cannot leave out
//! a field or variant under `#[cfg]`).
//!
//! The environment's defaults (`CRAC_TRUSTED_KEYS`, `CRAC_SIGNING_KEY`, `CRAC_REGISTRY_CA`)
//! are read where the commands run, through `crac_criu::settings`, not by clap.

#[cfg(feature = "registry")]
pub(crate) use registry::*;

/// No registry commands without the feature.
#[cfg(not(feature = "registry"))]
#[derive(Debug, clap::Subcommand)]
pub(crate) enum RegistryCommand {}

/// No `crac restore REF` options without the feature.
#[cfg(not(feature = "registry"))]
#[derive(Debug, clap::Args)]
pub(crate) struct RestoreRegistry {}

#[cfg(feature = "registry")]
mod registry {
    use std::path::PathBuf;

    use clap::{Args, Subcommand};

    use crate::registry::push::{DEFAULT_CHUNK, DEFAULT_LEVEL};

    /// `crac push` and `crac pull`.
    #[derive(Debug, Subcommand)]
    pub(crate) enum RegistryCommand {
        /// Push the sealed image in DIR to an OCI registry; prints REPO@DIGEST
        ///
        /// The image goes as a zstd-compressed OCI artifact, signed with --sign.
        /// Credentials: REGISTRY_AUTH_FILE or ~/.docker/config.json.
        #[command(verbatim_doc_comment)]
        Push(PushArgs),
        /// Pull an image pushed by `crac push` into the new or empty DIR
        ///
        /// Streaming; refused before any page is downloaded unless signed by a key in --trust
        /// (or CRAC_TRUSTED_KEYS) and runnable on this host (CPU features, executable build).
        /// Credentials: REGISTRY_AUTH_FILE or ~/.docker/config.json.
        #[command(verbatim_doc_comment)]
        Pull(PullArgs),
    }

    /// How to reach a registry.
    #[derive(Debug, Args)]
    pub(crate) struct ReachArgs {
        /// Plain HTTP instead of TLS.
        #[arg(long)]
        pub(crate) plain_http: bool,
        /// CA certificates (PEM) to trust too (default: CRAC_REGISTRY_CA)
        ///
        /// Besides the system's roots.
        #[arg(long, value_name = "CA", verbatim_doc_comment)]
        pub(crate) ca_file: Option<PathBuf>,
    }

    /// Whose signatures count.
    #[derive(Debug, Args)]
    pub(crate) struct TrustArgs {
        /// Public keys whose signatures count; repeatable
        ///
        /// A file or directory of ed25519 public keys (`openssl pkey -pubout` PEM). Default:
        /// CRAC_TRUSTED_KEYS (`:`-separated); without either, only --allow-unsigned pulls.
        #[arg(long, value_name = "DIR", verbatim_doc_comment)]
        pub(crate) trust: Vec<String>,
        /// Take whatever the registry sends, signed or not (no trusted keys then)
        #[arg(long)]
        pub(crate) allow_unsigned: bool,
    }

    /// The registry options of `crac restore REF`, which `--broker` refuses.
    pub(crate) const RESTORE_REGISTRY_IDS: [&str; 5] = [
        "plain_http",
        "ca_file",
        "trust",
        "allow_unsigned",
        "pull_to",
    ];

    /// `crac restore REF`'s options.
    #[derive(Debug, Args)]
    #[command(next_help_heading = "Registry options (crac restore REF)")]
    pub(crate) struct RestoreRegistry {
        /// How to reach the registry.
        #[command(flatten)]
        pub(crate) reach: ReachArgs,
        /// Whose signatures count.
        #[command(flatten)]
        pub(crate) trust: TrustArgs,
        /// Pull into this new or empty directory, not the image cache
        ///
        /// The image cache: CRAC_IMAGE_CACHE, else /var/cache/crac-rs/images for root and
        /// ~/.cache/crac-rs/images for others.
        #[arg(long, value_name = "DIR", verbatim_doc_comment)]
        pub(crate) pull_to: Option<PathBuf>,
    }

    /// `crac push`'s arguments.
    #[derive(Debug, Args)]
    #[command(args_override_self = true)]
    pub(crate) struct PushArgs {
        /// The sealed image directory.
        pub(crate) dir: PathBuf,
        /// Where to push it: HOST[:PORT]/REPO[:TAG].
        #[arg(value_name = "REF")]
        pub(crate) reference: String,
        /// The ed25519 private key to sign with (default: CRAC_SIGNING_KEY)
        ///
        /// PEM, as `openssl genpkey -algorithm ed25519` writes it.
        #[arg(long, value_name = "KEY", verbatim_doc_comment)]
        pub(crate) sign: Option<PathBuf>,
        /// MB of page file per layer, 1 to 4096.
        #[arg(
            long,
            value_name = "N",
            value_parser = clap::value_parser!(u64).range(1..=4096),
            default_value_t = DEFAULT_CHUNK >> 20
        )]
        pub(crate) chunk_mb: u64,
        /// The layers' zstd level, 1 to 19.
        #[arg(
            long,
            value_name = "N",
            value_parser = clap::value_parser!(i32).range(1..=19),
            default_value_t = DEFAULT_LEVEL
        )]
        pub(crate) level: i32,
        /// How to reach the registry.
        #[command(flatten)]
        pub(crate) reach: ReachArgs,
    }

    /// `crac pull`'s arguments.
    #[derive(Debug, Args)]
    #[command(args_override_self = true)]
    pub(crate) struct PullArgs {
        /// The image: HOST[:PORT]/REPO[:TAG|@DIGEST].
        #[arg(value_name = "REF")]
        pub(crate) reference: String,
        /// The new or empty directory to pull into.
        pub(crate) dir: PathBuf,
        /// Whose signatures count.
        #[command(flatten)]
        pub(crate) trust: TrustArgs,
        /// How to reach the registry.
        #[command(flatten)]
        pub(crate) reach: ReachArgs,
    }
}
