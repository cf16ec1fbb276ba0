//! The consumer's codecs against a real Apache Kafka 4 broker (KRaft, one node on 127.0.0.1,
//! started and stopped by `scripts/kafka/kafka`), over a plain `TcpStream`:
//!
//! - The Java console producer writes records with each codec (gzip, snappy, lz4, zstd). We
//!   fetch them raw (ApiVersions, Metadata, ListOffsets, then Fetch in its oldest, last
//!   name-based and newest id-based versions), check the framing is what we expect of Java
//!   (xerial snappy, LZ4 frames, ...), decompress every batch and find every record.
//! - We produce batches compressed by us: the broker validates each by decompressing it with
//!   Java's codecs, we fetch them back byte for byte, and the Java console consumer reads them.
//! - The classic group protocol: FindCoordinator, JoinGroup (`MEMBER_ID_REQUIRED`, then as leader
//!   with our subscription), SyncGroup with our assignment, Heartbeat, OffsetCommit,
//!   OffsetFetch, LeaveGroup; Java's `kafka-consumer-groups` reads our assignment and our
//!   committed offsets.
//!
//! The first Java batch of each codec is kept in `tests/data/` as a golden vector, decoded
//! without a broker by `java_golden_batches_decode` (regenerate with `CRAC_RS_WRITE_GOLDEN=1`).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kafka_client::testing::protocol::compression::{self, Compression};
use kafka_client::testing::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, PROTOCOL_TYPE, TopicPartitions,
};
use kafka_client::testing::protocol::messages::fetch::{FetchPartition, FetchRequest, FetchTopic};
use kafka_client::testing::protocol::messages::find_coordinator::FindCoordinatorRequest;
use kafka_client::testing::protocol::messages::heartbeat::HeartbeatRequest;
use kafka_client::testing::protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupRequestProtocol,
};
use kafka_client::testing::protocol::messages::leave_group::{LeaveGroupRequest, MemberIdentity};
use kafka_client::testing::protocol::messages::list_offsets::{
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListOffsetsPartition, ListOffsetsRequest,
    ListOffsetsTopic,
};
use kafka_client::testing::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_client::testing::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopics,
};
use kafka_client::testing::protocol::messages::produce::{PartitionProduceData, TopicProduceData};
use kafka_client::testing::protocol::messages::sync_group::{
    SyncGroupRequest, SyncGroupRequestAssignment,
};
use kafka_client::testing::protocol::messages::{
    ApiVersionsRequest, MetadataRequest, ProduceRequest,
};
use kafka_client::testing::protocol::primitives::Uuid;
use kafka_client::testing::protocol::record::{BatchWriter, decode_batches};
use kafka_client::testing::protocol::{
    ApiVersionsTable, ErrorCode, Request, decode_response, encode_frame,
};

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];
const JAVA_RECORDS: usize = 300;
const OUR_RECORDS: usize = 50;
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const GROUP: &str = "crac-rs-codec-group";
const OURS: &str = "ours";

fn java_value(codec: Compression, i: usize) -> String {
    format!("java {codec} record {i:04}: the quick brown fox jumps over the lazy dog")
}

fn our_value(codec: Compression, i: usize) -> String {
    format!("crac-rs {codec} record {i:04}: pack my box with five dozen liquor jugs")
}

fn golden_path(codec: Compression) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/java-4.4.0-{codec}.batch"))
}

// --- record batches ----------------------------------------------------------------------------

/// Splits a fetched `records` field into complete batches (a cut last one is dropped).
fn split_batches(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 12 {
        let len = i32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        if data.len() < 12 + len {
            break;
        }
        out.push(&data[..12 + len]);
        data = &data[12 + len..];
    }
    out
}

fn attributes(batch: &[u8]) -> i16 {
    i16::from_be_bytes(batch[21..23].try_into().unwrap())
}

