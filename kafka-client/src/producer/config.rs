//! Producer configuration with the Java client's keys and defaults, as a typed builder and as
//! `key=value` properties.

use crate::config::value::keyword_setting;
use std::time::Duration;

pub use crate::config::ConfigError;
use crate::config::{
    COMMON_KEYS, ClientConfig, CommonConfig, INT_MS, LONG_MS, SECURITY_KEYS, check_max, check_ms,
    client_config_api, common_builders, concat_keys, keys_len, parse_bool, parse_ms, parse_num,
    parse_with,
};
use crate::protocol::record::Compression;

/// `acks`: how many replicas must have a record before the broker acknowledges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// `0`: no acknowledgement; the record counts as sent once written to the socket.
    None,
    /// `1`: the leader has it.
    Leader,
    /// `all` / `-1`: every in-sync replica has it. The default.
    #[default]
    All,
}

impl Acks {
    /// The wire value.
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

keyword_setting!(Acks, ignore_case = false, expected = "expected 0, 1, all or -1", {
    None => "0",
    Leader => "1",
    All => "all" | "-1",
});

/// `checkpoint.transaction.policy`: what `before_checkpoint` does with a transaction that is
/// open when the checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointTransactionPolicy {
    /// `wait` (the default): no new transaction begins, and the checkpoint waits (up to
    /// `checkpoint.drain.timeout.ms`) for the application to commit or abort the open one; if
    /// it does not, the checkpoint fails and the producer goes on. No work is thrown away.
    #[default]
    Wait,
    /// `abort`: the open transaction is aborted at once; the application's next call on it
    /// returns an abortable [`TransactionError`](super::TransactionError) and it retries the
    /// work after `abort_transaction()`, as after any abortable error.
    Abort,
}

keyword_setting!(CheckpointTransactionPolicy, ignore_case = false, expected = "expected wait or abort", {
    Wait => "wait",
    Abort => "abort",
});

/// `crac.transactional.id.policy`: the `transactional.id` of a restored copy when the restorer
/// gives none (in the variable `crac.transactional.id.var` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransactionalIdPolicy {
    /// `keep` (the default): the configured id. A restored copy fences any earlier producer
    /// with that id (a zombie of itself, its own original after a leave-running dump); two
    /// copies of one image running at once fence each other, the older one failing with
    /// [`TransactionError::Fenced`](super::TransactionError::Fenced).
    #[default]
    Keep,
    /// `unique`: `<transactional.id>-crac<generation>-<8 random hex digits>`, drawn after
    /// each restore: copies of one image never fence each other. Zombies are then fenced by
    /// the consumer group (offsets sent with `send_offsets_to_transaction`), not by the id.
    Unique,
}

keyword_setting!(TransactionalIdPolicy, ignore_case = false, expected = "expected keep or unique", {
    Keep => "keep",
    Unique => "unique",
});

