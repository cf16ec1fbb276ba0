//! TLS and SASL for both clients, with Java's keys and meanings.
//!
//! [`SecurityConfig`] holds the keys as given: values that name a config provider
//! (`${file:…}`, `${env:…}`, [`providers`]) stay references. `SecurityConfig::resolve` turns
//! them into what one connection attempt needs (`Resolved`: a rustls configuration, SASL
//! credentials) on the connection's helper thread; the connection keeps none of it once it is
//! made, and every buffer that held a secret is wiped. A checkpoint closes every connection, so
//! no secret that came from a provider is in the image, and the connections made after the
//! restore read the providers again. Secrets written inline in the configuration are part of
//! it, and so of the image.

pub mod base64;
pub mod jaas;
pub mod providers;
pub mod sasl;
pub mod tls;

use crate::config::value::keyword_setting;
use std::fmt;
use std::sync::Arc;

use zeroize::Zeroizing;

pub use providers::{ProviderKind, Providers};
pub use sasl::{OAuthBearerToken, OAuthBearerTokenProvider, SaslMechanism};

use crate::config::value::ConfigError;

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    /// No TLS, no SASL (the default).
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections use TLS.
    pub fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

keyword_setting!(SecurityProtocol, ignore_case = true, expected = "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", {
    Plaintext => "PLAINTEXT",
    Ssl => "SSL",
    SaslPlaintext => "SASL_PLAINTEXT",
    SaslSsl => "SASL_SSL",
});

/// A configuration value that may be a secret: printed as `[hidden]`, as Java's `Password`
/// type is. It holds what was configured (a provider reference, or the secret itself).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// The configured text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(Zeroizing::new(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

