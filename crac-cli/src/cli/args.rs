//! `crac`'s command line as clap types: what each command takes, its help text, and the checks
//! every value passes before a command runs (so that a bad value is an error naming its
//! argument, exit status 2, before anything is done).
//!
//! The doc comments are the help: `crac --help`, `crac COMMAND --help`. They keep their line
//! breaks (`verbatim_doc_comment`): clap is built without `wrap_help`, so it would not wrap
//! them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

#[cfg(feature = "registry")]
pub(crate) use super::registry_args::{PullArgs, PushArgs, ReachArgs, TrustArgs};
pub(crate) use super::registry_args::{RegistryCommand, RestoreRegistry};
use crate::restore::Verify;
use crate::restore::guard::{GUARD_COMMAND, GuardArgs};
use crate::restore::pidns::{INIT_COMMAND, InitArgs};

/// Restore images, ask a running process to checkpoint itself, check the machine.
///
/// Messages go to stderr, prefixed `crac:`; stdout belongs to the restored process (and
/// carries the results of the other commands).
#[derive(Debug, Parser)]
#[command(
    name = "crac",
    bin_name = "crac",
    version,
    subcommand_required = true,
    arg_required_else_help = true,
    verbatim_doc_comment
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands. Push and pull exist with the `registry` feature only (`RegistryCommand`).
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Restore an image; wait for the restored process and exit with its status
    ///
    /// DIR is an image directory. REF (HOST[:PORT]/REPO[:TAG|@DIGEST], or oci://REF) is an
    /// image in an OCI registry: it is pulled, its signature checked (--trust), into
    /// --pull-to DIR or the image cache, then restored. With --broker NAME, a user who is
    /// not root has the checkpoint broker restore their image NAME.
    #[command(verbatim_doc_comment, override_usage = RESTORE_USAGE)]
    Restore(RestoreArgs),
    #[command(flatten)]
    Registry(RegistryCommand),
    /// Ask a running crac-criu program to checkpoint itself (like jcmd PID JDK.checkpoint)
    ///
    /// Without --leave-running, --stop or --dir, the process's own configuration decides.
    /// When the process ended after the checkpoint, its image directory is printed.
    #[command(verbatim_doc_comment)]
    Checkpoint(CheckpointArgs),
    /// Can checkpoints work here? criu, `criu check`, privileges, kernel, the broker
    ///
    /// Each problem is reported with its fix; the exit status is 1 if there is one.
    #[command(verbatim_doc_comment)]
    Check,
    /// (root) The checkpoint broker: users who are not root checkpoint and restore with it
    Daemon(DaemonArgs),
    /// Print the shell completions of crac for SHELL.
    Completions {
        /// The shell to complete in.
        shell: Shell,
    },
    /// Internal to `crac restore --pidns`: PID 1 of the new PID namespace, runs criu.
    #[command(name = INIT_COMMAND, hide = true)]
    PidnsInit(InitArgs),
    /// Internal to `crac restore`: ends what the restore started if `crac restore` dies first.
    #[command(name = GUARD_COMMAND, hide = true)]
    RestoreGuard(GuardArgs),
}

/// `crac restore`'s forms (clap would show one).
const RESTORE_USAGE: &str = "crac restore [OPTIONS] <DIR|REF>
       crac restore --broker <NAME> [--env <KEY=VALUE>]... [--detach] [--pidns] [--lazy|--eager] [--verify <full|metadata>]";

/// What `--broker` refuses: the image is the broker's, and so is the wait for its pids (the
/// registry's options are refused too: `RESTORE_REGISTRY_IDS`).
const NOT_WITH_BROKER: [&str; 2] = ["image", "pid_wait"];

/// `crac restore`'s arguments.
#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub(crate) struct RestoreArgs {
    /// The image directory, or (with the registry) an image reference REF to pull.
    #[arg(value_name = "DIR|REF", required_unless_present = "broker")]
    pub(crate) image: Option<PathBuf>,
    /// The checkpoint broker restores this user's image NAME
    ///
    /// For a user who is not root: the image's seal and the user's credentials are checked,
    /// and the process gets this terminal's descriptors. --env, --detach, --pidns, --lazy,
    /// --eager and --verify go with it (the seal is what is verified).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = NOT_WITH_BROKER,
        verbatim_doc_comment
    )]
    #[cfg_attr(
        feature = "registry",
        arg(conflicts_with_all = super::registry_args::RESTORE_REGISTRY_IDS)
    )]
    pub(crate) broker: Option<String>,
    /// Run at once, memory served on demand (default where it works)
    ///
    /// Lazy: the pages the process touches are served first while the rest streams in.
    /// The default where `crac check` says lazy restores work.
    #[arg(long, overrides_with = "eager", verbatim_doc_comment)]
    pub(crate) lazy: bool,
    /// Eager: every page is read before the process runs.
    #[arg(long, overrides_with = "lazy")]
    pub(crate) eager: bool,
    /// What is checked against the image's manifest, and when
    ///
    /// full: every file's digest before the process runs (default when eager);
    /// metadata: the page files' digests while it runs, a mismatch ends it (default when
    /// lazy).
    #[arg(long, value_name = "full|metadata", value_parser = verify, verbatim_doc_comment)]
    pub(crate) verify: Option<Verify>,
    /// Restore into a fresh PID namespace
    ///
    /// So several copies of one image can run at once, and a PID of the image that is taken
    /// here does not matter.
    #[arg(long, verbatim_doc_comment)]
    pub(crate) pidns: bool,
    /// Configuration for the restored process; repeatable
    ///
    /// The process reads it with Core::management().restore_env().
    #[arg(
        short = 'e',
        long,
        value_name = "KEY=VALUE",
        value_parser = env_value,
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub(crate) env: Vec<(String, String)>,
    /// Exit once the process runs, its memory all in and checked
    ///
    /// Instead of waiting for the process and exiting with its status.
    #[arg(short = 'd', long, verbatim_doc_comment)]
    pub(crate) detach: bool,
    /// How long to wait for a PID of the image that a dying process holds
    #[arg(
        long,
        value_name = "SECS",
        value_parser = seconds,
        default_value = "10",
        allow_negative_numbers = true
    )]
    pub(crate) pid_wait: Duration,
    /// `crac restore REF`'s options.
    #[command(flatten)]
    pub(crate) registry: RestoreRegistry,
}