/// Every setting of the producer. Build it with [`ProducerConfig::new`] and the setters, or
/// from properties with [`ProducerConfig::from_properties`]; [`ProducerConfig::set`] takes one
/// `key, value` pair the way Java's `Properties` does.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// The keys every client has: `bootstrap.servers`, `client.id`, `request.timeout.ms`,
    /// `retry.backoff.*`, `reconnect.backoff.*`, `socket.connection.setup.timeout.ms`,
    /// `metadata.max.age.ms`, `allow.auto.create.topics`, `crac.register`.
    pub common: CommonConfig,
    /// `acks` (default all).
    pub acks: Acks,
    /// `linger.ms` (default 5).
    pub linger: Duration,
    /// `batch.size` (default 16384).
    pub batch_size: usize,
    /// `batch.grow.max.bytes` (default 1 MiB; ours, not Java's): how large a batch may grow
    /// past `batch.size` while it cannot be sent (its broker's in-flight window full, its
    /// partition held back); bounded by `max.request.size`. At or below `batch.size` (0): off.
    pub batch_grow_max: usize,
    /// `buffer.memory` (default 32 MiB).
    pub buffer_memory: usize,
    /// `max.block.ms` (default 60000): how long `send()` and `flush()`-free waits block.
    pub max_block: Duration,
    /// `delivery.timeout.ms` (default 120000).
    pub delivery_timeout: Duration,
    /// `retries` (default 2147483647).
    pub retries: u32,
    /// `max.in.flight.requests.per.connection` (default 5).
    pub max_in_flight: usize,
    /// `enable.idempotence` (default true).
    pub enable_idempotence: bool,
    /// `compression.type` (default none).
    pub compression: Compression,
    /// `max.request.size` (default 1 MiB).
    pub max_request_size: usize,
    /// `partitioner.ignore.keys` (default false).
    pub partitioner_ignore_keys: bool,
    /// `checkpoint.drain.timeout.ms` (default 30000): how long `before_checkpoint` waits for
    /// every accepted record to be acknowledged.
    pub checkpoint_drain_timeout: Duration,
    /// `transactional.id` (default none): makes the producer transactional
    /// ([`Producer::init_transactions`](super::Producer::init_transactions)).
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms` (default 60000): how long the transaction coordinator lets a
    /// transaction stay open before it aborts it.
    pub transaction_timeout: Duration,
    /// `checkpoint.transaction.policy` (default wait).
    pub checkpoint_transaction_policy: CheckpointTransactionPolicy,
    /// `crac.transactional.id.var` (default `KAFKA_TRANSACTIONAL_ID`): the restore variable
    /// that names a restored copy's `transactional.id` (`crac restore --env
    /// KAFKA_TRANSACTIONAL_ID=svc-2`).
    pub crac_transactional_id_var: String,
    /// `crac.transactional.id.policy` (default keep): a restored copy's id when the restorer
    /// names none.
    pub crac_transactional_id_policy: TransactionalIdPolicy,
    explicit_idempotence: bool,
    explicit: Vec<&'static str>,
}

/// The producer's own keys.
const PRODUCER_KEYS: &[&str] = &[
    "acks",
    "linger.ms",
    "batch.size",
    "batch.grow.max.bytes",
    "buffer.memory",
    "max.block.ms",
    "delivery.timeout.ms",
    "retries",
    "max.in.flight.requests.per.connection",
    "enable.idempotence",
    "compression.type",
    "max.request.size",
    "partitioner.ignore.keys",
    "checkpoint.drain.timeout.ms",
    "transactional.id",
    "transaction.timeout.ms",
    "checkpoint.transaction.policy",
    "crac.transactional.id.var",
    "crac.transactional.id.policy",
];

/// Every key [`ProducerConfig::set`] accepts: the [`COMMON_KEYS`], the [`SECURITY_KEYS`]
/// (and `config.providers.NAME.class`), then the producer's own.
pub const KEYS: &[&str] =
    &concat_keys::<{ keys_len(&[COMMON_KEYS, SECURITY_KEYS, PRODUCER_KEYS]) }>(&[
        COMMON_KEYS,
        SECURITY_KEYS,
        PRODUCER_KEYS,
    ]);

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            common: CommonConfig::default(),
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_size: 16384,
            batch_grow_max: 1024 * 1024,
            buffer_memory: 32 * 1024 * 1024,
            max_block: Duration::from_millis(60_000),
            delivery_timeout: Duration::from_millis(120_000),
            retries: i32::MAX as u32,
            max_in_flight: 5,
            enable_idempotence: true,
            compression: Compression::None,
            max_request_size: 1024 * 1024,
            partitioner_ignore_keys: false,
            checkpoint_drain_timeout: Duration::from_millis(30_000),
            transactional_id: None,
            transaction_timeout: Duration::from_millis(60_000),
            checkpoint_transaction_policy: CheckpointTransactionPolicy::Wait,
            crac_transactional_id_var: "KAFKA_TRANSACTIONAL_ID".into(),
            crac_transactional_id_policy: TransactionalIdPolicy::Keep,
            explicit_idempotence: false,
            explicit: Vec::new(),
        }
    }
}

