//! Which engine a checkpoint uses: the one `CRAC_ENGINE` names, else the best-ranked usable one.

use crate::spi::{Engine, EngineError, linked_engines};

/// The environment variable that names the engine to use.
const ENGINE_ENV: &str = "CRAC_ENGINE";

/// Why no engine could be chosen.
#[derive(Debug)]
pub(crate) enum SelectError {
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
pub(crate) fn select_engine() -> Result<&'static dyn Engine, SelectError> {
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

/// The message of a [`CheckpointError::Unsupported`](crate::CheckpointError::Unsupported): the
/// cause and the fix.
pub(crate) fn describe(e: SelectError) -> String {
    match e {
        SelectError::NoneLinked => "no checkpoint engine is linked into this program; add `crac-criu` (or \
             `crac-noop`) to the application's dependencies and write `use crac_criu as _;` in its main.rs"
            .to_owned(),
        SelectError::NotLinked { requested, linked } => format!(
            "CRAC_ENGINE={requested} names an engine that is not linked into this program (linked: {}); \
             link it or unset CRAC_ENGINE",
            if linked.is_empty() { "none".to_owned() } else { linked.join(", ") }
        ),
        SelectError::Unusable { name, error } => {
            format!("CRAC_ENGINE={name} cannot work here: {error}")
        }
        SelectError::NoneUsable(list) => {
            let parts: Vec<String> = list.iter().map(|(n, e)| format!("{n}: {e}")).collect();
            format!("no linked engine can work here ({})", parts.join("; "))
        }
    }
}
