//! What the producer's and the consumer's configurations share: the settings every client has
//! ([`CommonConfig`], Java's `CommonClientConfigs`) with their one parser, and, in `value`, the
//! error that names a bad key and value ([`ConfigError`]) and the parsing of Java-style property
//! values and `.properties` text. The connection layer's security settings
//! ([`SecurityConfig`]) take their errors from `value` too, so this module and theirs do not
//! import each other.

use std::time::Duration;

pub(crate) mod value;

pub use self::value::ConfigError;
pub(crate) use self::value::{
    INT_MS, LONG_MS, check_max, check_ms, check_wire_string, parse_bool, parse_ms, parse_num,
    parse_with, properties_pairs,
};
pub use crate::network::metadata::BootstrapServer;
use crate::network::metadata::parse_bootstrap;
use crate::network::security::resolved_late;
// The types of the security settings' fields, so that a configuration can be written field by
// field as well as key by key.
pub use crate::network::security::providers::ProviderError;
pub use crate::network::security::tls::TlsVersion;
pub use crate::network::security::{
    ProviderKind, Providers, SECURITY_KEYS, SaslMechanism, Secret, SecurityConfig, SecurityProtocol,
};

/// The settings the producer and the consumer share: how to reach the cluster and how the
/// connection layer (`network`) behaves. Both configurations hold one as `common` and
/// parse these keys with [`CommonConfig::set`], so a key means the same thing in both.
#[derive(Debug, Clone)]
pub struct CommonConfig {
    /// `bootstrap.servers`.
    pub bootstrap_servers: Vec<BootstrapServer>,
    /// `client.id` (empty: the client makes one up).
    pub client_id: String,
    /// `request.timeout.ms` (default 30000).
    pub request_timeout: Duration,
    /// `retry.backoff.ms` (default 100).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (default 1000).
    pub retry_backoff_max: Duration,
    /// `reconnect.backoff.ms` (default 50).
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms` (default 1000).
    pub reconnect_backoff_max: Duration,
    /// `socket.connection.setup.timeout.ms` (default 10000).
    pub connect_timeout: Duration,
    /// `metadata.max.age.ms` (default 300000).
    pub metadata_max_age: Duration,
    /// `allow.auto.create.topics` (default true).
    pub allow_auto_create_topics: bool,
    /// `crac.register` (default true): register in the global CRaC context.
    pub crac_register: bool,
    /// `crac.bootstrap.servers.var` (default `KAFKA_BOOTSTRAP_SERVERS`): the restore variable
    /// (`crac restore --env KAFKA_BOOTSTRAP_SERVERS=…`) whose value, when given, replaces
    /// `bootstrap.servers` in a restored copy (it runs on another host, or another network,
    /// than the one the image was taken on). Empty: never.
    pub crac_bootstrap_servers_var: String,
    /// `security.protocol`, `ssl.*`, `sasl.*`, `config.providers*`: TLS and SASL.
    pub security: SecurityConfig,
}

/// Every key [`CommonConfig::set`] accepts.
pub const COMMON_KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "socket.connection.setup.timeout.ms",
    "metadata.max.age.ms",
    "allow.auto.create.topics",
    "crac.register",
    "crac.bootstrap.servers.var",
];

impl Default for CommonConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: String::new(),
            request_timeout: Duration::from_millis(30_000),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1000),
            connect_timeout: Duration::from_millis(10_000),
            metadata_max_age: Duration::from_millis(300_000),
            allow_auto_create_topics: true,
            crac_register: true,
            crac_bootstrap_servers_var: "KAFKA_BOOTSTRAP_SERVERS".into(),
            security: SecurityConfig::new(),
        }
    }
}

impl CommonConfig {
    /// Sets one of the [`COMMON_KEYS`] from its string value. Returns the key's name when it
    /// is one of them, `None` when it is not (the caller's own keys), an error naming the key
    /// and value when the value is bad. String values are trimmed, as Java's `ConfigDef` does.
    pub fn set(&mut self, key: &str, v: &str) -> Result<Option<&'static str>, ConfigError> {
        if let Some(k) = self.security.set(key, v)? {
            return Ok(Some(k));
        }
        match key {
            "bootstrap.servers" => {
                self.bootstrap_servers =
                    parse_bootstrap(v).map_err(|r| ConfigError::new(key, v, r))?
            }
            "client.id" => self.client_id = v.trim().to_owned(),
            "request.timeout.ms" => self.request_timeout = parse_ms(key, v)?,
            "retry.backoff.ms" => self.retry_backoff = parse_ms(key, v)?,
            "retry.backoff.max.ms" => self.retry_backoff_max = parse_ms(key, v)?,
            "reconnect.backoff.ms" => self.reconnect_backoff = parse_ms(key, v)?,
            "reconnect.backoff.max.ms" => self.reconnect_backoff_max = parse_ms(key, v)?,
            "socket.connection.setup.timeout.ms" => self.connect_timeout = parse_ms(key, v)?,
            "metadata.max.age.ms" => self.metadata_max_age = parse_ms(key, v)?,
            "allow.auto.create.topics" => self.allow_auto_create_topics = parse_bool(key, v)?,
            "crac.register" => self.crac_register = parse_bool(key, v)?,
            "crac.bootstrap.servers.var" => self.crac_bootstrap_servers_var = v.trim().to_owned(),
            _ => return Ok(None),
        }
        // Every arm above is listed (the unit test checks both ways).
        Ok(COMMON_KEYS.iter().copied().find(|k| *k == key))
    }

    /// Checks what every client needs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap_servers.is_empty() {
            return Err(ConfigError::new("bootstrap.servers", "", "required"));
        }
        self.validate_values()?;
        self.security.validate()
    }

    /// The ranges of the common values, whether set as properties or with the builders.
    fn validate_values(&self) -> Result<(), ConfigError> {
        check_wire_string("client.id", &self.client_id)?;
        if self.client_id.contains('\0') {
            // It names the client's threads, which cannot hold one.
            return Err(ConfigError::new(
                "client.id",
                self.client_id.escape_default(),
                "must not contain a NUL character",
            ));
        }
        check_ms("request.timeout.ms", self.request_timeout, 1, INT_MS)?;
        check_ms("retry.backoff.ms", self.retry_backoff, 0, LONG_MS)?;
        check_ms("retry.backoff.max.ms", self.retry_backoff_max, 0, LONG_MS)?;
        check_ms("reconnect.backoff.ms", self.reconnect_backoff, 0, LONG_MS)?;
        check_ms(
            "reconnect.backoff.max.ms",
            self.reconnect_backoff_max,
            0,
            LONG_MS,
        )?;
        check_ms(
            "socket.connection.setup.timeout.ms",
            self.connect_timeout,
            1,
            LONG_MS,
        )?;
        check_ms("metadata.max.age.ms", self.metadata_max_age, 0, LONG_MS)
    }

    /// `value` with its config provider references (`${file:…}`, `${env:…}`) resolved, for a
    /// key that is parsed now; the security keys keep theirs until a connection is made.
    pub fn resolve_now<'a>(
        &self,
        key: &str,
        value: &'a str,
    ) -> Result<std::borrow::Cow<'a, str>, ConfigError> {
        if resolved_late(key) || !self.security.providers.has_reference(value) {
            return Ok(std::borrow::Cow::Borrowed(value));
        }
        self.security
            .providers
            .resolve(value)
            .map(|v| std::borrow::Cow::Owned(v.to_string()))
            .map_err(|e| ConfigError::new(key, value, format!("config provider: {e}")))
    }
}

/// The mechanics both clients' configurations share, written once: a configuration is the
/// [`CommonConfig`] plus the client's own keys, and only those keys (their parsing, their
/// checks) are the client's. Setting a key resolves its config provider references, offers it
/// to the common (and security) keys, then to the client's, and records it as set; an unknown
/// key or a bad value is an error naming both.
pub(crate) trait ClientConfig: Default {
    /// `producer` or `consumer`: where the key list is, for the unknown-key error.
    const CLIENT: &'static str;
    /// Every key the client accepts, common ones included.
    const KEYS: &'static [&'static str];

    /// The common settings.
    fn common(&mut self) -> &mut CommonConfig;
    /// The keys set so far (by `set` or a builder).
    fn explicit(&mut self) -> &mut Vec<&'static str>;
    /// Sets one of the client's own keys from its (resolved) value; `Ok(false)` when `key` is
    /// not one of them.
    fn set_own(&mut self, key: &str, v: &str) -> Result<bool, ConfigError>;
    /// Checks the whole configuration.
    fn validate(&mut self) -> Result<(), ConfigError>;

    /// Defaults, with `bootstrap.servers`.
    fn with_bootstrap(bootstrap_servers: &str) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        c.set_key("bootstrap.servers", bootstrap_servers)?;
        Ok(c)
    }

    /// Defaults, then every pair set in order, then validated.
    fn from_pairs<K, V>(props: impl IntoIterator<Item = (K, V)>) -> Result<Self, ConfigError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut c = Self::default();
        for (k, v) in props {
            c.set_key(k.as_ref(), v.as_ref())?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Sets one key from its string value.
    fn set_key(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let resolved = self.common().resolve_now(key, value)?;
        let v = &*resolved;
        if let Some(k) = self.common().set(key, v)? {
            self.mark_set(k);
            return Ok(());
        }
        if !self.set_own(key, v)? {
            return Err(ConfigError::new(
                key,
                v,
                format!(
                    "unknown key (see kafka_client::{}::config::KEYS)",
                    Self::CLIENT
                ),
            ));
        }
        if let Some(k) = Self::KEYS.iter().find(|k| **k == key) {
            self.mark_set(k);
        }
        Ok(())
    }

    /// Records `key` as set explicitly.
    fn mark_set(&mut self, key: &'static str) {
        let explicit = self.explicit();
        if !explicit.contains(&key) {
            explicit.push(key);
        }
    }
}

/// Lists of keys ([`COMMON_KEYS`], [`SECURITY_KEYS`], a client's own) as one constant list.
pub(crate) const fn concat_keys<const N: usize>(lists: &[&[&'static str]]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut l) = (0, 0);
    while l < lists.len() {
        let mut j = 0;
        while j < lists[l].len() {
            out[i] = lists[l][j];
            i += 1;
            j += 1;
        }
        l += 1;
    }
    assert!(i == N, "N must be the sum of the lengths");
    out
}

/// The length of [`concat_keys`]'s result.
pub(crate) const fn keys_len(lists: &[&[&'static str]]) -> usize {
    let (mut n, mut l) = (0, 0);
    while l < lists.len() {
        n += lists[l].len();
        l += 1;
    }
    n
}

/// The entry points of a configuration type that implements [`ClientConfig`]: `new`,
/// `from_properties`, `from_properties_text`, `set`, `explicit_keys`, and the `mark` its
/// builders call. One definition, so both clients read and set keys the same way.
macro_rules! client_config_api {
    ($client:literal) => {
        /// Defaults, with `bootstrap.servers` (e.g. `"127.0.0.1:9092,127.0.0.1:9093"`).
        pub fn new(bootstrap_servers: &str) -> Result<Self, ConfigError> {
            <Self as $crate::config::ClientConfig>::with_bootstrap(bootstrap_servers)
        }

        #[doc = concat!("Reads `key=value` pairs (Java's ", $client, " keys) and validates the result.")]
        pub fn from_properties<K, V>(
            props: impl IntoIterator<Item = (K, V)>,
        ) -> Result<Self, ConfigError>
        where
            K: AsRef<str>,
            V: AsRef<str>,
        {
            <Self as $crate::config::ClientConfig>::from_pairs(props)
        }

        /// Reads a Java `.properties`-style text: `key=value` lines, `#` and `!` comments.
        pub fn from_properties_text(text: &str) -> Result<Self, ConfigError> {
            Self::from_properties($crate::config::properties_pairs(text)?)
        }

