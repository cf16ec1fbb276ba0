//! A fake Kafka cluster for tests of error paths, built from the crate's own message codecs
//! (the request decoders and response encoders the protocol modules keep for this): each node
//! listens on 127.0.0.1 and answers ApiVersions, Metadata, InitProducerId, Produce,
//! FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! ListOffsets, OffsetForLeaderEpoch, Fetch, and the transactional AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn.
//!
//! A simple model answers by default: topics with a leader and a leader epoch per partition,
//! logs that Produce appends to (with the broker's idempotence checks, per partition: a
//! duplicate sequence is acknowledged without a second write, a gap is
//! `OUT_OF_ORDER_SEQUENCE_NUMBER`, an older epoch `INVALID_PRODUCER_EPOCH`, a newer one must
//! start at sequence 0 (KIP-360's epoch bump), an id never handed out `UNKNOWN_PRODUCER_ID`;
//! InitProducerId without a transactional id hands out a new id, as a real broker does; with
//! one, the id's producer id with the next epoch, which fences the older ones: every
//! transactional request with an older epoch gets `PRODUCER_FENCED`, a transactional batch for
//! a partition not added to the transaction `INVALID_TXN_STATE`, and offsets sent to a
//! transaction are committed at its EndTxn(commit)), Fetch and ListOffsets over those logs, a
//! one-member consumer group on node 0 (classic), and a one-member group of the KIP-848
//! protocol (ConsumerGroupHeartbeat: a member joining with epoch 0 gets every partition of its
//! subscription and the next epoch). A test's script overrides any request: [`FakeCluster::on`] gets each
//! matching request with the model's answer and returns what to do instead: reply with
//! something else, delay, cut the response mid-frame, close the connection with the
//! request in flight, or never answer. Every request is logged for assertions.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_client::testing::protocol::messages::add_offsets_to_txn::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
};
use kafka_client::testing::protocol::messages::add_partitions_to_txn::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use kafka_client::testing::protocol::messages::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicIdPartitions,
};
use kafka_client::testing::protocol::messages::end_txn::{EndTxnRequest, EndTxnResponse};
use kafka_client::testing::protocol::messages::fetch::{
    FetchPartitionData, FetchRequest, FetchResponse, FetchableTopicResponse, LeaderIdAndEpoch,
};
use kafka_client::testing::protocol::messages::find_coordinator::{
    Coordinator, FindCoordinatorRequest, FindCoordinatorResponse,
};
use kafka_client::testing::protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use kafka_client::testing::protocol::messages::init_producer_id::{
    InitProducerIdRequest, InitProducerIdResponse,
};
use kafka_client::testing::protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember,
};
use kafka_client::testing::protocol::messages::leave_group::{
    LeaveGroupRequest, LeaveGroupResponse, MemberResponse,
};
use kafka_client::testing::protocol::messages::list_offsets::{
    EARLIEST_TIMESTAMP, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse,
};
use kafka_client::testing::protocol::messages::metadata::{
    MetadataBroker, MetadataPartition, MetadataTopic,
};
use kafka_client::testing::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
};
use kafka_client::testing::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopics, OffsetFetchResponse, OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_client::testing::protocol::messages::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};
use kafka_client::testing::protocol::messages::produce::{
    PartitionProduceResponse, ProduceRequest, TopicProduceResponse,
};
use kafka_client::testing::protocol::messages::sync_group::{SyncGroupRequest, SyncGroupResponse};
use kafka_client::testing::protocol::messages::txn_offset_commit::{
    TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetCommitTopicResult,
};
use kafka_client::testing::protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse, ProduceResponse,
    api_versions::ApiVersion,
};
use kafka_client::testing::protocol::primitives::{Reader, Uuid};
use kafka_client::testing::protocol::record::{BATCH_HEADER_SIZE, RecordBatch};
use kafka_client::testing::protocol::{ApiKey, ErrorCode, Request, RequestHeader, ResponseHeader};

/// A decoded request.
#[derive(Debug, Clone)]
pub enum Req {
    ApiVersions(ApiVersionsRequest),
    Metadata(MetadataRequest),
    InitProducerId(InitProducerIdRequest),
    Produce(Produce),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    EndTxn(EndTxnRequest),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
}

/// A Produce request, owned.
#[derive(Debug, Clone)]
pub struct Produce {
    pub transactional_id: Option<String>,
    pub acks: i16,
    /// (topic, partition, records).
    pub partitions: Vec<(String, i32, Vec<u8>)>,
}

impl Produce {
    /// The batches sent, decoded (each partition's records hold one batch from our producer).
    pub fn batches(&self) -> Vec<(String, i32, RecordBatch)> {
        self.partitions
            .iter()
            .flat_map(|(t, p, data)| {
                kafka_client::testing::protocol::record::decode_batches(data)
                    .unwrap()
                    .into_iter()
                    .map(move |b| (t.clone(), *p, b))
            })
            .collect()
    }
}

/// A response.
#[derive(Debug, Clone)]
pub enum Resp {
    ApiVersions(ApiVersionsResponse),
    Metadata(MetadataResponse),
    InitProducerId(InitProducerIdResponse),
    Produce(ProduceResponse),
    Fetch(FetchResponse),
    ListOffsets(ListOffsetsResponse),
    FindCoordinator(FindCoordinatorResponse),
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    LeaveGroup(LeaveGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    OffsetFetch(OffsetFetchResponse),
    OffsetForLeaderEpoch(OffsetForLeaderEpochResponse),
    AddPartitionsToTxn(AddPartitionsToTxnResponse),
    AddOffsetsToTxn(AddOffsetsToTxnResponse),
    TxnOffsetCommit(TxnOffsetCommitResponse),
    EndTxn(EndTxnResponse),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse),
}

/// One request as the cluster saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub node: i32,
    pub conn: u64,
    pub at: Instant,
    pub version: i16,
    pub req: Req,
}

impl Seen {
    pub fn api(&self) -> ApiKey {
        api_of(&self.req)
    }
}

fn api_of(req: &Req) -> ApiKey {
    match req {
        Req::ApiVersions(_) => ApiKey::ApiVersions,
        Req::Metadata(_) => ApiKey::Metadata,
        Req::InitProducerId(_) => ApiKey::InitProducerId,
        Req::Produce(_) => ApiKey::Produce,
        Req::Fetch(_) => ApiKey::Fetch,
        Req::ListOffsets(_) => ApiKey::ListOffsets,
        Req::FindCoordinator(_) => ApiKey::FindCoordinator,
        Req::JoinGroup(_) => ApiKey::JoinGroup,
        Req::SyncGroup(_) => ApiKey::SyncGroup,
        Req::Heartbeat(_) => ApiKey::Heartbeat,
        Req::LeaveGroup(_) => ApiKey::LeaveGroup,
        Req::OffsetCommit(_) => ApiKey::OffsetCommit,
        Req::OffsetFetch(_) => ApiKey::OffsetFetch,
        Req::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
        Req::AddPartitionsToTxn(_) => ApiKey::AddPartitionsToTxn,
        Req::AddOffsetsToTxn(_) => ApiKey::AddOffsetsToTxn,
        Req::TxnOffsetCommit(_) => ApiKey::TxnOffsetCommit,
        Req::EndTxn(_) => ApiKey::EndTxn,
        Req::ConsumerGroupHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat,
    }
}

