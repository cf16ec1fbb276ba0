//! Real Apache Kafka brokers for end-to-end tests.
//!
//! A [`Cluster`] is 1 or 3 KRaft nodes (broker and controller in one JVM) on 127.0.0.1, started by
//! `scripts/kafka/kafka` on ports free at run time, so tests of one binary can each start their
//! own cluster in parallel. Everything that checks what reached the brokers goes through the
//! Java tools of the same Kafka release (console consumer and producer, topics, reassignment,
//! leader election): an independent client to compare ours with.
//!
//! It is a test harness: every method panics with the tool's output when something fails.
//! Dropping a cluster stops its JVMs (by pid) and deletes its directory; the directory is kept
//! (data removed, logs kept) when the test panicked, and kept whole with `KEEP_KAFKA=1`.
//! A cluster that is never dropped (one shared by the tests of a binary through a
//! `static OnceLock<Cluster>`) is stopped and deleted by a watchdog about a second after the
//! test process exits.
//!
//! ```no_run
//! use crac_tests::kafka::Cluster;
//! use std::time::Duration;
//!
//! let kafka = Cluster::start(3);
//! kafka.create_topic("events", 3, 3);
//! kafka.java_produce("events", &[(Some("k1"), "v1"), (None, "v2")]);
//! let records = kafka.consume_all("events", 2, Duration::from_secs(30));
//! assert_eq!(records.len(), 2);
//! ```

use std::collections::BTreeMap;

use kafka_client::Admin;
use kafka_client::admin;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long `start` may take: formatting and starting three JVMs on two busy cores.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// Any single tool run (they start in about a second; the admin client retries for a while).
const TOOL_TIMEOUT: Duration = Duration::from_secs(90);

// Separators of the console tools' text formats: control characters no test text uses. The
// consumer also escapes every key, value and header value (see `unescape`), so only header keys
// are printed raw.
const FIELD: char = '\u{1f}';
const HEADERS: char = '\u{1e}';
const HEADER: char = '\u{1d}';
const HEADER_KV: char = '\u{1c}';
/// Stands for null in both tools (the producer's `null.marker`, the consumer's `null.literal`).
const NULL: &str = "\u{0}null\u{0}";
/// `NULL` as the consumer prints it, escaped like any value.
const NULL_ESCAPED: &str = "\\x00null\\x00";

/// Path of `scripts/kafka/kafka`, for tests that want to run it themselves.
pub fn kafka_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/kafka")
}

/// A running Kafka cluster. Dropping it stops the brokers.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bootstrap: String,
    brokers: usize,
    /// Bootstrap servers of the listeners `start --security` added, by name.
    listeners: BTreeMap<String, String>,
    /// Our admin client on the PLAINTEXT listener (made at first use): topics and offsets
    /// without a JVM per question.
    admin: OnceLock<Admin>,
}

/// How a client reaches a cluster: one listener's bootstrap servers and the client settings
/// that go with it (security protocol, trust store, SASL mechanism and credentials), as the
/// Java tools read them from `config` and as our clients take them from [`Access::properties`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// `SSL`, `MTLS`, `SASL_SSL`, `SASL_PLAINTEXT` or `PLAINTEXT`.
    pub listener: String,
    pub bootstrap: String,
    /// A `.properties` file of client settings; none for PLAINTEXT.
    pub config: Option<PathBuf>,
}

impl Access {
    /// The client settings of `config` as `key=value` pairs, `bootstrap.servers` first.
    pub fn properties(&self) -> Vec<(String, String)> {
        let mut out = vec![("bootstrap.servers".to_owned(), self.bootstrap.clone())];
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            for line in text.lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (k, v) = line
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{}: bad line {line:?}", path.display()));
                out.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        out
    }

    /// The same listener with one setting replaced or added (in `properties` and in the file
    /// the Java tools read, a copy next to the original).
    pub fn with(&self, key: &str, value: &str) -> Access {
        let mut props = self.properties();
        props.retain(|(k, _)| k != "bootstrap.servers" && k != key);
        props.push((key.to_owned(), value.to_owned()));
        let base = self.config.clone().expect("a listener with a config file");
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = base.with_extension(format!("{}.properties", N.fetch_add(1, Ordering::Relaxed)));
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&path, text).expect("write client config");
        Access {
            config: Some(path),
            ..self.clone()
        }
    }
}

/// One record as the Java console consumer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch (create or log-append time), -1 if the record has none.
    pub timestamp: i64,
    pub key: Option<String>,
    pub value: Option<String>,
    /// In record order; duplicate keys are kept.
    pub headers: Vec<(String, Option<String>)>,
}

/// A record for [`Cluster::java_produce_records`]: the console producer can send null keys, null
/// values and headers (duplicates kept, null values allowed). Text only, without line breaks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaRecord {
    pub key: Option<String>,
    pub value: Option<String>,
    pub headers: Vec<(String, Option<String>)>,
}

