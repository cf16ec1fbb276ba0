//! Consumer configuration with the Java client's keys and defaults, as a typed builder and as
//! `key=value` properties (the same style as [`ProducerConfig`](crate::ProducerConfig)).

use crate::config::value::keyword_setting;
use std::time::Duration;

pub use crate::config::ConfigError;
use crate::config::{
    COMMON_KEYS, ClientConfig, CommonConfig, INT_MS, LONG_MS, SECURITY_KEYS, check_max, check_ms,
    check_wire_string, client_config_api, common_builders, concat_keys, keys_len, parse_bool,
    parse_ms, parse_num, parse_with,
};
use crate::network::connection::MAX_RESPONSE_SIZE;
use crate::protocol::messages::fetch::IsolationLevel;

use super::assignor::AssignorKind;

/// `auto.offset.reset`: where to start in a partition that has no committed offset (or whose
/// position is out of range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The first offset the log still has.
    Earliest,
    /// The end of the log: only records written from now on. The default, as in Java.
    #[default]
    Latest,
    /// No reset: `poll()` returns [`ConsumerError::NoOffset`](super::ConsumerError::NoOffset)
    /// (or `OffsetOutOfRange`) until the application seeks.
    None,
}

keyword_setting!(AutoOffsetReset, ignore_case = false, expected = "expected earliest, latest or none", {
    Earliest => "earliest",
    Latest => "latest",
    None => "none",
});

/// `group.protocol`: how the member takes part in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup, the assignment computed by a member (the default, as in Java).
    #[default]
    Classic,
    /// KIP-848 (Kafka 4.0+): ConsumerGroupHeartbeat, the assignment computed by the broker
    /// (`group.remote.assignor`), every rebalance incremental.
    Consumer,
}

keyword_setting!(GroupProtocol, ignore_case = true, expected = "expected classic or consumer", {
    Classic => "classic",
    Consumer => "consumer",
});

fn parse_isolation(s: &str) -> Result<IsolationLevel, String> {
    match s.trim() {
        "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
        "read_committed" => Ok(IsolationLevel::ReadCommitted),
        _ => Err("expected read_uncommitted or read_committed".into()),
    }
}