/// What to do with a request.
#[derive(Debug)]
pub enum Action {
    /// Answer this.
    Reply(Resp),
    /// Wait, then do the rest (the connection answers nothing else meanwhile, as a broker
    /// answers in order).
    Delay(Duration, Box<Action>),
    /// Write the first half of the response frame, then close the connection.
    Cut(Resp),
    /// Close the connection without answering (this request and any other in flight on it
    /// are lost).
    Close,
    /// Never answer (the request stays in flight until the client gives up).
    Hold,
}

type Script = Box<dyn FnMut(&Seen, Resp) -> Action + Send>;

struct Rule {
    api: ApiKey,
    remaining: usize,
    script: Script,
}

/// One partition of the model.
#[derive(Debug, Default)]
pub struct PartitionModel {
    pub leader: i32,
    pub leader_epoch: i32,
    /// Batches as written, with their base offsets.
    pub batches: Vec<Vec<u8>>,
    pub end_offset: i64,
    /// Per producer id: epoch and the last batches' (first sequence, base offset), newest
    /// last; the sequence the next batch must have.
    producers: HashMap<i64, ProducerState>,
    /// Errors the next Produce requests for this partition get, without writing anything
    /// ([`FakeCluster::fail_produce`]).
    pub produce_errors: std::collections::VecDeque<ErrorCode>,
}

#[derive(Debug, Default)]
struct ProducerState {
    epoch: i16,
    next_seq: i32,
    recent: Vec<(i32, i64)>,
}

/// A transactional id's state on its coordinator.
#[derive(Debug, Default, Clone)]
pub struct TxnModel {
    pub producer_id: i64,
    pub epoch: i16,
    /// Partitions of the open transaction.
    pub partitions: Vec<(String, i32)>,
    /// Groups whose offsets the open transaction commits.
    pub groups: Vec<String>,
    /// Offsets sent to the open transaction: committed at its commit.
    pub offsets: Vec<((String, i32), i64)>,
    /// Transactions committed and aborted.
    pub commits: u32,
    pub aborts: u32,
}

/// The cluster's state, which tests may read and change.
#[derive(Debug, Default)]
pub struct Model {
    /// Transactional ids.
    pub transactions: HashMap<String, TxnModel>,
    pub topics: HashMap<String, (Uuid, Vec<PartitionModel>)>,
    /// Producer ids handed out, with their current epoch.
    pub producer_ids: HashMap<i64, i16>,
    next_producer_id: i64,
    /// API versions by key: (min, max).
    pub versions: HashMap<i16, (i16, i16)>,
    /// Committed offsets of the group.
    pub committed: HashMap<(String, i32), i64>,
    /// The leader epochs committed with them.
    pub committed_epochs: HashMap<(String, i32), i32>,
    pub generation: i32,
    pub members: u64,
    /// The partitions the one member is given: every partition of the topics it subscribes.
    last_subscription: Vec<u8>,
    /// The consumer group protocol's group epoch (the one member's epoch).
    pub member_epoch: i32,
    /// The heartbeat interval it asks for (ms; 100 by default).
    pub heartbeat_interval_ms: i32,
}

struct Inner {
    model: Mutex<Model>,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Seen>>,
    logged: Condvar,
    ports: Mutex<Vec<u16>>,
    conns: AtomicU64,
    stop: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

/// A fake cluster of `n` nodes (ids 0..n).
pub struct FakeCluster {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl FakeCluster {
    /// Starts `nodes` listeners on 127.0.0.1.
    pub fn start(nodes: usize) -> Self {
        let mut model = Model {
            next_producer_id: 1000,
            heartbeat_interval_ms: 100,
            ..Model::default()
        };
        for (key, min, max) in [
            (ApiKey::Produce, 3, 12),
            (ApiKey::Fetch, 4, 17),
            (ApiKey::ListOffsets, 1, 10),
            (ApiKey::Metadata, 4, 12),
            (ApiKey::OffsetCommit, 2, 9),
            (ApiKey::OffsetFetch, 1, 9),
            (ApiKey::OffsetForLeaderEpoch, 2, 4),
            (ApiKey::FindCoordinator, 0, 6),
            (ApiKey::JoinGroup, 0, 9),
            (ApiKey::Heartbeat, 0, 4),
            (ApiKey::LeaveGroup, 0, 5),
            (ApiKey::SyncGroup, 0, 5),
            (ApiKey::ApiVersions, 0, 4),
            (ApiKey::InitProducerId, 0, 5),
            (ApiKey::AddPartitionsToTxn, 0, 3),
            (ApiKey::AddOffsetsToTxn, 0, 4),
            (ApiKey::TxnOffsetCommit, 0, 4),
            (ApiKey::EndTxn, 0, 4),
            (ApiKey::ConsumerGroupHeartbeat, 0, 1),
        ] {
            model.versions.insert(key.code(), (min, max));
        }
        let inner = Arc::new(Inner {
            model: Mutex::new(model),
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            logged: Condvar::new(),
            ports: Mutex::new(Vec::new()),
            conns: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let mut threads = Vec::new();
        for node in 0..nodes as i32 {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
            inner
                .ports
                .lock()
                .unwrap()
                .push(listener.local_addr().unwrap().port());
            let inner = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fake-broker-{node}"))
                    .spawn(move || accept_loop(listener, node, inner))
                    .unwrap(),
            );
        }
        Self { inner, threads }
    }

    /// `bootstrap.servers` for node 0.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.inner.ports.lock().unwrap()[0])
    }

    /// A topic of `partitions` partitions, leaders spread over the nodes, epoch 0.
    pub fn create_topic(&self, name: &str, partitions: usize) {
        let nodes = self.inner.ports.lock().unwrap().len() as i32;
        let mut m = self.inner.model.lock().unwrap();
        let id = Uuid([m.topics.len() as u8 + 1; 16]);
        let parts = (0..partitions as i32)
            .map(|p| PartitionModel {
                leader: p % nodes,
                ..PartitionModel::default()
            })
            .collect();
        m.topics.insert(name.to_owned(), (id, parts));
    }

    /// Reads or changes the model.
    pub fn model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.inner.model.lock().unwrap())
    }