fn reseal(mut batch: Vec<u8>) -> Vec<u8> {
    let len = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// The uncompressed equivalent of a (compressed) batch, after checking its CRC: what the
/// record decoder reads.
fn inflate(batch: &[u8]) -> Vec<u8> {
    let stored = u32::from_be_bytes(batch[17..21].try_into().unwrap());
    assert_eq!(
        stored,
        crc32c::crc32c(&batch[21..]),
        "CRC of the compressed batch"
    );
    let attrs = attributes(batch);
    let codec = compression::from_attributes(attrs).unwrap();
    let records = compression::decompress(codec, &batch[61..], 64 << 20)
        .unwrap_or_else(|e| panic!("{codec}: {e}"));
    let mut out = batch[..61].to_vec();
    out[21..23].copy_from_slice(&(attrs & !0x07).to_be_bytes());
    out.extend_from_slice(&records);
    reseal(out)
}

/// `batch` (uncompressed, sealed) with its records compressed by `codec`.
fn deflate(batch: &[u8], codec: Compression) -> Vec<u8> {
    let mut out = batch[..61].to_vec();
    let attrs = attributes(batch) | codec.attribute_bits();
    out[21..23].copy_from_slice(&attrs.to_be_bytes());
    compression::compress(codec, &batch[61..], &mut out).unwrap();
    reseal(out)
}

/// Checks the records section is framed as the Java client frames `codec`.
fn assert_java_framing(codec: Compression, records: &[u8]) {
    let prefix: &[u8] = match codec {
        Compression::Gzip => &[0x1f, 0x8b, 0x08],
        Compression::Snappy => b"\x82SNAPPY\0\0\0\0\x01\0\0\0\x01",
        // Magic, FLG (version 1, independent blocks), BD (64 KiB).
        Compression::Lz4 => &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x40],
        Compression::Zstd => &[0x28, 0xb5, 0x2f, 0xfd],
        Compression::None => &[],
    };
    assert!(
        records.starts_with(prefix),
        "{codec}: {:02x?}",
        &records[..16]
    );
}

/// Decodes a Java-written batch and returns its (offset, value) pairs.
fn java_batch_values(codec: Compression, batch: &[u8]) -> Vec<(i64, String)> {
    assert_eq!(
        attributes(batch) & 0x07,
        codec.attribute_bits(),
        "codec bits"
    );
    assert_java_framing(codec, &batch[61..]);
    let batches = decode_batches(&inflate(batch)).unwrap();
    assert_eq!(batches.len(), 1);
    batches[0]
        .records
        .iter()
        .map(|r| {
            let value = String::from_utf8(r.value.clone().expect("a value").to_vec()).unwrap();
            (r.offset, value)
        })
        .collect()
}

#[test]
fn java_golden_batches_decode() {
    for codec in CODECS {
        let batch = fs::read(golden_path(codec)).unwrap();
        let values = java_batch_values(codec, &batch);
        assert!(values.len() > 10, "{codec}: {} records", values.len());
        for (offset, value) in values {
            assert_eq!(value, java_value(codec, offset as usize), "{codec}");
        }
        // Every prefix of the compressed records is an error or a shorter valid stream (snappy
        // between chunks), never a panic.
        for cut in 61..batch.len() {
            let _ = compression::decompress(codec, &batch[61..cut], 1 << 20);
        }
    }
}

// --- a broker ----------------------------------------------------------------------------------

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/kafka")
}

/// Runs `scripts/kafka/kafka ARGS` for the cluster in `dir`, with `stdin` from a file; panics
/// with its output on failure or after [`TOOL_TIMEOUT`]. Returns stdout.
fn kafka(dir: &Path, args: &[&str], stdin: Option<&Path>) -> String {
    // The tool's output goes beside the cluster directory, which must be empty or a cluster's.
    let work = dir.with_extension("tools");
    fs::create_dir_all(&work).unwrap();
    let out_path = work.join("tool.out");
    let err_path = work.join("tool.err");
    let mut cmd = Command::new(script());
    cmd.arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .stdin(match stdin {
            Some(p) => Stdio::from(File::open(p).unwrap()),
            None => Stdio::null(),
        });
    let mut child = cmd.spawn().expect("scripts/kafka/kafka runs");
    let deadline = Instant::now() + TOOL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kafka {args:?} timed out");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = fs::read_to_string(&out_path).unwrap();
    let err = fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "kafka {args:?}: {status}\n{out}\n{err}");
    out
}

