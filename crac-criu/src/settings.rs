//! Every `CRAC_*` environment variable, read here and nowhere else (but the two of
//! `crac-api`, which cannot depend on an engine): typed, validated, and a value that does not
//! fit is an error naming the variable and the value. The engine reads its own; the `crac`
//! program (`crac-cli`) reads through this module too.
//!
//! | variable | read by | default | meaning |
//! | --- | --- | --- | --- |
//! | `CRAC_CHECKPOINT_TO` | engine | none | image directory of a checkpoint whose options name none (created `0700`; one others can access is refused) |
//! | `CRAC_CHECKPOINT_MODE` | engine | `stop` | `stop` (the process ends after the dump) or `leave-running` |
//! | `CRAC_CHECKPOINT_SIGNAL` | engine | `1` | `0`: no listener for `crac checkpoint PID` (no signal handler, no thread) |
//! | `CRAC_CRIU` | engine, crac | `PATH`, then `CRAC_CRIU_ROOT` | the criu executable |
//! | `CRAC_CRIU_ROOT` | engine, crac | `~/.cache/crac-rs/criu-root` | where `scripts/install-criu` installed criu (`ROOT/bin/criu` is used when `CRAC_CRIU` is unset and none is on `PATH`) |
//! | `CRAC_CRIU_LOG_LEVEL` | engine, crac | `4` | CRIU's log level, 0–4, for every log it writes (dump, restore, lazy pages) |
//! | `CRAC_CRIU_TIMEOUT` | engine, crac | `300` | seconds a dump or restore may take before criu is stopped |
//! | `CRAC_BROKER` | engine | auto | `1`: checkpoint through the broker (an error if there is none); `0`: never; unset: when not root and the broker's socket exists |
//! | `CRAC_BROKER_SOCKET` | engine, crac | `/run/crac/daemon.sock` | the checkpoint broker's socket (absolute path), for its clients and `crac daemon` |
//! | `CRAC_CRIU_DUMP_HELPER` | engine | none | internal: set by the engine for the dump helper it starts (descriptor numbers and the bound) |
//! | `CRAC_LAZY_TIMEOUT` | crac | 30 s + 15 s per GiB | seconds the pages of a lazy restore may take to all arrive before the copy is ended |
//! | `CRAC_IMAGE_CACHE` | crac | `/var/cache/crac-rs/images` (root), `~/.cache/crac-rs/images` | where `crac restore REF` keeps pulled images |
//! | `CRAC_TRUSTED_KEYS` | crac | none | `:`-separated files or directories of ed25519 public keys (PEM) whose signatures `crac pull`/`restore REF` accept (`--trust` overrides) |
//! | `CRAC_SIGNING_KEY` | crac | none | the ed25519 private key (PEM) `crac push` signs with (`--sign` overrides) |
//! | `CRAC_REGISTRY_CA` | crac | system roots | a PEM file of CA certificates for registries (`--ca-file` overrides) |
//! | `CRAC_ENGINE` | crac-api | best usable | `noop` or `criu`: the engine a checkpoint uses |
//! | `CRAC_HOOK_TIMEOUT` | crac-api | `60` | seconds one resource's hook may take before it counts as failed |
//!
//! The same table is in `docs/settings.md`; a unit test checks that both list exactly the
//! variables the code names.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crac_api::CheckpointMode;

use crate::error::{Error, ErrorKind};