/// The TLS and SASL settings of a client (part of [`crate::config::CommonConfig`]).
#[derive(Clone, Default)]
pub struct SecurityConfig {
    /// `security.protocol` (default PLAINTEXT).
    pub protocol: SecurityProtocol,
    /// `ssl.truststore.type` (PEM; JKS and PKCS12 are refused with a hint to convert).
    pub truststore_type: Option<String>,
    /// `ssl.truststore.location`: a PEM file of CA certificates.
    pub truststore_location: Option<String>,
    /// `ssl.truststore.certificates`: PEM CA certificates inline.
    pub truststore_certificates: Option<Secret>,
    /// `ssl.keystore.type` (PEM).
    pub keystore_type: Option<String>,
    /// `ssl.keystore.location`: a PEM file with the private key and the certificate chain.
    pub keystore_location: Option<String>,
    /// `ssl.keystore.key`: the PEM private key inline.
    pub keystore_key: Option<Secret>,
    /// `ssl.keystore.certificate.chain`: the PEM certificate chain inline.
    pub keystore_certificate_chain: Option<Secret>,
    /// `ssl.key.password`: the password of an encrypted PKCS#8 key.
    pub key_password: Option<Secret>,
    /// `ssl.endpoint.identification.algorithm` (default `https`: the broker's certificate
    /// must name the host connected to; empty disables the check).
    pub endpoint_identification: bool,
    /// `ssl.enabled.protocols` (default TLSv1.2,TLSv1.3).
    pub tls_versions: Vec<tls::TlsVersion>,
    /// `sasl.mechanism` (GSSAPI, Java's default, is not supported: required with SASL).
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.jaas.config`.
    pub sasl_jaas_config: Option<Secret>,
    /// The providers `${name:…}` references name (`config.providers*`).
    pub providers: Providers,
    /// OAUTHBEARER tokens from the application (instead of an unsecured JWS).
    pub token_provider: Option<Arc<dyn OAuthBearerTokenProvider>>,
}

impl fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecurityConfig")
            .field("protocol", &self.protocol)
            .field("truststore_location", &self.truststore_location)
            .field("keystore_location", &self.keystore_location)
            .field("endpoint_identification", &self.endpoint_identification)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_jaas_config", &self.sasl_jaas_config)
            .field("token_provider", &self.token_provider.is_some())
            .finish_non_exhaustive()
    }
}

/// Every key [`SecurityConfig::set`] accepts (and `config.providers.NAME.class`).
pub const SECURITY_KEYS: &[&str] = &[
    "security.protocol",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "sasl.mechanism",
    "sasl.jaas.config",
    "config.providers",
];

/// Keys whose values are resolved at each connection (they may hold or name secrets).
pub(crate) fn resolved_late(key: &str) -> bool {
    matches!(
        key,
        "ssl.truststore.location"
            | "ssl.truststore.certificates"
            | "ssl.keystore.location"
            | "ssl.keystore.key"
            | "ssl.keystore.certificate.chain"
            | "ssl.key.password"
            | "ssl.keystore.password"
            | "ssl.truststore.password"
            | "sasl.jaas.config"
    )
}

fn store_type(key: &str, v: &str) -> Result<Option<String>, ConfigError> {
    let t = v.trim().to_ascii_uppercase();
    match t.as_str() {
        "" => Ok(None),
        "PEM" => Ok(Some(t)),
        "JKS" | "PKCS12" | "P12" => Err(ConfigError::new(
            key,
            v,
            "only PEM stores are supported: convert the store to PEM (keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) and set the type to PEM",
        )),
        _ => Err(ConfigError::new(key, v, "expected PEM")),
    }
}

fn non_empty(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

impl SecurityConfig {
    /// The defaults: PLAINTEXT, host name verification on, TLS 1.2 and 1.3.
    pub fn new() -> Self {
        Self {
            endpoint_identification: true,
            tls_versions: vec![tls::TlsVersion::Tls12, tls::TlsVersion::Tls13],
            ..Self::default()
        }
    }

    /// Sets one security key. Returns the key's name when it is one, `None` when it is not.
    pub fn set(&mut self, key: &str, v: &str) -> Result<Option<&'static str>, ConfigError> {
        if let Some(name) = key
            .strip_prefix("config.providers.")
            .and_then(|rest| rest.strip_suffix(".class"))
        {
            let kind = ProviderKind::from_class(v).ok_or_else(|| {
                ConfigError::new(
                    key,
                    v,
                    "supported providers: org.apache.kafka.common.config.provider.FileConfigProvider, DirectoryConfigProvider, EnvVarConfigProvider",
                )
            })?;
            self.providers.declare(name, kind);
            return Ok(Some("config.providers"));
        }
        if key.starts_with("config.providers.") {
            // Provider parameters (allowed.paths, …): accepted, and the paths a value names
            // are what they are.
            return Ok(Some("config.providers"));
        }
        let secret = || Some(Secret::from(v.trim()));
        match key {
            "security.protocol" => {
                self.protocol = v.parse().map_err(|r| ConfigError::new(key, v, r))?
            }
            "ssl.truststore.type" => self.truststore_type = store_type(key, v)?,
            "ssl.keystore.type" => self.keystore_type = store_type(key, v)?,
            "ssl.truststore.location" => self.truststore_location = non_empty(v),
            "ssl.truststore.certificates" => self.truststore_certificates = secret(),
            "ssl.keystore.location" => self.keystore_location = non_empty(v),
            "ssl.keystore.key" => self.keystore_key = secret(),
            "ssl.keystore.certificate.chain" => self.keystore_certificate_chain = secret(),
            "ssl.key.password" => self.key_password = secret(),
            // PEM stores have no store password (Java refuses one with a PEM truststore).
            "ssl.truststore.password" | "ssl.keystore.password" => {}
            "ssl.endpoint.identification.algorithm" => {
                self.endpoint_identification = match v.trim().to_ascii_lowercase().as_str() {
                    "" => false,
                    "https" => true,
                    _ => return Err(ConfigError::new(key, v, "expected https or empty")),
                }
            }
            "ssl.protocol" => {
                // The protocol of Java's SSLContext; the versions offered are
                // ssl.enabled.protocols.
                tls::TlsVersion::parse(v).map_err(|r| ConfigError::new(key, v, r))?;
            }
            "ssl.enabled.protocols" => {
                let mut list = Vec::new();
                for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    list.push(tls::TlsVersion::parse(p).map_err(|r| ConfigError::new(key, v, r))?);
                }
                if list.is_empty() {
                    return Err(ConfigError::new(key, v, "at least one version is needed"));
                }
                self.tls_versions = list;
            }
            "sasl.mechanism" => {
                self.sasl_mechanism = Some(v.parse().map_err(|r| ConfigError::new(key, v, r))?)
            }
            "sasl.jaas.config" => {
                // Checked now when it holds no reference (a reference is checked when
                // resolved); the error never repeats the text.
                if !self.providers.has_reference(v) {
                    jaas::parse(v).map_err(|r| ConfigError::new(key, "[hidden]", r))?;
                }
                self.sasl_jaas_config = secret();
            }
            "config.providers" => {}
            _ => return Ok(None),
        }
        Ok(SECURITY_KEYS.iter().copied().find(|k| *k == key))
    }

    /// Checks the combination.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.protocol.sasl() && self.sasl_mechanism.is_none() {
            return Err(ConfigError::new(
                "sasl.mechanism",
                "GSSAPI",
                format!(
                    "security.protocol={} needs a mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (GSSAPI, Java's default, is not supported)",
                    self.protocol
                ),
            ));
        }
        if let Some(m) = self.sasl_mechanism {
            let provided = m == SaslMechanism::OAuthBearer && self.token_provider.is_some();
            if self.protocol.sasl() && self.sasl_jaas_config.is_none() && !provided {
                return Err(ConfigError::new(
                    "sasl.jaas.config",
                    "",
                    format!(
                        "sasl.mechanism={m} needs sasl.jaas.config ({} required …;)",
                        m.login_module()
                    ),
                ));
            }
        }
        if self.keystore_key.is_some() != self.keystore_certificate_chain.is_some() {
            return Err(ConfigError::new(
                if self.keystore_key.is_some() {
                    "ssl.keystore.certificate.chain"
                } else {
                    "ssl.keystore.key"
                },
                "",
                "ssl.keystore.key and ssl.keystore.certificate.chain go together",
            ));
        }
        if self.keystore_key.is_some() && self.keystore_location.is_some() {
            return Err(ConfigError::new(
                "ssl.keystore.location",
                self.keystore_location.as_deref().unwrap_or_default(),
                "give either ssl.keystore.location or ssl.keystore.key, not both",
            ));
        }
        if self.truststore_certificates.is_some() && self.truststore_location.is_some() {
            return Err(ConfigError::new(
                "ssl.truststore.location",
                self.truststore_location.as_deref().unwrap_or_default(),
                "give either ssl.truststore.location or ssl.truststore.certificates, not both",
            ));
        }
        Ok(())
    }

    /// Resolves what one connection needs: provider references read now, PEM parsed, the
    /// rustls configuration built, SASL credentials taken from the JAAS entry or the token
    /// provider. The error names the key to fix.
    pub(crate) fn resolve(&self) -> Result<Resolved, SecurityError> {
        let tls = if self.protocol.tls() {
            Some(tls::client_config(self)?)
        } else {
            None
        };
        Ok(Resolved {
            tls,
            sasl: self.resolve_sasl()?,
        })
    }

    /// The SASL credentials for one authentication (a connection's first, or a
    /// re-authentication), if the protocol uses SASL.
    pub(crate) fn resolve_sasl(
        &self,
    ) -> Result<Option<(SaslMechanism, sasl::Credentials)>, SecurityError> {
        let (true, Some(m)) = (self.protocol.sasl(), self.sasl_mechanism) else {
            return Ok(None);
        };
        let module = match &self.sasl_jaas_config {
            Some(text) => {
                let text = self.resolve_value("sasl.jaas.config", text.expose())?;
                Some(jaas::parse(&text).map_err(|reason| SecurityError {
                    key: "sasl.jaas.config",
                    reason,
                })?)
            }
            None => None,
        };
        let creds = sasl::Credentials::from_jaas(m, module.as_ref(), self.token_provider.as_ref())
            .map_err(|reason| SecurityError {
                key: "sasl.jaas.config",
                reason,
            })?;
        Ok(Some((m, creds)))
    }

    /// A value with its provider references resolved; the error names `key`.
    pub(crate) fn resolve_value(
        &self,
        key: &'static str,
        value: &str,
    ) -> Result<Zeroizing<String>, SecurityError> {
        self.providers.resolve(value).map_err(|e| SecurityError {
            key,
            reason: format!("config provider: {e}"),
        })
    }
}

/// What one connection attempt needs, resolved; dropped (and wiped) once it is made.
pub(crate) struct Resolved {
    pub tls: Option<tls::TlsSetup>,
    pub sasl: Option<(SaslMechanism, sasl::Credentials)>,
}

/// A security setting that could not be used when connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SecurityError {
    /// The key to fix.
    pub key: &'static str,
    /// What is wrong.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_combinations() {
        let mut s = SecurityConfig::new();
        assert_eq!(
            s.set("security.protocol", "sasl_ssl").unwrap(),
            Some("security.protocol")
        );
        assert_eq!(s.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(s.validate().unwrap_err().key, "sasl.mechanism");
        s.set("sasl.mechanism", "SCRAM-SHA-512").unwrap();
        assert_eq!(s.validate().unwrap_err().key, "sasl.jaas.config");
        let e = s
            .set(
                "sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required password=\"hunter2",
            )
            .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        s.set(
            "sasl.jaas.config",
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"hunter2\";",
        )
        .unwrap();
        s.validate().unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
        let e = s.set("ssl.truststore.type", "JKS").unwrap_err();
        assert!(e.reason.contains("convert"), "{e}");
        assert_eq!(e.key, "ssl.truststore.type");
        assert!(
            s.set("sasl.mechanism", "GSSAPI")
                .unwrap_err()
                .reason
                .contains("not supported")
        );
        s.set("ssl.endpoint.identification.algorithm", "").unwrap();
        assert!(!s.endpoint_identification);
        assert_eq!(s.set("linger.ms", "1").unwrap(), None);
        assert_eq!(
            s.set(
                "config.providers.vault.class",
                "org.apache.kafka.common.config.provider.FileConfigProvider"
            )
            .unwrap(),
            Some("config.providers")
        );
        assert!(s.set("config.providers.x.class", "com.acme.Vault").is_err());
        s.set("ssl.keystore.key", "-----BEGIN PRIVATE KEY-----")
            .unwrap();
        assert_eq!(
            s.validate().unwrap_err().key,
            "ssl.keystore.certificate.chain"
        );
    }
}
