//! The admin client's configuration: the keys every client has ([`CommonConfig`]: bootstrap,
//! timeouts, backoff, TLS and SASL) and Java's `default.api.timeout.ms`, read the way the
//! producer's and the consumer's are.

use std::time::Duration;

pub use crate::config::ConfigError;
use crate::config::{
    COMMON_KEYS, ClientConfig, CommonConfig, LONG_MS, SECURITY_KEYS, check_ms, client_config_api,
    common_builders, concat_keys, keys_len, parse_ms,
};

/// The admin client's own keys.
const ADMIN_KEYS: &[&str] = &["default.api.timeout.ms"];

/// Every key [`AdminConfig::set`] accepts.
pub const KEYS: &[&str] =
    &concat_keys::<{ keys_len(&[COMMON_KEYS, SECURITY_KEYS, ADMIN_KEYS]) }>(&[
        COMMON_KEYS,
        SECURITY_KEYS,
        ADMIN_KEYS,
    ]);

/// Every setting of the admin client. Build it with [`AdminConfig::new`] and the setters, or
/// from properties with [`AdminConfig::from_properties`].
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The keys every client has (`bootstrap.servers`, `client.id` (default `adminclient-N`),
    /// `request.timeout.ms`, `retry.backoff.*`, `reconnect.backoff.*`, security, …).
    pub common: CommonConfig,
    /// `default.api.timeout.ms` (default 60000): how long a call may take, retries included,
    /// when it is not given a timeout of its own.
    pub default_api_timeout: Duration,
    explicit: Vec<&'static str>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            common: CommonConfig::default(),
            default_api_timeout: Duration::from_millis(60_000),
            explicit: Vec::new(),
        }
    }
}

impl ClientConfig for AdminConfig {
    const CLIENT: &'static str = "admin";
    const KEYS: &'static [&'static str] = KEYS;

    fn common(&mut self) -> &mut CommonConfig {
        &mut self.common
    }

    fn explicit(&mut self) -> &mut Vec<&'static str> {
        &mut self.explicit
    }

    fn set_own(&mut self, key: &str, v: &str) -> Result<bool, ConfigError> {
        match key {
            "default.api.timeout.ms" => self.default_api_timeout = parse_ms(key, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn validate(&mut self) -> Result<(), ConfigError> {
        AdminConfig::validate(self)
    }
}

impl AdminConfig {
    client_config_api!("admin");
    common_builders!();

    /// `default.api.timeout.ms`.
    pub fn default_api_timeout(mut self, d: Duration) -> Self {
        self.default_api_timeout = d;
        self.mark("default.api.timeout.ms");
        self
    }

    /// Checks the values.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        self.common.validate()?;
        check_ms(
            "default.api.timeout.ms",
            self.default_api_timeout,
            1,
            LONG_MS,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_errors_name_the_key() {
        let c = AdminConfig::from_properties([
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("default.api.timeout.ms", "5000"),
            ("request.timeout.ms", "2000"),
        ])
        .unwrap();
        assert_eq!(c.default_api_timeout, Duration::from_secs(5));
        assert_eq!(c.common.request_timeout, Duration::from_secs(2));
        let e = AdminConfig::from_properties([
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("default.api.timeout.ms", "-1"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "default.api.timeout.ms");
        let e = AdminConfig::from_properties([
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("linger.ms", "5"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "linger.ms");
        assert!(e.to_string().contains("admin"), "{e}");
        assert!(KEYS.contains(&"sasl.mechanism"));
    }
}