/// Image directory of a checkpoint whose options name none.
pub const CHECKPOINT_TO: &str = "CRAC_CHECKPOINT_TO";
/// `stop` or `leave-running`.
pub const CHECKPOINT_MODE: &str = "CRAC_CHECKPOINT_MODE";
/// `0`: no `crac checkpoint PID` listener.
pub const CHECKPOINT_SIGNAL: &str = "CRAC_CHECKPOINT_SIGNAL";
/// The criu executable.
pub const CRIU: &str = "CRAC_CRIU";
/// Where `scripts/install-criu` installed criu.
pub const CRIU_ROOT: &str = "CRAC_CRIU_ROOT";
/// CRIU's log level.
pub const CRIU_LOG_LEVEL: &str = "CRAC_CRIU_LOG_LEVEL";
/// Seconds a dump or restore may take.
pub const CRIU_TIMEOUT: &str = "CRAC_CRIU_TIMEOUT";
/// Whether to checkpoint through the broker.
pub const BROKER: &str = "CRAC_BROKER";
/// The broker's socket.
pub const BROKER_SOCKET: &str = "CRAC_BROKER_SOCKET";
/// Internal: the dump helper's descriptors and bound.
pub const DUMP_HELPER: &str = "CRAC_CRIU_DUMP_HELPER";
/// Seconds a lazy restore's pages may take.
pub const LAZY_TIMEOUT: &str = "CRAC_LAZY_TIMEOUT";
/// Where `crac restore REF` keeps pulled images.
pub const IMAGE_CACHE: &str = "CRAC_IMAGE_CACHE";
/// Public keys whose signatures a pull accepts.
pub const TRUSTED_KEYS: &str = "CRAC_TRUSTED_KEYS";
/// The key `crac push` signs with.
pub const SIGNING_KEY: &str = "CRAC_SIGNING_KEY";
/// CA certificates for registries.
pub const REGISTRY_CA: &str = "CRAC_REGISTRY_CA";

/// The broker's socket when [`BROKER_SOCKET`] is unset.
pub const DEFAULT_BROKER_SOCKET: &str = "/run/crac/daemon.sock";
/// CRIU's log level when [`CRIU_LOG_LEVEL`] is unset: everything.
pub const DEFAULT_CRIU_LOG_LEVEL: u32 = 4;
/// The bound on a dump or restore when [`CRIU_TIMEOUT`] is unset.
pub const DEFAULT_CRIU_TIMEOUT: Duration = Duration::from_secs(300);

fn config(msg: String) -> Error {
    Error::new(ErrorKind::Config, msg)
}

/// The raw value of `name`, `None` when unset or empty (an empty value counts as unset, as
/// shells write `VAR= cmd`).
fn raw(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The value of `name` as text; a value that is not UTF-8 is an error naming it.
fn text(name: &str) -> Result<Option<String>, Error> {
    raw(name)
        .map(|v| {
            v.into_string()
                .map_err(|v| config(format!("{name}={v:?} is not UTF-8")))
        })
        .transpose()
}

/// A path from `name`.
fn path(name: &str) -> Option<PathBuf> {
    raw(name).map(PathBuf::from)
}

/// A duration in seconds from `name` (`default` when unset); a value that is not a positive
/// number of seconds is an error naming it and `example`.
pub fn seconds(name: &str, default: Duration, example: u32) -> Result<Duration, Error> {
    match text(name)? {
        None => Ok(default),
        Some(v) => parse_seconds(name, &v, example),
    }
}

/// Parses the value `v` of `name` as a positive number of seconds.
fn parse_seconds(name: &str, v: &str, example: u32) -> Result<Duration, Error> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            config(format!(
                "{name}={v} is not a number of seconds (e.g. {example})"
            ))
        })
}

/// [`CHECKPOINT_TO`].
pub fn checkpoint_to() -> Option<PathBuf> {
    path(CHECKPOINT_TO)
}

/// [`CHECKPOINT_MODE`]: `None` when unset.
pub fn checkpoint_mode() -> Result<Option<CheckpointMode>, Error> {
    text(CHECKPOINT_MODE)?.map(|v| parse_mode(&v)).transpose()
}

/// Parses a checkpoint mode as [`CHECKPOINT_MODE`] takes it.
pub fn parse_mode(v: &str) -> Result<CheckpointMode, Error> {
    match v.trim() {
        "stop" | "stop-after-dump" => Ok(CheckpointMode::StopAfterDump),
        "leave-running" | "leave_running" => Ok(CheckpointMode::LeaveRunning),
        other => Err(config(format!(
            "{CHECKPOINT_MODE}={other} is not a mode: use `stop` (the default) or \
             `leave-running`"
        ))),
    }
}

