//! The producer's identity on the wire: an id and its epoch.

/// A producer id with its epoch: what a batch is sealed with, next to its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerIdAndEpoch {
    pub id: i64,
    pub epoch: i16,
}
