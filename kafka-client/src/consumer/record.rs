//! What the consumer hands out: [`TopicPartition`], [`ConsumerRecord`], [`ConsumerRecords`],
//! [`OffsetAndMetadata`].

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::record::OwnedHeader;

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// How a record's timestamp was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// By the producer.
    CreateTime,
    /// By the broker when it appended the batch (`message.timestamp.type=LogAppendTime`).
    LogAppendTime,
}

/// A record returned by `poll()`.
///
/// Its key, value and header values are [`Bytes`]: slices of the buffer its batch was fetched
/// (or decompressed) into, shared by the batch's records, so no record costs an allocation and
/// a value can be handed on (to an HTTP body, a channel) without a copy. A record kept alive
/// keeps that buffer alive (up to `max.partition.fetch.bytes`, or a decompressed batch); copy
/// what is kept for long (`value.as_deref().map(<[u8]>::to_vec)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    /// Who set the timestamp.
    pub timestamp_type: TimestampType,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in record order; duplicate keys are kept.
    pub headers: Vec<OwnedHeader>,
    /// The leader epoch of the batch, if the broker recorded one.
    pub leader_epoch: Option<i32>,
}

#[cfg(test)]
impl ConsumerRecord {
    /// A record of `topic`/`partition` at `offset` with no key, value, headers or epoch.
    pub(crate) fn bare(topic: Arc<str>, partition: i32, offset: i64) -> Self {
        ConsumerRecord {
            topic,
            partition,
            offset,
            timestamp: 0,
            timestamp_type: TimestampType::CreateTime,
            key: None,
            value: None,
            headers: Vec::new(),
            leader_epoch: None,
        }
    }
}

impl ConsumerRecord {
    /// The record's partition.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }

    /// The first header with this key, if any.
    pub fn header(&self, key: &str) -> Option<&OwnedHeader> {
        self.headers.iter().find(|h| h.key == key)
    }
}

/// The records of one `poll()`, in the order they were fetched (by offset within a partition).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerRecords {
    records: Vec<ConsumerRecord>,
}

impl ConsumerRecords {
    pub(crate) fn new(records: Vec<ConsumerRecord>) -> Self {
        Self { records }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// All of them.
    pub fn iter(&self) -> std::slice::Iter<'_, ConsumerRecord> {
        self.records.iter()
    }

    /// The partitions that have records here.
    pub fn partitions(&self) -> BTreeSet<TopicPartition> {
        self.records
            .iter()
            .map(ConsumerRecord::topic_partition)
            .collect()
    }

    /// The records of one partition.
    pub fn records(&self, tp: &TopicPartition) -> impl Iterator<Item = &ConsumerRecord> {
        self.records
            .iter()
            .filter(move |r| r.partition == tp.partition && *r.topic == *tp.topic)
    }

    /// The records as a `Vec`.
    pub fn into_vec(self) -> Vec<ConsumerRecord> {
        self.records
    }
}

impl IntoIterator for ConsumerRecords {
    type Item = ConsumerRecord;
    type IntoIter = std::vec::IntoIter<ConsumerRecord>;
    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl<'a> IntoIterator for &'a ConsumerRecords {
    type Item = &'a ConsumerRecord;
    type IntoIter = std::slice::Iter<'a, ConsumerRecord>;
    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

/// A committed position: the offset of the next record to consume, with the leader epoch of
/// the last consumed one and free-form metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset to consume.
    pub offset: i64,
    /// Leader epoch of the last consumed record, if known.
    pub leader_epoch: Option<i32>,
    /// Metadata stored with the offset.
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// An offset without metadata.
    pub fn new(offset: i64) -> Self {
        Self {
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }
}
