//! Reading CRIU's logs: what of a dump, restore or lazy-pages log a user needs to see.

use std::fs;
use std::path::Path;

/// The relevant lines of CRIU's log: every `Error (` line but the harmless RLIMIT one (at most
/// 12), or, without any, the log's last lines.
pub fn log_errors(log: &Path) -> String {
    let Ok(text) = fs::read_to_string(log) else {
        return format!("(no log at {})", log.display());
    };
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error (") && !l.contains("RLIMIT_NOFILE"))
        .map(str::trim)
        .take(12)
        .collect();
    if errors.is_empty() {
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(5)..];
        return format!(
            "no error line in {}; its end: {}",
            log.display(),
            tail.join(" | ")
        );
    }
    errors.join("\n  ")
}
