//! `crac restore DIR …`: its arguments, and the restore run as a subreaper.

use std::path::PathBuf;
use std::time::Duration;

use super::{Term, USAGE, seconds, value};
use crate::restore::{self, Mode, RestoreOptions, Verify};

/// A `--env KEY=VALUE` value.
fn env_value(kv: &str) -> Result<(String, String), String> {
    kv.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("--env {kv}: expected KEY=VALUE"))
}

/// Parses `crac restore`'s arguments.
pub(super) fn parse_restore(args: &[String]) -> Result<(RestoreOptions, bool), String> {
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
            "--env" | "-e" => opts.env.push(env_value(value(args, &mut i, "--env")?)?),
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

pub(super) fn cmd_restore(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
    if let Some(i) = args.iter().position(|a| a == "--broker") {
        return broker_restore(args, i, term);
    }
    #[cfg(feature = "registry")]
    let (reg, args) = super::registry::RegistryArgs::take(args)?;
    #[cfg(feature = "registry")]
    let args = &args[..];
    let (opts, detach) = parse_restore(args)?;
    #[cfg(feature = "registry")]
    let opts = RestoreOptions {
        image_dir: match opts
            .image_dir
            .to_str()
            .and_then(crate::registry::is_reference)
        {
            Some(r) => super::registry::pull_for_restore(r, &reg, term)?,
            None => opts.image_dir,
        },
        ..opts
    };
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

/// `crac restore --broker NAME [--env K=V]… [--detach]`: the broker restores this user's image
/// of that name (see `crate::broker`).
fn broker_restore(args: &[String], at: usize, term: &mut Term<'_>) -> Result<i32, String> {
    let (name, env, detach) = parse_broker(args, at)?;
    crate::broker::client::restore(&name, &env, detach, &mut |m| term.say(m))
}

/// A broker restore: the image name, the `--env` values, `--detach`.
type BrokerRestore = (String, Vec<(String, String)>, bool);

/// The image name, `--env` values and `--detach` of a broker restore; anything else refused.
fn parse_broker(args: &[String], at: usize) -> Result<BrokerRestore, String> {
    let name = args
        .get(at + 1)
        .ok_or_else(|| format!("--broker needs an image name\n{USAGE}"))?;
    let mut env = Vec::new();
    let mut detach = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            _ if i == at => i += 1,
            "--detach" | "-d" => detach = true,
            "--env" | "-e" => env.push(env_value(value(args, &mut i, "--env")?)?),
            a => {
                return Err(format!(
                    "--broker takes only --env and --detach, not {a} (the broker restores \
                     eagerly, its seal checked in full)\n{USAGE}"
                ));
            }
        }
        i += 1;
    }
    Ok((name.clone(), env, detach))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn broker_restore_arguments() {
        let a = args("--env A=1 --broker svc -d");
        let (name, env, detach) = parse_broker(&a, 2).unwrap();
        assert_eq!((name.as_str(), detach), ("svc", true));
        assert_eq!(env, vec![("A".into(), "1".into())]);
        for bad in ["--broker svc --pidns", "--broker svc /img", "--broker"] {
            let a = args(bad);
            assert!(parse_broker(&a, 0).is_err(), "{bad}");
        }
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
}
