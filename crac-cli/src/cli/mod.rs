//! The `crac` command: restore an image, ask a running process to checkpoint itself, check the
//! machine. It lives in the library so that every binary built from it (the `crac` binary of
//! this crate, and the copy the end-to-end tests build) runs the same code.
//!
//! The command line is clap's ([`args`]; `crac --help`). Messages go to the `err` writer
//! (stderr), prefixed `crac:`; stdout belongs to the restored process, which writes to the
//! restorer's own stdout.

use std::io::Write;

use clap::Parser;

pub(crate) mod args;
mod check;
mod checkpoint;
#[cfg(feature = "registry")]
mod registry;
mod registry_args;
mod restore;

use args::{Cli, Command};

/// Where the command writes: `out` for results (`crac check`'s report, the image directory of
/// `crac checkpoint`), `err` for messages.
pub struct Term<'a> {
    /// Results.
    pub out: &'a mut dyn Write,
    /// Messages.
    pub err: &'a mut dyn Write,
}

impl Term<'_> {
    /// One message, written at once: the restored process writes to the same stream, and a
    /// line written in pieces would be torn by its output.
    fn say(&mut self, msg: &str) {
        let _ = self.err.write_all(format!("crac: {msg}\n").as_bytes());
        let _ = self.err.flush();
    }

    fn print(&mut self, line: &str) {
        let _ = self.out.write_all(format!("{line}\n").as_bytes());
        let _ = self.out.flush();
    }
}

/// The `crac` program: runs [`run`] with the process's arguments and terminal and exits with
/// its code.
pub fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = run(
        &args,
        &mut Term {
            out: &mut out,
            err: &mut err,
        },
    );
    std::process::ExitCode::from(code as u8)
}

/// Runs the command with `args` (without the program name) and returns the exit code: the
/// restored process's status for `restore`, 0/1 for the others, 2 for a usage or setup error
/// (0 for `--help`, whose text goes to `out`).
pub fn run(args: &[String], term: &mut Term<'_>) -> i32 {
    let line = std::iter::once("crac").chain(args.iter().map(String::as_str));
    let cli = match Cli::try_parse_from(line) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e, term),
    };
    let r = match cli.command {
        Command::Restore(a) => restore::cmd_restore(&a, term),
        #[cfg(feature = "registry")]
        Command::Registry(c) => registry::cmd_registry(&c, term),
        #[cfg(not(feature = "registry"))]
        Command::Registry(c) => match c {},
        Command::Checkpoint(a) => checkpoint::cmd_checkpoint(&a, term),
        Command::Check => Ok(check::cmd_check(term)),
        Command::Daemon(a) => crate::broker::server::run_daemon(&a),
        Command::Completions { shell } => {
            let mut cmd = args::completed_command();
            clap_complete::generate(shell, &mut cmd, "crac", &mut *term.out);
            let _ = term.out.flush();
            Ok(0)
        }
        Command::PidnsInit(a) => crate::restore::pidns::run_init(&a),
        Command::RestoreGuard(a) => crate::restore::guard::run_guard(&a),
    };
    match r {
        Ok(code) => code.clamp(0, 255),
        Err(e) => {
            term.say(&format!("error: {e}"));
            2
        }
    }
}

/// What clap stopped at: help and the version go to `out` (exit 0), help for a bare `crac`
/// and usage errors to `err` (exit 2), an error prefixed as every message is.
fn clap_error(e: &clap::Error, term: &mut Term<'_>) -> i32 {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = write!(term.out, "{text}");
            let _ = term.out.flush();
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = write!(term.err, "{text}");
            let _ = term.err.flush();
        }
        _ => term.say(text.trim_end()),
    }
    e.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `line`: its exit code, what it wrote to out and to err.
    fn run_line(line: &str) -> (i32, String, String) {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let code = run(
            &args,
            &mut Term {
                out: &mut o,
                err: &mut e,
            },
        );
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (code, text(o), text(e))
    }

    #[test]
    fn usage_errors_exit_2() {
        let (code, _, e) = run_line("frobnicate");
        assert_eq!(code, 2);
        assert!(
            e.starts_with("crac: error:") && e.contains("frobnicate"),
            "{e}"
        );
        let (code, _, e) = run_line("checkpoint notapid");
        assert_eq!(code, 2);
        assert!(e.contains("'notapid'") && e.contains("<PID>"), "{e}");
        let (code, o, e) = run_line("");
        assert_eq!((code, o.as_str()), (2, ""));
        assert!(e.contains("Usage: crac"), "{e}");
    }

    #[test]
    fn help_goes_to_out_and_exits_0() {
        let mut commands = vec!["restore", "checkpoint", "check", "daemon", "completions"];
        if cfg!(feature = "registry") {
            commands.extend(["push", "pull"]);
        }
        let (code, o, e) = run_line("--help");
        assert_eq!((code, e.as_str()), (0, ""));
        assert!(o.contains("Usage: crac"), "{o}");
        for c in &commands {
            assert!(o.contains(&format!("\n  {c} ")), "{c} in {o}");
        }
        for hidden in ["__pidns-init", "__restore-guard"] {
            assert!(!o.contains(hidden), "{o}");
        }
        for c in &commands {
            let (code, o, e) = run_line(&format!("{c} --help"));
            assert_eq!((code, e.as_str()), (0, ""), "{c}");
            assert!(o.contains(&format!("Usage: crac {c}")), "{o}");
        }
        let (code, o, _) = run_line("help restore");
        assert_eq!(code, 0);
        assert!(o.contains("--broker <NAME>"), "{o}");
    }

    #[test]
    fn a_bad_value_names_its_argument() {
        let (code, _, e) = run_line("restore /img --pid-wait soon");
        assert_eq!(code, 2);
        assert!(
            e.contains("'soon'") && e.contains("--pid-wait <SECS>"),
            "{e}"
        );
        let (code, _, e) = run_line("restore /img --verify some");
        assert_eq!(code, 2);
        assert!(
            e.contains("--verify") && e.contains("full or metadata"),
            "{e}"
        );
    }

    #[test]
    fn completions_are_printed() {
        let (code, o, e) = run_line("completions bash");
        assert_eq!((code, e.as_str()), (0, ""));
        assert!(o.contains("restore") && o.contains("--pid-wait"), "{o}");
        assert!(!o.contains("__pidns-init") && !o.contains("__restore-guard"));
        for shell in ["zsh", "fish", "elvish", "powershell"] {
            let (code, o, _) = run_line(&format!("completions {shell}"));
            assert_eq!(code, 0);
            assert!(o.contains("restore"), "{shell}");
        }
        assert_eq!(run_line("completions tcsh").0, 2);
    }
}