    /// Moves a partition's leadership.
    pub fn set_leader(&self, topic: &str, partition: i32, leader: i32, epoch: i32) {
        self.model(|m| {
            let p = &mut m.topics.get_mut(topic).unwrap().1[partition as usize];
            p.leader = leader;
            p.leader_epoch = epoch;
        });
    }

    /// The next `codes.len()` Produce requests for the partition are answered with these
    /// errors, in order, and write nothing (unlike a script over the model's answer, which
    /// has already written).
    pub fn fail_produce(&self, topic: &str, partition: i32, codes: &[ErrorCode]) {
        self.model(|m| {
            let p = &mut m.topics.get_mut(topic).unwrap().1[partition as usize];
            p.produce_errors.extend(codes.iter().copied());
        });
    }

    /// The (producer id, epoch, base sequence) of every batch sent to a partition, in order
    /// (retries included).
    pub fn produced_sequences(&self, topic: &str, partition: i32) -> Vec<(i64, i16, i32)> {
        self.seen(ApiKey::Produce)
            .iter()
            .filter_map(|s| match &s.req {
                Req::Produce(p) => Some(p.batches()),
                _ => None,
            })
            .flatten()
            .filter(|(t, p, _)| t == topic && *p == partition)
            .map(|(_, _, b)| (b.producer_id, b.producer_epoch, b.base_sequence))
            .collect()
    }

    /// Drops the partition's state of every producer, as a broker does for a producer idle
    /// longer than `producer.id.expiration.ms`: the next batch of each may carry any sequence.
    pub fn forget_producers(&self, topic: &str, partition: i32) {
        self.model(|m| {
            m.topics.get_mut(topic).unwrap().1[partition as usize]
                .producers
                .clear();
        });
    }

    /// An unclean leader election: `leader` leads in `epoch` with the partition's log cut at
    /// `offset` (a batch boundary), lacking the records from there on. One step, as in a
    /// broker: a fetch between a cut and a leader change made apart would find the old
    /// leader's log shorter than its position and be reset as out of range.
    pub fn elect_unclean(&self, topic: &str, partition: i32, offset: i64, leader: i32, epoch: i32) {
        self.model(|m| {
            let p = &mut m.topics.get_mut(topic).unwrap().1[partition as usize];
            p.batches.retain(|b| be_i64(b, 0) < offset);
            p.end_offset = offset;
            p.leader = leader;
            p.leader_epoch = epoch;
        });
    }

    /// Records in a partition's log, in order.
    pub fn records(&self, topic: &str, partition: i32) -> Vec<Vec<u8>> {
        self.model(|m| {
            m.topics[topic].1[partition as usize]
                .batches
                .iter()
                .flat_map(|b| kafka_client::testing::protocol::record::decode_batches(b).unwrap())
                .flat_map(|b| b.records)
                .map(|r| r.value.unwrap_or_default().to_vec())
                .collect()
        })
    }

    /// Appends a batch (from [`RecordBatch::encode`] or a `BatchWriter`) to a partition,
    /// giving it the next offsets.
    pub fn append(&self, topic: &str, partition: i32, batch: &[u8]) {
        self.model(|m| {
            let p = &mut m.topics.get_mut(topic).unwrap().1[partition as usize];
            append_batch(p, batch);
        });
    }

    /// Overrides the next `times` requests of `api` (`usize::MAX`: all of them): `script`
    /// gets each with the model's answer and says what to do. Rules are tried in the order
    /// added; a request no rule takes gets the model's answer.
    pub fn on(
        &self,
        api: ApiKey,
        times: usize,
        script: impl FnMut(&Seen, Resp) -> Action + Send + 'static,
    ) {
        self.inner.rules.lock().unwrap().push(Rule {
            api,
            remaining: times,
            script: Box::new(script),
        });
    }

    /// Drops every rule.
    pub fn clear_rules(&self) {
        self.inner.rules.lock().unwrap().clear();
    }

    /// Every request of `api` seen so far.
    pub fn seen(&self, api: ApiKey) -> Vec<Seen> {
        self.inner
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.api() == api)
            .cloned()
            .collect()
    }

    /// Waits until `n` requests of `api` were seen; panics after `timeout`.
    pub fn wait_for(&self, api: ApiKey, n: usize, timeout: Duration) -> Vec<Seen> {
        let deadline = Instant::now() + timeout;
        let mut log = self.inner.log.lock().unwrap();
        loop {
            let seen: Vec<Seen> = log.iter().filter(|s| s.api() == api).cloned().collect();
            if seen.len() >= n {
                return seen;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{n} {api:?} requests not seen within {timeout:?} (saw {})",
                seen.len()
            );
            log = self.inner.logged.wait_timeout(log, left).unwrap().0;
        }
    }

    /// Closes every open connection (the client sees them all drop).
    pub fn drop_connections(&self) {
        for s in self.inner.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// How many connections are open now.
    pub fn open_connections(&self) -> usize {
        let mut open = self.inner.open.lock().unwrap();
        open.retain(|s| s.peer_addr().is_ok() && !peer_closed(s));
        open.len()
    }
}

fn peer_closed(s: &TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut b = [0u8; 1];
    let closed = matches!(s.peek(&mut b), Ok(0));
    let _ = s.set_nonblocking(false);
    closed
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        for port in self.inner.ports.lock().unwrap().iter() {
            let _ = TcpStream::connect(("127.0.0.1", *port)); // wakes accept()
        }
        self.drop_connections();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, node: i32, inner: Arc<Inner>) {
    for stream in listener.incoming() {
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let conn = inner.conns.fetch_add(1, Ordering::SeqCst);
        if let Ok(s) = stream.try_clone() {
            inner.open.lock().unwrap().push(s);
        }
        let inner = inner.clone();
        std::thread::spawn(move || serve(stream, node, conn, inner));
    }
}

fn serve(mut stream: TcpStream, node: i32, conn: u64, inner: Arc<Inner>) {
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).is_err() {
            return;
        }
        let mut body = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let Some((seen, header_flexible, correlation_id)) = decode_request(&body, node, conn)
        else {
            return;
        };
        let api = seen.api();
        let version = seen.version;
        let default = answer(&inner, &seen);
        // A fetch with nothing to return waits fetch.max.wait.ms, as a broker's does.
        let idle_fetch = match (&seen.req, &default) {
            (Req::Fetch(req), Resp::Fetch(resp)) => resp
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.records.as_ref().is_none_or(|r| r.is_empty()))
                .then(|| Duration::from_millis(req.max_wait_ms.clamp(0, 500) as u64)),
            _ => None,
        };
        {
            let mut log = inner.log.lock().unwrap();
            log.push(seen.clone());
            inner.logged.notify_all();
        }
        let mut action = {
            let mut rules = inner.rules.lock().unwrap();
            match rules.iter_mut().find(|r| r.api == api && r.remaining > 0) {
                Some(rule) => {
                    rule.remaining -= 1;
                    (rule.script)(&seen, default)
                }
                None => match idle_fetch {
                    Some(wait) => Action::Delay(wait, Box::new(Action::Reply(default))),
                    None => Action::Reply(default),
                },
            }
        };
        loop {
            match action {
                Action::Delay(d, next) => {
                    std::thread::sleep(d);
                    action = *next;
                }
                Action::Reply(resp) => {
                    let frame = encode_response(&resp, version, correlation_id, header_flexible);
                    if stream.write_all(&frame).is_err() {
                        return;
                    }
                    break;
                }
                Action::Cut(resp) => {
                    let frame = encode_response(&resp, version, correlation_id, header_flexible);
                    let _ = stream.write_all(&frame[..frame.len() / 2]);
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Action::Close => {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Action::Hold => break,
            }
        }
    }
}

