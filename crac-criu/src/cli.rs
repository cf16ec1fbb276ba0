//! The `crac` command: restore an image, ask a running process to checkpoint itself, check the
//! machine. It lives in the library so that every binary built from it (the `crac` binary of
//! this crate, and the copy the end-to-end tests build) runs the same code.
//!
//! ```text
//! crac restore DIR [--lazy | --eager] [--verify full|metadata] [--pidns] [--env K=V]...
//!              [--detach] [--pid-wait SECS]
//! crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
//! crac check
//! ```
//!
//! Messages go to the `err` writer (stderr), prefixed `crac:`; stdout belongs to the restored
//! process, which writes to the restorer's own stdout.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::restore::{self, Mode, RestoreOptions, Verify};
use crate::{control, criu, kdat};

/// The usage text.
pub const USAGE: &str = "usage:
  crac restore DIR [--lazy | --eager] [--verify full|metadata] [--pidns] [--env K=V]...
               [--detach] [--pid-wait SECS]
      restore the image in DIR; waits for the restored process and exits with its status
      (--detach: exits once the process runs and its memory is all in and checked).
      --lazy (the default where `crac check` says it works): the process runs at once and
      its memory is served on demand while the rest streams in; --eager: every page is read
      first. --verify full: every file's digest before the process runs (default when
      eager); metadata: the page files' digests while it runs, a mismatch ends it (default
      when lazy). --pidns restores into a fresh PID namespace, so several copies of one image
      can run at once; --env passes configuration to the restored process
      (Core::management().restore_env()).
  crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
      ask a running crac-criu program to checkpoint itself (like jcmd PID JDK.checkpoint)
  crac check
      can checkpoints work here? criu, its version, `criu check`, privileges, kernel";

/// Where the command writes: `out` for results (`crac check`'s report, the image directory of
/// `crac checkpoint`), `err` for messages.
pub struct Term<'a> {
    /// Results.
    pub out: &'a mut dyn Write,
    /// Messages.
    pub err: &'a mut dyn Write,
}

impl Term<'_> {
    fn say(&mut self, msg: &str) {
        let _ = writeln!(self.err, "crac: {msg}");
        let _ = self.err.flush();
    }

    fn print(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
}