/// The producer's own keys; the rest of the mechanics are [`ClientConfig`]'s.
impl ClientConfig for ProducerConfig {
    const CLIENT: &'static str = "producer";
    const KEYS: &'static [&'static str] = KEYS;

    fn common(&mut self) -> &mut CommonConfig {
        &mut self.common
    }

    fn explicit(&mut self) -> &mut Vec<&'static str> {
        &mut self.explicit
    }

    fn set_own(&mut self, key: &str, v: &str) -> Result<bool, ConfigError> {
        match key {
            "acks" => self.acks = parse_with(key, v)?,
            "linger.ms" => self.linger = parse_ms(key, v)?,
            "batch.size" => self.batch_size = parse_num(key, v, 0usize)?,
            "batch.grow.max.bytes" => self.batch_grow_max = parse_num(key, v, 0usize)?,
            "buffer.memory" => self.buffer_memory = parse_num(key, v, 1usize)?,
            "max.block.ms" => self.max_block = parse_ms(key, v)?,
            "delivery.timeout.ms" => self.delivery_timeout = parse_ms(key, v)?,
            "retries" => self.retries = parse_num(key, v, 0u32)?,
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight = parse_num(key, v, 1usize)?
            }
            "enable.idempotence" => {
                self.enable_idempotence = parse_bool(key, v)?;
                self.explicit_idempotence = true;
            }
            "compression.type" => {
                self.compression = parse_with(key, v)?;
            }
            "max.request.size" => self.max_request_size = parse_num(key, v, 1usize)?,
            "partitioner.ignore.keys" => self.partitioner_ignore_keys = parse_bool(key, v)?,
            "checkpoint.drain.timeout.ms" => self.checkpoint_drain_timeout = parse_ms(key, v)?,
            // Java reads an empty transactional.id as none.
            "transactional.id" => {
                self.transactional_id = Some(v.trim().to_owned()).filter(|id| !id.is_empty())
            }
            "transaction.timeout.ms" => self.transaction_timeout = parse_ms(key, v)?,
            "checkpoint.transaction.policy" => {
                self.checkpoint_transaction_policy = parse_with(key, v)?
            }
            "crac.transactional.id.var" => self.crac_transactional_id_var = v.trim().to_owned(),
            "crac.transactional.id.policy" => {
                self.crac_transactional_id_policy = parse_with(key, v)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn validate(&mut self) -> Result<(), ConfigError> {
        ProducerConfig::validate(self)
    }
}

impl ProducerConfig {
    client_config_api!("producer");

    /// Checks the combination, like Java's `ProducerConfig` does. Idempotence, when not set
    /// explicitly, is switched off by settings that contradict it (`acks` other than all,
    /// `retries=0`, more than 5 in flight); set explicitly, the contradiction is an error.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        self.common.validate()?;
        self.validate_values()?;
        if let Some(id) = &self.transactional_id {
            if !self.enable_idempotence {
                return Err(ConfigError::new(
                    "enable.idempotence",
                    "false",
                    format!("transactional.id={id} needs idempotence"),
                ));
            }
            // A transactional producer is idempotent by definition: a conflicting setting is
            // an error, as in Java, rather than a reason to switch idempotence off.
            self.explicit_idempotence = true;
        }
        if self.enable_idempotence {
            let conflict = if self.acks != Acks::All {
                Some(("acks", self.acks.to_string(), "idempotence needs acks=all"))
            } else if self.retries == 0 {
                Some(("retries", "0".to_owned(), "idempotence needs retries > 0"))
            } else if self.max_in_flight > 5 {
                Some((
                    "max.in.flight.requests.per.connection",
                    self.max_in_flight.to_string(),
                    "idempotence needs at most 5 requests in flight",
                ))
            } else {
                None
            };
            if let Some((key, value, reason)) = conflict {
                if self.explicit_idempotence {
                    return Err(ConfigError::new(
                        key,
                        value,
                        format!("{reason} (enable.idempotence=true was set)"),
                    ));
                }
                tracing::info!(key, value = %value, "idempotence disabled by a conflicting setting");
                self.enable_idempotence = false;
            }
        }
        let min_delivery = self.linger + self.common.request_timeout;
        if self.delivery_timeout < min_delivery {
            return Err(ConfigError::new(
                "delivery.timeout.ms",
                self.delivery_timeout.as_millis(),
                format!(
                    "must be at least linger.ms + request.timeout.ms = {}",
                    min_delivery.as_millis()
                ),
            ));
        }
        if self.max_request_size < 128 {
            return Err(ConfigError::new(
                "max.request.size",
                self.max_request_size,
                "too small to hold a record batch",
            ));
        }
        Ok(())
    }

    /// The ranges of the producer's values (Java's types; no timeout of 0), whether set as
    /// properties or with the builders.
    fn validate_values(&self) -> Result<(), ConfigError> {
        check_ms("linger.ms", self.linger, 0, LONG_MS)?;
        check_ms("max.block.ms", self.max_block, 0, LONG_MS)?;
        check_ms("delivery.timeout.ms", self.delivery_timeout, 1, INT_MS)?;
        check_ms(
            "transaction.timeout.ms",
            self.transaction_timeout,
            1,
            INT_MS,
        )?;
        check_ms(
            "checkpoint.drain.timeout.ms",
            self.checkpoint_drain_timeout,
            1,
            LONG_MS,
        )?;
        let int = i32::MAX as usize;
        check_max("batch.size", self.batch_size, int)?;
        check_max("batch.grow.max.bytes", self.batch_grow_max, int)?;
        check_max("buffer.memory", self.buffer_memory, i64::MAX as usize)?;
        check_max("max.request.size", self.max_request_size, int)?;
        check_max("retries", self.retries, i32::MAX as u32)?;
        check_max(
            "max.in.flight.requests.per.connection",
            self.max_in_flight,
            int,
        )
    }

    common_builders!();

    /// `acks`.
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self.mark("acks");
        self
    }

    /// `linger.ms`.
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self.mark("linger.ms");
        self
    }

    /// `batch.size`.
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes;
        self.mark("batch.size");
        self
    }

    /// `buffer.memory`.
    pub fn buffer_memory(mut self, bytes: usize) -> Self {
        self.buffer_memory = bytes.max(1);
        self.mark("buffer.memory");
        self
    }

    /// `max.block.ms`.
    pub fn max_block(mut self, d: Duration) -> Self {
        self.max_block = d;
        self.mark("max.block.ms");
        self
    }

    /// `delivery.timeout.ms`.
    pub fn delivery_timeout(mut self, d: Duration) -> Self {
        self.delivery_timeout = d;
        self.mark("delivery.timeout.ms");
        self
    }

    /// `retries`.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self.mark("retries");
        self
    }

    /// `max.in.flight.requests.per.connection`.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self.mark("max.in.flight.requests.per.connection");
        self
    }

    /// `enable.idempotence`.
    pub fn enable_idempotence(mut self, on: bool) -> Self {
        self.enable_idempotence = on;
        self.explicit_idempotence = true;
        self.mark("enable.idempotence");
        self
    }

    /// `batch.grow.max.bytes` (0: batches never grow past `batch.size`).
    pub fn batch_grow_max_bytes(mut self, bytes: usize) -> Self {
        self.batch_grow_max = bytes;
        self.mark("batch.grow.max.bytes");
        self
    }

    /// `max.request.size`.
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request_size = bytes;
        self.mark("max.request.size");
        self
    }

    /// `partitioner.ignore.keys`.
    pub fn partitioner_ignore_keys(mut self, on: bool) -> Self {
        self.partitioner_ignore_keys = on;
        self.mark("partitioner.ignore.keys");
        self
    }

    /// `checkpoint.drain.timeout.ms`.
    pub fn checkpoint_drain_timeout(mut self, d: Duration) -> Self {
        self.checkpoint_drain_timeout = d;
        self.mark("checkpoint.drain.timeout.ms");
        self
    }

    /// `transactional.id`.
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into()).filter(|id| !id.is_empty());
        self.mark("transactional.id");
        self
    }

    /// `transaction.timeout.ms`.
    pub fn transaction_timeout(mut self, d: Duration) -> Self {
        self.transaction_timeout = d;
        self.mark("transaction.timeout.ms");
        self
    }

    /// `checkpoint.transaction.policy`.
    pub fn checkpoint_transaction_policy(mut self, p: CheckpointTransactionPolicy) -> Self {
        self.checkpoint_transaction_policy = p;
        self.mark("checkpoint.transaction.policy");
        self
    }

    /// `crac.transactional.id.policy`.
    pub fn crac_transactional_id_policy(mut self, p: TransactionalIdPolicy) -> Self {
        self.crac_transactional_id_policy = p;
        self.mark("crac.transactional.id.policy");
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_key_and_value() {
        let e = ProducerConfig::from_properties([("bootstrap.servers", "h:1"), ("acks", "2")])
            .unwrap_err();
        assert_eq!((e.key.as_str(), e.value.as_str()), ("acks", "2"));
        assert!(e.to_string().contains("acks=\"2\""), "{e}");
        let e = ProducerConfig::from_properties([("bootstrap.servers", "h:1"), ("lingr.ms", "5")])
            .unwrap_err();
        assert!(e.reason.contains("unknown key"));
        let e = ProducerConfig::from_properties([("linger.ms", "-1")]).unwrap_err();
        assert_eq!(e.key, "linger.ms");
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("compression.type", "brotli"),
        ])
        .unwrap_err();
        assert!(e.reason.contains("unknown codec"), "{e}");
        let e = ProducerConfig::from_properties([("acks", "1")]).unwrap_err();
        assert_eq!(e.key, "bootstrap.servers");
    }

    #[test]
    fn idempotence_conflicts() {
        let c =
            ProducerConfig::from_properties([("bootstrap.servers", "h:1"), ("acks", "1")]).unwrap();
        assert!(!c.enable_idempotence);
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("acks", "1"),
            ("enable.idempotence", "true"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "acks");
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("delivery.timeout.ms", "1000"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "delivery.timeout.ms");
    }

    #[test]
    fn transactions_need_idempotence() {
        let c = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("transactional.id", " svc-1 "),
            ("checkpoint.transaction.policy", "abort"),
            ("crac.transactional.id.policy", "unique"),
        ])
        .unwrap();
        assert_eq!(c.transactional_id.as_deref(), Some("svc-1"));
        assert_eq!(
            c.checkpoint_transaction_policy,
            CheckpointTransactionPolicy::Abort
        );
        assert_eq!(
            c.crac_transactional_id_policy,
            TransactionalIdPolicy::Unique
        );
        let c = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("transactional.id", ""),
        ])
        .unwrap();
        assert_eq!(c.transactional_id, None);
        // Idempotence is not switched off quietly for a transactional producer.
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("transactional.id", "t"),
            ("acks", "1"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "acks");
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("transactional.id", "t"),
            ("enable.idempotence", "false"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "enable.idempotence");
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("checkpoint.transaction.policy", "commit"),
        ])
        .unwrap_err();
        assert!(e.reason.contains("wait or abort"), "{e}");
        let e = ProducerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("transactional.id", "t"),
            ("transaction.timeout.ms", "0"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "transaction.timeout.ms");
    }

    #[test]
    fn properties_text() {
        let c = ProducerConfig::from_properties_text(
            "# a comment\nbootstrap.servers = 127.0.0.1:9092\nacks=-1\nlinger.ms=0\n\n",
        )
        .unwrap();
        assert_eq!(c.linger, Duration::ZERO);
        assert!(c.explicit_keys().contains(&"linger.ms"));
    }
}