/// `crac checkpoint`'s arguments.
#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub(crate) struct CheckpointArgs {
    /// The process: a running crac-criu program.
    #[arg(
        value_parser = clap::value_parser!(i32).range(1..),
        allow_negative_numbers = true
    )]
    pub(crate) pid: i32,
    /// Keep the process running after the checkpoint
    #[arg(long, overrides_with = "stop")]
    pub(crate) leave_running: bool,
    /// End the process after the checkpoint
    #[arg(long, overrides_with = "leave_running")]
    pub(crate) stop: bool,
    /// The image directory
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// How long to wait for the process's answer.
    #[arg(
        long,
        value_name = "SECS",
        value_parser = seconds,
        default_value = "300",
        allow_negative_numbers = true
    )]
    pub(crate) timeout: Duration,
}

/// `crac daemon`'s arguments.
#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub(crate) struct DaemonArgs {
    /// The socket clients connect to (default: CRAC_BROKER_SOCKET, else
    /// /run/crac/daemon.sock).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Where the images are kept.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/crac/images")]
    pub(crate) store: PathBuf,
    /// The host key the images are sealed with.
    #[arg(long, value_name = "FILE", default_value = "/var/lib/crac/host.key")]
    pub(crate) key: PathBuf,
    /// Requests served at once, in all (each holds a thread until it is answered; a
    /// restored service holds none).
    #[arg(long, value_name = "N", default_value = "64", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) max_requests: u32,
    /// Requests of one user served at once: what one user can never take from another.
    #[arg(long, value_name = "N", default_value = "8", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) max_per_user: u32,
}

/// The command line that shell completions offer: the visible commands only (clap_complete
/// would offer the hidden internal ones too).
pub(crate) fn completed_command() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .cloned()
        .collect();
    clap::Command::new("crac")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(visible)
}

/// A `--verify` value.
fn verify(v: &str) -> Result<Verify, String> {
    Verify::parse(v).ok_or_else(|| "expected full or metadata".to_owned())
}

/// A `--env KEY=VALUE` value.
fn env_value(kv: &str) -> Result<(String, String), String> {
    kv.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| "expected KEY=VALUE".to_owned())
}

/// A number of seconds: finite, not negative.
fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "not a number of seconds".to_owned())
}

/// Parses a command line (without the program name), as `run` does; the error as text.
#[cfg(test)]
pub(crate) fn parse(line: &[&str]) -> Result<Command, String> {
    Cli::try_parse_from(std::iter::once("crac").chain(line.iter().copied()))
        .map(|c| c.command)
        .map_err(|e| e.to_string())
}

/// Parses `crac restore LINE` (`LINE` split at white space), for tests.
#[cfg(test)]
pub(crate) fn parse_restore(line: &str) -> Result<RestoreArgs, String> {
    let line: Vec<&str> = std::iter::once("restore")
        .chain(line.split_whitespace())
        .collect();
    match parse(&line)? {
        Command::Restore(a) => Ok(a),
        c => Err(format!("not a restore: {c:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds_are_finite_and_not_negative() {
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        for bad in ["-1", "inf", "NaN", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn checkpoint_arguments() {
        let Ok(Command::Checkpoint(a)) = parse(&["checkpoint", "--stop", "42", "--dir", "/i"])
        else {
            panic!("not parsed");
        };
        assert_eq!((a.pid, a.stop, a.leave_running), (42, true, false));
        assert_eq!(a.dir, Some(PathBuf::from("/i")));
        assert_eq!(a.timeout, Duration::from_secs(300));
        let Ok(Command::Checkpoint(a)) = parse(&["checkpoint", "7", "--stop", "--leave-running"])
        else {
            panic!("not parsed");
        };
        assert!(a.leave_running && !a.stop, "the last of the two counts");
        for bad in ["notapid", "0", "-5"] {
            let e = parse(&["checkpoint", bad]).unwrap_err();
            assert!(e.contains("<PID>"), "{e}");
        }
        let e = parse(&["checkpoint", "7", "--timeout", "-1"]).unwrap_err();
        assert!(e.contains("'-1'") && e.contains("--timeout <SECS>"), "{e}");
    }

    #[test]
    fn daemon_defaults() {
        let Ok(Command::Daemon(a)) = parse(&["daemon", "--key", "/k"]) else {
            panic!("not parsed");
        };
        assert_eq!(a.socket, None);
        assert_eq!(a.store, PathBuf::from("/var/lib/crac/images"));
        assert_eq!(a.key, PathBuf::from("/k"));
        assert!(
            parse(&["daemon", "--bogus"])
                .unwrap_err()
                .contains("--bogus")
        );
    }
}
