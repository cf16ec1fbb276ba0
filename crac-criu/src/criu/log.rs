//! Reading CRIU's logs: what of a dump, restore or lazy-pages log a user needs to see.

use std::fs;
use std::path::Path;

/// The relevant lines of CRIU's log: every `Error (` line but the harmless RLIMIT one (at most
/// 12), or, without any, the log's last lines.
pub fn log_errors(log: &Path) -> String {
    match fs::read_to_string(log) {
        Ok(text) => errors_of(&text, log),
        Err(_) => format!("(no log at {})", log.display()),
    }
}

/// [`log_errors`] of the log `name` in `dir`, opened through the directory without following
/// a link (a log in a directory another user can write).
pub fn log_errors_in(dir: &crate::safe_dir::Dir, name: &str) -> String {
    use std::io::Read;
    let mut text = String::new();
    match dir.open_file(name) {
        Ok(f) if (&f).take(16 << 20).read_to_string(&mut text).is_ok() => {
            errors_of(&text, &dir.path().join(name))
        }
        _ => format!("(no log at {})", dir.path().join(name).display()),
    }
}

fn errors_of(text: &str, log: &Path) -> String {
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