/// Runs the command with `args` (without the program name) and returns the exit code: the
/// restored process's status for `restore`, 0/1 for the others, 2 for a usage or setup error.
pub fn run(args: &[String], term: &mut Term<'_>) -> i32 {
    let r = match args.first().map(String::as_str) {
        Some("restore") => cmd_restore(&args[1..], term),
        Some("checkpoint") => cmd_checkpoint(&args[1..], term),
        Some("check") => Ok(cmd_check(term)),
        Some(crate::pidns::INIT_COMMAND) => crate::pidns::run_init(&args[1..]),
        Some("-h") | Some("--help") | Some("help") => {
            term.print(USAGE);
            Ok(0)
        }
        Some(c) => Err(format!("unknown command `{c}`\n{USAGE}")),
        None => Err(USAGE.to_owned()),
    };
    match r {
        Ok(code) => code.clamp(0, 255),
        Err(e) => {
            term.say(&format!("error: {e}"));
            2
        }
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn seconds(s: &str, flag: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{flag} {s}: not a number of seconds"))
}

/// Parses `crac restore`'s arguments.
fn parse_restore(args: &[String]) -> Result<(RestoreOptions, bool), String> {
    let mut opts = RestoreOptions {
        pid_wait: Duration::from_secs(10),
        ..RestoreOptions::default()
    };
    let mut detach = false;
    let mut dir = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--pidns" => opts.pidns = true,
            "--lazy" => opts.mode = Mode::Lazy,
            "--eager" => opts.mode = Mode::Eager,
            "--verify" => {
                let v = value(args, &mut i, "--verify")?;
                opts.verify = Some(
                    Verify::parse(v)
                        .ok_or_else(|| format!("--verify {v}: expected full or metadata"))?,
                );
            }
            a if a.starts_with("--verify=") => {
                let v = &a["--verify=".len()..];
                opts.verify = Some(
                    Verify::parse(v)
                        .ok_or_else(|| format!("--verify {v}: expected full or metadata"))?,
                );
            }
            "--detach" | "-d" => detach = true,
            "--env" | "-e" => {
                let kv = value(args, &mut i, "--env")?;
                let (k, v) = kv
                    .split_once('=')
                    .filter(|(k, _)| !k.is_empty())
                    .ok_or_else(|| format!("--env {kv}: expected KEY=VALUE"))?;
                opts.env.push((k.to_owned(), v.to_owned()));
            }
            "--pid-wait" => {
                opts.pid_wait = seconds(value(args, &mut i, "--pid-wait")?, "--pid-wait")?
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a if dir.is_none() => dir = Some(PathBuf::from(a)),
            a => return Err(format!("unexpected argument {a}")),
        }
        i += 1;
    }
    opts.image_dir = dir.ok_or_else(|| format!("restore needs an image directory\n{USAGE}"))?;
    Ok((opts, detach))
}

fn cmd_restore(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
    let (opts, detach) = parse_restore(args)?;
    // Subreaper: once criu exits, the restored process becomes our child and we can report
    // its exit status (and reap it at once, so its PID is free for the next restore).
    restore::become_subreaper().map_err(|e| e.to_string())?;
    let r = restore::restore(&opts, &mut |m| {
        let _ = writeln!(term.err, "crac: {m}");
    })
    .map_err(|e| e.to_string())?;
    let pid = match (r.pid, r.ns_pid) {
        (Some(p), Some(ns)) => format!("{p} (pid {ns} in its own PID namespace)"),
        (Some(p), None) => p.to_string(),
        // It ran and ended before we looked: its status below is what counts.
        (None, Some(ns)) => format!("{ns} of its own PID namespace"),
        (None, None) => "?".to_owned(),
    };
    term.say(&format!(
        "restored pid {pid} from {} in {:.1} ms ({})",
        opts.image_dir.display(),
        r.took.as_secs_f64() * 1e3,
        match &r.lazy {
            Ok(()) => "lazy: memory served on demand, the rest streaming in".to_owned(),
            Err(why) => format!("eager: {why}"),
        }
    ));
    let phases: Vec<String> = r
        .phases
        .iter()
        .map(|(name, d)| format!("{name} {:.1}", d.as_secs_f64() * 1e3))
        .collect();
    term.say(&format!("restore phases (ms): {}", phases.join(", ")));
    let mut note = |m: &str| term.say(m);
    if detach {
        return match r.wait_loaded(&mut note) {
            Ok(()) => Ok(0),
            Err(e) => {
                note(&format!("error: {e}"));
                Ok(1)
            }
        };
    }
    let code = match r.wait(&mut note) {
        Ok(code) => code,
        Err(e) => {
            // The background (pages, digests) failed and ended the process: it is killed.
            note(&format!("error: {e}"));
            return Ok(128 + libc::SIGKILL);
        }
    };
    let pid = pid.split(' ').next().unwrap_or("?");
    term.say(&format!("restored pid {pid} exited with status {code}"));
    Ok(code)
}

fn cmd_checkpoint(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
    let mut pid = None;
    let mut mode = None;
    let mut dir = None;
    let mut timeout = Duration::from_secs(300);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--leave-running" => mode = Some("leave-running"),
            "--stop" => mode = Some("stop"),
            "--dir" => dir = Some(value(args, &mut i, "--dir")?.to_owned()),
            "--timeout" => timeout = seconds(value(args, &mut i, "--timeout")?, "--timeout")?,
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a if pid.is_none() => {
                pid = Some(
                    a.parse::<i32>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("{a}: not a pid"))?,
                )
            }
            a => return Err(format!("unexpected argument {a}")),
        }
        i += 1;
    }
    let pid = pid.ok_or_else(|| format!("checkpoint needs a pid\n{USAGE}"))?;
    let dir = match dir {
        Some(d) => Some(std::path::absolute(&d).map_err(|e| format!("{d}: {e}"))?),
        None => None,
    };
    let req = control::Request { mode, dir, timeout };
    match control::request(pid, &req)? {
        control::Answer::Answered(true, text) => {
            term.say(&format!("pid {pid}: {text}"));
            Ok(0)
        }
        control::Answer::Answered(false, text) => {
            term.say(&format!("pid {pid} did not checkpoint: {text}"));
            Ok(1)
        }
        control::Answer::Stopped(d) => {
            term.say(&format!(
                "pid {pid} checkpointed to {} and stopped",
                d.display()
            ));
            term.print(&d.display().to_string());
            Ok(0)
        }
    }
}

