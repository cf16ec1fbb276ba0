//! The contexts of the consumer's in-flight requests, and its [`Net`] (the connection layer
//! under `network/` that the producer shares).

use std::collections::HashMap;
use std::sync::Arc;

use super::config::AutoOffsetReset;
use super::record::TopicPartition;
use crate::network::MetadataContext;
use crate::protocol::primitives::Uuid;

/// Brokers are nodes `0..`, bootstrap servers `-1, -2, …` (as in Java); the group
/// coordinator gets a connection of its own as node `COORDINATOR_BASE - broker id`, so a
/// JoinGroup held for a whole rebalance never delays fetches from the same broker.
pub(crate) const COORDINATOR_BASE: i32 = i32::MAX;

/// What an in-flight request was.
#[derive(Debug)]
pub(crate) enum RequestContext {
    Metadata,
    Fetch(FetchContext),
    ListOffsets(Vec<(TopicPartition, AutoOffsetReset)>),
    FindCoordinator,
    JoinGroup,
    SyncGroup,
    Heartbeat,
    LeaveGroup,
    /// A LeaveGroup removing a restored image's static member for good.
    Release,
    /// A ConsumerGroupHeartbeat (KIP-848).
    GroupHeartbeat(GroupHeartbeatKind),
    /// The id of the commit in the coordinator's queue.
    OffsetCommit(u64),
    /// Positions to initialize (`None`) or a `committed()` query (its id).
    OffsetFetch(Option<u64>),
    /// Positions being validated after a leader change.
    OffsetForLeaderEpoch(Checked),
}

/// What a ConsumerGroupHeartbeat was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupHeartbeatKind {
    /// The member's own (joining or heartbeating), carrying this subscription version.
    Member { subscription: u64 },
    /// Leaving (epoch -1 or -2).
    Leave,
    /// A restored copy removing the image's static member.
    Release,
}

/// The positions an OffsetForLeaderEpoch checks (`validation`): each partition, its position
/// and the position's epoch.
pub(crate) type Checked = Vec<(TopicPartition, i64, i32)>;

/// A Fetch in flight: which positions it asked for, and the topic ids it named.
#[derive(Debug)]
pub(crate) struct FetchContext {
    pub node: i32,
    pub partitions: Vec<(TopicPartition, i64)>,
    pub topic_names: HashMap<Uuid, Arc<str>>,
}

impl MetadataContext for RequestContext {
    fn metadata() -> Self {
        Self::Metadata
    }
}

/// The consumer's connections and cluster view: the one connection layer of both clients.
pub(crate) type Net = crate::network::Net<RequestContext>;