impl JavaRecord {
    pub fn new(key: Option<&str>, value: &str) -> JavaRecord {
        JavaRecord {
            key: key.map(str::to_owned),
            value: Some(value.to_owned()),
            headers: Vec::new(),
        }
    }

    /// Adds a header (after the ones already there).
    pub fn header(mut self, key: &str, value: Option<&str>) -> JavaRecord {
        self.headers
            .push((key.to_owned(), value.map(str::to_owned)));
        self
    }
}

/// A partition as `kafka-topics --describe` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// -1 when the partition has no leader.
    pub leader: i32,
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl Cluster {
    /// Starts a fresh cluster of `brokers` nodes (1 or 3; ids 1..=brokers) and waits until every
    /// broker is registered. Fetches Kafka's jars first if needed (Maven).
    pub fn start(brokers: usize) -> Cluster {
        Cluster::start_with(brokers, &[])
    }

    /// Starts a cluster that also has SSL, MTLS (client certificates required), SASL_SSL and
    /// SASL_PLAINTEXT listeners (`kafka start --security`: a CA and certificates made for it,
    /// users `alice`/`alice-secret` for PLAIN and SCRAM, unsecured OAUTHBEARER). With
    /// `reauth`, the SASL_PLAINTEXT listener's sessions last that long (KIP-368).
    pub fn start_secure(brokers: usize, reauth: Option<Duration>) -> Cluster {
        let reauth = reauth.map(|d| d.as_millis().to_string());
        let mut extra = vec!["--security"];
        if let Some(ms) = &reauth {
            extra.extend(["--reauth-ms", ms]);
        }
        Cluster::start_with(brokers, &extra)
    }

    /// Starts a cluster that also listens (PLAINTEXT) on other addresses of this machine, one
    /// listener `NAME` per `(NAME, IP)`, advertised as that address: how another network (a
    /// test's network namespace, [`crate::netns::Host`]) reaches it. Their bootstrap servers:
    /// [`Cluster::bootstrap_of`].
    pub fn start_with_host_listeners(brokers: usize, hosts: &[(&str, &str)]) -> Cluster {
        let specs: Vec<String> = hosts.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
        let mut extra = Vec::new();
        for s in &specs {
            extra.extend(["--host-listener", s.as_str()]);
        }
        Cluster::start_with(brokers, &extra)
    }

    /// The bootstrap servers of listener `name`.
    pub fn bootstrap_of(&self, name: &str) -> &str {
        self.listeners
            .get(name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.listeners))
    }

    fn start_with(brokers: usize, extra: &[&str]) -> Cluster {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "crac-kafka-{}-{}-{nanos:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // Built before starting, so that a failed start still stops what it started (Drop).
        let mut cluster = Cluster {
            dir,
            bootstrap: String::new(),
            brokers,
            listeners: BTreeMap::new(),
            admin: OnceLock::new(),
        };
        let (count, owner) = (brokers.to_string(), std::process::id().to_string());
        let mut args = vec!["start", "--brokers", &count, "--owner", &owner];
        if !keep_kafka() {
            args.push("--cleanup");
        }
        args.extend(extra);
        let out = cluster.script(&args, START_TIMEOUT);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines() {
            if let Some((name, servers)) = line.split_once(' ') {
                if servers
                    .split(',')
                    .all(|s| s.parse::<std::net::SocketAddr>().is_ok())
                {
                    cluster
                        .listeners
                        .insert(name.to_owned(), servers.to_owned());
                }
            }
        }
        cluster.bootstrap = stdout
            .lines()
            .last()
            .filter(|l| l.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("kafka start printed no bootstrap servers: {out:?}"))
            .to_owned();
        cluster.write_tool_configs();
        cluster
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,…`, every node (stopped ones included).
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The PLAINTEXT listener, as an [`Access`].
    pub fn plaintext(&self) -> Access {
        Access {
            listener: "PLAINTEXT".into(),
            bootstrap: self.bootstrap.clone(),
            config: None,
        }
    }

    /// A listener of a [`Cluster::start_secure`] cluster: `SSL`, `MTLS`, or `SASL_SSL` /
    /// `SASL_PLAINTEXT` with a mechanism (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`,
    /// `OAUTHBEARER`), with the client settings `kafka start` wrote for it.
    pub fn access(&self, listener: &str, mechanism: Option<&str>) -> Access {
        let bootstrap = self
            .listeners
            .get(listener)
            .unwrap_or_else(|| panic!("no listener {listener} (started with start_secure?)"))
            .clone();
        let mut name = format!("client-{}", listener.to_lowercase());
        if let Some(m) = mechanism {
            name.push('-');
            name.push_str(&m.to_lowercase());
        }
        let config = self.dir.join(format!("{name}.properties"));
        assert!(config.exists(), "no client config {}", config.display());
        Access {
            listener: listener.to_owned(),
            bootstrap,
            config: Some(config),
        }
    }

    /// A file of the cluster's TLS material (`ca.pem`, `client.pem`, `client.key`,
    /// `client.crt`, `client-encrypted-key.pem`, `client-key-password`).
    pub fn tls_file(&self, name: &str) -> PathBuf {
        self.dir.join("tls").join(name)
    }

    /// The brokers' ports, every node's.
    pub fn ports(&self) -> std::collections::HashSet<u16> {
        self.bootstrap
            .split(',')
            .filter_map(|s| s.rsplit_once(':')?.1.parse().ok())
            .collect()
    }

    /// How many nodes the cluster has (broker ids are 1..=brokers).
    pub fn brokers(&self) -> usize {
        self.brokers
    }

    /// The cluster's directory: `broker-N.log`, configs, data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates a topic; returns once it exists (its leaders may still be being elected: use
    /// [`Cluster::leaders`] to wait for them if the test needs them).
    pub fn create_topic(&self, name: &str, partitions: i32, replication: i16) {
        self.create_topic_with_config(name, partitions, replication, &[]);
    }

    /// Creates a topic with configuration overrides, e.g. `[("min.insync.replicas", "2")]`.
    pub fn create_topic_with_config(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        config: &[(&str, &str)],
    ) {
        let mut topic = admin::NewTopic::new(name, partitions, replication);
        for (k, v) in config {
            topic = topic.config(*k, *v);
        }
        let created = self
            .admin()
            .create_topics(&[topic], &admin::Options::timeout(TOOL_TIMEOUT))
            .unwrap_or_else(|e| panic!("create topic {name}: {e}"));
        match &created[name] {
            Ok(_) => {}
            // The admin client retries a create whose answer it did not get in time (a loaded
            // controller); the retry then finds the topic its first attempt made. Test topic
            // names are unique per cluster, so an existing one with the asked-for partition
            // count is this call's.
            Err(e)
                if e.code() == Some(kafka_client::ErrorCode::TopicAlreadyExists)
                    && self
                        .try_describe(name)
                        .is_some_and(|parts| parts.len() == partitions as usize) =>
            {
                eprintln!(
                    "kafka: topic {name} existed after a retried create: taking it as created"
                );
            }
            Err(e) => panic!(
                "create topic {name} ({partitions} partitions, replication {replication}, {config:?}): {e}"
            ),
        }
        // Metadata reaches every broker a moment after the controller commits it, and a leader
        // serves its partition a moment after it is named: a first produce before that is
        // refused (NOT_LEADER_OR_FOLLOWER) and retried, which may reorder a producer without
        // idempotence. Created means every leader answers for its partition.
        let parts = self.wait_for("every partition of the new topic to have a leader", || {
            let parts = self.try_describe(name)?;
            (parts.len() == partitions as usize && parts.iter().all(|p| p.leader >= 0))
                .then_some(parts)
        });
        let wanted: Vec<_> = parts
            .iter()
            .map(|p| {
                (
                    kafka_client::TopicPartition::new(name, p.partition),
                    admin::OffsetSpec::Latest,
                )
            })
            .collect();
        self.wait_for(
            "every leader of the new topic to serve its partition",
            || {
                let got = self
                    .admin()
                    .list_offsets(&wanted, false, &admin::Options::timeout(TOOL_TIMEOUT))
                    .ok()?;
                got.values().all(Result::is_ok).then_some(())
            },
        );
    }

    /// Partitions of `topic` with leader, replicas and ISR (from our admin client).
    pub fn describe(&self, topic: &str) -> Vec<PartitionState> {
        self.try_describe(topic)
            .unwrap_or_else(|| panic!("describe {topic}: no partitions"))
    }

    /// Partition -> leader broker id (-1: no leader).
    pub fn leaders(&self, topic: &str) -> BTreeMap<i32, i32> {
        self.describe(topic)
            .into_iter()
            .map(|p| (p.partition, p.leader))
            .collect()
    }

    /// Gives every partition of `topic` a different leader and returns once the brokers report
    /// it. With several replicas, the replica list is rotated so another in-sync replica comes
    /// first, then a preferred leader election makes it leader (no data moves). A partition with
    /// one replica is reassigned to another running broker (its data is copied).
    pub fn move_leaders(&self, topic: &str) -> BTreeMap<i32, i32> {
        let before = self.describe(topic);
        // Only a single-replica partition needs to know which brokers run (one JVM less).
        let running = if before.iter().any(|p| p.replicas.len() == 1) {
            self.running_brokers()
        } else {
            Vec::new()
        };
        let mut target = BTreeMap::new();
        for p in &before {
            let replicas = if p.replicas.len() > 1 {
                let at = p.replicas.iter().position(|&r| r == p.leader).unwrap_or(0);
                let n = p.replicas.len();
                let next = (1..n)
                    .map(|i| p.replicas[(at + i) % n])
                    .find(|r| p.isr.contains(r))
                    .unwrap_or_else(|| {
                        panic!("move_leaders {topic}: partition {} has no other in-sync replica: {p:?}", p.partition)
                    });
                let mut r = vec![next];
                r.extend(p.replicas.iter().copied().filter(|&x| x != next));
                r
            } else {
                let other = running
                    .iter()
                    .copied()
                    .find(|&b| b != p.leader)
                    .unwrap_or_else(|| {
                        panic!(
                            "move_leaders {topic}: no running broker other than {}",
                            p.leader
                        )
                    });
                vec![other]
            };
            target.insert(p.partition, replicas);
        }

        let mut json = String::from(r#"{"version":1,"partitions":["#);
        for (i, (partition, replicas)) in target.iter().enumerate() {
            let list: Vec<String> = replicas.iter().map(i32::to_string).collect();
            let _ = write!(
                json,
                r#"{}{{"topic":"{topic}","partition":{partition},"replicas":[{}]}}"#,
                if i > 0 { "," } else { "" },
                list.join(",")
            );
        }
        json.push_str("]}");
        let file = self.dir.join(format!("reassign-{topic}.json"));
        std::fs::write(&file, json).expect("write reassignment file");
        let file = file.to_str().expect("utf-8 temp dir");
        self.tool_ok(
            "reassign-partitions",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--execute",
                "--reassignment-json-file",
                file,
            ],
        );

        let mut elect = String::from(r#"{"partitions":["#);
        for (i, partition) in target.keys().enumerate() {
            let _ = write!(
                elect,
                r#"{}{{"topic":"{topic}","partition":{partition}}}"#,
                if i > 0 { "," } else { "" }
            );
        }
        elect.push_str("]}");
        let efile = self.dir.join(format!("elect-{topic}.json"));
        std::fs::write(&efile, elect).expect("write election file");
        let efile = efile.to_str().expect("utf-8 temp dir");
        let wanted: BTreeMap<i32, i32> = target.iter().map(|(&p, r)| (p, r[0])).collect();
        self.wait_for("the new preferred leaders to be elected", || {
            // Fails while a copied replica is still catching up, and for partitions whose leader is
            // already the preferred one: only the leaders it ends with count.
            self.java_tool(
                "leader-election",
                &[
                    "--bootstrap-server",
                    &self.bootstrap,
                    "--election-type",
                    "PREFERRED",
                    "--path-to-json-file",
                    efile,
                ],
            );
            // Brokers learn the outcome a moment later: look again before electing again.
            (0..3).find_map(|_| {
                let ok = self.leaders(topic) == wanted;
                if !ok {
                    thread::sleep(Duration::from_millis(300));
                }
                ok.then_some(())
            })
        });
        wanted
    }

    /// Stops node `id` (SIGTERM, then SIGKILL after 20 s); the others elect new leaders.
    pub fn stop_broker(&self, id: i32) {
        self.script(&["stop-broker", &id.to_string()], TOOL_TIMEOUT);
    }

    /// Starts node `id` again, with its data, and waits until it is registered.
    pub fn start_broker(&self, id: i32) {
        self.script(&["start-broker", &id.to_string()], START_TIMEOUT);
    }

    /// Ids of the brokers the cluster reports as running (unfenced: KRaft's metadata names
    /// only those).
    pub fn running_brokers(&self) -> Vec<i32> {
        self.admin()
            .describe_cluster(&admin::Options::timeout(TOOL_TIMEOUT))
            .unwrap_or_else(|e| panic!("describe cluster: {e}"))
            .brokers
            .iter()
            .map(|b| b.id)
            .collect()
    }

    /// Every record of `topic`, read from the beginning by the Java console consumer: waits until
    /// `expected` records have come or `timeout` passed without a new one. Then, should the log
    /// hold more than were read (duplicates!), reads again to return all of them, so
    /// `assert_eq!(records.len(), expected)` catches extras. Records are in the order the
    /// consumer got them: by offset within a partition.
    ///
    /// Keys, values and header values come back byte for byte (the consumer escapes them;
    /// bytes that are not UTF-8 become U+FFFD). Limits: a header key must not contain `:` or
    /// control characters; the exact text `"\0null\0"` reads as null. Counting extras assumes a
    /// topic without transactions (markers take offsets).
    pub fn consume_all(
        &self,
        topic: &str,
        expected: usize,
        timeout: Duration,
    ) -> Vec<ConsumedRecord> {
        self.consume_all_via(&self.plaintext(), topic, expected, timeout)
    }

    /// [`Cluster::consume_all`] through a listener of a [`Cluster::start_secure`] cluster.
    pub fn consume_all_via(
        &self,
        via: &Access,
        topic: &str,
        expected: usize,
        timeout: Duration,
    ) -> Vec<ConsumedRecord> {
        let records = self.console_consume(via, topic, expected, timeout);
        if records.len() < expected {
            return records;
        }
        let mut last = BTreeMap::new();
        for r in &records {
            last.insert(r.partition, r.offset);
        }
        let extra: i64 = self
            .end_offsets(topic)
            .iter()
            .map(|(p, &end)| end - last.get(p).map_or(0, |o| o + 1))
            .filter(|&e| e > 0)
            .sum();
        if extra == 0 {
            return records;
        }
        self.console_consume(via, topic, expected + extra as usize, timeout)
    }

    /// The committed records of a topic written by transactions, as a `read_committed` Java
    /// console consumer reads them from the beginning: up to `expected + 1` records, waiting
    /// until `idle` passes without a new one. So one record too many (a duplicate) is read
    /// and caught by `assert_eq!(records.len(), expected)`; aborted records and transaction
    /// markers are not returned (markers take offsets, so [`Cluster::consume_all`]'s count of
    /// extras does not apply to such a topic). Each call waits `idle` at its end.
    ///
    /// The console consumer's idle limit also bounds its wait for the first record, joining
    /// its group included, which on a loaded machine can alone take longer than `idle`: a read
    /// that came back short is made again from the beginning (a new group), up to three
    /// times. One that read a record too many returns at once.
    pub fn consume_committed(
        &self,
        topic: &str,
        expected: usize,
        idle: Duration,
    ) -> Vec<ConsumedRecord> {
        let mut attempt = 1;
        loop {
            let records = self.console_consume_with(
                &self.plaintext(),
                topic,
                expected + 1,
                idle,
                &[("isolation.level", "read_committed")],
            );
            if records.len() >= expected || attempt == 3 {
                return records;
            }
            eprintln!(
                "consume_committed {topic}: {} of {expected} records read (attempt {attempt}): again",
                records.len()
            );
            attempt += 1;
        }
    }

    /// Partition -> log end offset (the offset the next record will get).
    pub fn end_offsets(&self, topic: &str) -> BTreeMap<i32, i64> {
        let wanted: Vec<_> = self
            .describe(topic)
            .iter()
            .map(|p| {
                (
                    kafka_client::TopicPartition::new(topic, p.partition),
                    admin::OffsetSpec::Latest,
                )
            })
            .collect();
        self.admin()
            .list_offsets(&wanted, false, &admin::Options::timeout(TOOL_TIMEOUT))
            .unwrap_or_else(|e| panic!("end offsets of {topic}: {e}"))
            .into_iter()
            .map(|(tp, r)| {
                let o = r.unwrap_or_else(|e| panic!("end offset of {tp}: {e}"));
                (tp.partition, o.offset)
            })
            .collect()
    }

    /// `(topic, partition) -> committed offset` of `group`, from Java's
    /// `kafka-consumer-groups --describe --offsets` (the reference the admin client's tests
    /// compare with).
    pub fn java_group_offsets(&self, group: &str) -> BTreeMap<(String, i32), i64> {
        let out = self.tool_ok(
            "consumer-groups",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--describe",
                "--offsets",
                "--group",
                group,
            ],
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                if cols.len() < 4 || cols[0] != group {
                    return None;
                }
                Some((
                    (cols[1].to_owned(), cols[2].parse().ok()?),
                    cols[3].parse().ok()?,
                ))
            })
            .collect()
    }

    /// Sends `(key, value)` records with the Java console producer (Java's default partitioner,
    /// `acks=all`), in order, and waits until all are acknowledged.
    pub fn java_produce(&self, topic: &str, records: &[(Option<&str>, &str)]) {
        let records: Vec<JavaRecord> = records
            .iter()
            .map(|&(k, v)| JavaRecord::new(k, v))
            .collect();
        self.java_produce_records(topic, &records);
    }

    /// Like [`Cluster::java_produce`], with null values and headers.
    pub fn java_produce_records(&self, topic: &str, records: &[JavaRecord]) {
        self.java_produce_via(&self.plaintext(), topic, records);
    }

    /// [`Cluster::java_produce_records`] through a listener of a [`Cluster::start_secure`]
    /// cluster.
    pub fn java_produce_via(&self, via: &Access, topic: &str, records: &[JavaRecord]) {
        let mut input = String::new();
        let text = |s: &Option<String>, what: &str| -> String {
            match s {
                None => NULL.to_owned(),
                Some(s) => {
                    assert!(
                        !s.contains(['\n', '\r', FIELD, HEADERS, HEADER, HEADER_KV]) && s != NULL,
                        "java_produce cannot send {what} {s:?}: no line breaks or ASCII separators \\x1c-\\x1f"
                    );
                    s.clone()
                }
            }
        };
        for r in records {
            if r.headers.is_empty() {
                input.push_str(NULL);
            }
            for (i, (k, v)) in r.headers.iter().enumerate() {
                if i > 0 {
                    input.push(HEADER);
                }
                input.push_str(&text(&Some(k.clone()), "header key"));
                input.push(HEADER_KV);
                input.push_str(&text(v, "header value"));
            }
            input.push(HEADERS);
            input.push_str(&text(&r.key, "key"));
            input.push(FIELD);
            input.push_str(&text(&r.value, "value"));
            input.push('\n');
        }
        let reader = self.dir.join("producer-reader.properties");
        let mut cmd = Command::new(kafka_script());
        cmd.args([
            "tool",
            "console-producer",
            "--bootstrap-server",
            &via.bootstrap,
            "--topic",
            topic,
            "--reader-config",
            reader.to_str().expect("utf-8 temp dir"),
            "--request-required-acks",
            "all",
        ]);
        if let Some(c) = &via.config {
            cmd.arg("--command-config").arg(c);
        }
        let out = self.run(&mut cmd, Some(input.as_bytes()), TOOL_TIMEOUT);
        // The console producer logs failed sends and still exits 0.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("ERROR"),
            "java console producer to {topic} failed: {stderr}"
        );
    }

    /// Creates or changes a SCRAM user's password (`kafka-configs --alter`, through the
    /// PLAINTEXT listener), for `SCRAM-SHA-256` or `SCRAM-SHA-512`. Brokers apply it within a
    /// moment; new authentications then need the new password.
    pub fn set_scram_password(&self, user: &str, mechanism: &str, password: &str) {
        let config = format!("{mechanism}=[iterations=4096,password={password}]");
        self.tool_ok(
            "configs",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--alter",
                "--add-config",
                &config,
                "--entity-type",
                "users",
                "--entity-name",
                user,
            ],
        );
    }

    /// Runs a Kafka tool (a wrapper name of `scripts/kafka/kafka` such as `topics`, or a fully
    /// qualified class) with Kafka's classpath. Give it `--bootstrap-server`, [`Cluster::bootstrap`].
    pub fn java_tool(&self, tool: &str, args: &[&str]) -> Output {
        self.run(
            Command::new(kafka_script())
                .arg("tool")
                .arg(tool)
                .args(args),
            None,
            TOOL_TIMEOUT,
        )
    }

    // --- internals ---------------------------------------------------------------------------

    fn tool_ok(&self, tool: &str, args: &[&str]) -> Output {
        let out = self.java_tool(tool, args);
        assert!(
            out.status.success(),
            "kafka tool {tool} {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs `kafka --dir DIR ARGS…`, which must succeed.
    fn script(&self, args: &[&str], timeout: Duration) -> Output {
        let out = self.run(
            Command::new(kafka_script())
                .arg("--dir")
                .arg(&self.dir)
                .args(args),
            None,
            timeout,
        );
        assert!(
            out.status.success(),
            "kafka {args:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs a command with stdin and a deadline; kills it (by pid) when the deadline passes.
    fn run(&self, cmd: &mut Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let input = stdin.map(<[u8]>::to_vec);
        let mut pipe_in = child.stdin.take();
        let writer = thread::spawn(move || {
            if let (Some(pipe), Some(input)) = (pipe_in.as_mut(), input) {
                let _ = pipe.write_all(&input);
            }
            drop(pipe_in); // EOF: the console producer then flushes and exits
        });
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = wait_deadline(&mut child, timeout)
            .unwrap_or_else(|| panic!("{what} still running after {timeout:?}: killed"));
        let _ = writer.join();
        Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        }
    }

    /// The console consumer, read again when it read an offset twice: its group member was
    /// fenced (a stalled JVM on a loaded machine) and its partitions, with nothing committed
    /// yet, were read from the start again. A record the log holds twice has two offsets, so
    /// this never hides a duplicate of the producer's.
    fn console_consume(
        &self,
        via: &Access,
        topic: &str,
        max: usize,
        timeout: Duration,
    ) -> Vec<ConsumedRecord> {
        let mut attempt = 1;
        loop {
            let records = self.console_consume_with(via, topic, max, timeout, &[]);
            let mut offsets = std::collections::HashSet::new();
            if records
                .iter()
                .all(|r| offsets.insert((r.partition, r.offset)))
                || attempt == 3
            {
                return records;
            }
            eprintln!(
                "kafka: the console consumer read an offset of {topic} twice (attempt {attempt}): again"
            );
            attempt += 1;
        }
    }

    /// The console consumer with consumer properties of its own.
    fn console_consume_with(
        &self,
        via: &Access,
        topic: &str,
        max: usize,
        timeout: Duration,
        props: &[(&str, &str)],
    ) -> Vec<ConsumedRecord> {
        let format = self.dir.join("consumer-format.properties");
        let mut cmd = Command::new(kafka_script());
        cmd.args([
            "tool",
            "console-consumer",
            "--bootstrap-server",
            &via.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &max.to_string(),
            "--timeout-ms",
            &timeout.as_millis().to_string(),
            "--formatter-config",
            format.to_str().expect("utf-8 temp dir"),
            "--command-property",
            "group.protocol=consumer",
        ]);
        for (k, v) in props {
            cmd.arg("--command-property").arg(format!("{k}={v}"));
        }
        if let Some(c) = &via.config {
            cmd.arg("--command-config").arg(c);
        }
        let out = self.run(
            &mut cmd,
            None,
            // --timeout-ms counts idle time; bound the whole run as well, generously for a
            // loaded machine (a JVM's start and a group join, then reading `max` records).
            timeout + Duration::from_secs(60) + Duration::from_millis(10 * max as u64),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "java console consumer of {topic} failed: {stderr}"
        );
        let stdout = String::from_utf8(out.stdout)
            .expect("the consumer prints escaped ASCII and UTF-8 header keys");
        stdout
            .split_terminator('\n')
            .map(|line| {
                parse_record(line)
                    .unwrap_or_else(|| panic!("unreadable console consumer line {line:?}"))
            })
            .collect()
    }

    fn try_describe(&self, topic: &str) -> Option<Vec<PartitionState>> {
        let mut got = self
            .admin()
            .describe_topics(&[topic], &admin::Options::timeout(TOOL_TIMEOUT))
            .ok()?;
        let d = got.remove(topic)?.ok()?;
        let parts: Vec<PartitionState> = d
            .partitions
            .into_iter()
            .map(|p| PartitionState {
                partition: p.partition,
                leader: p.leader.unwrap_or(-1),
                replicas: p.replicas,
                isr: p.isr,
            })
            .collect();
        (!parts.is_empty()).then_some(parts)
    }

    /// Partitions of `topic` as Java's `kafka-topics --describe` reports them (the reference
    /// the admin client's tests compare with; [`Cluster::describe`] asks our admin client).
    pub fn java_describe(&self, topic: &str) -> Vec<PartitionState> {
        let out = self.tool_ok(
            "topics",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--describe",
                "--topic",
                topic,
            ],
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(parse_partition)
            .collect()
    }

    /// Our admin client on the PLAINTEXT listener.
    pub fn admin(&self) -> &Admin {
        self.admin.get_or_init(|| {
            // Registered (the default): a test's in-process checkpoint finds its connections
            // closed, as it finds every client's.
            let mut props = self.plaintext().properties();
            props.push(("client.id".into(), "crac-tests-admin".into()));
            Admin::from_properties(props).expect("admin client config")
        })
    }

    /// Polls `f` until it returns Some, for up to 60 s.
    fn wait_for<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} (cluster {})",
                self.dir.display()
            );
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Formats the console tools read and write, as properties files: `\uXXXX` escapes carry the
    /// control characters exactly (a command-line `key=value` would be trimmed).
    fn write_tool_configs(&self) {
        let esc = |s: &str| {
            s.chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect::<String>()
        };
        let (field, hs, h, hkv, null) = (
            esc(&FIELD.to_string()),
            esc(&HEADERS.to_string()),
            esc(&HEADER.to_string()),
            esc(&HEADER_KV.to_string()),
            esc(NULL),
        );
        let reader = format!(
            "parse.key=true\nparse.headers=true\nkey.separator={field}\nheaders.delimiter={hs}\n\
             headers.separator={h}\nheaders.key.separator={hkv}\nnull.marker={null}\n"
        );
        // BytesDeserializer prints bytes escaped (\xNN for anything but printable ASCII, and for
        // the backslash itself): nothing in a key or value can look like a separator.
        let bytes = "org.apache.kafka.common.serialization.BytesDeserializer";
        let format = format!(
            "print.timestamp=true\nprint.partition=true\nprint.offset=true\nprint.headers=true\n\
             print.key=true\nprint.value=true\nkey.separator={field}\nline.separator=\\n\n\
             headers.separator={h}\nnull.literal={null}\nkey.deserializer={bytes}\n\
             value.deserializer={bytes}\nheaders.deserializer={bytes}\n"
        );
        std::fs::write(self.dir.join("producer-reader.properties"), reader)
            .expect("write producer config");
        std::fs::write(self.dir.join("consumer-format.properties"), format)
            .expect("write consumer config");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let keep = keep_kafka();
        let panicking = thread::panicking();
        // Data is thrown away: a short grace period, unless the logs should show a clean stop.
        let grace = if keep { "20" } else { "3" };
        let stopped = Command::new(kafka_script())
            .arg("--dir")
            .arg(&self.dir)
            .args(["stop", "--timeout", grace])
            .stdin(Stdio::null())
            .output();
        if !matches!(&stopped, Ok(o) if o.status.success()) {
            eprintln!(
                "kafka: stopping the cluster in {} failed: {stopped:?}",
                self.dir.display()
            );
            return;
        }
        if keep {
            eprintln!(
                "kafka: KEEP_KAFKA=1: cluster directory kept: {}",
                self.dir.display()
            );
        } else if panicking {
            // Keep what explains the failure, not the data.
            for n in 1..=self.brokers {
                let _ = std::fs::remove_dir_all(self.dir.join(format!("data-{n}")));
            }
            eprintln!("kafka: broker logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn keep_kafka() -> bool {
    std::env::var_os("KEEP_KAFKA").is_some_and(|v| v == "1")
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

fn wait_deadline(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// One line of `kafka-topics --describe`: tab-separated `Name: value` fields.
fn parse_partition(line: &str) -> Option<PartitionState> {
    let field = |name: &str| {
        line.split('\t').find_map(|f| {
            f.trim()
                .strip_prefix(name)?
                .strip_prefix(':')
                .map(str::trim)
        })
    };
    let ids =
        |s: &str| -> Vec<i32> { s.split(',').filter_map(|x| x.trim().parse().ok()).collect() };
    Some(PartitionState {
        partition: field("Partition")?.parse().ok()?,
        leader: field("Leader")?.parse().unwrap_or(-1), // "none"
        replicas: ids(field("Replicas")?),
        isr: ids(field("Isr")?),
    })
}

/// One line of the console consumer in the format of `write_tool_configs`:
/// `CreateTime:T␟Partition:P␟Offset:O␟HEADERS␟KEY␟VALUE`.
fn parse_record(line: &str) -> Option<ConsumedRecord> {
    let mut f = line.splitn(6, FIELD);
    let ts = f.next()?;
    let timestamp = if ts == "NO_TIMESTAMP" {
        -1
    } else {
        ts.split_once(':')?.1.parse().ok()?
    };
    let partition = f.next()?.strip_prefix("Partition:")?.parse().ok()?;
    let offset = f.next()?.strip_prefix("Offset:")?.parse().ok()?;
    let headers = match f.next()? {
        "NO_HEADERS" => Vec::new(),
        hs => hs
            .split(HEADER)
            .map(|h| {
                // The key is printed raw, the value escaped (so never holding HEADER).
                let (k, v) = h.split_once(':')?;
                Some((k.to_owned(), unescape(v)?))
            })
            .collect::<Option<Vec<_>>>()?,
    };
    let key = unescape(f.next()?)?;
    let value = unescape(f.next()?)?;
    Some(ConsumedRecord {
        partition,
        offset,
        timestamp,
        key,
        value,
        headers,
    })
}

/// Undoes the escaping of Kafka's `Bytes::toString` (`\xNN` for every byte but printable ASCII
/// other than `\`); `NULL_ESCAPED` is null. None if the text is not such an escape.
fn unescape(s: &str) -> Option<Option<String>> {
    if s == NULL_ESCAPED {
        return Some(None);
    }
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let hex = s.get(i + 2..i + 4)?;
            if b.get(i + 1) != Some(&b'x') {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(Some(String::from_utf8_lossy(&out).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_describe_line() {
        let line = "\tTopic: t3\tPartition: 2\tLeader: 2\tReplicas: 2,3,1\tIsr: 3,1\tElr: \tLastKnownElr: ";
        assert_eq!(
            parse_partition(line),
            Some(PartitionState {
                partition: 2,
                leader: 2,
                replicas: vec![2, 3, 1],
                isr: vec![3, 1]
            })
        );
        let none =
            "\tTopic: t\tPartition: 0\tLeader: none\tReplicas: 1\tIsr: \tElr: \tLastKnownElr: ";
        assert_eq!(parse_partition(none).unwrap().leader, -1);
        assert_eq!(
            parse_partition("Topic: t3\tTopicId: x\tPartitionCount: 3"),
            None
        );
    }

    #[test]
    fn parses_a_consumer_line() {
        let line = "CreateTime:1796275856059\u{1f}Partition:1\u{1f}Offset:0\u{1f}h1:v1\u{1d}h1:v2\u{1d}\
                    h2:\\x00null\\x00\u{1d}h\u{fc}:\u{1d}url:a:b\u{1f}k1\u{1f}val \\xC3\\xBC \\x5C back\\x09tab";
        let r = parse_record(line).unwrap();
        assert_eq!((r.partition, r.offset, r.timestamp), (1, 0, 1796275856059));
        assert_eq!(r.key.as_deref(), Some("k1"));
        assert_eq!(r.value.as_deref(), Some("val ü \\ back\ttab"));
        assert_eq!(
            r.headers,
            vec![
                ("h1".into(), Some("v1".into())),
                ("h1".into(), Some("v2".into())),
                ("h2".into(), None),
                ("hü".into(), Some(String::new())),
                ("url".into(), Some("a:b".into())),
            ]
        );
        let r = parse_record(
            "LogAppendTime:5\u{1f}Partition:0\u{1f}Offset:7\u{1f}NO_HEADERS\u{1f}\\x00null\\x00\u{1f}\\x00null\\x00",
        )
        .unwrap();
        assert_eq!(
            (r.key, r.value, r.headers, r.timestamp),
            (None, None, vec![], 5)
        );
        assert_eq!(unescape("\\x4"), None);
        assert_eq!(unescape("\\q00"), None);
    }
}