fn cmd_check(term: &mut Term<'_>) -> i32 {
    let mut problems = 0;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    term.print(&format!("ok      kernel {kernel}"));
    match criu::find() {
        Ok(c) => {
            term.print(&format!(
                "ok      criu {}.{}.{} at {}",
                c.version.0,
                c.version.1,
                c.version.2,
                c.path.display()
            ));
            match criu::run_check(&c) {
                Ok(()) => term.print("ok      criu check: Looks good"),
                Err(e) => {
                    problems += 1;
                    term.print(&format!("PROBLEM {e}"));
                }
            }
        }
        Err(e) => {
            problems += 1;
            term.print(&format!("PROBLEM {e}"));
        }
    }
    if let Ok(path) = criu::locate() {
        if let Some(p) = criu::exposure_problem(&path) {
            problems += 1;
            term.print(&format!("PROBLEM {p}"));
        } else if let Some(n) = criu::exposure_note(&path) {
            term.print(&format!("note    {n}"));
        }
    }
    match criu::check_privileges() {
        Ok(()) if criu::unprivileged() => term.print(
            "ok      privileges: not root; criu carries cap_checkpoint_restore and \
             cap_sys_ptrace and runs in its unprivileged mode",
        ),
        Ok(()) => term.print("ok      privileges: root"),
        Err(e) => {
            problems += 1;
            term.print(&format!("PROBLEM {e}"));
        }
    }
    term.print(&format!(
        "ok      CPU features images from here record (a restore needs them all): {}",
        crate::cpu::host_features().join(" ")
    ));
    match std::process::Command::new("unshare")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => {
            term.print("ok      unshare found (for crac restore --pidns)")
        }
        _ => term.print(
            "note    unshare (util-linux) not found: `crac restore --pidns` will not work; \
             install util-linux",
        ),
    }
    if let Ok(c) = criu::find() {
        let timeout = crate::helper::criu_timeout().unwrap_or(Duration::from_secs(60));
        report_kdat(term, &kdat::facts(&c, timeout));
    }
    if problems == 0 {
        term.print("checkpoints can work here");
        0
    } else {
        term.print(&format!("{problems} problem(s)"));
        1
    }
}

/// `crac check`'s lines on CRIU's probe cache and on lazy restores.
fn report_kdat(term: &mut Term<'_>, f: &kdat::Facts) {
    match &f.cache {
        kdat::Cache::CriuOwn => {
            term.print("ok      /run is a tmpfs: criu keeps its kernel probe in /run/criu.kdat")
        }
        kdat::Cache::Installed { made_now } => term.print(&format!(
            "ok      /run is not a tmpfs: crac keeps criu's kernel probe in {} (made once per \
             boot, kernel and criu{}), so dumps and restores do not probe the kernel",
            kdat::KDAT_PATH,
            match made_now {
                Some(t) => format!("; made now in {:.0} ms", t.as_secs_f64() * 1e3),
                None => String::new(),
            }
        )),
        kdat::Cache::Absent(why) => term.print(&format!(
            "note    criu probes the kernel at every dump and restore (tens of ms each): {why}"
        )),
    }
    match &f.lazy_pages {
        Ok(()) => term.print(
            "ok      restores are lazy (memory served on demand while the rest streams in; \
             `criu check --feature uffd-noncoop` passes); `crac restore --eager` reads it all \
             first",
        ),
        Err(why) => term.print(&format!(
            "note    restores are eager (every page read before the process runs): {why}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn restore_arguments() {
        let (o, d) =
            parse_restore(&args("/img --pidns --env A=1 -e B=x=y --pid-wait 2.5")).unwrap();
        assert_eq!(o.image_dir, PathBuf::from("/img"));
        assert!(o.pidns && !d);
        assert_eq!(
            o.env,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(o.pid_wait, Duration::from_millis(2500));
        assert_eq!((o.mode, o.verify), (Mode::Auto, None));
        let (o, _) = parse_restore(&args("/img --eager --verify metadata")).unwrap();
        assert_eq!((o.mode, o.verify), (Mode::Eager, Some(Verify::Metadata)));
        let (o, _) = parse_restore(&args("/img --lazy --verify=full")).unwrap();
        assert_eq!((o.mode, o.verify), (Mode::Lazy, Some(Verify::Full)));
        assert!(
            parse_restore(&args("/img --verify some"))
                .unwrap_err()
                .contains("full or metadata")
        );
        assert!(
            parse_restore(&args("--env A"))
                .unwrap_err()
                .contains("KEY=VALUE")
        );
        assert!(parse_restore(&args("/img --pid-wait x")).is_err());
        assert!(
            parse_restore(&args("--bogus"))
                .unwrap_err()
                .contains("unknown option")
        );
        assert!(parse_restore(&[]).unwrap_err().contains("image directory"));
    }

    #[test]
    fn usage_errors_exit_2() {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let mut t = Term {
            out: &mut o,
            err: &mut e,
        };
        assert_eq!(run(&args("frobnicate"), &mut t), 2);
        assert_eq!(run(&args("checkpoint notapid"), &mut t), 2);
        assert!(String::from_utf8_lossy(&e).contains("unknown command `frobnicate`"));
    }
}
