//! The engine SPI: what an engine crate implements. Applications and libraries do not need it.
//!
//! An engine takes (or does not take) the image once every resource is quiesced. Engines live
//! in their own crates (`crac-noop`, `crac-criu`) and announce themselves at link time with
//! [`register_engine!`](crate::register_engine); the application links the one it wants, and
//! libraries never depend on an engine (the split of the `log` facade and its loggers).
//! [`Core`](crate::Core) picks the engine `CRAC_ENGINE` names, else the best-ranked one whose
//! [`probe`](Engine::probe) passes.
//!
//! ```
//! use crac_api::CheckpointOptions;
//! use crac_api::spi::{Engine, EngineError, EngineOutcome};
//!
//! struct DryRun;
//! impl Engine for DryRun {
//!     fn name(&self) -> &'static str {
//!         "dry-run"
//!     }
//!     fn probe(&self) -> Result<(), EngineError> {
//!         Ok(())
//!     }
//!     fn checkpoint(&self, _: &CheckpointOptions) -> Result<EngineOutcome, EngineError> {
//!         Ok(EngineOutcome::NoImage) // a real engine writes the image here
//!     }
//! }
//!
//! static ENGINE: DryRun = DryRun;
//! crac_api::register_engine!(&ENGINE, 10);
//!
//! # fn main() {
//! // Every linked engine, best rank first (here also the noop engine, a dev-dependency).
//! let linked = crac_api::spi::linked_engines();
//! assert!(linked.iter().any(|r| r.engine.name() == "dry-run" && r.rank == 10));
//! # }
//! ```

use std::fmt;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::CheckpointOptions;

/// What an engine reports back to the core after the snapshot step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineOutcome {
    /// This process is a copy restored from the image.
    Restored(RestoreData),
    /// The image was written and this is the original process, still running (leave-running).
    Continued {
        /// Where the image was written.
        image_dir: PathBuf,
    },
    /// No image was taken (the noop engine).
    NoImage,
}

/// What the engine knows about the restore it performed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RestoreData {
    /// The image this process was restored from.
    pub image_dir: Option<PathBuf>,
    /// New configuration handed to the restored process by the restorer (like CRaC's new
    /// arguments): `KEY=VALUE` pairs, in the order given.
    pub new_env: Vec<(String, String)>,
    /// Wall-clock time at which the restorer started, when the engine knows it.
    pub restore_started: Option<SystemTime>,
}

/// Why an engine could not take the image. The process goes on as before.
#[derive(Debug)]
pub struct EngineError {
    kind: EngineErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The broad class of an [`EngineError`], for programs that react to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineErrorKind {
    /// The engine cannot work on this machine (tool missing, too old, no privilege).
    Unavailable,
    /// The configuration is wrong (image directory missing or unsafe, bad mode).
    Config,
    /// The process holds something the engine cannot snapshot (open sockets, locks).
    Refused,
    /// The snapshot itself failed.
    Snapshot,
    /// Anything else.
    Other,
}

impl EngineError {
    /// A new error of `kind` with a message that says the cause and the fix.
    pub fn new(kind: EngineErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The class of the error.
    pub fn kind(&self) -> EngineErrorKind {
        self.kind
    }

    /// The message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A checkpoint engine. Called by [`Core`](crate::Core) with every resource already quiesced.
/// Register it with [`register_engine!`](crate::register_engine).
pub trait Engine: Send + Sync + 'static {
    /// Short name, as used in `CRAC_ENGINE` (`"noop"`, `"criu"`).
    fn name(&self) -> &'static str;

    /// Whether the engine can work in this process now. Must be cheap (no snapshot, no
    /// subprocess where avoidable): discovery calls it to pick the best engine.
    fn probe(&self) -> Result<(), EngineError>;

    /// Takes the image. Returns in the original (leave-running or no image) and, for engines that
    /// restore, in every restored copy. With [`CheckpointMode::StopAfterDump`](crate::CheckpointMode::StopAfterDump) a successful dump
    /// does not return in the original.
    fn checkpoint(&self, options: &CheckpointOptions) -> Result<EngineOutcome, EngineError>;
}

/// An engine's entry in the link-time registry. Create it with
/// [`register_engine!`](crate::register_engine).
pub struct EngineRegistration {
    /// The engine.
    pub engine: &'static dyn Engine,
    /// Preference when several are linked and none is named: highest usable rank wins.
    pub rank: u32,
}

inventory::collect!(EngineRegistration);

/// Registers an engine at link time, with its rank (higher wins when several are linked and
/// usable; noop has 0, CRIU 100). The engine is a `&'static` [`Engine`].
///
/// Write it in the engine crate, at module level. An application must name the engine crate
/// (`use crac_noop as _;`) or the linker drops the registration. See [`spi`](crate::spi) for a
/// whole engine.
///
/// ```
/// # use crac_api::{CheckpointOptions, spi::{Engine, EngineError, EngineOutcome}};
/// # struct MyEngine;
/// # impl Engine for MyEngine {
/// #     fn name(&self) -> &'static str { "mine" }
/// #     fn probe(&self) -> Result<(), EngineError> { Ok(()) }
/// #     fn checkpoint(&self, _: &CheckpointOptions) -> Result<EngineOutcome, EngineError> {
/// #         Ok(EngineOutcome::NoImage)
/// #     }
/// # }
/// static ENGINE: MyEngine = MyEngine;
/// crac_api::register_engine!(&ENGINE, 100);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! register_engine {
    ($engine:expr, $rank:expr) => {
        $crate::__private::inventory::submit! {
            $crate::spi::EngineRegistration { engine: $engine, rank: $rank }
        }
    };
}

/// Every engine linked into this program, best rank first (equal ranks by name).
pub fn linked_engines() -> Vec<&'static EngineRegistration> {
    let mut v: Vec<_> = inventory::iter::<EngineRegistration>.into_iter().collect();
    v.sort_by(|a, b| {
        b.rank
            .cmp(&a.rank)
            .then(a.engine.name().cmp(b.engine.name()))
    });
    v
}
