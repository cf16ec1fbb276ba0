//! `crac push DIR REF`, `crac pull REF DIR`, and the registry options of `crac restore REF`.

use std::path::PathBuf;

use super::Term;
use super::args::{PullArgs, PushArgs, ReachArgs, RegistryCommand, RestoreRegistry, TrustArgs};
use crate::registry::connect::Reach;
use crate::registry::pull::{self, PullOptions, Trust};
use crate::registry::push::{self, PushOptions};
use crate::registry::sign::TrustedKeys;
use crac_criu::safe_dir::Dir;
use crac_criu::settings;

/// How to reach the registry: `--ca-file`, else `CRAC_REGISTRY_CA`.
fn reach(a: &ReachArgs) -> Reach {
    Reach {
        plain_http: a.plain_http,
        ca_file: a.ca_file.clone().or_else(settings::registry_ca),
    }
}

/// The trusted keys (`--trust`, else `CRAC_TRUSTED_KEYS`), or no signature asked for.
fn trust(a: &TrustArgs) -> Result<Trust, String> {
    let spec = if a.trust.is_empty() {
        settings::trusted_keys()
            .map_err(|e| e.to_string())?
            .unwrap_or_default()
    } else {
        a.trust.join(":")
    };
    match (spec.is_empty(), a.allow_unsigned) {
        (true, true) => Ok(Trust::Unsigned),
        (false, false) => TrustedKeys::load(&spec)
            .map(Trust::Keys)
            .map_err(|e| e.to_string()),
        (false, true) => Err("--allow-unsigned and trusted keys: choose one".to_owned()),
        (true, false) => Err(
            "no trusted keys: pass --trust DIR (public keys, `openssl pkey -pubout` PEM) or \
             set CRAC_TRUSTED_KEYS, or --allow-unsigned to restore whatever the registry \
             sends"
                .to_owned(),
        ),
    }
}

/// `crac push` or `crac pull`.
pub(super) fn cmd_registry(c: &RegistryCommand, term: &mut Term<'_>) -> Result<i32, String> {
    match c {
        RegistryCommand::Push(a) => cmd_push(a, term),
        RegistryCommand::Pull(a) => cmd_pull(a, term),
    }
}

/// `crac push DIR REF`: prints the pinned reference.
fn cmd_push(a: &PushArgs, term: &mut Term<'_>) -> Result<i32, String> {
    let opts = PushOptions {
        dir: a.dir.clone(),
        reference: a.reference.clone(),
        reach: reach(&a.reach),
        sign_key: a.sign.clone().or_else(settings::signing_key),
        chunk: a.chunk_mb << 20,
        level: a.level,
    };
    let p = push::push(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
    push::report(&p, &mut |m| term.say(m));
    term.print(&p.pinned);
    Ok(0)
}

/// `crac pull REF DIR`: prints the directory.
fn cmd_pull(a: &PullArgs, term: &mut Term<'_>) -> Result<i32, String> {
    let opts = PullOptions {
        reference: a.reference.clone(),
        dir: a.dir.clone(),
        reach: reach(&a.reach),
        trust: trust(&a.trust)?,
    };
    let p = pull::pull(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
    pull::report(&p, &mut |m| term.say(m));
    term.print(&opts.dir.display().to_string());
    Ok(0)
}

/// For `crac restore REF`: pulls the artifact (into `--pull-to DIR`, else the cache) and
/// returns the image directory to restore.
pub(super) fn pull_for_restore(
    reference: &str,
    reg: &RestoreRegistry,
    term: &mut Term<'_>,
) -> Result<PathBuf, String> {
    let trust = trust(&reg.trust)?;
    let reach = reach(&reg.reach);
    if let Some(dir) = &reg.pull_to {
        let opts = PullOptions {
            reference: reference.to_owned(),
            dir: dir.clone(),
            reach,
            trust,
        };
        let p = pull::pull(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
        pull::report(&p, &mut |m| term.say(m));
        return Ok(dir.clone());
    }
    let base = cache_dir();
    let cache =
        Dir::create_private(&base).map_err(|e| format!("image cache {}: {e}", base.display()))?;
    let (path, p) = pull::pull_cached(reference, &reach, &trust, &cache, &mut |m| term.say(m))
        .map_err(|e| e.to_string())?;
    if let Some(p) = p {
        pull::report(&p, &mut |m| term.say(m));
    }
    Ok(path)
}

/// Where `crac restore REF` keeps pulled images: `CRAC_IMAGE_CACHE`, else
/// `/var/cache/crac-rs/images` for root and `$XDG_CACHE_HOME` (or `~/.cache`)`/crac-rs/images`.
fn cache_dir() -> PathBuf {
    if let Some(d) = settings::image_cache() {
        return d;
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if crate::sys::euid() == 0 {
        return PathBuf::from("/var/cache/crac-rs/images");
    }
    env("XDG_CACHE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("crac-rs/images")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Command, parse, parse_restore};

    fn restore_registry(line: &str) -> Result<RestoreRegistry, String> {
        parse_restore(line).map(|a| a.registry)
    }

    #[test]
    fn registry_options_are_taken_out() {
        let r = restore_registry("ref --plain-http --trust /k --eager --pull-to /d").unwrap();
        assert!(r.reach.plain_http && !r.trust.allow_unsigned);
        assert_eq!(r.trust.trust, vec!["/k".to_owned()]);
        assert_eq!(r.pull_to, Some(PathBuf::from("/d")));
        let r = restore_registry("--trust /a ref --trust /b --ca-file /ca").unwrap();
        assert_eq!(r.trust.trust, vec!["/a".to_owned(), "/b".to_owned()]);
        assert_eq!(reach(&r.reach).ca_file, Some(PathBuf::from("/ca")));
        assert!(restore_registry("ref --trust").is_err());
        let r = restore_registry("ref --allow-unsigned --trust /k").unwrap();
        assert!(trust(&r.trust).err().unwrap().contains("choose one"));
    }

    #[test]
    fn push_and_pull_arguments() {
        let Ok(Command::Registry(RegistryCommand::Push(a))) = parse(&[
            "push",
            "--sign",
            "/key",
            "/img",
            "h:5000/r:t",
            "--chunk-mb",
            "8",
            "--plain-http",
        ]) else {
            panic!("not parsed");
        };
        assert_eq!(
            (a.dir.to_str(), a.reference.as_str()),
            (Some("/img"), "h:5000/r:t")
        );
        assert_eq!((a.sign, a.chunk_mb, a.level), (Some("/key".into()), 8, 3));
        assert!(a.reach.plain_http);
        for (bad, named) in [
            (["--chunk-mb", "0"], "--chunk-mb <N>"),
            (["--chunk-mb", "4097"], "--chunk-mb <N>"),
            (["--level", "20"], "--level <N>"),
        ] {
            let line = [&["push", "/img", "h/r"][..], &bad[..]].concat();
            let e = parse(&line).unwrap_err();
            assert!(e.contains(named), "{e}");
        }
        assert!(parse(&["push", "/img"]).unwrap_err().contains("<REF>"));
        let Ok(Command::Registry(RegistryCommand::Pull(a))) =
            parse(&["pull", "h/r", "/d", "--trust", "/k", "--ca-file", "/ca"])
        else {
            panic!("not parsed");
        };
        assert_eq!((a.reference.as_str(), a.dir.to_str()), ("h/r", Some("/d")));
        assert_eq!(a.trust.trust, vec!["/k".to_owned()]);
        assert!(parse(&["pull", "h/r", "/d", "--pull-to", "/x"]).is_err());
    }
}