/// A one-node cluster, stopped (by the script, which kills by pid) when dropped.
struct Broker {
    dir: PathBuf,
    bootstrap: String,
}

impl Broker {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "crac-rs-kafka-client-codecs-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        let mut broker = Broker {
            dir,
            bootstrap: String::new(),
        };
        let pid = std::process::id().to_string();
        let out = kafka(
            &broker.dir,
            &["start", "--brokers", "1", "--owner", &pid],
            None,
        );
        broker.bootstrap = out
            .lines()
            .last()
            .filter(|l| l.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no bootstrap servers in {out:?}"))
            .to_owned();
        broker
    }

    fn tool(&self, args: &[&str]) -> String {
        let mut all = args.to_vec();
        all.extend(["--bootstrap-server", &self.bootstrap]);
        kafka(&self.dir, &all, None)
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        let p = partitions.to_string();
        self.tool(&["topics", "--create", "--topic", name, "--partitions", &p]);
    }

    fn java_produce(&self, topic: &str, codec: Compression, values: &[String]) {
        let input = self.dir.with_extension("tools").join("input.txt");
        fs::write(&input, values.join("\n") + "\n").unwrap();
        // `--compression-codec`: the tool overrides a `compression.type` property with it.
        let codec = codec.to_string();
        let args = [
            "console-producer",
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--compression-codec",
            &codec,
            "--command-property",
            "linger.ms=100",
        ];
        kafka(&self.dir, &args, Some(&input));
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let stopped = Command::new(script())
            .arg("--dir")
            .arg(&self.dir)
            .args(["stop", "--timeout", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(self.dir.with_extension("tools"));
        if stopped.is_ok_and(|s| s.success()) && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// --- a raw client ------------------------------------------------------------------------------

struct Conn {
    stream: TcpStream,
    correlation_id: i32,
    versions: ApiVersionsTable,
}

impl Conn {
    fn connect(bootstrap: &str) -> Self {
        let stream = TcpStream::connect(bootstrap).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut conn = Conn {
            stream,
            correlation_id: 0,
            versions: ApiVersionsTable::default(),
        };
        let resp = conn.call(
            &ApiVersionsRequest::default(),
            ApiVersionsRequest::MAX_VERSION,
        );
        assert_eq!(resp.error_code, ErrorCode::None);
        conn.versions = resp.table();
        conn
    }

    fn version<R: Request>(&self) -> i16 {
        self.versions.negotiate(R::API_KEY, R::versions()).unwrap()
    }

    fn call<R: Request>(&mut self, request: &R, version: i16) -> R::Response {
        self.correlation_id += 1;
        let frame = encode_frame(request, version, self.correlation_id, Some("crac-rs-test"));
        self.stream.write_all(&frame).unwrap();
        let mut size = [0; 4];
        self.stream.read_exact(&mut size).unwrap();
        let mut body = vec![0; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).unwrap();
        decode_response::<R>(&body, version, self.correlation_id)
            .unwrap_or_else(|e| panic!("{} v{version}: {e}", R::API_KEY))
    }

    fn call_latest<R: Request>(&mut self, request: &R) -> R::Response {
        let v = self.version::<R>();
        self.call(request, v)
    }

    /// Topic ids by name.
    fn topic_ids(&mut self, topics: &[&str]) -> Vec<Uuid> {
        let req = MetadataRequest {
            topics: Some(topics.iter().map(|t| t.to_string()).collect()),
            allow_auto_topic_creation: false,
        };
        let resp = self.call_latest(&req);
        topics
            .iter()
            .map(|name| {
                let t = resp
                    .topics
                    .iter()
                    .find(|t| t.name.as_deref() == Some(name))
                    .unwrap();
                assert_eq!(t.error_code, ErrorCode::None, "{name}");
                assert_ne!(t.topic_id, Uuid::default());
                t.topic_id
            })
            .collect()
    }

    /// `(earliest, latest)` offsets of a partition.
    fn offsets(&mut self, topic: &str, partition: i32) -> (i64, i64) {
        let mut got = Vec::new();
        for timestamp in [EARLIEST_TIMESTAMP, LATEST_TIMESTAMP] {
            let req = ListOffsetsRequest {
                isolation_level: Default::default(),
                topics: vec![ListOffsetsTopic {
                    name: topic.into(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: partition,
                        current_leader_epoch: -1,
                        timestamp,
                    }],
                }],
                timeout_ms: 10_000,
            };
            let resp = self.call_latest(&req);
            let p = &resp.topics[0].partitions[0];
            assert_eq!(p.error_code, ErrorCode::None);
            got.push(p.offset);
        }
        (got[0], got[1])
    }

    /// Every complete batch of a partition from offset 0 to `end`, fetched in `version`.
    fn fetch_all(
        &mut self,
        version: i16,
        topic: &str,
        topic_id: Uuid,
        partition: i32,
        end: i64,
    ) -> Vec<Vec<u8>> {
        let mut batches = Vec::new();
        let mut offset = 0;
        for _ in 0..50 {
            if offset >= end {
                return batches;
            }
            let req = FetchRequest {
                max_wait_ms: 100,
                // Small enough that the broker cuts a batch short now and then.
                max_bytes: 4000,
                topics: vec![FetchTopic {
                    topic: topic.into(),
                    topic_id,
                    partitions: vec![FetchPartition {
                        partition,
                        current_leader_epoch: -1,
                        fetch_offset: offset,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: 4000,
                    }],
                }],
                ..FetchRequest::default()
            };
            let resp = self.call(&req, version);
            assert_eq!(resp.error_code, ErrorCode::None);
            let t = &resp.responses[0];
            if FetchRequest::uses_topic_ids(version) {
                assert_eq!(t.topic_id, topic_id);
            } else {
                assert_eq!(t.topic, topic);
            }
            let p = &t.partitions[0];
            assert_eq!(
                (p.partition_index, p.error_code),
                (partition, ErrorCode::None)
            );
            assert_eq!(p.high_watermark, end);
            for batch in split_batches(p.records.as_deref().unwrap_or_default()) {
                let base = i64::from_be_bytes(batch[..8].try_into().unwrap());
                let last_delta = i32::from_be_bytes(batch[23..27].try_into().unwrap());
                if base + last_delta as i64 >= offset {
                    offset = base + last_delta as i64 + 1;
                    batches.push(batch.to_vec());
                }
            }
        }
        panic!("{topic}-{partition}: stuck at offset {offset} of {end}");
    }
}

#[test]
fn codecs_and_consumer_messages_against_a_real_broker() {
    let broker = Broker::start();
    for codec in CODECS {
        broker.create_topic(&format!("java-{codec}"), 1);
    }
    broker.create_topic(OURS, CODECS.len() as u32);
    for codec in CODECS {
        let values: Vec<String> = (0..JAVA_RECORDS).map(|i| java_value(codec, i)).collect();
        broker.java_produce(&format!("java-{codec}"), codec, &values);
    }

    let mut conn = Conn::connect(&broker.bootstrap);
    let fetch_max = conn.version::<FetchRequest>();
    assert_eq!(
        fetch_max,
        FetchRequest::MAX_VERSION,
        "Kafka 4 speaks Fetch 17"
    );

    // Java's batches, in the oldest, the last name-based and the newest id-based Fetch.
    for codec in CODECS {
        let topic = format!("java-{codec}");
        let id = conn.topic_ids(&[&topic])[0];
        assert_eq!(conn.offsets(&topic, 0), (0, JAVA_RECORDS as i64));
        for version in [FetchRequest::MIN_VERSION, 12, fetch_max] {
            let batches = conn.fetch_all(version, &topic, id, 0, JAVA_RECORDS as i64);
            let mut values = Vec::new();
            for batch in &batches {
                values.extend(java_batch_values(codec, batch));
            }
            let want: Vec<_> = (0..JAVA_RECORDS)
                .map(|i| (i as i64, java_value(codec, i)))
                .collect();
            assert_eq!(values, want, "{codec} v{version}");
            if version == fetch_max && std::env::var_os("CRAC_RS_WRITE_GOLDEN").is_some() {
                fs::create_dir_all(golden_path(codec).parent().unwrap()).unwrap();
                fs::write(golden_path(codec), &batches[0]).unwrap();
            }
        }
    }

    // Our batches: the broker validates them with Java's codecs.
    let ours_id = conn.topic_ids(&[OURS])[0];
    for (partition, codec) in CODECS.into_iter().enumerate() {
        let mut w = BatchWriter::new(1024, Compression::None);
        for i in 0..OUR_RECORDS {
            let value = our_value(codec, i);
            w.append(
                1_700_000_000_000 + i as i64,
                None,
                Some(value.as_bytes()),
                &[],
            );
        }
        let batch = deflate(&w.seal(-1, -1, -1).to_vec(), codec);
        let req = ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![TopicProduceData {
                name: OURS,
                partitions: vec![PartitionProduceData {
                    index: partition as i32,
                    records: batch[..].into(),
                }],
            }],
        };
        let resp = conn.call_latest(&req);
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            p.error_code,
            ErrorCode::None,
            "{codec}: {:?}",
            p.error_message
        );
        assert_eq!(p.base_offset, 0);
        // Stored as sent: the same compressed bytes come back.
        let fetched = conn.fetch_all(fetch_max, OURS, ours_id, partition as i32, 50);
        assert_eq!(fetched.len(), 1);
        assert_eq!(fetched[0][21..], batch[21..], "{codec}");
    }
    let out = broker.tool(&[
        "console-consumer",
        "--topic",
        OURS,
        "--from-beginning",
        "--max-messages",
        &(OUR_RECORDS * CODECS.len()).to_string(),
        "--timeout-ms",
        "60000",
    ]);
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let mut want: Vec<String> = CODECS
        .iter()
        .flat_map(|&c| (0..OUR_RECORDS).map(move |i| our_value(c, i)))
        .collect();
    want.sort_unstable();
    assert_eq!(got, want, "what Java's consumer read of our batches");

    classic_group_protocol(&broker, &mut conn);
}