/// [`CHECKPOINT_SIGNAL`]: whether the `crac checkpoint PID` listener is installed. Read
/// before `main`, where no error can be reported: anything but `0` leaves it on.
pub fn checkpoint_signal() -> bool {
    raw(CHECKPOINT_SIGNAL).is_none_or(|v| v != "0")
}

/// [`CRIU`].
pub fn criu() -> Option<PathBuf> {
    path(CRIU)
}

/// [`CRIU_ROOT`], else `~/.cache/crac-rs/criu-root` (`None` without a home).
pub fn criu_root() -> Option<PathBuf> {
    path(CRIU_ROOT).or_else(|| path("HOME").map(|h| h.join(".cache/crac-rs/criu-root")))
}

/// [`CRIU_LOG_LEVEL`]: 0 to 4.
pub fn criu_log_level() -> Result<u32, Error> {
    let Some(v) = text(CRIU_LOG_LEVEL)? else {
        return Ok(DEFAULT_CRIU_LOG_LEVEL);
    };
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|l| *l <= 4)
        .ok_or_else(|| config(format!("{CRIU_LOG_LEVEL}={v} is not a log level: 0 to 4")))
}

/// [`CRIU_TIMEOUT`].
pub fn criu_timeout() -> Result<Duration, Error> {
    seconds(CRIU_TIMEOUT, DEFAULT_CRIU_TIMEOUT, 300)
}

/// [`BROKER`]: `Some(true)` for `1`, `Some(false)` for `0`, `None` (decide) when unset.
pub fn broker() -> Result<Option<bool>, Error> {
    match text(BROKER)?.as_deref().map(str::trim) {
        None => Ok(None),
        Some("1") => Ok(Some(true)),
        Some("0") => Ok(Some(false)),
        Some(v) => Err(config(format!(
            "{BROKER}={v}: use 1 (always through the checkpoint broker), 0 (never) or leave it \
             unset (when not root and the broker's socket exists)"
        ))),
    }
}

/// [`BROKER_SOCKET`], else [`DEFAULT_BROKER_SOCKET`]; a relative path is an error.
pub fn broker_socket() -> Result<PathBuf, Error> {
    match path(BROKER_SOCKET) {
        None => Ok(PathBuf::from(DEFAULT_BROKER_SOCKET)),
        Some(p) if p.is_absolute() => Ok(p),
        Some(p) => Err(config(format!(
            "{BROKER_SOCKET}={}: the broker's socket must be an absolute path",
            p.display()
        ))),
    }
}

/// [`DUMP_HELPER`] (internal).
pub fn dump_helper() -> Option<String> {
    text(DUMP_HELPER).ok().flatten()
}

/// [`LAZY_TIMEOUT`], else `default`.
pub fn lazy_timeout(default: Duration) -> Result<Duration, Error> {
    seconds(LAZY_TIMEOUT, default, 120)
}

/// Whether [`LAZY_TIMEOUT`] is set (a bound the user chose, not the default).
pub fn lazy_timeout_set() -> bool {
    raw(LAZY_TIMEOUT).is_some()
}

/// [`IMAGE_CACHE`].
pub fn image_cache() -> Option<PathBuf> {
    path(IMAGE_CACHE)
}

/// [`TRUSTED_KEYS`]: the `:`-separated list as given.
pub fn trusted_keys() -> Result<Option<String>, Error> {
    text(TRUSTED_KEYS)
}

/// [`SIGNING_KEY`].
pub fn signing_key() -> Option<PathBuf> {
    path(SIGNING_KEY)
}

