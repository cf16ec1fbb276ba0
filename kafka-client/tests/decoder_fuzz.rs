//! Property tests of every response decoder the producer uses, on random frames and on valid
//! frames with bytes changed, cut or inserted: the result is a value or an error, never a
//! panic, and never an allocation larger than the frame allows (a forged count of 2^31
//! elements in a small frame is refused before anything is reserved).

use kafka_client::testing::protocol::messages::api_versions::ApiVersion;
use kafka_client::testing::protocol::messages::metadata::{
    MetadataBroker, MetadataPartition, MetadataTopic,
};
use kafka_client::testing::protocol::messages::produce::{
    PartitionProduceResponse, TopicProduceResponse,
};
use kafka_client::testing::protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, InitProducerIdRequest, InitProducerIdResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
};
use kafka_client::testing::protocol::primitives::Uuid;
use kafka_client::testing::protocol::record::decode_batches;
use kafka_client::testing::protocol::{ErrorCode, Request, ResponseHeader, decode_response};
use proptest::prelude::*;

fn frame(header_version: i16, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = Vec::new();
    ResponseHeader { correlation_id: 7 }.encode(header_version, &mut f);
    body(&mut f);
    f
}

/// Valid frames of every response in every version this client speaks, with their version.
fn valid_frames() -> Vec<(&'static str, i16, Vec<u8>)> {
    let mut out = Vec::new();
    for v in ApiVersionsRequest::MIN_VERSION..=ApiVersionsRequest::MAX_VERSION {
        let r = ApiVersionsResponse {
            error_code: ErrorCode::None,
            api_keys: vec![
                ApiVersion {
                    api_key: 0,
                    min_version: 3,
                    max_version: 12,
                },
                ApiVersion {
                    api_key: 3,
                    min_version: 0,
                    max_version: 13,
                },
            ],
            throttle_time_ms: 0,
        };
        out.push(("api_versions", v, frame(0, |f| r.encode(v, f))));
    }
    for v in MetadataRequest::MIN_VERSION..=MetadataRequest::MAX_VERSION {
        let r = MetadataResponse {
            throttle_time_ms: 0,
            brokers: vec![MetadataBroker {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
            }],
            cluster_id: Some("c".into()),
            controller_id: 1,
            topics: vec![MetadataTopic {
                error_code: ErrorCode::None,
                name: Some("t".into()),
                topic_id: if v >= 10 {
                    Uuid([1; 16])
                } else {
                    Uuid::default()
                },
                is_internal: false,
                partitions: vec![MetadataPartition {
                    error_code: ErrorCode::None,
                    partition_index: 0,
                    leader_id: 1,
                    leader_epoch: if v >= 7 { 3 } else { -1 },
                    replica_nodes: vec![1, 2, 3],
                    isr_nodes: vec![1, 2],
                    offline_replicas: vec![],
                }],
                topic_authorized_operations: i32::MIN,
            }],
        };
        let hv = MetadataRequest::response_header_version(v);
        out.push(("metadata", v, frame(hv, |f| r.encode(v, f))));
    }
    for v in ProduceRequest::MIN_VERSION..=ProduceRequest::MAX_VERSION {
        let r = ProduceResponse {
            topics: vec![TopicProduceResponse {
                name: "t".into(),
                partitions: vec![PartitionProduceResponse {
                    index: 0,
                    error_code: ErrorCode::NotLeaderOrFollower,
                    base_offset: 5,
                    log_append_time_ms: -1,
                    log_start_offset: if v >= 5 { 0 } else { -1 },
                    record_errors: vec![],
                    error_message: None,
                    current_leader: if v >= 10 { Some((2, 4)) } else { None },
                }],
            }],
            throttle_time_ms: 0,
        };
        let hv = <ProduceRequest<'_> as Request>::response_header_version(v);
        out.push(("produce", v, frame(hv, |f| r.encode(v, f))));
    }
    for v in InitProducerIdRequest::MIN_VERSION..=InitProducerIdRequest::MAX_VERSION {
        let r = InitProducerIdResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            producer_id: 42,
            producer_epoch: 0,
        };
        let hv = InitProducerIdRequest::response_header_version(v);
        out.push(("init_producer_id", v, frame(hv, |f| r.encode(v, f))));
    }
    out
}

/// Decodes `bytes` as the named response; any outcome but a panic is fine.
fn decode(kind: &str, v: i16, bytes: &[u8]) -> bool {
    match kind {
        "api_versions" => decode_response::<ApiVersionsRequest>(bytes, v, 7).is_ok(),
        "metadata" => decode_response::<MetadataRequest>(bytes, v, 7).is_ok(),
        "produce" => decode_response::<ProduceRequest<'_>>(bytes, v, 7).is_ok(),
        "init_producer_id" => decode_response::<InitProducerIdRequest>(bytes, v, 7).is_ok(),
        _ => unreachable!(),
    }
}

#[test]
fn valid_frames_decode() {
    for (kind, v, f) in valid_frames() {
        assert!(decode(kind, v, &f), "{kind} v{v}");
        // Every truncation is an error.
        for cut in 0..f.len() {
            assert!(!decode(kind, v, &f[..cut]), "{kind} v{v} cut at {cut}");
        }
    }
}

#[test]
fn forged_counts_do_not_allocate() {
    // A Metadata v12 response claiming 2^31-1 brokers in a 20-byte frame.
    let mut f = frame(1, |f| {
        f.extend_from_slice(&0i32.to_be_bytes());
        f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
    });
    f.extend_from_slice(&[0; 8]);
    assert!(!decode("metadata", 12, &f));
    // A Produce v8 response claiming 2^31-1 topics.
    let f = frame(0, |f| f.extend_from_slice(&i32::MAX.to_be_bytes()));
    assert!(!decode("produce", 8, &f));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), v in 0i16..14) {
        for kind in ["api_versions", "metadata", "produce", "init_producer_id"] {
            decode(kind, v, &bytes);
        }
        let _ = decode_batches(&bytes);
    }

    #[test]
    fn mutated_frames_never_panic(
        which: prop::sample::Index,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let frames = valid_frames();
        let (kind, v, f) = &frames[which.index(frames.len())];
        let mut f = f.clone();
        for (at, byte, op) in edits {
            if f.is_empty() { break; }
            let i = at.index(f.len());
            match op {
                0 => f[i] = byte,
                1 => { f.remove(i); }
                _ => f.insert(i, byte),
            }
        }
        decode(kind, *v, &f);
    }
}
