//! What a user sends and what comes back.

use std::sync::Arc;

use crate::protocol::record::Header;

/// A record to send. Borrowed: the producer serializes it into a batch buffer during
/// `send()`, so nothing of it is kept and nothing is copied twice.
#[derive(Debug, Clone, Copy)]
pub struct ProducerRecord<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Explicit partition; `None` lets the partitioner choose.
    pub partition: Option<i32>,
    /// Key (null if `None`).
    pub key: Option<&'a [u8]>,
    /// Value (null if `None`: a tombstone).
    pub value: Option<&'a [u8]>,
    /// Headers, in order; duplicate keys are kept.
    pub headers: &'a [Header<'a>],
    /// Timestamp in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl<'a> ProducerRecord<'a> {
    /// A record for `topic` with no key, value or headers.
    pub fn new(topic: &'a str) -> Self {
        Self {
            topic,
            partition: None,
            key: None,
            value: None,
            headers: &[],
            timestamp: None,
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: &'a [u8]) -> Self {
        self.value = Some(value);
        self
    }

    /// Sets the headers.
    pub fn headers(mut self, headers: &'a [Header<'a>]) -> Self {
        self.headers = headers;
        self
    }

    /// Sets an explicit partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the timestamp (ms since the epoch).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset; -1 with `acks=0` (the broker does not answer).
    pub offset: i64,
    /// The record's timestamp, or the broker's append time if the topic uses LogAppendTime.
    pub timestamp: i64,
}
