//! Every response decoder the consumer uses (Fetch, ListOffsets, FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, the consumer protocol's
//! subscription and assignment) and every decompressor, on random input, on valid frames with
//! bytes changed, cut or inserted, and on valid frames with a forged length or count written at
//! every position: the result is a value or an error, never a panic.
//!
//! The process runs under an allocator with a limit (64 MiB above what the harness holds): an
//! allocation sized by a forged count, or by a decompression bomb beyond `max_output`, would
//! exceed it and abort the test binary.

use std::alloc::System;
use std::sync::Once;

use cap::Cap;
use kafka_client::testing::protocol::compression::{self, Compression};
use kafka_client::testing::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicPartitions,
};
use kafka_client::testing::protocol::messages::fetch::{
    AbortedTransaction, EpochEndOffset, FetchPartitionData, FetchRequest, FetchResponse,
    FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
};
use kafka_client::testing::protocol::messages::find_coordinator::{
    Coordinator, FindCoordinatorRequest, FindCoordinatorResponse,
};
use kafka_client::testing::protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use kafka_client::testing::protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember,
};
use kafka_client::testing::protocol::messages::leave_group::{
    LeaveGroupRequest, LeaveGroupResponse, MemberResponse,
};
use kafka_client::testing::protocol::messages::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_client::testing::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
};
use kafka_client::testing::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchResponse, OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_client::testing::protocol::messages::sync_group::{SyncGroupRequest, SyncGroupResponse};
use kafka_client::testing::protocol::primitives::Uuid;
use kafka_client::testing::protocol::{ErrorCode, Request, ResponseHeader, decode_response};
use proptest::prelude::*;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// Caps allocations at 64 MiB above what is held when the first test starts.
fn limit_allocations() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ALLOCATOR
            .set_limit(ALLOCATOR.allocated() + (64 << 20))
            .expect("limit above what is allocated");
    });
}

const MAX_OUTPUT: usize = 1 << 20;

/// A decoder under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fetch,
    ListOffsets,
    FindCoordinator,
    JoinGroup,
    SyncGroup,
    Heartbeat,
    LeaveGroup,
    OffsetCommit,
    OffsetFetch,
    Subscription,
    Assignment,
    Codec(Compression),
}

fn frame<R: Request>(v: i16, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = Vec::new();
    ResponseHeader { correlation_id: 7 }.encode(R::response_header_version(v), &mut f);
    body(&mut f);
    f
}

fn fetch_response(v: i16) -> FetchResponse {
    let ids = FetchRequest::uses_topic_ids(v);
    FetchResponse {
        throttle_time_ms: 0,
        error_code: ErrorCode::None,
        session_id: 0,
        responses: vec![FetchableTopicResponse {
            topic: if ids { String::new() } else { "topic".into() },
            topic_id: if ids { Uuid([5; 16]) } else { Uuid::default() },
            partitions: vec![
                FetchPartitionData {
                    partition_index: 0,
                    error_code: ErrorCode::None,
                    high_watermark: 10,
                    last_stable_offset: 10,
                    log_start_offset: 0,
                    diverging_epoch: (v >= 12).then_some(EpochEndOffset {
                        epoch: 1,
                        end_offset: 4,
                    }),
                    current_leader: (v >= 12).then_some(LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 2,
                    }),
                    aborted_transactions: Some(vec![AbortedTransaction {
                        producer_id: 1,
                        first_offset: 2,
                    }]),
                    preferred_read_replica: -1,
                    records: Some(vec![7; 40].into()),
                },
                FetchPartitionData {
                    partition_index: 1,
                    error_code: ErrorCode::OffsetOutOfRange,
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    diverging_epoch: None,
                    current_leader: None,
                    aborted_transactions: None,
                    preferred_read_replica: -1,
                    records: None,
                },
            ],
        }],
        node_endpoints: if v >= 16 {
            vec![NodeEndpoint {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: Some("r".into()),
            }]
        } else {
            vec![]
        },
    }
}