/// Every setting of the consumer. Build it with [`ConsumerConfig::new`] and the setters, or
/// from properties with [`ConsumerConfig::from_properties`]; [`ConsumerConfig::set`] takes one
/// `key, value` pair the way Java's `Properties` does.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// The keys every client has: `bootstrap.servers`, `client.id` (default
    /// `consumer-<group.id>-N`), `request.timeout.ms`, `retry.backoff.*`, `reconnect.backoff.*`,
    /// `socket.connection.setup.timeout.ms`, `metadata.max.age.ms`, `allow.auto.create.topics`,
    /// `crac.register`.
    pub common: CommonConfig,
    /// `group.id`: needed by `subscribe()` and by commits.
    pub group_id: Option<String>,
    /// `group.instance.id`: static membership. Clones of one image must not share it: see
    /// [`crac_group_instance_id_var`](Self::crac_group_instance_id_var).
    pub group_instance_id: Option<String>,
    /// `group.protocol` (default classic).
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor`: the broker's assignor with `group.protocol=consumer`
    /// (`uniform` or `range`; default: the broker's default).
    pub group_remote_assignor: Option<String>,
    /// `auto.offset.reset` (default latest).
    pub auto_offset_reset: AutoOffsetReset,
    /// `enable.auto.commit` (default true with a `group.id`).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms` (default 5000).
    pub auto_commit_interval: Duration,
    /// `session.timeout.ms` (default 45000).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3000).
    pub heartbeat_interval: Duration,
    /// `max.poll.records` (default 500).
    pub max_poll_records: usize,
    /// `max.poll.interval.ms` (default 300000): the member leaves its group when the
    /// application does not call `poll()` for this long; also the rebalance timeout.
    pub max_poll_interval: Duration,
    /// `fetch.min.bytes` (default 1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes` (default 52428800).
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes` (default 1048576).
    pub max_partition_fetch_bytes: i32,
    /// `fetch.max.decompressed.bytes` (default [`DECOMPRESSED_PER_FETCH_BYTE`] times
    /// `fetch.max.bytes`): how many bytes the compressed batches of one fetch response may
    /// inflate to. What does not fit is fetched again; a batch larger than this alone is an
    /// error for its partition. `None` until set: see
    /// [`max_decompressed_bytes`](Self::max_decompressed_bytes).
    pub fetch_max_decompressed_bytes: Option<usize>,
    /// `fetch.max.compression.ratio` (default
    /// `protocol::compression::DEFAULT_MAX_RATIO`, 64): a compressed
    /// batch may inflate to this many times its size, or to 8 MiB, whichever is more; past it
    /// the batch is a decompression bomb and an error for its partition, whatever
    /// `fetch.max.decompressed.bytes` leaves.
    pub fetch_max_compression_ratio: usize,
    /// `fetch.max.wait.ms` (default 500).
    pub fetch_max_wait: Duration,
    /// `isolation.level` (default read_uncommitted).
    pub isolation_level: IsolationLevel,
    /// `partition.assignment.strategy` (default `range`; `range`, `roundrobin`, `sticky` and
    /// `cooperative-sticky`, by name or by Java class name). With `cooperative-sticky` alone
    /// the member uses the cooperative protocol (KIP-429).
    pub assignors: Vec<AssignorKind>,
    /// `default.api.timeout.ms` (default 60000): bounds `commit_sync()`, `committed()`,
    /// `position()` and `close()` without an explicit timeout.
    pub default_api_timeout: Duration,
    /// `client.rack` (default empty).
    pub client_rack: String,
    /// `checkpoint.timeout.ms` (default 30000): how long `before_checkpoint` may take to commit
    /// and leave the group before it fails the checkpoint.
    pub checkpoint_timeout: Duration,
    /// `checkpoint.commit.offsets` (default true): before a checkpoint, commit the positions
    /// of the records `poll()` returned. Set it to false when the offsets are committed by a
    /// transactional producer (`send_offsets_to_transaction`): a commit of positions the
    /// transaction has not committed would skip records whose transaction may yet abort. The
    /// checkpoint then only leaves the group, and the partitions are read again from the
    /// transactions' offsets by whoever owns them after.
    pub checkpoint_commit_offsets: bool,
    /// `crac.group.instance.id.var` (default `KAFKA_GROUP_INSTANCE_ID`): after a restore, a
    /// configured `group.instance.id` is replaced by the restorer's value of this variable
    /// (`crac restore --env KAFKA_GROUP_INSTANCE_ID=worker-7`), or, without one, by the
    /// configured id with a suffix unique to this restore.
    pub crac_group_instance_id_var: String,
    explicit: Vec<&'static str>,
}

/// The default `fetch.max.decompressed.bytes` is this many times `fetch.max.bytes`: room for a
/// full response compressed 2:1, or a smaller one compressed more, within a bound that keeps
/// what one response can cost the network thread (and the memory of its records) a fixed
/// multiple of what the broker may send.
pub const DECOMPRESSED_PER_FETCH_BYTE: usize = 2;

/// The largest `fetch.max.bytes` and `max.partition.fetch.bytes`: a response of that much
/// data, with 1 MiB for its headers, still fits the frame limit
/// (`MAX_RESPONSE_SIZE`).
pub const MAX_FETCH_BYTES: i32 = (MAX_RESPONSE_SIZE - (1 << 20)) as i32;

/// The consumer's own keys.
const CONSUMER_KEYS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.records",
    "max.poll.interval.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.decompressed.bytes",
    "fetch.max.compression.ratio",
    "fetch.max.wait.ms",
    "isolation.level",
    "partition.assignment.strategy",
    "default.api.timeout.ms",
    "client.rack",
    "checkpoint.timeout.ms",
    "checkpoint.commit.offsets",
    "crac.group.instance.id.var",
];

/// Every key [`ConsumerConfig::set`] accepts: the [`COMMON_KEYS`], the [`SECURITY_KEYS`]
/// (and `config.providers.NAME.class`), then the consumer's own.
pub const KEYS: &[&str] =
    &concat_keys::<{ keys_len(&[COMMON_KEYS, SECURITY_KEYS, CONSUMER_KEYS]) }>(&[
        COMMON_KEYS,
        SECURITY_KEYS,
        CONSUMER_KEYS,
    ]);

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            common: CommonConfig::default(),
            group_id: None,
            group_instance_id: None,
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
            auto_offset_reset: AutoOffsetReset::Latest,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_millis(5000),
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(3000),
            max_poll_records: 500,
            max_poll_interval: Duration::from_millis(300_000),
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            fetch_max_decompressed_bytes: None,
            fetch_max_compression_ratio: crate::protocol::compression::DEFAULT_MAX_RATIO,
            fetch_max_wait: Duration::from_millis(500),
            isolation_level: IsolationLevel::ReadUncommitted,
            assignors: vec![AssignorKind::Range],
            default_api_timeout: Duration::from_millis(60_000),
            client_rack: String::new(),
            checkpoint_timeout: Duration::from_millis(30_000),
            checkpoint_commit_offsets: true,
            crac_group_instance_id_var: "KAFKA_GROUP_INSTANCE_ID".into(),
            explicit: Vec::new(),
        }
    }
}

fn non_empty(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

/// The consumer's own keys; the rest of the mechanics are [`ClientConfig`]'s.
impl ClientConfig for ConsumerConfig {
    const CLIENT: &'static str = "consumer";
    const KEYS: &'static [&'static str] = KEYS;

    fn common(&mut self) -> &mut CommonConfig {
        &mut self.common
    }

    fn explicit(&mut self) -> &mut Vec<&'static str> {
        &mut self.explicit
    }

    fn set_own(&mut self, key: &str, v: &str) -> Result<bool, ConfigError> {
        match key {
            "group.id" => self.group_id = non_empty(v),
            "group.instance.id" => self.group_instance_id = non_empty(v),
            "group.protocol" => self.group_protocol = parse_with(key, v)?,
            "group.remote.assignor" => self.group_remote_assignor = non_empty(v),
            "auto.offset.reset" => self.auto_offset_reset = parse_with(key, v)?,
            "enable.auto.commit" => self.enable_auto_commit = parse_bool(key, v)?,
            "auto.commit.interval.ms" => self.auto_commit_interval = parse_ms(key, v)?,
            "session.timeout.ms" => self.session_timeout = parse_ms(key, v)?,
            "heartbeat.interval.ms" => self.heartbeat_interval = parse_ms(key, v)?,
            "max.poll.records" => self.max_poll_records = parse_num(key, v, 1usize)?,
            "max.poll.interval.ms" => self.max_poll_interval = parse_ms(key, v)?,
            "fetch.min.bytes" => self.fetch_min_bytes = parse_num(key, v, 0i32)?,
            "fetch.max.bytes" => self.fetch_max_bytes = parse_num(key, v, 0i32)?,
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = parse_num(key, v, 0i32)?
            }
            "fetch.max.decompressed.bytes" => {
                self.fetch_max_decompressed_bytes = Some(parse_num(key, v, 1usize)?)
            }
            "fetch.max.compression.ratio" => {
                self.fetch_max_compression_ratio = parse_num(key, v, 1usize)?
            }
            "fetch.max.wait.ms" => self.fetch_max_wait = parse_ms(key, v)?,
            "isolation.level" => {
                self.isolation_level =
                    parse_isolation(v).map_err(|r| ConfigError::new(key, v, r))?
            }
            "partition.assignment.strategy" => {
                let mut list = Vec::new();
                for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let a: AssignorKind = name
                        .parse()
                        .map_err(|r: String| ConfigError::new(key, v, r))?;
                    if !list.contains(&a) {
                        list.push(a);
                    }
                }
                if list.is_empty() {
                    return Err(ConfigError::new(key, v, "at least one assignor is needed"));
                }
                self.assignors = list;
            }
            "default.api.timeout.ms" => self.default_api_timeout = parse_ms(key, v)?,
            "client.rack" => self.client_rack = v.trim().to_owned(),
            "checkpoint.timeout.ms" => self.checkpoint_timeout = parse_ms(key, v)?,
            "checkpoint.commit.offsets" => self.checkpoint_commit_offsets = parse_bool(key, v)?,
            "crac.group.instance.id.var" => self.crac_group_instance_id_var = v.trim().to_owned(),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn validate(&mut self) -> Result<(), ConfigError> {
        ConsumerConfig::validate(self)
    }
}

impl ConsumerConfig {
    client_config_api!("consumer");

    /// Checks the combination, as Java's consumer does.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        self.common.validate()?;
        self.validate_values()?;
        if self.group_id.is_none() {
            // Java: without a group there is nothing to commit to; an explicit true is an error.
            if self.enable_auto_commit && self.explicit.contains(&"enable.auto.commit") {
                return Err(ConfigError::new(
                    "enable.auto.commit",
                    "true",
                    "needs a group.id (commits are stored with the group)",
                ));
            }
            self.enable_auto_commit = false;
            if let Some(id) = &self.group_instance_id {
                return Err(ConfigError::new(
                    "group.instance.id",
                    id,
                    "needs a group.id",
                ));
            }
        }
        self.validate_group_protocol()?;
        if self.heartbeat_interval >= self.session_timeout {
            return Err(ConfigError::new(
                "heartbeat.interval.ms",
                self.heartbeat_interval.as_millis(),
                format!(
                    "must be lower than session.timeout.ms={}",
                    self.session_timeout.as_millis()
                ),
            ));
        }
        if self.common.request_timeout <= self.fetch_max_wait {
            return Err(ConfigError::new(
                "request.timeout.ms",
                self.common.request_timeout.as_millis(),
                format!(
                    "must be greater than fetch.max.wait.ms={} (a fetch may wait that long)",
                    self.fetch_max_wait.as_millis()
                ),
            ));
        }
        Ok(())
    }

    /// The ranges of the consumer's values (Java's types; no timeout of 0; a fetch response
    /// that fits a frame), whether set as properties or with the builders.
    fn validate_values(&self) -> Result<(), ConfigError> {
        for (key, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("heartbeat.interval.ms", self.heartbeat_interval),
            ("max.poll.interval.ms", self.max_poll_interval),
        ] {
            check_ms(key, d, 1, INT_MS)?;
        }
        check_ms(
            "auto.commit.interval.ms",
            self.auto_commit_interval,
            0,
            INT_MS,
        )?;
        check_ms("fetch.max.wait.ms", self.fetch_max_wait, 0, INT_MS)?;
        check_ms(
            "default.api.timeout.ms",
            self.default_api_timeout,
            0,
            INT_MS,
        )?;
        check_ms("checkpoint.timeout.ms", self.checkpoint_timeout, 1, LONG_MS)?;
        check_max("max.poll.records", self.max_poll_records, i32::MAX as usize)?;
        for (key, n) in [
            ("fetch.max.bytes", self.fetch_max_bytes),
            ("max.partition.fetch.bytes", self.max_partition_fetch_bytes),
        ] {
            if n > MAX_FETCH_BYTES {
                return Err(ConfigError::new(
                    key,
                    n,
                    format!(
                        "must be at most {MAX_FETCH_BYTES}: a fetch response must fit the client's frame limit of {MAX_RESPONSE_SIZE} bytes with its headers"
                    ),
                ));
            }
        }
        for (key, s) in [
            ("group.id", self.group_id.as_deref()),
            ("group.instance.id", self.group_instance_id.as_deref()),
            ("client.rack", Some(self.client_rack.as_str())),
        ] {
            check_wire_string(key, s.unwrap_or_default())?;
        }
        Ok(())
    }

    /// Java 4's rules: the consumer protocol takes its heartbeat interval and session timeout
    /// from the broker, and its assignor from `group.remote.assignor`; the classic protocol
    /// has no remote assignor.
    fn validate_group_protocol(&self) -> Result<(), ConfigError> {
        match self.group_protocol {
            GroupProtocol::Consumer => {
                for key in [
                    "session.timeout.ms",
                    "heartbeat.interval.ms",
                    "partition.assignment.strategy",
                ] {
                    if self.explicit.contains(&key) {
                        return Err(ConfigError::new(
                            key,
                            "(set)",
                            "not used with group.protocol=consumer: the broker sets the session \
                             timeout and heartbeat interval (group.consumer.*), and assigns with \
                             group.remote.assignor",
                        ));
                    }
                }
            }
            GroupProtocol::Classic => {
                if let Some(a) = &self.group_remote_assignor {
                    return Err(ConfigError::new(
                        "group.remote.assignor",
                        a,
                        "cannot be set with group.protocol=classic (use \
                         partition.assignment.strategy)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The decompressed bytes one fetch response may produce: `fetch.max.decompressed.bytes`,
    /// or [`DECOMPRESSED_PER_FETCH_BYTE`] times `fetch.max.bytes`.
    pub fn max_decompressed_bytes(&self) -> usize {
        self.fetch_max_decompressed_bytes.unwrap_or_else(|| {
            usize::try_from(self.fetch_max_bytes.max(1))
                .unwrap_or(1)
                .saturating_mul(DECOMPRESSED_PER_FETCH_BYTE)
        })
    }

    common_builders!();

    /// `group.id`.
    pub fn group_id(mut self, id: impl Into<String>) -> Self {
        self.group_id = non_empty(&id.into());
        self.mark("group.id");
        self
    }

    /// `group.instance.id`.
    pub fn group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = non_empty(&id.into());
        self.mark("group.instance.id");
        self
    }

    /// `group.protocol`.
    pub fn group_protocol(mut self, p: GroupProtocol) -> Self {
        self.group_protocol = p;
        self.mark("group.protocol");
        self
    }

    /// `group.remote.assignor`.
    pub fn group_remote_assignor(mut self, name: impl Into<String>) -> Self {
        self.group_remote_assignor = non_empty(&name.into());
        self.mark("group.remote.assignor");
        self
    }

    /// `auto.offset.reset`.
    pub fn auto_offset_reset(mut self, r: AutoOffsetReset) -> Self {
        self.auto_offset_reset = r;
        self.mark("auto.offset.reset");
        self
    }

    /// `enable.auto.commit`.
    pub fn enable_auto_commit(mut self, on: bool) -> Self {
        self.enable_auto_commit = on;
        self.mark("enable.auto.commit");
        self
    }

    /// `auto.commit.interval.ms`.
    pub fn auto_commit_interval(mut self, d: Duration) -> Self {
        self.auto_commit_interval = d;
        self.mark("auto.commit.interval.ms");
        self
    }

    /// `session.timeout.ms`.
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = d;
        self.mark("session.timeout.ms");
        self
    }

    /// `heartbeat.interval.ms`.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.heartbeat_interval = d;
        self.mark("heartbeat.interval.ms");
        self
    }

    /// `max.poll.records`.
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.max_poll_records = n.max(1);
        self.mark("max.poll.records");
        self
    }

    /// `max.poll.interval.ms`.
    pub fn max_poll_interval(mut self, d: Duration) -> Self {
        self.max_poll_interval = d;
        self.mark("max.poll.interval.ms");
        self
    }

    /// `fetch.min.bytes`.
    pub fn fetch_min_bytes(mut self, n: i32) -> Self {
        self.fetch_min_bytes = n.max(0);
        self.mark("fetch.min.bytes");
        self
    }

    /// `fetch.max.bytes`.
    pub fn fetch_max_bytes(mut self, n: i32) -> Self {
        self.fetch_max_bytes = n.max(0);
        self.mark("fetch.max.bytes");
        self
    }

    /// `max.partition.fetch.bytes`.
    pub fn max_partition_fetch_bytes(mut self, n: i32) -> Self {
        self.max_partition_fetch_bytes = n.max(0);
        self.mark("max.partition.fetch.bytes");
        self
    }

    /// `fetch.max.decompressed.bytes`.
    pub fn fetch_max_decompressed_bytes(mut self, n: usize) -> Self {
        self.fetch_max_decompressed_bytes = Some(n.max(1));
        self.mark("fetch.max.decompressed.bytes");
        self
    }

    /// `fetch.max.compression.ratio`.
    pub fn fetch_max_compression_ratio(mut self, ratio: usize) -> Self {
        self.fetch_max_compression_ratio = ratio.max(1);
        self.mark("fetch.max.compression.ratio");
        self
    }

    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(mut self, d: Duration) -> Self {
        self.fetch_max_wait = d;
        self.mark("fetch.max.wait.ms");
        self
    }

    /// `isolation.level`.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation_level = level;
        self.mark("isolation.level");
        self
    }

    /// `partition.assignment.strategy`, in order of preference.
    pub fn assignors(mut self, list: &[AssignorKind]) -> Self {
        if !list.is_empty() {
            self.assignors = list.to_vec();
        }
        self.mark("partition.assignment.strategy");
        self
    }

    /// `default.api.timeout.ms`.
    pub fn default_api_timeout(mut self, d: Duration) -> Self {
        self.default_api_timeout = d;
        self.mark("default.api.timeout.ms");
        self
    }

    /// `checkpoint.timeout.ms`.
    pub fn checkpoint_timeout(mut self, d: Duration) -> Self {
        self.checkpoint_timeout = d;
        self.mark("checkpoint.timeout.ms");
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![("bootstrap.servers", "127.0.0.1:9092"), ("group.id", "g")]
    }

    #[test]
    fn java_defaults() {
        let c = ConsumerConfig::from_properties(base()).unwrap();
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert!(c.enable_auto_commit);
        assert_eq!(c.auto_commit_interval, Duration::from_secs(5));
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.max_poll_records, 500);
        assert_eq!(c.max_poll_interval, Duration::from_secs(300));
        assert_eq!(c.fetch_max_bytes, 52_428_800);
        assert_eq!(c.max_partition_fetch_bytes, 1_048_576);
        assert_eq!(c.max_decompressed_bytes(), 2 * 52_428_800);
        assert_eq!(c.fetch_max_wait, Duration::from_millis(500));
        assert_eq!(c.isolation_level, IsolationLevel::ReadUncommitted);
        assert_eq!(c.assignors, vec![AssignorKind::Range]);
    }

    #[test]
    fn errors_name_key_and_value() {
        let mut p = base();
        p.push(("auto.offset.reset", "smallest"));
        let e = ConsumerConfig::from_properties(p).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.value.as_str()),
            ("auto.offset.reset", "smallest")
        );
        assert!(
            e.to_string().contains("auto.offset.reset=\"smallest\""),
            "{e}"
        );
        let mut p = base();
        p.push(("partition.assignment.strategy", "range,sticky2"));
        let e = ConsumerConfig::from_properties(p).unwrap_err();
        assert_eq!(e.key, "partition.assignment.strategy");
        assert!(e.reason.contains("sticky2"), "{e}");
        let mut p = base();
        p.push(("max.pol.records", "5"));
        assert!(
            ConsumerConfig::from_properties(p)
                .unwrap_err()
                .reason
                .contains("unknown key")
        );
        let mut p = base();
        p.push(("heartbeat.interval.ms", "50000"));
        assert_eq!(
            ConsumerConfig::from_properties(p).unwrap_err().key,
            "heartbeat.interval.ms"
        );
        let e = ConsumerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("enable.auto.commit", "true"),
        ])
        .unwrap_err();
        assert_eq!(e.key, "enable.auto.commit");
        let e = ConsumerConfig::from_properties([("group.id", "g")]).unwrap_err();
        assert_eq!(e.key, "bootstrap.servers");
    }

    #[test]
    fn decompression_budget_follows_fetch_max_bytes_unless_set() {
        let mut p = base();
        p.push(("fetch.max.bytes", "1000"));
        let c = ConsumerConfig::from_properties(p.clone()).unwrap();
        assert_eq!(c.max_decompressed_bytes(), 2000);
        p.push(("fetch.max.decompressed.bytes", "5000"));
        let c = ConsumerConfig::from_properties(p.clone()).unwrap();
        assert_eq!(c.max_decompressed_bytes(), 5000);
        p.push(("fetch.max.decompressed.bytes", "0"));
        let e = ConsumerConfig::from_properties(p).unwrap_err();
        assert_eq!(e.key, "fetch.max.decompressed.bytes");
    }

    #[test]
    fn assignors_by_name_or_java_class() {
        let mut p = base();
        p.push((
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor, range",
        ));
        let c = ConsumerConfig::from_properties(p).unwrap();
        assert_eq!(
            c.assignors,
            vec![AssignorKind::RoundRobin, AssignorKind::Range]
        );
    }

    #[test]
    fn group_protocol_rules_as_java() {
        let mut p = base();
        p.push(("group.protocol", "CONSUMER"));
        p.push(("group.remote.assignor", "uniform"));
        let c = ConsumerConfig::from_properties(p.clone()).unwrap();
        assert_eq!(c.group_protocol, GroupProtocol::Consumer);
        assert_eq!(c.group_remote_assignor.as_deref(), Some("uniform"));
        for key in ["heartbeat.interval.ms", "partition.assignment.strategy"] {
            let mut q = p.clone();
            q.push((
                key,
                if key == "heartbeat.interval.ms" {
                    "1000"
                } else {
                    "range"
                },
            ));
            assert_eq!(ConsumerConfig::from_properties(q).unwrap_err().key, key);
        }
        let mut q = base();
        q.push(("group.remote.assignor", "uniform"));
        assert_eq!(
            ConsumerConfig::from_properties(q).unwrap_err().key,
            "group.remote.assignor"
        );
        let mut q = base();
        q.push(("group.protocol", "new"));
        assert_eq!(
            ConsumerConfig::from_properties(q).unwrap_err().key,
            "group.protocol"
        );
    }

    #[test]
    fn without_a_group_auto_commit_is_off() {
        let c = ConsumerConfig::from_properties([("bootstrap.servers", "h:1")]).unwrap();
        assert!(!c.enable_auto_commit);
        let c = ConsumerConfig::from_properties_text(
            "bootstrap.servers=h:1\ngroup.id=g\nisolation.level=read_committed\n",
        )
        .unwrap();
        assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
        assert!(c.explicit_keys().contains(&"isolation.level"));
    }
}
