//! `sasl.jaas.config` in Java's syntax, as users paste it from their Java clients:
//!
//! ```text
//! org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cret";
//! ```
//!
//! One login module (Kafka accepts exactly one), its control flag, and `name=value` options
//! whose values are double-quoted (with `\"` and `\\` escapes) or bare words. Option values may
//! be secrets: they are wiped when dropped.

use zeroize::Zeroizing;

/// A parsed login module entry.
#[derive(Debug)]
pub struct JaasModule {
    /// The login module's class, e.g. `org.apache.kafka.common.security.plain.PlainLoginModule`.
    pub class: String,
    /// `required`, `requisite`, `sufficient` or `optional`: checked, then unused (one module,
    /// so the flag decides nothing), as in Java's client.
    #[cfg_attr(not(test), allow(dead_code))]
    pub flag: String,
    options: Vec<(String, Zeroizing<String>)>,
}

impl JaasModule {
    /// The option `name`, if given.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every option, in order.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The simple name of the class (`PlainLoginModule`).
    pub fn simple_name(&self) -> &str {
        self.class.rsplit('.').next().unwrap_or(&self.class)
    }
}

/// Parses one login module entry. The error says what is wrong, never the text (it may hold
/// a password).
pub fn parse(text: &str) -> Result<JaasModule, String> {
    let mut t = Tokens { s: text, at: 0 };
    let class = t
        .word()
        .ok_or("expected a login module class, e.g. org.apache.kafka.common.security.plain.PlainLoginModule")?;
    let flag = t
        .word()
        .ok_or("expected a control flag (required) after the login module class")?;
    if !matches!(
        flag.to_ascii_lowercase().as_str(),
        "required" | "requisite" | "sufficient" | "optional"
    ) {
        return Err(format!(
            "control flag {flag:?} is not one of required, requisite, sufficient, optional"
        ));
    }
    let mut options = Vec::new();
    loop {
        t.skip_space();
        if t.eat(';') {
            t.skip_space();
            if t.at < t.s.len() {
                return Err("only one login module may be given (text follows the ';')".into());
            }
            break;
        }
        if t.at >= t.s.len() {
            return Err("missing ';' at the end of the login module entry".into());
        }
        let name = t.word().ok_or("expected an option name=value")?;
        t.skip_space();
        if !t.eat('=') {
            return Err(format!("option {name} has no '=value'"));
        }
        t.skip_space();
        let value = if t.eat('"') {
            t.quoted()
                .ok_or_else(|| format!("the value of option {name} has no closing quote"))?
        } else {
            Zeroizing::new(
                t.word()
                    .ok_or_else(|| format!("option {name} has no value"))?
                    .to_owned(),
            )
        };
        options.push((name.to_owned(), value));
    }
    Ok(JaasModule {
        class: class.to_owned(),
        flag: flag.to_owned(),
        options,
    })
}

struct Tokens<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn skip_space(&mut self) {
        let rest = &self.s[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        if self.s[self.at..].starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// A bare word: anything up to white space, '=', ';' or '"'.
    fn word(&mut self) -> Option<&'a str> {
        self.skip_space();
        let rest = &self.s[self.at..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '=' | ';' | '"'))
            .unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        self.at += end;
        Some(&rest[..end])
    }

    /// The rest of a quoted value, after its opening quote.
    fn quoted(&mut self) -> Option<Zeroizing<String>> {
        // Sized for the rest of the text: growing would leave copies of a secret behind.
        let mut out = Zeroizing::new(String::with_capacity(self.s.len() - self.at));
        let mut chars = self.s[self.at..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.at += i + 1;
                    return Some(out);
                }
                '\\' => {
                    let (_, next) = chars.next()?;
                    out.push(next);
                }
                c => out.push(c),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_entries() {
        let m = parse(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="a \"b\" ;c";"#,
        )
        .unwrap();
        assert_eq!(m.simple_name(), "PlainLoginModule");
        assert_eq!(m.flag, "required");
        assert_eq!(m.option("username"), Some("alice"));
        assert_eq!(m.option("password"), Some(r#"a "b" ;c"#));
        let m = parse(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required\n  unsecuredLoginStringClaim_sub = alice\n  unsecuredLoginLifetimeSeconds=60 ;",
        )
        .unwrap();
        assert_eq!(m.option("unsecuredLoginStringClaim_sub"), Some("alice"));
        assert_eq!(m.option("unsecuredLoginLifetimeSeconds"), Some("60"));
        let m = parse("x.ScramLoginModule required;").unwrap();
        assert_eq!(m.options().count(), 0);
    }

    #[test]
    fn errors_never_echo_secrets() {
        for bad in [
            "",
            "x.PlainLoginModule",
            "x.PlainLoginModule mandatory password=\"hunter2\";",
            "x.PlainLoginModule required password=\"hunter2;",
            "x.PlainLoginModule required password=\"hunter2\"",
            "x.PlainLoginModule required password;",
            "x.PlainLoginModule required password=\"hunter2\"; y.Other required;",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
    }
}