/// Valid input of every decoder in every version this client speaks.
fn valid_inputs() -> Vec<(Kind, i16, Vec<u8>)> {
    let mut out = Vec::new();
    for v in FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION {
        let r = fetch_response(v);
        out.push((Kind::Fetch, v, frame::<FetchRequest>(v, |f| r.encode(v, f))));
    }
    for v in ListOffsetsRequest::MIN_VERSION..=ListOffsetsRequest::MAX_VERSION {
        let r = ListOffsetsResponse {
            throttle_time_ms: 0,
            topics: vec![ListOffsetsTopicResponse {
                name: "topic".into(),
                partitions: vec![ListOffsetsPartitionResponse {
                    partition_index: 0,
                    error_code: ErrorCode::None,
                    timestamp: -1,
                    offset: 5,
                    leader_epoch: 1,
                }],
            }],
        };
        let f = frame::<ListOffsetsRequest>(v, |f| r.encode(v, f));
        out.push((Kind::ListOffsets, v, f));
    }
    for v in FindCoordinatorRequest::MIN_VERSION..=FindCoordinatorRequest::MAX_VERSION {
        let r = FindCoordinatorResponse {
            throttle_time_ms: 0,
            coordinators: vec![Coordinator {
                key: "group".into(),
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092,
                error_code: ErrorCode::None,
                error_message: None,
            }],
        };
        let f = frame::<FindCoordinatorRequest>(v, |f| r.encode(v, f));
        out.push((Kind::FindCoordinator, v, f));
    }
    for v in JoinGroupRequest::MIN_VERSION..=JoinGroupRequest::MAX_VERSION {
        let r = JoinGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            generation_id: 1,
            protocol_type: (v >= 7).then(|| "consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m".into(),
            skip_assignment: false,
            member_id: "m".into(),
            members: vec![JoinGroupResponseMember {
                member_id: "m".into(),
                group_instance_id: Some("i".into()),
                metadata: subscription(),
            }],
        };
        out.push((
            Kind::JoinGroup,
            v,
            frame::<JoinGroupRequest>(v, |f| r.encode(v, f)),
        ));
    }
    for v in SyncGroupRequest::MIN_VERSION..=SyncGroupRequest::MAX_VERSION {
        let r = SyncGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            protocol_type: (v >= 5).then(|| "consumer".into()),
            protocol_name: (v >= 5).then(|| "range".into()),
            assignment: assignment(),
        };
        out.push((
            Kind::SyncGroup,
            v,
            frame::<SyncGroupRequest>(v, |f| r.encode(v, f)),
        ));
    }
    for v in HeartbeatRequest::MIN_VERSION..=HeartbeatRequest::MAX_VERSION {
        let r = HeartbeatResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
        };
        out.push((
            Kind::Heartbeat,
            v,
            frame::<HeartbeatRequest>(v, |f| r.encode(v, f)),
        ));
    }
    for v in LeaveGroupRequest::MIN_VERSION..=LeaveGroupRequest::MAX_VERSION {
        let r = LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::None,
            members: vec![MemberResponse {
                member_id: "m".into(),
                group_instance_id: None,
                error_code: ErrorCode::None,
            }],
        };
        out.push((
            Kind::LeaveGroup,
            v,
            frame::<LeaveGroupRequest>(v, |f| r.encode(v, f)),
        ));
    }
    for v in OffsetCommitRequest::MIN_VERSION..=OffsetCommitRequest::MAX_VERSION {
        let r = OffsetCommitResponse {
            throttle_time_ms: 0,
            topics: vec![OffsetCommitResponseTopic {
                name: "topic".into(),
                partitions: vec![OffsetCommitResponsePartition {
                    partition_index: 0,
                    error_code: ErrorCode::None,
                }],
            }],
        };
        let f = frame::<OffsetCommitRequest>(v, |f| r.encode(v, f));
        out.push((Kind::OffsetCommit, v, f));
    }
    for v in OffsetFetchRequest::MIN_VERSION..=OffsetFetchRequest::MAX_VERSION {
        let r = OffsetFetchResponse {
            throttle_time_ms: 0,
            groups: vec![OffsetFetchResponseGroup {
                group_id: "group".into(),
                topics: vec![OffsetFetchResponseTopics {
                    name: "topic".into(),
                    partitions: vec![OffsetFetchResponsePartitions {
                        partition_index: 0,
                        committed_offset: 3,
                        committed_leader_epoch: -1,
                        metadata: Some(String::new()),
                        error_code: ErrorCode::None,
                    }],
                }],
                error_code: ErrorCode::None,
            }],
        };
        let f = frame::<OffsetFetchRequest>(v, |f| r.encode(v, f));
        out.push((Kind::OffsetFetch, v, f));
    }
    for v in 0..=3 {
        out.push((Kind::Subscription, v, subscription_in(v)));
        let a = ConsumerProtocolAssignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "topic".into(),
                partitions: vec![0, 1],
            }],
            user_data: Some(vec![1]),
        };
        out.push((Kind::Assignment, v, a.encode(v)));
    }
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 7 + i / 3000) as u8).collect();
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut c = Vec::new();
        compression::compress(codec, &data, &mut c).unwrap();
        out.push((Kind::Codec(codec), 0, c));
    }
    out
}

fn subscription_in(v: i16) -> Vec<u8> {
    ConsumerProtocolSubscription {
        topics: vec!["topic".into()],
        user_data: None,
        owned_partitions: vec![TopicPartitions {
            topic: "topic".into(),
            partitions: vec![0],
        }],
        generation_id: 1,
        rack_id: None,
    }
    .encode(v)
}

fn subscription() -> Vec<u8> {
    subscription_in(ConsumerProtocolSubscription::VERSION)
}