        /// Sets one key from its string value, as in Java properties. An unknown key or a bad
        /// value is an error naming both.
        pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, ConfigError> {
            <Self as $crate::config::ClientConfig>::set_key(self, key, value)?;
            Ok(self)
        }

        /// Keys set explicitly (by `set` or a builder method).
        pub fn explicit_keys(&self) -> &[&'static str] {
            &self.explicit
        }

        fn mark(&mut self, key: &'static str) -> &mut Self {
            <Self as $crate::config::ClientConfig>::mark_set(self, key);
            self
        }
    };
}
pub(crate) use client_config_api;

/// The builder methods of the common keys, for a configuration type with a `common:
/// CommonConfig` field and a `mark(&mut self, &'static str)` method that records a key as set.
macro_rules! common_builders {
    () => {
        /// `client.id`.
        pub fn client_id(mut self, id: impl Into<String>) -> Self {
            self.common.client_id = id.into();
            self.mark("client.id");
            self
        }

        /// `request.timeout.ms`.
        pub fn request_timeout(mut self, d: std::time::Duration) -> Self {
            self.common.request_timeout = d;
            self.mark("request.timeout.ms");
            self
        }

        /// `retry.backoff.ms`.
        pub fn retry_backoff(mut self, d: std::time::Duration) -> Self {
            self.common.retry_backoff = d;
            self.mark("retry.backoff.ms");
            self
        }

        /// `reconnect.backoff.ms` and `reconnect.backoff.max.ms`.
        pub fn reconnect_backoff(
            mut self,
            base: std::time::Duration,
            max: std::time::Duration,
        ) -> Self {
            self.common.reconnect_backoff = base;
            self.common.reconnect_backoff_max = max;
            self.mark("reconnect.backoff.ms");
            self
        }

        /// `metadata.max.age.ms`.
        pub fn metadata_max_age(mut self, d: std::time::Duration) -> Self {
            self.common.metadata_max_age = d;
            self.mark("metadata.max.age.ms");
            self
        }

        /// `crac.register`.
        pub fn crac_register(mut self, on: bool) -> Self {
            self.common.crac_register = on;
            self.mark("crac.register");
            self
        }

        /// Where OAUTHBEARER tokens come from (with `sasl.mechanism=OAUTHBEARER`): asked for
        /// a token each time a connection authenticates, so the client keeps none between
        /// connections (and none in a checkpoint image).
        pub fn oauthbearer_token_provider(
            mut self,
            provider: std::sync::Arc<dyn crate::network::security::OAuthBearerTokenProvider>,
        ) -> Self {
            self.common.security.token_provider = Some(provider);
            self
        }
    };
}
pub(crate) use common_builders;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_keys() {
        let mut c = CommonConfig::default();
        assert_eq!(c.set("client.id", "  app-1 ").unwrap(), Some("client.id"));
        assert_eq!(c.client_id, "app-1");
        assert_eq!(c.set("linger.ms", "5").unwrap(), None);
        let e = c.set("request.timeout.ms", "soon").unwrap_err();
        assert_eq!(e.key, "request.timeout.ms");
        assert_eq!(c.validate().unwrap_err().key, "bootstrap.servers");
        // Every listed key has its arm.
        for k in COMMON_KEYS {
            let r = c.set(k, "1");
            assert!(!matches!(r, Ok(None)), "{k}");
        }
        const ALL: [&str; 3] = concat_keys(&[&["a"], &["b", "c"]]);
        assert_eq!(ALL, ["a", "b", "c"]);
    }

    #[test]
    fn properties_text() {
        let p = properties_pairs("# c\n! c\n\na = 1\nb:2\n").unwrap();
        assert_eq!(p, [("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert_eq!(properties_pairs("nothing").unwrap_err().key, "nothing");
    }
}
