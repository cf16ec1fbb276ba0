//! Java-style property values: the error that names a bad key and value, the parsing of
//! values (`*.ms`, numbers, booleans, `.properties` text) and their range checks. A leaf: the
//! configurations and the security settings of the connection layer both build on it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `FromStr` and `Display` for a setting whose value is one keyword of a fixed set: each
/// variant with the keyword it is written as, then other spellings it is also read from.
/// Values are trimmed; `ignore_case` follows what Java accepts for the key.
macro_rules! keyword_setting {
    ($ty:ty, ignore_case = $ic:expr, expected = $expected:expr,
     { $($variant:ident => $kw:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl ::std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let s = s.trim();
                let is = |k: &str| if $ic { s.eq_ignore_ascii_case(k) } else { s == k };
                $( if is($kw) $(|| is($alias))* { return Ok(Self::$variant); } )+
                Err($expected.into())
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self { $( Self::$variant => $kw, )+ })
            }
        }
    };
}
pub(crate) use keyword_setting;

/// A configuration key or value a client cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config {key}={value:?}: {reason}")]
pub struct ConfigError {
    /// The key.
    pub key: String,
    /// The value given.
    pub value: String,
    /// Why it was refused.
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> Self {
        Self {
            key: key.to_owned(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// The largest `*.ms` value of a key Java types as `int` (many are sent to the broker as
/// int32).
pub(crate) const INT_MS: u64 = i32::MAX as u64;
/// The largest `*.ms` value of a key Java types as `long`.
pub(crate) const LONG_MS: u64 = i64::MAX as u64;

/// Checks a duration key is within `min_ms..=max_ms` (a timeout of 0 would fail everything at
/// once; past Java's type the value cannot be meant, and deadlines computed from it would
/// overflow).
pub(crate) fn check_ms(
    key: &str,
    d: Duration,
    min_ms: u64,
    max_ms: u64,
) -> Result<(), ConfigError> {
    let ms = d.as_millis();
    if ms < u128::from(min_ms) {
        return Err(ConfigError::new(
            key,
            ms,
            format!("must be at least {min_ms} ms"),
        ));
    }
    if ms > u128::from(max_ms) {
        return Err(ConfigError::new(
            key,
            ms,
            format!("must be at most {max_ms} ms"),
        ));
    }
    Ok(())
}

/// Checks a number is at most `max` (Java's type of the key).
pub(crate) fn check_max<T: PartialOrd + fmt::Display>(
    key: &str,
    n: T,
    max: T,
) -> Result<(), ConfigError> {
    if n > max {
        return Err(ConfigError::new(key, &n, format!("must be at most {max}")));
    }
    Ok(())
}

/// Checks a string sent in requests fits the protocol's 16-bit string length.
pub(crate) fn check_wire_string(key: &str, s: &str) -> Result<(), ConfigError> {
    if s.len() > i16::MAX as usize {
        return Err(ConfigError::new(
            key,
            format!("{}…", s.chars().take(20).collect::<String>()),
            format!("{} bytes: must be at most {}", s.len(), i16::MAX),
        ));
    }
    Ok(())
}

/// A `*.ms` value.
pub(crate) fn parse_ms(key: &str, v: &str) -> Result<Duration, ConfigError> {
    v.trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| ConfigError::new(key, v, "expected a non-negative number of milliseconds"))
}

/// A number of at least `min`.
pub(crate) fn parse_num<T>(key: &str, v: &str, min: T) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + fmt::Display + Copy,
{
    let n: T = v
        .trim()
        .parse()
        .map_err(|_| ConfigError::new(key, v, "expected a number"))?;
    if n < min {
        return Err(ConfigError::new(key, v, format!("must be at least {min}")));
    }
    Ok(n)
}

/// `true` or `false`.
pub(crate) fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::new(key, v, "expected true or false")),
    }
}

/// A value of a type that parses itself, its error being the reason (`acks`, `compression.type`,
/// `auto.offset.reset`, …).
pub(crate) fn parse_with<T: FromStr<Err = String>>(key: &str, v: &str) -> Result<T, ConfigError> {
    v.parse().map_err(|r| ConfigError::new(key, v, r))
}

/// The `key=value` pairs of a Java `.properties`-style text: `#` and `!` comment lines, `=` or
/// `:` between key and value.
pub(crate) fn properties_pairs(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut pairs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| ConfigError::new(line, "", "expected key=value"))?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse_ms("k", " 25 ").unwrap(), Duration::from_millis(25));
        assert!(
            parse_ms("k", "-1")
                .unwrap_err()
                .reason
                .contains("milliseconds")
        );
        assert_eq!(parse_num("k", "3", 1usize).unwrap(), 3);
        let e = parse_num("k", "0", 1usize).unwrap_err();
        assert_eq!((e.key.as_str(), e.value.as_str()), ("k", "0"));
        assert!(e.reason.contains("at least 1"));
        assert!(parse_bool("k", "yes").is_err());
        assert!(parse_bool("k", "true").unwrap());
    }
}