/// Whether `api` in `version` uses the flexible (v2) request header.
fn flexible(api: ApiKey, version: i16) -> bool {
    use kafka_client::testing::protocol::messages::*;
    let from = match api {
        ApiKey::ApiVersions => ApiVersionsRequest::FLEXIBLE_FROM,
        ApiKey::Metadata => MetadataRequest::FLEXIBLE_FROM,
        ApiKey::InitProducerId => InitProducerIdRequest::FLEXIBLE_FROM,
        ApiKey::Produce => ProduceRequest::FLEXIBLE_FROM,
        ApiKey::Fetch => fetch::FetchRequest::FLEXIBLE_FROM,
        ApiKey::ListOffsets => list_offsets::ListOffsetsRequest::FLEXIBLE_FROM,
        ApiKey::FindCoordinator => find_coordinator::FindCoordinatorRequest::FLEXIBLE_FROM,
        ApiKey::JoinGroup => join_group::JoinGroupRequest::FLEXIBLE_FROM,
        ApiKey::SyncGroup => sync_group::SyncGroupRequest::FLEXIBLE_FROM,
        ApiKey::Heartbeat => heartbeat::HeartbeatRequest::FLEXIBLE_FROM,
        ApiKey::LeaveGroup => leave_group::LeaveGroupRequest::FLEXIBLE_FROM,
        ApiKey::OffsetCommit => offset_commit::OffsetCommitRequest::FLEXIBLE_FROM,
        ApiKey::OffsetFetch => offset_fetch::OffsetFetchRequest::FLEXIBLE_FROM,
        ApiKey::OffsetForLeaderEpoch => {
            offset_for_leader_epoch::OffsetForLeaderEpochRequest::FLEXIBLE_FROM
        }
        ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::FLEXIBLE_FROM,
        ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::FLEXIBLE_FROM,
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::FLEXIBLE_FROM,
        ApiKey::EndTxn => EndTxnRequest::FLEXIBLE_FROM,
        ApiKey::ConsumerGroupHeartbeat => {
            consumer_group_heartbeat::ConsumerGroupHeartbeatRequest::FLEXIBLE_FROM
        }
        _ => i16::MAX,
    };
    version >= from
}

fn decode_request(body: &[u8], node: i32, conn: u64) -> Option<(Seen, bool, i32)> {
    if body.len() < 4 {
        return None;
    }
    let api = ApiKey::from_code(i16::from_be_bytes([body[0], body[1]]));
    let version = i16::from_be_bytes([body[2], body[3]]);
    let flex = flexible(api, version);
    let mut r = Reader::new(body);
    let header = RequestHeader::decode(&mut r, if flex { 2 } else { 1 }).ok()?;
    let r = &mut r;
    let req = match api {
        ApiKey::ApiVersions => Req::ApiVersions(ApiVersionsRequest::decode(r, version).ok()?),
        ApiKey::Metadata => Req::Metadata(MetadataRequest::decode(r, version).ok()?),
        ApiKey::InitProducerId => {
            Req::InitProducerId(InitProducerIdRequest::decode(r, version).ok()?)
        }
        ApiKey::Produce => {
            let p = ProduceRequest::decode(r, version).ok()?;
            Req::Produce(Produce {
                transactional_id: p.transactional_id.map(str::to_owned),
                acks: p.acks,
                partitions: p
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| (t.name.to_owned(), p.index, p.records.to_vec()))
                    })
                    .collect(),
            })
        }
        ApiKey::Fetch => Req::Fetch(FetchRequest::decode(r, version).ok()?),
        ApiKey::ListOffsets => Req::ListOffsets(ListOffsetsRequest::decode(r, version).ok()?),
        ApiKey::FindCoordinator => {
            Req::FindCoordinator(FindCoordinatorRequest::decode(r, version).ok()?)
        }
        ApiKey::JoinGroup => Req::JoinGroup(JoinGroupRequest::decode(r, version).ok()?),
        ApiKey::SyncGroup => Req::SyncGroup(SyncGroupRequest::decode(r, version).ok()?),
        ApiKey::Heartbeat => Req::Heartbeat(HeartbeatRequest::decode(r, version).ok()?),
        ApiKey::LeaveGroup => Req::LeaveGroup(LeaveGroupRequest::decode(r, version).ok()?),
        ApiKey::OffsetCommit => Req::OffsetCommit(OffsetCommitRequest::decode(r, version).ok()?),
        ApiKey::OffsetFetch => Req::OffsetFetch(OffsetFetchRequest::decode(r, version).ok()?),
        ApiKey::OffsetForLeaderEpoch => {
            Req::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::decode(r, version).ok()?)
        }
        ApiKey::AddPartitionsToTxn => {
            Req::AddPartitionsToTxn(AddPartitionsToTxnRequest::decode(r, version).ok()?)
        }
        ApiKey::AddOffsetsToTxn => {
            Req::AddOffsetsToTxn(AddOffsetsToTxnRequest::decode(r, version).ok()?)
        }
        ApiKey::TxnOffsetCommit => {
            Req::TxnOffsetCommit(TxnOffsetCommitRequest::decode(r, version).ok()?)
        }
        ApiKey::EndTxn => Req::EndTxn(EndTxnRequest::decode(r, version).ok()?),
        ApiKey::ConsumerGroupHeartbeat => {
            Req::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest::decode(r, version).ok()?)
        }
        _ => return None,
    };
    let seen = Seen {
        node,
        conn,
        at: Instant::now(),
        version,
        req,
    };
    // ApiVersions answers with a v0 header whatever its version.
    let response_flexible = flex && api != ApiKey::ApiVersions;
    Some((seen, response_flexible, header.correlation_id))
}

