//! `crac push DIR REF`, `crac pull REF DIR`, and the registry options of `crac restore REF`.

use std::path::PathBuf;

use super::{Term, USAGE, value};
use crate::image::dir::Dir;
use crate::registry::connect::Reach;
use crate::registry::pull::{self, PullOptions, Trust};
use crate::registry::push::{self, DEFAULT_CHUNK, DEFAULT_LEVEL, PushOptions};
use crate::registry::sign::TrustedKeys;

/// The options every registry command takes: how to reach it, whose signatures count.
#[derive(Debug, Default, Clone)]
pub(super) struct RegistryArgs {
    reach: Reach,
    trust: Vec<String>,
    allow_unsigned: bool,
    /// `crac restore REF --pull-to DIR`: where the image goes instead of the cache.
    pull_to: Option<PathBuf>,
}

impl RegistryArgs {
    /// Takes the registry options out of `args`; the rest is returned for the command's own
    /// parser.
    pub(super) fn take(args: &[String]) -> Result<(RegistryArgs, Vec<String>), String> {
        let mut r = RegistryArgs::default();
        let mut rest = Vec::new();
        let mut i = 0;
        while i < args.len() {
            match args[i].as_str() {
                "--plain-http" => r.reach.plain_http = true,
                "--allow-unsigned" => r.allow_unsigned = true,
                "--ca-file" => r.reach.ca_file = Some(value(args, &mut i, "--ca-file")?.into()),
                "--trust" => r.trust.push(value(args, &mut i, "--trust")?.to_owned()),
                "--pull-to" => r.pull_to = Some(value(args, &mut i, "--pull-to")?.into()),
                _ => rest.push(args[i].clone()),
            }
            i += 1;
        }
        if r.reach.ca_file.is_none() {
            r.reach.ca_file = std::env::var_os("CRAC_REGISTRY_CA")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from);
        }
        Ok((r, rest))
    }

    /// The trusted keys (`--trust`, else `CRAC_TRUSTED_KEYS`), or no signature asked for.
    fn trust(&self) -> Result<Trust, String> {
        let spec = if self.trust.is_empty() {
            std::env::var("CRAC_TRUSTED_KEYS").unwrap_or_default()
        } else {
            self.trust.join(":")
        };
        match (spec.is_empty(), self.allow_unsigned) {
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
}

/// `crac push DIR REF [--sign KEY] [--chunk-mb N] [--level N] [--plain-http] [--ca-file F]`.
pub(super) fn cmd_push(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
    let (reg, args) = RegistryArgs::take(args)?;
    let mut opts = PushOptions {
        dir: PathBuf::new(),
        reference: String::new(),
        reach: reg.reach,
        sign_key: std::env::var_os("CRAC_SIGNING_KEY")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        chunk: DEFAULT_CHUNK,
        level: DEFAULT_LEVEL,
    };
    let mut pos = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--sign" => opts.sign_key = Some(value(&args, &mut i, "--sign")?.into()),
            "--chunk-mb" => {
                let v = value(&args, &mut i, "--chunk-mb")?;
                opts.chunk = v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=4096).contains(n))
                    .ok_or_else(|| format!("--chunk-mb {v}: expected 1 to 4096"))?
                    << 20;
            }
            "--level" => {
                let v = value(&args, &mut i, "--level")?;
                opts.level = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=19).contains(n))
                    .ok_or_else(|| format!("--level {v}: expected a zstd level, 1 to 19"))?;
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a => pos.push(a.to_owned()),
        }
        i += 1;
    }
    let [dir, reference] = <[String; 2]>::try_from(pos)
        .map_err(|_| format!("push needs an image directory and a reference\n{USAGE}"))?;
    (opts.dir, opts.reference) = (dir.into(), reference);
    let p = push::push(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
    push::report(&p, &mut |m| term.say(m));
    term.print(&p.pinned);
    Ok(0)
}

/// `crac pull REF DIR [--trust DIR]… [--allow-unsigned] [--plain-http] [--ca-file F]`.
pub(super) fn cmd_pull(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
    let (reg, args) = RegistryArgs::take(args)?;
    if let Some(a) = args.iter().find(|a| a.starts_with('-')) {
        return Err(format!("unknown option {a}\n{USAGE}"));
    }
    let [reference, dir] = <[String; 2]>::try_from(args)
        .map_err(|_| format!("pull needs a reference and a directory\n{USAGE}"))?;
    let opts = PullOptions {
        reference,
        dir: dir.into(),
        reach: reg.reach.clone(),
        trust: reg.trust()?,
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
    reg: &RegistryArgs,
    term: &mut Term<'_>,
) -> Result<PathBuf, String> {
    let trust = reg.trust()?;
    if let Some(dir) = &reg.pull_to {
        let opts = PullOptions {
            reference: reference.to_owned(),
            dir: dir.clone(),
            reach: reg.reach.clone(),
            trust,
        };
        let p = pull::pull(&opts, &mut |m| term.say(m)).map_err(|e| e.to_string())?;
        pull::report(&p, &mut |m| term.say(m));
        return Ok(dir.clone());
    }
    let base = cache_dir();
    let cache =
        Dir::create_private(&base).map_err(|e| format!("image cache {}: {e}", base.display()))?;
    let (path, p) = pull::pull_cached(reference, &reg.reach, &trust, &cache, &mut |m| term.say(m))
        .map_err(|e| e.to_string())?;
    if let Some(p) = p {
        pull::report(&p, &mut |m| term.say(m));
    }
    Ok(path)
}

/// Where `crac restore REF` keeps pulled images: `CRAC_IMAGE_CACHE`, else
/// `/var/cache/crac-rs/images` for root and `$XDG_CACHE_HOME` (or `~/.cache`)`/crac-rs/images`.
fn cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("CRAC_IMAGE_CACHE") {
        return d;
    }
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

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn registry_options_are_taken_out() {
        let (r, rest) =
            RegistryArgs::take(&args("ref --plain-http --trust /k --eager --pull-to /d")).unwrap();
        assert!(r.reach.plain_http);
        assert_eq!(r.trust, vec!["/k".to_owned()]);
        assert_eq!(r.pull_to, Some(PathBuf::from("/d")));
        assert_eq!(rest, args("ref --eager"));
        assert!(RegistryArgs::take(&args("--trust")).is_err());
        let (r, _) = RegistryArgs::take(&args("--allow-unsigned --trust /k")).unwrap();
        assert!(r.trust().err().unwrap().contains("choose one"));
    }
}
