//! The engine interface: what takes (or does not take) the image.
//!
//! Engines live in their own crates (`crac-noop`, `crac-criu`) and announce themselves with
//! [`register_engine!`](crate::register_engine). The application links the one it wants; libraries
//! never depend on an engine, the same split as the `log` facade and its loggers.

use std::fmt;
use std::path::PathBuf;
use std::time::SystemTime;

/// How the engine treats the process after the image is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointMode {
    /// The process ends once the image is written; it lives on only in restored copies.
    #[default]
    StopAfterDump,
    /// The process is snapshotted and goes on running (CRIU `--leave-running`).
    LeaveRunning,
}

/// What the application asks of a checkpoint. Engines fill unset fields from their own
/// configuration (for CRIU: `CRAC_CHECKPOINT_TO`, `CRAC_CHECKPOINT_MODE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// Where the image goes. `None`: the engine's configured default.
    pub image_dir: Option<PathBuf>,
    /// Stop after dump or leave running. `None`: the engine's configured default.
    pub mode: Option<CheckpointMode>,
}

impl CheckpointOptions {
    /// Options with every field left to the engine's configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the image directory.
    pub fn image_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.image_dir = Some(dir.into());
        self
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: CheckpointMode) -> Self {
        self.mode = Some(mode);
        self
    }
}

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
pub trait Engine: Send + Sync + 'static {
    /// Short name, as used in `CRAC_ENGINE` (`"noop"`, `"criu"`).
    fn name(&self) -> &'static str;

    /// Whether the engine can work in this process now. Must be cheap (no snapshot, no
    /// subprocess where avoidable): discovery calls it to pick the best engine.
    fn probe(&self) -> Result<(), EngineError>;

    /// Takes the image. Returns in the original (leave-running or no image) and, for engines that
    /// restore, in every restored copy. With [`CheckpointMode::StopAfterDump`] a successful dump
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

/// Registers an engine at link time.
///
/// ```ignore
/// static ENGINE: MyEngine = MyEngine;
/// crac_api::register_engine!(&ENGINE, 100);
/// ```
#[macro_export]
macro_rules! register_engine {
    ($engine:expr, $rank:expr) => {
        $crate::inventory::submit! {
            $crate::EngineRegistration { engine: $engine, rank: $rank }
        }
    };
}

/// Every engine linked into this program, best rank first.
pub fn linked_engines() -> Vec<&'static EngineRegistration> {
    let mut v: Vec<_> = inventory::iter::<EngineRegistration>.into_iter().collect();
    v.sort_by(|a, b| {
        b.rank
            .cmp(&a.rank)
            .then(a.engine.name().cmp(b.engine.name()))
    });
    v
}

/// The environment variable that names the engine to use.
pub const ENGINE_ENV: &str = "CRAC_ENGINE";

/// Why no engine could be chosen.
#[derive(Debug)]
pub enum SelectError {
    /// No engine is linked into the program.
    NoneLinked,
    /// `CRAC_ENGINE` names an engine that is not linked.
    NotLinked {
        /// The name asked for.
        requested: String,
        /// The names that are linked.
        linked: Vec<&'static str>,
    },
    /// `CRAC_ENGINE` names an engine that cannot work here.
    Unusable {
        /// The engine's name.
        name: &'static str,
        /// Why.
        error: EngineError,
    },
    /// Engines are linked but none can work here.
    NoneUsable(Vec<(&'static str, EngineError)>),
}

/// Picks the engine: the one `CRAC_ENGINE` names, else the best-ranked one whose probe passes.
pub fn select_engine() -> Result<&'static dyn Engine, SelectError> {
    let linked = linked_engines();
    if linked.is_empty() {
        return Err(SelectError::NoneLinked);
    }
    if let Ok(requested) = std::env::var(ENGINE_ENV) {
        let requested = requested.trim().to_owned();
        if !requested.is_empty() {
            let Some(reg) = linked.iter().find(|r| r.engine.name() == requested) else {
                return Err(SelectError::NotLinked {
                    requested,
                    linked: linked.iter().map(|r| r.engine.name()).collect(),
                });
            };
            return match reg.engine.probe() {
                Ok(()) => Ok(reg.engine),
                Err(error) => Err(SelectError::Unusable {
                    name: reg.engine.name(),
                    error,
                }),
            };
        }
    }
    let mut refused = Vec::new();
    for reg in &linked {
        match reg.engine.probe() {
            Ok(()) => {
                if !refused.is_empty() {
                    tracing::warn!(
                        engine = reg.engine.name(),
                        skipped = ?refused,
                        "better-ranked checkpoint engines are unusable here; falling back"
                    );
                }
                return Ok(reg.engine);
            }
            Err(e) => refused.push((reg.engine.name(), e)),
        }
    }
    Err(SelectError::NoneUsable(refused))
}