fn encode_response(resp: &Resp, version: i16, correlation_id: i32, flexible: bool) -> Vec<u8> {
    let mut out = vec![0; 4];
    ResponseHeader { correlation_id }.encode(if flexible { 1 } else { 0 }, &mut out);
    match resp {
        Resp::ApiVersions(r) => r.encode(version, &mut out),
        Resp::Metadata(r) => r.encode(version, &mut out),
        Resp::InitProducerId(r) => r.encode(version, &mut out),
        Resp::Produce(r) => r.encode(version, &mut out),
        Resp::Fetch(r) => r.encode(version, &mut out),
        Resp::ListOffsets(r) => r.encode(version, &mut out),
        Resp::FindCoordinator(r) => r.encode(version, &mut out),
        Resp::JoinGroup(r) => r.encode(version, &mut out),
        Resp::SyncGroup(r) => r.encode(version, &mut out),
        Resp::Heartbeat(r) => r.encode(version, &mut out),
        Resp::LeaveGroup(r) => r.encode(version, &mut out),
        Resp::OffsetCommit(r) => r.encode(version, &mut out),
        Resp::OffsetFetch(r) => r.encode(version, &mut out),
        Resp::OffsetForLeaderEpoch(r) => r.encode(version, &mut out),
        Resp::AddPartitionsToTxn(r) => r.encode(version, &mut out),
        Resp::AddOffsetsToTxn(r) => r.encode(version, &mut out),
        Resp::TxnOffsetCommit(r) => r.encode(version, &mut out),
        Resp::EndTxn(r) => r.encode(version, &mut out),
        Resp::ConsumerGroupHeartbeat(r) => r.encode(version, &mut out),
    }
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

// --- the model ---------------------------------------------------------------------------------

fn append_batch(p: &mut PartitionModel, batch: &[u8]) -> i64 {
    let mut b = batch.to_vec();
    let base = p.end_offset;
    b[0..8].copy_from_slice(&base.to_be_bytes());
    // The leader stamps its epoch (outside the CRC, like the base offset).
    b[12..16].copy_from_slice(&p.leader_epoch.to_be_bytes());
    let last_delta = i32::from_be_bytes(b[23..27].try_into().unwrap());
    p.end_offset = base + last_delta as i64 + 1;
    p.batches.push(b);
    base
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// The broker's side of Produce for one partition: idempotence checks, then the append.
fn produce_partition(
    m: &mut Model,
    node: i32,
    topic: &str,
    partition: i32,
    data: &[u8],
) -> (ErrorCode, i64, Option<(i32, i32)>) {
    let known = m.producer_ids.clone();
    let Some((_, parts)) = m.topics.get_mut(topic) else {
        return (ErrorCode::UnknownTopicOrPartition, -1, None);
    };
    let Some(p) = parts.get_mut(partition as usize) else {
        return (ErrorCode::UnknownTopicOrPartition, -1, None);
    };
    if p.leader != node {
        return (
            ErrorCode::NotLeaderOrFollower,
            -1,
            Some((p.leader, p.leader_epoch)),
        );
    }
    if let Some(code) = p.produce_errors.pop_front() {
        return (code, -1, None);
    }
    if data.len() < BATCH_HEADER_SIZE {
        return (ErrorCode::CorruptMessage, -1, None);
    }
    let pid = be_i64(data, 43);
    let epoch = i16::from_be_bytes([data[51], data[52]]);
    let seq = i32::from_be_bytes(data[53..57].try_into().unwrap());
    let count = i32::from_be_bytes(data[57..61].try_into().unwrap());
    if pid >= 0 {
        if !known.contains_key(&pid) {
            return (ErrorCode::UnknownProducerId, -1, None);
        }
        // As Kafka's ProducerStateManager: a producer the partition has no state for may
        // start at any sequence (its state may have been cleaned up); only a bumped epoch
        // must start at 0.
        let fresh = !p.producers.contains_key(&pid);
        let st = p.producers.entry(pid).or_insert(ProducerState {
            epoch,
            ..ProducerState::default()
        });
        if epoch < st.epoch {
            return (ErrorCode::InvalidProducerEpoch, -1, None);
        }
        if epoch > st.epoch {
            // A bumped epoch starts its sequences again at 0.
            if seq != 0 {
                return (ErrorCode::OutOfOrderSequenceNumber, -1, None);
            }
            *st = ProducerState {
                epoch,
                ..ProducerState::default()
            };
        }
        if let Some(&(_, offset)) = st.recent.iter().find(|(s, _)| *s == seq) {
            return (ErrorCode::None, offset, None); // a duplicate: acknowledged, not written
        }
        if seq != st.next_seq && !fresh {
            return (ErrorCode::OutOfOrderSequenceNumber, -1, None);
        }
    }
    let base = append_batch(p, data);
    if pid >= 0 {
        let st = p.producers.get_mut(&pid).unwrap();
        st.next_seq = seq + count;
        st.recent.push((seq, base));
        if st.recent.len() > 5 {
            st.recent.remove(0);
        }
    }
    (ErrorCode::None, base, None)
}

fn answer(inner: &Inner, seen: &Seen) -> Resp {
    let mut m = inner.model.lock().unwrap();
    let ports = inner.ports.lock().unwrap().clone();
    let node = seen.node;
    match &seen.req {
        Req::ApiVersions(_) => Resp::ApiVersions(ApiVersionsResponse {
            error_code: ErrorCode::None,
            api_keys: m
                .versions
                .iter()
                .map(|(&api_key, &(min_version, max_version))| ApiVersion {
                    api_key,
                    min_version,
                    max_version,
                })
                .collect(),
            throttle_time_ms: 0,
        }),
        Req::Metadata(req) => {
            let names: Vec<String> = match &req.topics {
                Some(t) => t.clone(),
                None => m.topics.keys().cloned().collect(),
            };
            Resp::Metadata(MetadataResponse {
                throttle_time_ms: 0,
                brokers: ports
                    .iter()
                    .enumerate()
                    .map(|(i, port)| MetadataBroker {
                        node_id: i as i32,
                        host: "127.0.0.1".into(),
                        port: *port as i32,
                        rack: None,
                    })
                    .collect(),
                cluster_id: Some("fake".into()),
                controller_id: 0,
                topics: names
                    .into_iter()
                    .map(|name| match m.topics.get(&name) {
                        Some((id, parts)) => MetadataTopic {
                            error_code: ErrorCode::None,
                            name: Some(name),
                            topic_id: *id,
                            is_internal: false,
                            partitions: parts
                                .iter()
                                .enumerate()
                                .map(|(i, p)| MetadataPartition {
                                    error_code: ErrorCode::None,
                                    partition_index: i as i32,
                                    leader_id: p.leader,
                                    leader_epoch: p.leader_epoch,
                                    replica_nodes: vec![p.leader],
                                    isr_nodes: vec![p.leader],
                                    offline_replicas: vec![],
                                })
                                .collect(),
                            topic_authorized_operations: i32::MIN,
                        },
                        None => MetadataTopic {
                            error_code: ErrorCode::UnknownTopicOrPartition,
                            name: Some(name),
                            topic_id: Uuid::default(),
                            is_internal: false,
                            partitions: vec![],
                            topic_authorized_operations: i32::MIN,
                        },
                    })
                    .collect(),
            })
        }
        Req::InitProducerId(req) if req.transactional_id.is_some() => {
            Resp::InitProducerId(init_transactional(&mut m, req))
        }
        Req::AddPartitionsToTxn(req) => Resp::AddPartitionsToTxn(add_partitions(&mut m, req)),
        Req::AddOffsetsToTxn(req) => Resp::AddOffsetsToTxn(AddOffsetsToTxnResponse {
            throttle_time_ms: 0,
            error_code: match txn_check(
                &m,
                &req.transactional_id,
                req.producer_id,
                req.producer_epoch,
            ) {
                ErrorCode::None => {
                    let t = m.transactions.get_mut(&req.transactional_id).unwrap();
                    if !t.groups.contains(&req.group_id) {
                        t.groups.push(req.group_id.clone());
                    }
                    ErrorCode::None
                }
                code => code,
            },
        }),
        Req::TxnOffsetCommit(req) => Resp::TxnOffsetCommit(txn_offset_commit(&mut m, req)),
        Req::EndTxn(req) => Resp::EndTxn(EndTxnResponse {
            throttle_time_ms: 0,
            error_code: end_txn(&mut m, req),
        }),
        Req::InitProducerId(_) => {
            // Without a transactional id a broker hands out a new id whatever the request
            // says (TransactionCoordinator.handleInitProducerId); an idempotent producer
            // bumps its epoch itself.
            m.next_producer_id += 1;
            let (id, epoch) = (m.next_producer_id, 0);
            m.producer_ids.insert(id, epoch);
            Resp::InitProducerId(InitProducerIdResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::None,
                producer_id: id,
                producer_epoch: epoch,
            })
        }
        Req::Produce(req) => {
            let mut topics: Vec<TopicProduceResponse> = Vec::new();
            for (t, p, data) in &req.partitions {
                let outside = req.transactional_id.as_ref().is_some_and(|id| {
                    m.transactions
                        .get(id)
                        .is_none_or(|x| !x.partitions.contains(&(t.clone(), *p)))
                });
                let (error_code, base_offset, current_leader) = if outside {
                    (ErrorCode::InvalidTxnState, -1, None)
                } else {
                    produce_partition(&mut m, node, t, *p, data)
                };
                let resp = PartitionProduceResponse {
                    index: *p,
                    error_code,
                    base_offset,
                    log_append_time_ms: -1,
                    log_start_offset: 0,
                    record_errors: vec![],
                    error_message: None,
                    current_leader,
                };
                match topics.iter_mut().find(|x| x.name == *t) {
                    Some(x) => x.partitions.push(resp),
                    None => topics.push(TopicProduceResponse {
                        name: t.clone(),
                        partitions: vec![resp],
                    }),
                }
            }
            Resp::Produce(ProduceResponse {
                topics,
                throttle_time_ms: 0,
            })
        }
        Req::Fetch(req) => Resp::Fetch(fetch(&m, node, req, seen.version)),
        Req::ConsumerGroupHeartbeat(req) => group_heartbeat(&mut m, req),
        Req::OffsetForLeaderEpoch(req) => {
            Resp::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse {
                throttle_time_ms: 0,
                topics: req
                    .topics
                    .iter()
                    .map(|t| OffsetForLeaderTopicResult {
                        topic: t.topic.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|q| {
                                let part = m
                                    .topics
                                    .get(&t.topic)
                                    .and_then(|(_, ps)| ps.get(q.partition as usize));
                                epoch_end_offset(
                                    part,
                                    node,
                                    q.partition,
                                    q.current_leader_epoch,
                                    q.leader_epoch,
                                )
                            })
                            .collect(),
                    })
                    .collect(),
            })
        }
        Req::ListOffsets(req) => Resp::ListOffsets(ListOffsetsResponse {
            throttle_time_ms: 0,
            topics: req
                .topics
                .iter()
                .map(|t| ListOffsetsTopicResponse {
                    name: t.name.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| {
                            let part = m
                                .topics
                                .get(&t.name)
                                .and_then(|(_, ps)| ps.get(p.partition_index as usize));
                            let (error_code, offset, epoch) = match part {
                                None => (ErrorCode::UnknownTopicOrPartition, -1, -1),
                                Some(x) if x.leader != node => {
                                    (ErrorCode::NotLeaderOrFollower, -1, -1)
                                }
                                Some(x) if p.timestamp == EARLIEST_TIMESTAMP => {
                                    (ErrorCode::None, 0, x.leader_epoch)
                                }
                                Some(x) => (ErrorCode::None, x.end_offset, x.leader_epoch),
                            };
                            ListOffsetsPartitionResponse {
                                partition_index: p.partition_index,
                                error_code,
                                timestamp: -1,
                                offset,
                                leader_epoch: epoch,
                            }
                        })
                        .collect(),
                })
                .collect(),
        }),
        Req::FindCoordinator(req) => Resp::FindCoordinator(FindCoordinatorResponse {
            throttle_time_ms: 0,
            coordinators: req
                .coordinator_keys
                .iter()
                .map(|k| Coordinator {
                    key: k.clone(),
                    node_id: 0,
                    host: "127.0.0.1".into(),
                    port: ports[0] as i32,
                    error_code: ErrorCode::None,
                    error_message: None,
                })
                .collect(),
        }),
        Req::JoinGroup(req) => {
            if req.member_id.is_empty() && seen.version >= 4 {
                m.members += 1;
                let id = format!("member-{}", m.members);
                return Resp::JoinGroup(JoinGroupResponse {
                    throttle_time_ms: 0,
                    error_code: ErrorCode::MemberIdRequired,
                    generation_id: -1,
                    protocol_type: None,
                    protocol_name: None,
                    leader: String::new(),
                    skip_assignment: false,
                    member_id: id,
                    members: vec![],
                });
            }
            let member_id = if req.member_id.is_empty() {
                m.members += 1;
                format!("member-{}", m.members)
            } else {
                req.member_id.clone()
            };
            m.generation += 1;
            let (protocol_name, metadata) = req
                .protocols
                .first()
                .map(|p| (p.name.clone(), p.metadata.clone()))
                .unwrap_or_default();
            m.last_subscription = metadata.clone();
            Resp::JoinGroup(JoinGroupResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::None,
                generation_id: m.generation,
                protocol_type: Some(req.protocol_type.clone()),
                protocol_name: Some(protocol_name),
                leader: member_id.clone(),
                skip_assignment: false,
                member_id: member_id.clone(),
                members: vec![JoinGroupResponseMember {
                    member_id,
                    group_instance_id: req.group_instance_id.clone(),
                    metadata,
                }],
            })
        }
        Req::SyncGroup(req) => {
            let generation_ok = req.generation_id == m.generation;
            Resp::SyncGroup(SyncGroupResponse {
                throttle_time_ms: 0,
                error_code: if generation_ok {
                    ErrorCode::None
                } else {
                    ErrorCode::IllegalGeneration
                },
                protocol_type: req.protocol_type.clone(),
                protocol_name: req.protocol_name.clone(),
                assignment: req
                    .assignments
                    .iter()
                    .find(|a| a.member_id == req.member_id)
                    .map(|a| a.assignment.clone())
                    .unwrap_or_default(),
            })
        }
        Req::Heartbeat(req) => Resp::Heartbeat(HeartbeatResponse {
            throttle_time_ms: 0,
            error_code: if req.generation_id == m.generation {
                ErrorCode::None
            } else {
                ErrorCode::IllegalGeneration
            },
        }),
        Req::LeaveGroup(req) => Resp::LeaveGroup(LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            members: req
                .members
                .iter()
                .map(|x| MemberResponse {
                    member_id: x.member_id.clone(),
                    group_instance_id: x.group_instance_id.clone(),
                    error_code: ErrorCode::None,
                })
                .collect(),
        }),
        Req::OffsetCommit(req) => {
            let mut topics = Vec::new();
            for t in &req.topics {
                let mut partitions = Vec::new();
                for p in &t.partitions {
                    m.committed
                        .insert((t.name.clone(), p.partition_index), p.committed_offset);
                    m.committed_epochs.insert(
                        (t.name.clone(), p.partition_index),
                        p.committed_leader_epoch,
                    );
                    partitions.push(OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: ErrorCode::None,
                    });
                }
                topics.push(OffsetCommitResponseTopic {
                    name: t.name.clone(),
                    partitions,
                });
            }
            Resp::OffsetCommit(OffsetCommitResponse {
                throttle_time_ms: 0,
                topics,
            })
        }
        Req::OffsetFetch(req) => Resp::OffsetFetch(OffsetFetchResponse {
            throttle_time_ms: 0,
            groups: req
                .groups
                .iter()
                .map(|g| OffsetFetchResponseGroup {
                    group_id: g.group_id.clone(),
                    error_code: ErrorCode::None,
                    topics: g
                        .topics
                        .clone()
                        // Every partition with a committed offset (the admin client's listing).
                        .unwrap_or_else(|| all_committed(&m.committed))
                        .iter()
                        .map(|t| OffsetFetchResponseTopics {
                            name: t.name.clone(),
                            partitions: t
                                .partition_indexes
                                .iter()
                                .map(|&p| OffsetFetchResponsePartitions {
                                    partition_index: p,
                                    committed_offset: m
                                        .committed
                                        .get(&(t.name.clone(), p))
                                        .copied()
                                        .unwrap_or(-1),
                                    committed_leader_epoch: m
                                        .committed_epochs
                                        .get(&(t.name.clone(), p))
                                        .copied()
                                        .unwrap_or(-1),
                                    metadata: Some(String::new()),
                                    error_code: ErrorCode::None,
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }),
    }
}

/// The broker's epoch checks on a request naming `current` as the leader epoch (KIP-320).
/// The one-member group of the KIP-848 protocol: joining (epoch 0) gives the next epoch and
/// every partition of the subscribed topics; a heartbeat of the current epoch is answered
/// without an assignment; leaving (-1, -2) is acknowledged.
fn group_heartbeat(m: &mut Model, req: &ConsumerGroupHeartbeatRequest) -> Resp {
    let ok = |epoch: i32, assignment: Option<Vec<TopicIdPartitions>>| {
        Resp::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            error_message: None,
            member_id: Some(req.member_id.clone()),
            member_epoch: epoch,
            heartbeat_interval_ms: m.heartbeat_interval_ms,
            assignment,
        })
    };
    match req.member_epoch {
        e if e < 0 => ok(e, None),
        0 => {
            m.member_epoch += 1;
            let mut assignment = Vec::new();
            for t in req.subscribed_topic_names.iter().flatten() {
                if let Some((id, parts)) = m.topics.get(t) {
                    assignment.push(TopicIdPartitions {
                        topic_id: *id,
                        partitions: (0..parts.len() as i32).collect(),
                    });
                }
            }
            ok(m.member_epoch, Some(assignment))
        }
        e if e == m.member_epoch => ok(e, None),
        _ => Resp::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::FencedMemberEpoch,
            error_message: None,
            member_id: None,
            member_epoch: -1,
            heartbeat_interval_ms: 0,
            assignment: None,
        }),
    }
}

