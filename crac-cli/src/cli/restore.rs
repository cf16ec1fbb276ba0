//! `crac restore`: the restore run as a subreaper, or asked of the checkpoint broker.

use super::Term;
use super::args::RestoreArgs;
use crate::restore::{self, Mode, RestoreOptions};

/// What the restore does, from its arguments (a registry reference is still the image).
fn options(a: &RestoreArgs) -> RestoreOptions {
    let mode = match (a.lazy, a.eager) {
        (true, _) => Mode::Lazy,
        (_, true) => Mode::Eager,
        _ => Mode::Auto,
    };
    RestoreOptions {
        image_dir: a.image.clone().unwrap_or_default(),
        pidns: a.pidns,
        env: a.env.clone(),
        pid_wait: a.pid_wait,
        mode,
        verify: a.verify,
        ..RestoreOptions::default()
    }
}

/// Restores (pulling the image first if it is a registry reference) and waits for the
/// restored process, or has the broker restore with `--broker`.
pub(super) fn cmd_restore(a: &RestoreArgs, term: &mut Term<'_>) -> Result<i32, String> {
    if let Some(name) = &a.broker {
        // The broker restores this user's image of that name (see `crate::broker`).
        let req = crate::broker::client::BrokerRestore {
            name,
            env: &a.env,
            detach: a.detach,
            pidns: a.pidns,
            mode: options(a).mode,
            verify: a.verify,
        };
        return crate::broker::client::restore(&req, &mut |m| term.say(m));
    }
    let opts = options(a);
    #[cfg(feature = "registry")]
    let opts = match opts
        .image_dir
        .to_str()
        .and_then(crate::registry::is_reference)
    {
        Some(r) => RestoreOptions {
            image_dir: super::registry::pull_for_restore(r, &a.registry, term)?,
            ..opts
        },
        None => opts,
    };
    // Subreaper: once criu exits, the restored process becomes our child and we can report
    // its exit status (and reap it at once, so its PID is free for the next restore).
    restore::become_subreaper().map_err(|e| e.to_string())?;
    let r = restore::restore(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
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
    if a.detach {
        return match r.wait_loaded(&mut note) {
            Ok(()) => Ok(0),
            Err(e) => {
                note(&format!("error: {e}"));
                Ok(1)
            }
        };
    }
    // Until it ends, what would stop us stops it (a container's stop, a Ctrl-C): its status,
    // 128 + the signal, is then ours.
    let forwarding = r
        .pid
        .and_then(|p| crate::sys::pidfd_open(p).ok())
        .map(crate::sys::forward_signals)
        .transpose()
        .map_err(|e| format!("cannot forward signals to the restored process: {e}"))?;
    let code = r.wait(&mut note);
    drop(forwarding);
    let code = match code {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::cli::args::parse_restore;
    use crate::restore::Verify;

    #[test]
    fn broker_restore_arguments() {
        let a = parse_restore("--env A=1 --broker svc -d --pidns").unwrap();
        assert_eq!(
            (a.broker.as_deref(), a.detach, a.pidns),
            (Some("svc"), true, true)
        );
        assert_eq!(a.env, vec![("A".into(), "1".into())]);
        let a = parse_restore("--broker svc --lazy --verify full").unwrap();
        assert_eq!(options(&a).mode, crate::restore::Mode::Lazy);
        assert_eq!(a.verify, Some(Verify::Full));
        let a = parse_restore("--broker svc --eager").unwrap();
        assert_eq!(options(&a).mode, crate::restore::Mode::Eager);
        for (bad, named) in [
            ("--broker svc /img", "DIR|REF"),
            ("--broker svc --pid-wait 1", "--pid-wait"),
            ("--broker", "--broker <NAME>"),
        ] {
            let e = parse_restore(bad).unwrap_err();
            assert!(e.contains("--broker") && e.contains(named), "{bad}: {e}");
        }
        if cfg!(feature = "registry") {
            let e = parse_restore("--broker svc --trust /k").unwrap_err();
            assert!(e.contains("--trust"), "{e}");
        }
    }

    #[test]
    fn restore_arguments() {
        let a = parse_restore("/img --pidns --env A=1 -e B=x=y --pid-wait 2.5").unwrap();
        let o = options(&a);
        assert_eq!(o.image_dir, PathBuf::from("/img"));
        assert!(o.pidns && !a.detach && a.broker.is_none());
        assert_eq!(
            o.env,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(o.pid_wait, Duration::from_millis(2500));
        assert_eq!((o.mode, o.verify), (Mode::Auto, None));
        let o = options(&parse_restore("/img --eager --verify metadata").unwrap());
        assert_eq!((o.mode, o.verify), (Mode::Eager, Some(Verify::Metadata)));
        let o = options(&parse_restore("--lazy --verify=full /img --detach").unwrap());
        assert_eq!((o.mode, o.verify), (Mode::Lazy, Some(Verify::Full)));
        let o = options(&parse_restore("/img --lazy --eager -d --lazy").unwrap());
        assert_eq!(o.mode, Mode::Lazy, "the last of --lazy and --eager counts");
        assert_eq!(
            options(&parse_restore("/img").unwrap()).pid_wait,
            Duration::from_secs(10)
        );
        let e = parse_restore("/img --verify some").unwrap_err();
        assert!(
            e.contains("full or metadata") && e.contains("--verify"),
            "{e}"
        );
        let e = parse_restore("/img --env A").unwrap_err();
        assert!(e.contains("KEY=VALUE") && e.contains("'A'"), "{e}");
        let e = parse_restore("/img --pid-wait x").unwrap_err();
        assert!(e.contains("--pid-wait"), "{e}");
        let e = parse_restore("/img --bogus").unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        let e = parse_restore("/img /other").unwrap_err();
        assert!(e.contains("/other"), "{e}");
        let e = parse_restore("").unwrap_err();
        assert!(e.contains("<DIR|REF>"), "{e}");
    }
}