fn assignment() -> Vec<u8> {
    ConsumerProtocolAssignment {
        assigned_partitions: vec![TopicPartitions {
            topic: "topic".into(),
            partitions: vec![0],
        }],
        user_data: None,
    }
    .encode(ConsumerProtocolAssignment::VERSION)
}

/// Decodes `bytes` as `kind`; any outcome but a panic is fine. Whether it decoded.
fn decode(kind: Kind, v: i16, bytes: &[u8]) -> bool {
    match kind {
        Kind::Fetch => decode_response::<FetchRequest>(bytes, v, 7).is_ok(),
        Kind::ListOffsets => decode_response::<ListOffsetsRequest>(bytes, v, 7).is_ok(),
        Kind::FindCoordinator => decode_response::<FindCoordinatorRequest>(bytes, v, 7).is_ok(),
        Kind::JoinGroup => decode_response::<JoinGroupRequest>(bytes, v, 7).is_ok(),
        Kind::SyncGroup => decode_response::<SyncGroupRequest>(bytes, v, 7).is_ok(),
        Kind::Heartbeat => decode_response::<HeartbeatRequest>(bytes, v, 7).is_ok(),
        Kind::LeaveGroup => decode_response::<LeaveGroupRequest>(bytes, v, 7).is_ok(),
        Kind::OffsetCommit => decode_response::<OffsetCommitRequest>(bytes, v, 7).is_ok(),
        Kind::OffsetFetch => decode_response::<OffsetFetchRequest>(bytes, v, 7).is_ok(),
        Kind::Subscription => ConsumerProtocolSubscription::decode(bytes).is_ok(),
        Kind::Assignment => ConsumerProtocolAssignment::decode(bytes).is_ok(),
        Kind::Codec(c) => match compression::decompress(c, bytes, MAX_OUTPUT) {
            Ok(out) => {
                assert!(out.len() <= MAX_OUTPUT);
                true
            }
            Err(_) => false,
        },
    }
}

#[test]
fn the_allocation_limit_is_in_force() {
    limit_allocations();
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(128 << 20).is_err());
}

#[test]
fn valid_inputs_decode_and_every_truncation_fails() {
    limit_allocations();
    for (kind, v, f) in valid_inputs() {
        assert!(decode(kind, v, &f), "{kind:?} v{v}");
        // An empty assignment is a valid empty assignment; a snappy stream cut between two
        // chunks is a valid shorter stream (to Java's reader too): those are only decoded.
        for cut in 0..f.len() {
            let may_decode =
                matches!(kind, Kind::Codec(_)) || (kind == Kind::Assignment && cut == 0);
            let decoded = decode(kind, v, &f[..cut]);
            assert!(may_decode || !decoded, "{kind:?} v{v} cut at {cut}");
        }
    }
}

/// Lengths and counts written at every offset: classic `i32`/`i16` maxima and compact varints
/// of 2^31 and 2^32-1, so every length or count field of every message is forged once.
#[test]
fn forged_lengths_at_every_position_do_not_allocate() {
    limit_allocations();
    let forgeries: [&[u8]; 6] = [
        &[0x7f, 0xff, 0xff, 0xff],
        &[0x7f, 0xff],
        &[0xff, 0xff, 0xff, 0xff, 0x0f],
        &[0x80, 0x80, 0x80, 0x80, 0x08],
        &[0xff, 0xff, 0xff, 0x7f],
        &[0x00, 0x10, 0x00, 0x00],
    ];
    for (kind, v, f) in valid_inputs() {
        for at in 0..f.len() {
            for forged in forgeries {
                let mut g = f.clone();
                for (i, b) in forged.iter().enumerate() {
                    if let Some(x) = g.get_mut(at + i) {
                        *x = *b;
                    }
                }
                decode(kind, v, &g);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn random_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400), v in 0i16..18) {
        limit_allocations();
        for kind in [
            Kind::Fetch, Kind::ListOffsets, Kind::FindCoordinator, Kind::JoinGroup,
            Kind::SyncGroup, Kind::Heartbeat, Kind::LeaveGroup, Kind::OffsetCommit,
            Kind::OffsetFetch, Kind::Subscription, Kind::Assignment,
            Kind::Codec(Compression::Gzip), Kind::Codec(Compression::Snappy),
            Kind::Codec(Compression::Lz4), Kind::Codec(Compression::Zstd),
        ] {
            decode(kind, v, &bytes);
        }
    }

    #[test]
    fn mutated_input_never_panics(
        which: prop::sample::Index,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        limit_allocations();
        let inputs = valid_inputs();
        let (kind, v, f) = &inputs[which.index(inputs.len())];
        let mut f = f.clone();
        for (at, byte, op) in edits {
            if f.is_empty() {
                break;
            }
            let i = at.index(f.len());
            match op {
                0 => f[i] = byte,
                1 => {
                    f.remove(i);
                }
                _ => f.insert(i, byte),
            }
        }
        decode(*kind, *v, &f);
    }
}