fn leader_epoch_error(p: &PartitionModel, node: i32, current: i32) -> Option<ErrorCode> {
    if p.leader != node {
        Some(ErrorCode::NotLeaderOrFollower)
    } else if current > p.leader_epoch {
        Some(ErrorCode::UnknownLeaderEpoch)
    } else if current >= 0 && current < p.leader_epoch {
        Some(ErrorCode::FencedLeaderEpoch)
    } else {
        None
    }
}

/// Where `epoch` ends in the partition's log, as a leader's epoch cache answers: the largest
/// epoch at or below it and the start of the next one (the log end for the latest).
fn epoch_end_offset(
    part: Option<&PartitionModel>,
    node: i32,
    partition: i32,
    current: i32,
    epoch: i32,
) -> EpochEndOffset {
    let answer = |error_code, leader_epoch, end_offset| EpochEndOffset {
        error_code,
        partition,
        leader_epoch,
        end_offset,
    };
    let Some(p) = part else {
        return answer(ErrorCode::UnknownTopicOrPartition, -1, -1);
    };
    if let Some(code) = leader_epoch_error(p, node, current) {
        return answer(code, -1, -1);
    }
    // (epoch, start offset) of each epoch in the log, then the current one.
    let mut epochs: Vec<(i32, i64)> = Vec::new();
    for b in &p.batches {
        let e = i32::from_be_bytes(b[12..16].try_into().unwrap());
        if epochs.last().is_none_or(|l| l.0 < e) {
            epochs.push((e, be_i64(b, 0)));
        }
    }
    if epochs.last().is_none_or(|l| l.0 < p.leader_epoch) {
        epochs.push((p.leader_epoch, p.end_offset));
    }
    if epochs.last().is_some_and(|l| l.0 == epoch) {
        return answer(ErrorCode::None, epoch, p.end_offset);
    }
    let floor = epochs.iter().rev().find(|e| e.0 <= epoch);
    match epochs.iter().find(|e| e.0 > epoch) {
        None => answer(ErrorCode::None, -1, -1),
        Some(higher) => answer(ErrorCode::None, floor.map_or(epoch, |f| f.0), higher.1),
    }
}

