//! Config providers, as Java's KIP-297 and KIP-887 define them: a value may name what holds the
//! real one, `${file:/etc/kafka/secrets.properties:password}` (a key of a properties file),
//! `${dir:/run/secrets:password}` (a file's content) or `${env:KAFKA_PASSWORD}` (an environment
//! variable). The security keys (`sasl.jaas.config`, `ssl.*` contents and passwords) keep the
//! reference and are resolved each time a connection authenticates, so a secret is in memory
//! only while a connection is being made, is wiped after, and a secret rotated while the
//! process was frozen is simply read anew. Other keys are resolved when they are set.
//!
//! The names `file`, `dir` and `env` work without declaration; Java's declarations
//! (`config.providers=secrets` with `config.providers.secrets.class=
//! org.apache.kafka.common.config.provider.FileConfigProvider`) add aliases.

use std::collections::HashMap;

use zeroize::Zeroizing;

/// A provider kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// `FileConfigProvider`: `${NAME:path:key}`, a key of a properties file.
    File,
    /// `DirectoryConfigProvider`: `${NAME:dir:file}`, a file's content.
    Directory,
    /// `EnvVarConfigProvider`: `${NAME:VAR}` (or `${NAME::VAR}`).
    Env,
}

impl ProviderKind {
    /// The kind of a Java provider class, by its full or simple name.
    pub fn from_class(class: &str) -> Option<Self> {
        match class.trim().rsplit('.').next()? {
            "FileConfigProvider" => Some(Self::File),
            "DirectoryConfigProvider" => Some(Self::Directory),
            "EnvVarConfigProvider" => Some(Self::Env),
            _ => None,
        }
    }
}

/// The providers a client knows by name.
#[derive(Debug, Clone)]
pub struct Providers {
    names: HashMap<String, ProviderKind>,
}

impl Default for Providers {
    fn default() -> Self {
        let names = [
            ("file", ProviderKind::File),
            ("dir", ProviderKind::Directory),
            ("env", ProviderKind::Env),
        ];
        Self {
            names: names.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
        }
    }
}

/// A reference that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference}: {reason}")]
pub struct ProviderError {
    /// The `${…}` text.
    pub reference: String,
    /// Why.
    pub reason: String,
}

impl Providers {
    /// Declares `name` as a provider of `kind` (Java's `config.providers.NAME.class`).
    pub fn declare(&mut self, name: &str, kind: ProviderKind) {
        self.names.insert(name.trim().to_owned(), kind);
    }

    /// Whether `value` holds a reference to a known provider.
    pub fn has_reference(&self, value: &str) -> bool {
        references(value).any(|(_, inner)| self.parse(inner).is_some())
    }

    /// `value` with every `${provider:…}` reference of a known provider replaced by what it
    /// names. Text that only looks like a reference (an unknown provider) stays as it is, as in
    /// Java. The result may hold a secret: it is wiped when dropped.
    pub fn resolve(&self, value: &str) -> Result<Zeroizing<String>, ProviderError> {
        // The pieces first, then one allocation of the exact size: a growing string would
        // leave copies of a secret behind in the memory it gives back.
        let mut pieces: Vec<Zeroizing<String>> = Vec::new();
        let mut rest = value;
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start..].find('}') else {
                break;
            };
            let inner = &rest[start + 2..start + len];
            pieces.push(Zeroizing::new(rest[..start].to_owned()));
            match self.parse(inner) {
                Some((kind, path, key)) => {
                    let v = lookup(kind, path, key).map_err(|reason| ProviderError {
                        reference: format!("${{{inner}}}"),
                        reason,
                    })?;
                    pieces.push(v);
                }
                None => pieces.push(Zeroizing::new(rest[start..=start + len].to_owned())),
            }
            rest = &rest[start + len + 1..];
        }
        pieces.push(Zeroizing::new(rest.to_owned()));
        let mut out = Zeroizing::new(String::with_capacity(pieces.iter().map(|p| p.len()).sum()));
        for p in &pieces {
            out.push_str(p);
        }
        Ok(out)
    }

    /// `provider:path:key` or `provider:key` → (kind, path, key).
    fn parse<'a>(&self, inner: &'a str) -> Option<(ProviderKind, &'a str, &'a str)> {
        let (name, rest) = inner.split_once(':')?;
        let kind = *self.names.get(name)?;
        let (path, key) = match rest.rsplit_once(':') {
            // A Windows-free world: the last ':' separates the key (paths hold none here).
            Some((path, key)) => (path, key),
            None => ("", rest),
        };
        Some((kind, path, key))
    }
}

/// `(start, inner)` of each `${…}` in `value`.
fn references(value: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at + value[at..].find("${")?;
        let len = value[start..].find('}')?;
        at = start + len + 1;
        Some((start, &value[start + 2..start + len]))
    })
}

