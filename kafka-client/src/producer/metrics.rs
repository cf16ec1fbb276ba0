//! Counters a user can read while the producer runs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Live counters, updated with relaxed atomics.
#[derive(Debug)]
pub(crate) struct Counters {
    pub producer_id: AtomicI64,
    pub records_sent: AtomicU64,
    pub records_failed: AtomicU64,
    pub retries: AtomicU64,
    pub batches_sent: AtomicU64,
    pub requests_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub in_flight: AtomicU64,
    pub buffer_used: AtomicU64,
    pub records_queued: AtomicU64,
    pub producer_id_resets: AtomicU64,
    pub producer_epoch_bumps: AtomicU64,
    pub connects: AtomicU64,
    pub disconnects: AtomicU64,
    pub metadata_refreshes: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            producer_id: AtomicI64::new(-1),
            records_sent: AtomicU64::new(0),
            records_failed: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            batches_sent: AtomicU64::new(0),
            requests_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            buffer_used: AtomicU64::new(0),
            records_queued: AtomicU64::new(0),
            producer_id_resets: AtomicU64::new(0),
            producer_epoch_bumps: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            metadata_refreshes: AtomicU64::new(0),
        }
    }
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set(c: &AtomicU64, n: u64) {
        c.store(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProducerMetrics {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProducerMetrics {
            producer_id: self.producer_id.load(Ordering::Relaxed),
            records_sent: g(&self.records_sent),
            records_failed: g(&self.records_failed),
            retries: g(&self.retries),
            batches_sent: g(&self.batches_sent),
            requests_sent: g(&self.requests_sent),
            bytes_sent: g(&self.bytes_sent),
            in_flight_requests: g(&self.in_flight),
            buffer_bytes_used: g(&self.buffer_used),
            records_queued: g(&self.records_queued),
            producer_id_resets: g(&self.producer_id_resets),
            producer_epoch_bumps: g(&self.producer_epoch_bumps),
            connects: g(&self.connects),
            disconnects: g(&self.disconnects),
            metadata_refreshes: g(&self.metadata_refreshes),
        }
    }
}

/// A snapshot of the producer's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerMetrics {
    /// The idempotent producer's current id (-1: none yet, or idempotence off).
    pub producer_id: i64,
    /// Records acknowledged (or written, with acks=0).
    pub records_sent: u64,
    /// Records that failed.
    pub records_failed: u64,
    /// Batches re-sent after a retriable error.
    pub retries: u64,
    /// Record batches sent (one per partition in a produce request; retries included).
    pub batches_sent: u64,
    /// Produce requests sent (each carries the ready batches of one broker; retries
    /// included).
    pub requests_sent: u64,
    /// Bytes of record batches sent.
    pub bytes_sent: u64,
    /// Requests in flight now.
    pub in_flight_requests: u64,
    /// Bytes of `buffer.memory` in use now.
    pub buffer_bytes_used: u64,
    /// Records accepted and not yet completed.
    pub records_queued: u64,
    /// Times a fresh producer id was taken after the first (a restore, an epoch at its
    /// maximum).
    pub producer_id_resets: u64,
    /// Times the producer epoch was bumped to restart sequence numbers (KIP-360: the broker
    /// reported a gap or lost the producer's state, or a batch left unacknowledged).
    pub producer_epoch_bumps: u64,
    /// Broker connections opened.
    pub connects: u64,
    /// Broker connections closed.
    pub disconnects: u64,
    /// Metadata responses applied.
    pub metadata_refreshes: u64,
}
