//! The SASL mechanisms: PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC
//! 7677), OAUTHBEARER (RFC 7628) with a token from the application's
//! [`OAuthBearerTokenProvider`] or an unsecured JWS made from the JAAS options, as Java's
//! default login callback handler makes it (for tests and development clusters).
//!
//! Every buffer that holds a password, a salted password or a token is wiped when dropped.
//! The nonce of SCRAM is drawn from the operating system (ring's `SystemRandom`: a
//! `getrandom` call per draw, no state in the process), so two clones of one image never send
//! the same one.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ring::rand::SecureRandom;
use ring::{digest, hmac, pbkdf2};
use zeroize::Zeroizing;

use super::base64;
use super::jaas::JaasModule;

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// `PLAIN`.
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER`.
    OAuthBearer,
}

impl SaslMechanism {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The login module Java pairs with it.
    pub fn login_module(self) -> &'static str {
        match self {
            Self::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
            Self::ScramSha256 | Self::ScramSha512 => {
                "org.apache.kafka.common.security.scram.ScramLoginModule"
            }
            Self::OAuthBearer => {
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
            }
        }
    }
}

impl std::str::FromStr for SaslMechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "PLAIN" => Ok(Self::Plain),
            "SCRAM-SHA-256" => Ok(Self::ScramSha256),
            "SCRAM-SHA-512" => Ok(Self::ScramSha512),
            "OAUTHBEARER" => Ok(Self::OAuthBearer),
            "GSSAPI" => Err("GSSAPI (Kerberos) is not supported; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER".into()),
            _ => Err("expected PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER".into()),
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An OAuth 2 bearer token for OAUTHBEARER, and the SASL extensions to send with it.
#[derive(Clone)]
pub struct OAuthBearerToken {
    /// The compact JWS (or any token the broker's validator accepts).
    pub value: Zeroizing<String>,
    /// SASL extensions (`key=value` pairs the broker's callback handler may read).
    pub extensions: Vec<(String, String)>,
}

impl fmt::Debug for OAuthBearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthBearerToken")
            .field("value", &"[hidden]")
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// Where OAUTHBEARER tokens come from: the application's identity provider client. Called on
/// the connection's helper thread each time a connection authenticates (and again when it
/// re-authenticates, and after a restore), so it can hand out a fresh token every time and
/// the client keeps none between connections. The error message is shown to `send()`,
/// `flush()` and `poll()` callers.
pub trait OAuthBearerTokenProvider: Send + Sync + fmt::Debug {
    /// A token valid now.
    fn token(&self) -> Result<OAuthBearerToken, String>;
}

/// What a mechanism needs, resolved from `sasl.jaas.config` for one authentication.
pub(crate) enum Credentials {
    Plain {
        username: Zeroizing<String>,
        password: Zeroizing<String>,
    },
    Scram {
        sha512: bool,
        username: Zeroizing<String>,
        password: Zeroizing<String>,
    },
    OAuthBearer(OAuthBearerToken),
}

impl Credentials {
    /// Reads the credentials of `mechanism` from a parsed JAAS entry (or the token provider).
    pub fn from_jaas(
        mechanism: SaslMechanism,
        jaas: Option<&JaasModule>,
        provider: Option<&Arc<dyn OAuthBearerTokenProvider>>,
    ) -> Result<Self, String> {
        if let (SaslMechanism::OAuthBearer, Some(p)) = (mechanism, provider) {
            return p
                .token()
                .map(Self::OAuthBearer)
                .map_err(|e| format!("the OAUTHBEARER token provider failed: {e}"));
        }
        let jaas = jaas.ok_or_else(|| {
            format!(
                "sasl.mechanism={mechanism} needs sasl.jaas.config ({} required …;)",
                mechanism.login_module()
            )
        })?;
        let expected = mechanism.login_module();
        if jaas.simple_name() != expected.rsplit('.').next().unwrap_or(expected) {
            return Err(format!(
                "sasl.mechanism={mechanism} needs the login module {expected}, not {}",
                jaas.class
            ));
        }
        let need = |name: &str| {
            jaas.option(name)
                .map(|v| Zeroizing::new(v.to_owned()))
                .ok_or_else(|| format!("the login module has no {name}=\"…\" option"))
        };
        Ok(match mechanism {
            SaslMechanism::Plain => Self::Plain {
                username: need("username")?,
                password: need("password")?,
            },
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => Self::Scram {
                sha512: mechanism == SaslMechanism::ScramSha512,
                username: need("username")?,
                password: need("password")?,
            },
            SaslMechanism::OAuthBearer => Self::OAuthBearer(unsecured_token(jaas)?),
        })
    }
}

/// An unsecured JWS (`alg: none`) from the `unsecuredLogin*` options, as Java's
/// `OAuthBearerUnsecuredLoginCallbackHandler` makes it. Brokers accept it only with their
/// unsecured validator (development and test clusters).
fn unsecured_token(jaas: &JaasModule) -> Result<OAuthBearerToken, String> {
    let principal_claim = jaas
        .option("unsecuredLoginPrincipalClaimName")
        .unwrap_or("sub");
    let lifetime: u64 = match jaas.option("unsecuredLoginLifetimeSeconds") {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| "unsecuredLoginLifetimeSeconds is not a number".to_owned())?,
        None => 3600,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_owned())?;
    let mut claims = Vec::new();
    let mut extensions = Vec::new();
    for (k, v) in jaas.options() {
        if let Some(name) = k.strip_prefix("unsecuredLoginStringClaim_") {
            claims.push(format!("{}:{}", json_string(name), json_string(v)));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginNumberClaim_") {
            let n: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{k} is not a number"))?;
            claims.push(format!("{}:{n}", json_string(name)));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginListClaim_") {
            // Java: the first character is the separator of the list.
            let mut chars = v.chars();
            let sep = chars.next().unwrap_or(',');
            let items: Vec<String> = chars
                .as_str()
                .split(sep)
                .filter(|s| !s.is_empty())
                .map(json_string)
                .collect();
            claims.push(format!("{}:[{}]", json_string(name), items.join(",")));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginExtension_") {
            extensions.push((name.to_owned(), v.to_owned()));
        }
    }
    if !claims
        .iter()
        .any(|c| c.starts_with(&format!("{}:", json_string(principal_claim))))
    {
        return Err(format!(
            "the OAuthBearerLoginModule has no unsecuredLoginStringClaim_{principal_claim}=\"…\" option (or give the client a token provider)"
        ));
    }
    let iat = now.as_secs();
    claims.push(format!("\"iat\":{iat}"));
    claims.push(format!("\"exp\":{}", iat + lifetime));
    let header = base64::encode_url(br#"{"alg":"none"}"#);
    let body = base64::encode_url(format!("{{{}}}", claims.join(",")).as_bytes());
    let mut value = Zeroizing::new(String::with_capacity(header.len() + body.len() + 2));
    value.push_str(&header);
    value.push('.');
    value.push_str(&body);
    value.push('.');
    Ok(OAuthBearerToken { value, extensions })
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One authentication in progress: what to send, and what to make of the broker's answers.
pub(crate) struct Exchange {
    state: State,
}

enum State {
    /// PLAIN and OAUTHBEARER: one message; a non-empty answer of OAUTHBEARER is an error
    /// report, acknowledged with `\x01`.
    Single {
        oauth: bool,
        acknowledged: bool,
    },
    Scram(Box<Scram>),
    Done,
}

struct Scram {
    sha512: bool,
    password: Zeroizing<String>,
    client_nonce: String,
    client_first_bare: String,
    /// Set once the client-final message is sent: the expected server signature.
    server_signature: Option<Zeroizing<Vec<u8>>>,
}

/// What the exchange wants next.
pub(crate) enum Step {
    /// Send these bytes in a SaslAuthenticate request.
    Send(Zeroizing<Vec<u8>>),
    /// The mechanism is satisfied (the broker's answer had no error).
    Done,
}

impl Exchange {
    /// Starts an exchange: the first message to send.
    pub fn start(creds: Credentials) -> Result<(Self, Zeroizing<Vec<u8>>), String> {
        match creds {
            Credentials::Plain { username, password } => {
                let mut msg =
                    Zeroizing::new(Vec::with_capacity(username.len() + password.len() + 2));
                msg.push(0);
                msg.extend_from_slice(username.as_bytes());
                msg.push(0);
                msg.extend_from_slice(password.as_bytes());
                Ok((
                    Self {
                        state: State::Single {
                            oauth: false,
                            acknowledged: false,
                        },
                    },
                    msg,
                ))
            }
            Credentials::OAuthBearer(token) => {
                let ext: usize = token
                    .extensions
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum();
                let mut msg = Zeroizing::new(Vec::with_capacity(token.value.len() + ext + 32));
                msg.extend_from_slice(b"n,,\x01auth=Bearer ");
                msg.extend_from_slice(token.value.as_bytes());
                for (k, v) in &token.extensions {
                    msg.push(1);
                    msg.extend_from_slice(k.as_bytes());
                    msg.push(b'=');
                    msg.extend_from_slice(v.as_bytes());
                }
                msg.extend_from_slice(b"\x01\x01");
                Ok((
                    Self {
                        state: State::Single {
                            oauth: true,
                            acknowledged: false,
                        },
                    },
                    msg,
                ))
            }
            Credentials::Scram {
                sha512,
                username,
                password,
            } => {
                let mut raw = [0u8; 24];
                ring::rand::SystemRandom::new()
                    .fill(&mut raw)
                    .map_err(|_| "the operating system gave no random bytes".to_owned())?;
                let client_nonce = base64::encode(&raw).to_string();
                let client_first_bare = format!("n={},r={client_nonce}", sasl_name(&username));
                let msg = Zeroizing::new(format!("n,,{client_first_bare}").into_bytes());
                Ok((
                    Self {
                        state: State::Scram(Box::new(Scram {
                            sha512,
                            password,
                            client_nonce,
                            client_first_bare,
                            server_signature: None,
                        })),
                    },
                    msg,
                ))
            }
        }
    }

    /// The broker answered a round without an error code: what next. An error is a message
    /// for the user (the broker is hostile or broken: it never echoes a secret).
    pub fn next(&mut self, challenge: &[u8]) -> Result<Step, String> {
        match &mut self.state {
            State::Done => Err("the broker sent more after the exchange ended".into()),
            State::Single {
                oauth,
                acknowledged,
            } => {
                if *oauth && !challenge.is_empty() && !*acknowledged {
                    // RFC 7628: an error report; the client answers with a lone 0x01 and the
                    // broker then fails the authentication with its error code.
                    *acknowledged = true;
                    let detail = String::from_utf8_lossy(challenge);
                    tracing::debug!(report = %detail, "OAUTHBEARER: the broker refused the token");
                    return Ok(Step::Send(Zeroizing::new(vec![1])));
                }
                self.state = State::Done;
                Ok(Step::Done)
            }
            State::Scram(s) => match s.server_signature.take() {
                None => {
                    let reply = s.client_final(challenge)?;
                    Ok(Step::Send(reply))
                }
                Some(expected) => {
                    let text = std::str::from_utf8(challenge)
                        .map_err(|_| "the SCRAM server-final message is not UTF-8".to_owned())?;
                    if let Some(e) = text.strip_prefix("e=") {
                        return Err(format!("the broker refused the SCRAM proof: {e}"));
                    }
                    let sig = text
                        .strip_prefix("v=")
                        .and_then(base64::decode)
                        .ok_or("the SCRAM server-final message has no signature")?;
                    if !constant_time_eq(&sig, &expected) {
                        return Err("the broker's SCRAM signature is wrong: it does not know this user's credential (a man in the middle?)".into());
                    }
                    self.state = State::Done;
                    Ok(Step::Done)
                }
            },
        }
    }
}

/// Compares without an early exit (the broker's signature against the expected one).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// SCRAM's `saslname`: `=` and `,` escaped.
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

/// SCRAM iteration counts Kafka accepts (its `ScramMechanism` bounds); a higher count from a
/// hostile broker would burn the connecting thread's CPU.
const SCRAM_ITERATIONS: std::ops::RangeInclusive<u32> = 4096..=16384;

impl Scram {
    fn client_final(&mut self, challenge: &[u8]) -> Result<Zeroizing<Vec<u8>>, String> {
        let server_first = std::str::from_utf8(challenge)
            .map_err(|_| "the SCRAM server-first message is not UTF-8".to_owned())?;
        if let Some(e) = server_first.strip_prefix("e=") {
            return Err(format!("the broker refused the SCRAM exchange: {e}"));
        }
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attr in server_first.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = base64::decode(v),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(
                "the SCRAM server-first message lacks a nonce, salt or iteration count".into(),
            );
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the broker's SCRAM nonce does not extend the client's".into());
        }
        if !SCRAM_ITERATIONS.contains(&iterations) {
            return Err(format!(
                "the broker asks for {iterations} SCRAM iterations (accepted: {}..={})",
                SCRAM_ITERATIONS.start(),
                SCRAM_ITERATIONS.end()
            ));
        }
        let (pbkdf, hmac_alg, digest_alg, len) = if self.sha512 {
            (
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
                &digest::SHA512,
                64,
            )
        } else {
            (
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
                &digest::SHA256,
                32,
            )
        };
        let mut salted = Zeroizing::new(vec![0u8; len]);
        let rounds = std::num::NonZeroU32::new(iterations).ok_or("zero SCRAM iterations")?;
        pbkdf2::derive(pbkdf, rounds, &salt, self.password.as_bytes(), &mut salted);
        let salted_key = hmac::Key::new(hmac_alg, &salted);
        let client_key = Zeroizing::new(hmac::sign(&salted_key, b"Client Key").as_ref().to_vec());
        let stored_key = digest::digest(digest_alg, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac::sign(
            &hmac::Key::new(hmac_alg, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Zeroizing<Vec<u8>> = Zeroizing::new(
            client_key
                .iter()
                .zip(signature.as_ref())
                .map(|(a, b)| a ^ b)
                .collect(),
        );
        let server_key = hmac::sign(&salted_key, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(hmac_alg, server_key.as_ref()),
            auth_message.as_bytes(),
        );
        self.server_signature = Some(Zeroizing::new(server_signature.as_ref().to_vec()));
        let msg = format!("{without_proof},p={}", base64::encode(&proof).as_str());
        Ok(Zeroizing::new(msg.into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, with its fixed client nonce.
    #[test]
    fn scram_sha256_rfc7677() {
        let mut s = Scram {
            sha512: false,
            password: Zeroizing::new("pencil".into()),
            client_nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            server_signature: None,
        };
        // RFC 7677 uses 4096 iterations.
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let fin = s.client_final(server_first).unwrap();
        assert_eq!(
            std::str::from_utf8(&fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            base64::encode(s.server_signature.as_ref().unwrap()).as_str(),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let mut e = Exchange {
            state: State::Scram(Box::new(s)),
        };
        assert!(matches!(
            e.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Ok(Step::Done)
        ));
    }

    #[test]
    fn hostile_scram_answers_are_refused() {
        let fresh = || Scram {
            sha512: true,
            password: Zeroizing::new("pw".into()),
            client_nonce: "abc".into(),
            client_first_bare: "n=u,r=abc".into(),
            server_signature: None,
        };
        for bad in [
            &b"r=xyz,s=c2FsdA==,i=4096"[..],
            b"r=abc,s=c2FsdA==,i=4096",
            b"r=abcd,s=c2FsdA==,i=100000000",
            b"r=abcd,s=!!,i=4096",
            b"e=unknown-user",
            b"\xff",
        ] {
            assert!(fresh().client_final(bad).is_err(), "{bad:?}");
        }
        let mut s = fresh();
        s.client_final(b"r=abcd,s=c2FsdA==,i=4096").unwrap();
        let mut e = Exchange {
            state: State::Scram(Box::new(s)),
        };
        assert!(e.next(b"v=AAAA").is_err());
    }

    #[test]
    fn first_messages() {
        let (_, m) = Exchange::start(Credentials::Plain {
            username: Zeroizing::new("alice".into()),
            password: Zeroizing::new("pw".into()),
        })
        .unwrap();
        assert_eq!(&m[..], b"\0alice\0pw");
        let (_, m) = Exchange::start(Credentials::Scram {
            sha512: false,
            username: Zeroizing::new("a=b,c".into()),
            password: Zeroizing::new("pw".into()),
        })
        .unwrap();
        assert!(m.starts_with(b"n,,n=a=3Db=2Cc,r="), "{m:?}");
        let jaas = super::super::jaas::parse(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\" unsecuredLoginExtension_traceId=\"t1\";",
        )
        .unwrap();
        let c = Credentials::from_jaas(SaslMechanism::OAuthBearer, Some(&jaas), None).unwrap();
        let (mut e, m) = Exchange::start(c).unwrap();
        let text = String::from_utf8(m.to_vec()).unwrap();
        assert!(
            text.starts_with("n,,\x01auth=Bearer eyJhbGciOiJub25lIn0."),
            "{text}"
        );
        assert!(text.ends_with(".\x01traceId=t1\x01\x01"), "{text}");
        let body = text.split('.').nth(1).unwrap();
        let claims =
            String::from_utf8(base64::decode(&body.replace('-', "+").replace('_', "/")).unwrap())
                .unwrap();
        assert!(
            claims.starts_with("{\"sub\":\"alice\",\"iat\":"),
            "{claims}"
        );
        // An error report is acknowledged with 0x01.
        assert!(
            matches!(e.next(b"{\"status\":\"invalid_token\"}"), Ok(Step::Send(b)) if &b[..] == b"\x01")
        );
        let e = Credentials::from_jaas(SaslMechanism::Plain, Some(&jaas), None)
            .err()
            .unwrap();
        assert!(e.contains("PlainLoginModule"), "{e}");
    }
}