/// [`REGISTRY_CA`].
pub fn registry_ca() -> Option<PathBuf> {
    path(REGISTRY_CA)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The rows of the variables' table in `text`, each line with `prefix` taken off.
    fn table_rows(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter(|l| l.starts_with("| `CRAC_"))
            .map(str::to_owned)
            .collect()
    }

    fn name_of(row: &str) -> String {
        row.split('`').nth(1).unwrap_or_default().to_owned()
    }

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The `CRAC_…` names in `text` (not part of a longer identifier).
    fn names_in(text: &str) -> BTreeSet<String> {
        let b = text.as_bytes();
        let mut out = BTreeSet::new();
        for (i, _) in text.match_indices("CRAC_") {
            let before = i.checked_sub(1).map(|j| b[j]);
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                continue;
            }
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .map_or(text.len(), |n| i + n);
            let name = text[i..end].trim_end_matches('_');
            // `CRAC_*` speaks of them all.
            if name != "CRAC" {
                out.insert(name.to_owned());
            }
        }
        out
    }

    #[test]
    fn every_variable_the_code_names_is_in_the_one_table_and_read_here() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let own = include_str!("settings.rs");
        let rows = table_rows(own, "//! ");
        let table: BTreeSet<String> = rows.iter().map(|r| name_of(r)).collect();
        assert_eq!(table.len(), rows.len(), "a variable is listed twice");
        let docs = std::fs::read_to_string(root.join("docs/settings.md")).unwrap();
        assert_eq!(
            table_rows(&docs, ""),
            rows,
            "docs/settings.md's table must be this module's, row for row"
        );
        let mut files = Vec::new();
        for krate in ["crac-api", "crac-criu", "crac-cli"] {
            sources(&root.join(krate).join("src"), &mut files);
        }
        assert!(files.len() > 40, "the crates' sources were not found");
        let mut literals = BTreeSet::new();
        for f in &files {
            let whole = std::fs::read_to_string(f).unwrap();
            // What a file's tests name is theirs; the code above them is what reads.
            let text = whole.split("\n#[cfg(test)]\nmod tests").next().unwrap();
            let named = names_in(text);
            let unlisted: Vec<&String> = named.difference(&table).collect();
            assert!(
                unlisted.is_empty(),
                "{}: {unlisted:?} not in the table",
                f.display()
            );
            let is_here = f.ends_with("crac-criu/src/settings.rs");
            let in_api = f.components().any(|c| c.as_os_str() == "crac-api");
            for n in &named {
                if text.contains(&format!("\"{n}\"")) {
                    assert!(
                        is_here || in_api,
                        "{}: reads {n} itself; read it through crac_criu::settings",
                        f.display()
                    );
                    literals.insert(n.clone());
                }
            }
            if !is_here && !in_api {
                for l in text.lines().filter(|l| l.contains("env::var")) {
                    assert!(
                        !l.contains("CRAC_") && !l.contains("settings::"),
                        "{}: `{l}` reads a CRAC_ variable outside crac_criu::settings",
                        f.display()
                    );
                }
            }
        }
        assert_eq!(
            literals, table,
            "the table lists exactly the variables the code reads"
        );
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable_and_the_value() {
        let e = parse_mode("pause").unwrap_err();
        assert!(e.to_string().contains("CRAC_CHECKPOINT_MODE=pause"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(
            parse_mode("leave-running").unwrap(),
            CheckpointMode::LeaveRunning
        );
        assert_eq!(parse_mode(" stop ").unwrap(), CheckpointMode::StopAfterDump);
        let e = parse_seconds(CRIU_TIMEOUT, "soon", 300).unwrap_err();
        assert!(e.to_string().contains("CRAC_CRIU_TIMEOUT=soon"), "{e}");
        for bad in ["0", "-1", "inf", "NaN", ""] {
            assert!(parse_seconds(LAZY_TIMEOUT, bad, 120).is_err(), "{bad}");
        }
        assert_eq!(
            parse_seconds(LAZY_TIMEOUT, " 2.5 ", 120).unwrap(),
            Duration::from_millis(2500)
        );
    }
}