fn fetch(m: &Model, node: i32, req: &FetchRequest, version: i16) -> FetchResponse {
    let by_id = FetchRequest::uses_topic_ids(version);
    let responses = req
        .topics
        .iter()
        .map(|t| {
            let entry = if by_id {
                m.topics.iter().find(|(_, (id, _))| *id == t.topic_id)
            } else {
                m.topics.get_key_value(&t.topic)
            };
            FetchableTopicResponse {
                topic: t.topic.clone(),
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|fp| {
                        let part = entry.and_then(|(_, (_, ps))| ps.get(fp.partition as usize));
                        let mut out = FetchPartitionData {
                            partition_index: fp.partition,
                            error_code: ErrorCode::None,
                            high_watermark: -1,
                            last_stable_offset: -1,
                            log_start_offset: 0,
                            diverging_epoch: None,
                            current_leader: None,
                            aborted_transactions: None,
                            preferred_read_replica: -1,
                            records: None,
                        };
                        match part {
                            None => out.error_code = ErrorCode::UnknownTopicOrPartition,
                            Some(p) if p.leader != node => {
                                out.error_code = ErrorCode::NotLeaderOrFollower;
                                out.current_leader = Some(LeaderIdAndEpoch {
                                    leader_id: p.leader,
                                    leader_epoch: p.leader_epoch,
                                });
                            }
                            Some(p)
                                if leader_epoch_error(p, node, fp.current_leader_epoch)
                                    .is_some() =>
                            {
                                out.error_code =
                                    leader_epoch_error(p, node, fp.current_leader_epoch).unwrap();
                            }
                            Some(p) if fp.fetch_offset > p.end_offset || fp.fetch_offset < 0 => {
                                out.error_code = ErrorCode::OffsetOutOfRange;
                            }
                            Some(p) => {
                                out.high_watermark = p.end_offset;
                                out.last_stable_offset = p.end_offset;
                                let mut records = Vec::new();
                                for b in &p.batches {
                                    let base = be_i64(b, 0);
                                    let last = base
                                        + i32::from_be_bytes(b[23..27].try_into().unwrap()) as i64;
                                    if last >= fp.fetch_offset
                                        && records.len() < fp.partition_max_bytes.max(1) as usize
                                    {
                                        records.extend_from_slice(b);
                                    }
                                }
                                out.records = Some(records.into());
                            }
                        }
                        out
                    })
                    .collect(),
            }
        })
        .collect();
    FetchResponse {
        throttle_time_ms: 0,
        error_code: ErrorCode::None,
        session_id: 0,
        responses,
        node_endpoints: vec![],
    }
}