/// One member through the classic group protocol, with Java's tools reading what it wrote.
fn classic_group_protocol(broker: &Broker, conn: &mut Conn) {
    let resp = conn.call_latest(&FindCoordinatorRequest::group(GROUP));
    let c = &resp.coordinators[0];
    assert_eq!((c.key.as_str(), c.error_code), (GROUP, ErrorCode::None));
    assert_eq!(format!("{}:{}", c.host, c.port), broker.bootstrap);

    let subscription = ConsumerProtocolSubscription {
        topics: vec![OURS.into()],
        ..Default::default()
    };
    let mut join = JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: 30_000,
        rebalance_timeout_ms: 30_000,
        member_id: String::new(),
        group_instance_id: None,
        protocol_type: PROTOCOL_TYPE.into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: subscription.encode(ConsumerProtocolSubscription::VERSION),
        }],
        reason: Some("codec test".into()),
    };
    let resp = conn.call_latest(&join);
    assert_eq!(resp.error_code, ErrorCode::MemberIdRequired);
    assert!(!resp.member_id.is_empty());
    join.member_id = resp.member_id;
    let joined = conn.call_latest(&join);
    assert_eq!(joined.error_code, ErrorCode::None);
    assert!(joined.is_leader());
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    assert_eq!(
        ConsumerProtocolSubscription::decode(&joined.members[0].metadata).unwrap(),
        subscription
    );

    let assignment = ConsumerProtocolAssignment {
        assigned_partitions: vec![TopicPartitions {
            topic: OURS.into(),
            partitions: (0..CODECS.len() as i32).collect(),
        }],
        user_data: None,
    };
    let sync = SyncGroupRequest {
        group_id: GROUP.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        group_instance_id: None,
        protocol_type: Some(PROTOCOL_TYPE.into()),
        protocol_name: joined.protocol_name.clone(),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: joined.member_id.clone(),
            assignment: assignment.encode(ConsumerProtocolAssignment::VERSION),
        }],
    };
    let synced = conn.call_latest(&sync);
    assert_eq!(synced.error_code, ErrorCode::None);
    assert_eq!(
        ConsumerProtocolAssignment::decode(&synced.assignment).unwrap(),
        assignment
    );
    let beat = HeartbeatRequest {
        group_id: GROUP.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        group_instance_id: None,
    };
    assert_eq!(conn.call_latest(&beat).error_code, ErrorCode::None);

    // Java reads our assignment out of the group.
    let out = broker.tool(&[
        "consumer-groups",
        "--describe",
        "--group",
        GROUP,
        "--members",
        "--verbose",
    ]);
    let line = out
        .lines()
        .find(|l| l.contains(&joined.member_id))
        .unwrap_or_else(|| panic!("our member in {out}"));
    assert!(line.contains("crac-rs-test"), "{line}");
    assert!(line.contains(&format!("{OURS}:0,1,2,3")), "{line}");

    let commit = OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: joined.generation_id,
        member_id: joined.member_id.clone(),
        group_instance_id: None,
        topics: vec![OffsetCommitRequestTopic {
            name: OURS.into(),
            partitions: (0..CODECS.len() as i32)
                .map(|p| OffsetCommitRequestPartition {
                    partition_index: p,
                    committed_offset: 10 + p as i64,
                    committed_leader_epoch: -1,
                    committed_metadata: None,
                })
                .collect(),
        }],
    };
    let resp = conn.call_latest(&commit);
    for p in &resp.topics[0].partitions {
        assert_eq!(p.error_code, ErrorCode::None);
    }
    let topics = vec![OffsetFetchRequestTopics {
        name: OURS.into(),
        partition_indexes: (0..CODECS.len() as i32).collect(),
    }];
    let resp = conn.call_latest(&OffsetFetchRequest::group(GROUP, Some(topics), true));
    let g = &resp.groups[0];
    assert_eq!(
        (g.group_id.as_str(), g.error_code),
        (GROUP, ErrorCode::None)
    );
    let mut committed: Vec<_> = g.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        .collect();
    committed.sort_unstable_by_key(|c| c.0);
    let want: Vec<_> = (0..CODECS.len() as i32)
        .map(|p| (p, 10 + p as i64, ErrorCode::None))
        .collect();
    assert_eq!(committed, want);

    let leave = LeaveGroupRequest {
        group_id: GROUP.into(),
        members: vec![MemberIdentity {
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            reason: Some("checkpoint".into()),
        }],
    };
    let resp = conn.call_latest(&leave);
    assert_eq!(resp.error_code, ErrorCode::None);
    assert_eq!(resp.members.len(), 1);
    assert_eq!(resp.members[0].error_code, ErrorCode::None);

    // The group is empty now (no consumer id), and Java reads our committed offsets.
    let out = broker.tool(&["consumer-groups", "--describe", "--group", GROUP]);
    for p in 0..CODECS.len() {
        let row = out
            .lines()
            .find(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1] == OURS && cols[2] == p.to_string()
            })
            .unwrap_or_else(|| panic!("partition {p} in {out}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[3], (10 + p).to_string(), "{row}");
        assert_eq!(cols[6], "-", "no member owns it any more: {row}");
    }
}
