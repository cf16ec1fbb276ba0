//! What the admin calls take and return.

use std::collections::BTreeMap;
use std::fmt;

use super::AdminError;

/// A topic's id (a UUID), shown as Kafka's tools show it: URL-safe base64 without padding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// Whether it is the all-zero id (none).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = 0u32;
        let mut n = 0;
        for b in self.0 {
            bits = (bits << 8) | u32::from(b);
            n += 8;
            while n >= 6 {
                n -= 6;
                write!(f, "{}", ABC[((bits >> n) & 63) as usize] as char)?;
            }
        }
        if n > 0 {
            write!(f, "{}", ABC[((bits << (6 - n)) & 63) as usize] as char)?;
        }
        Ok(())
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// Per item (a topic, a group, a partition): its outcome.
pub type PerItem<K, T> = BTreeMap<K, Result<T, AdminError>>;

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub id: i32,
    /// Host of the listener the client uses.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// Fenced by the controller (only when asked for fenced brokers).
    pub fenced: bool,
}

/// The cluster: its id, its controller, its brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// `cluster.id`.
    pub cluster_id: Option<String>,
    /// The controller as brokers report it (with KRaft: a broker that forwards to the quorum).
    pub controller: Option<i32>,
    /// The brokers, by id.
    pub brokers: Vec<BrokerInfo>,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partitions (`None`: the broker's `num.partitions`).
    pub partitions: Option<i32>,
    /// Replication factor (`None`: the broker's `default.replication.factor`).
    pub replication_factor: Option<i16>,
    /// Explicit replicas per partition (then neither count above may be given).
    pub assignments: Vec<(i32, Vec<i32>)>,
    /// Topic configs (`retention.ms`, `cleanup.policy`, …).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// `name` with `partitions` partitions of `replication_factor` replicas.
    pub fn new(name: impl Into<String>, partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.into(),
            partitions: Some(partitions),
            replication_factor: Some(replication_factor),
            assignments: Vec::new(),
            configs: Vec::new(),
        }
    }

    /// `name` with the broker's defaults.
    pub fn with_defaults(name: impl Into<String>) -> Self {
        NewTopic {
            name: name.into(),
            partitions: None,
            replication_factor: None,
            assignments: Vec::new(),
            configs: Vec::new(),
        }
    }

    /// Adds a topic config.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// A topic as created (or as it would be, when only validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    /// Its id (zero when only validated).
    pub topic_id: TopicId,
    /// Partitions (-1 when the broker did not say).
    pub partitions: i32,
    /// Replication factor (-1 when the broker did not say).
    pub replication_factor: i16,
}

/// A partition of a topic as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Index.
    pub partition: i32,
    /// Leader (`None`: none now).
    pub leader: Option<i32>,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Offline replicas.
    pub offline: Vec<i32>,
}

/// A topic as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Id.
    pub topic_id: TopicId,
    /// An internal topic (`__consumer_offsets`, `__transaction_state`).
    pub internal: bool,
    /// Partitions, by index.
    pub partitions: Vec<PartitionInfo>,
}

/// A topic in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicListing {
    /// Name.
    pub name: String,
    /// Id.
    pub topic_id: TopicId,
    /// Internal.
    pub internal: bool,
}

/// Which offset of a partition [`Admin::list_offsets`](super::Admin::list_offsets) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first offset the log still has.
    Earliest,
    /// The end of the log (the next offset to be written).
    Latest,
    /// The offset of the record with the highest timestamp.
    MaxTimestamp,
    /// The first offset whose record's timestamp is at or after this (ms since the epoch).
    Timestamp(i64),
}

impl OffsetSpec {
    pub(crate) fn wire(self) -> i64 {
        match self {
            OffsetSpec::Latest => -1,
            OffsetSpec::Earliest => -2,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// An offset [`Admin::list_offsets`](super::Admin::list_offsets) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// The offset (-1: no record matches the timestamp).
    pub offset: i64,
    /// The record's timestamp (-1 for earliest and latest).
    pub timestamp: i64,
    /// The leader epoch of that offset, when known.
    pub leader_epoch: Option<i32>,
}

/// A committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// The offset of the next record the group reads.
    pub offset: i64,
    /// Its leader epoch, when the committer knew it.
    pub leader_epoch: Option<i32>,
    /// The committer's metadata string.
    pub metadata: String,
}