// --- transactions --------------------------------------------------------------------------

/// InitProducerId with a transactional id: the id's producer id with the next epoch (a new
/// one the first time), which fences every older epoch; an open transaction is aborted. With
/// the current id and epoch given (KIP-360), they must match.
fn init_transactional(m: &mut Model, req: &InitProducerIdRequest) -> InitProducerIdResponse {
    let id = req.transactional_id.clone().unwrap();
    let answer = |error_code, producer_id, producer_epoch| InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code,
        producer_id,
        producer_epoch,
    };
    let existing = m.transactions.get(&id).cloned();
    let (pid, epoch) = match existing {
        Some(t)
            if req.producer_id >= 0
                && (req.producer_id, req.producer_epoch) != (t.producer_id, t.epoch) =>
        {
            return answer(ErrorCode::ProducerFenced, -1, -1);
        }
        Some(t) => (t.producer_id, t.epoch + 1),
        None => {
            m.next_producer_id += 1;
            (m.next_producer_id, 0)
        }
    };
    let t = m.transactions.entry(id).or_default();
    if !t.partitions.is_empty() || !t.groups.is_empty() {
        t.aborts += 1;
    }
    *t = TxnModel {
        producer_id: pid,
        epoch,
        commits: t.commits,
        aborts: t.aborts,
        ..TxnModel::default()
    };
    m.producer_ids.insert(pid, epoch);
    answer(ErrorCode::None, pid, epoch)
}

/// The coordinator's check of a transactional request's producer id and epoch.
fn txn_check(m: &Model, id: &str, pid: i64, epoch: i16) -> ErrorCode {
    match m.transactions.get(id) {
        None => ErrorCode::InvalidProducerIdMapping,
        Some(t) if t.producer_id != pid => ErrorCode::InvalidProducerIdMapping,
        Some(t) if epoch < t.epoch => ErrorCode::ProducerFenced,
        Some(t) if epoch > t.epoch => ErrorCode::InvalidProducerEpoch,
        Some(_) => ErrorCode::None,
    }
}

fn add_partitions(m: &mut Model, req: &AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let code = txn_check(
        m,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
    );
    if code.is_ok() {
        let t = m.transactions.get_mut(&req.transactional_id).unwrap();
        for topic in &req.topics {
            for p in &topic.partitions {
                let tp = (topic.name.clone(), *p);
                if !t.partitions.contains(&tp) {
                    t.partitions.push(tp);
                }
            }
        }
    }
    AddPartitionsToTxnResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| AddPartitionsToTxnTopicResult {
                name: t.name.clone(),
                partitions: t.partitions.iter().map(|p| (*p, code)).collect(),
            })
            .collect(),
    }
}

fn txn_offset_commit(m: &mut Model, req: &TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let mut code = txn_check(
        m,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
    );
    if code == ErrorCode::ProducerFenced {
        code = ErrorCode::InvalidProducerEpoch; // what a group coordinator says
    }
    // KIP-447: a member of another generation may not commit.
    if code.is_ok() && req.generation_id >= 0 && req.generation_id != m.generation {
        code = ErrorCode::IllegalGeneration;
    }
    if code.is_ok() {
        let t = m.transactions.get_mut(&req.transactional_id).unwrap();
        for topic in &req.topics {
            for p in &topic.partitions {
                t.offsets
                    .push(((topic.name.clone(), p.partition_index), p.committed_offset));
            }
        }
    }
    TxnOffsetCommitResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| TxnOffsetCommitTopicResult {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| (p.partition_index, code))
                    .collect(),
            })
            .collect(),
    }
}

fn end_txn(m: &mut Model, req: &EndTxnRequest) -> ErrorCode {
    let code = txn_check(
        m,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
    );
    if !code.is_ok() {
        return code;
    }
    let t = m.transactions.get_mut(&req.transactional_id).unwrap();
    let offsets = std::mem::take(&mut t.offsets);
    t.partitions.clear();
    t.groups.clear();
    if req.committed {
        t.commits += 1;
        for (k, o) in offsets {
            m.committed.insert(k, o);
        }
    } else {
        t.aborts += 1;
    }
    ErrorCode::None
}

/// What `OffsetFetch` without topics asks for: every partition with a committed offset.
fn all_committed(committed: &HashMap<(String, i32), i64>) -> Vec<OffsetFetchRequestTopics> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in committed.keys() {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(name, mut partition_indexes)| {
            partition_indexes.sort_unstable();
            OffsetFetchRequestTopics {
                name: name.to_owned(),
                partition_indexes,
            }
        })
        .collect()
}