fn lookup(kind: ProviderKind, path: &str, key: &str) -> Result<Zeroizing<String>, String> {
    match kind {
        ProviderKind::Env => {
            if !path.is_empty() {
                return Err("expected ${env:VARIABLE}".into());
            }
            std::env::var(key)
                .map(Zeroizing::new)
                .map_err(|_| format!("environment variable {key} is not set"))
        }
        ProviderKind::Directory => {
            if path.is_empty() || key.contains('/') {
                return Err("expected ${dir:/directory:file}".into());
            }
            let file = std::path::Path::new(path).join(key);
            read_file(&file.to_string_lossy())
        }
        ProviderKind::File => {
            if path.is_empty() {
                return Err("expected ${file:/path/file.properties:key}".into());
            }
            let text = read_file(path)?;
            property(&text, key).ok_or_else(|| format!("no key {key:?} in {path}"))
        }
    }
}

fn read_file(path: &str) -> Result<Zeroizing<String>, String> {
    let bytes =
        Zeroizing::new(std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?);
    std::str::from_utf8(&bytes)
        .map(|s| Zeroizing::new(s.to_owned()))
        .map_err(|_| format!("{path} is not UTF-8"))
}

/// The value of `key` in a Java properties text (`key=value` or `key: value`, `#`/`!`
/// comments, backslash-continued lines, `\t \n \r \f \uXXXX` escapes).
fn property(text: &str, key: &str) -> Option<Zeroizing<String>> {
    // Never longer than the text: no reallocation leaves a copy behind.
    let mut logical = Zeroizing::new(String::with_capacity(text.len()));
    for line in text.lines() {
        // Leading white space goes, on first and continuation lines alike.
        let l = line.trim_start();
        if logical.is_empty() && (l.is_empty() || l.starts_with('#') || l.starts_with('!')) {
            continue;
        }
        let continued = l.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1;
        logical.push_str(if continued { &l[..l.len() - 1] } else { l });
        if continued {
            continue;
        }
        let (k, v) = split_property(&logical);
        if unescape(k).as_str() == key {
            return Some(unescape(v));
        }
        logical.clear();
    }
    None
}

fn split_property(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '=' | ':' | ' ' | '\t' if !escaped => {
                let rest = line[i..].trim_start_matches([' ', '\t']);
                let rest = rest
                    .strip_prefix(['=', ':'])
                    .unwrap_or(rest)
                    .trim_start_matches([' ', '\t']);
                return (&line[..i], rest);
            }
            _ => escaped = false,
        }
    }
    (line, "")
}

fn unescape(s: &str) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::with_capacity(s.len()));
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    out.push(ch);
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_files_dirs_and_env() {
        let dir = std::env::temp_dir().join(format!("crac-providers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let props = dir.join("s.properties");
        std::fs::write(
            &props,
            "# c\nuser = alice\npassword=p\\u0040ss\\\n  word\nempty=\n",
        )
        .unwrap();
        std::fs::write(dir.join("token"), "tok-1").unwrap();
        let p = Providers::default();
        let path = props.to_str().unwrap();
        let v = p
            .resolve(&format!(
                "u=${{file:{path}:user}} p=${{file:{path}:password}}"
            ))
            .unwrap();
        assert_eq!(v.as_str(), "u=alice p=p@ssword");
        assert_eq!(
            p.resolve(&format!("${{dir:{}:token}}", dir.display()))
                .unwrap()
                .as_str(),
            "tok-1"
        );
        assert_eq!(
            p.resolve("${env:PATH}").unwrap().as_str(),
            std::env::var("PATH").unwrap()
        );
        // Unknown providers and plain text stay as they are.
        assert_eq!(
            p.resolve("${vault:x} ${").unwrap().as_str(),
            "${vault:x} ${"
        );
        assert!(!p.has_reference("${vault:x}"));
        assert!(p.has_reference("a ${env:X} b"));
        let e = p.resolve(&format!("${{file:{path}:nope}}")).unwrap_err();
        assert!(e.reason.contains("no key"), "{e}");
        let e = p.resolve("${env:CRAC_TEST_SURELY_UNSET}").unwrap_err();
        assert!(e.to_string().contains("not set"), "{e}");
        let e = p.resolve("${file:/nonexistent/x:k}").unwrap_err();
        assert!(e.reason.contains("cannot read"), "{e}");
        let mut aliased = Providers::default();
        aliased.declare(
            "secrets",
            ProviderKind::from_class("org.apache.kafka.common.config.provider.FileConfigProvider")
                .unwrap(),
        );
        assert_eq!(
            aliased
                .resolve(&format!("${{secrets:{path}:user}}"))
                .unwrap()
                .as_str(),
            "alice"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
