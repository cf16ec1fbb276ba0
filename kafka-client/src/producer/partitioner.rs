//! Java's default partitioning: murmur2 of the key bytes for keyed records, sticky
//! partitions for records without a key (the `BuiltInPartitioner` of KIP-794, without its
//! queue-size weighting: a uniformly chosen partition with a leader, switched once it took
//! `batch.size` bytes and its batch is full, or after twice `batch.size`).

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), seed 0x9747b28c.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= (tail[2] as u32) << 16;
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Java's producer picks for a keyed record: `toPositive(murmur2(key)) % n`.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as usize % partitions.max(1)) as i32
}

/// The sticky partition of one topic for records without a key, as Java's `BuiltInPartitioner`
/// (KIP-794) keeps it, without its queue-size weighting: records go to one partition, chosen
/// uniformly among those with a leader, until it has taken at least `batch.size` bytes (the
/// bytes actually appended, batch headers included) *and* its last batch is full, so that the
/// batch left behind is ready to send instead of waiting out `linger.ms`. Batches that never
/// fill (they leave on `linger.ms` first, or keyed records open new ones) cap the stay at twice
/// `batch.size`.
///
/// The accumulator asks [`partition`](Self::partition) for a record's partition; before the
/// record opens a new batch there (the partition has none open, or its last one is full) it
/// calls [`switch_if_due`](Self::switch_if_due) and asks again if that switched; after the
/// append it reports the bytes with [`appended`](Self::appended).
#[derive(Debug, Default)]
pub struct StickyPartition {
    current: Option<i32>,
    produced: usize,
}

impl StickyPartition {
    /// The current partition, or a new one if there is none yet or the topic shrank below it.
    /// `available` lists partitions with a leader (all partitions if empty); `rand` is a
    /// source of randomness.
    pub fn partition(
        &mut self,
        partitions: usize,
        available: &[i32],
        rand: &mut impl FnMut() -> u64,
    ) -> i32 {
        match self.current {
            Some(p) if (p as usize) < partitions => p,
            _ => {
                let p = if available.is_empty() {
                    (rand() % partitions.max(1) as u64) as i32
                } else {
                    available[(rand() % available.len() as u64) as usize]
                };
                self.current = Some(p);
                self.produced = 0;
                p
            }
        }
    }

    /// Called when every batch of the current partition is full (or it has none), before a
    /// record opens a new one there: switches if the partition has taken `batch_size` bytes.
    /// Returns whether it switched (the next [`partition`](Self::partition) picks another).
    pub fn switch_if_due(&mut self, batch_size: usize) -> bool {
        self.update(0, true, batch_size)
    }

    /// Counts `bytes` appended to the current partition; `batch_full` tells whether its last
    /// batch is full now. Switches once `batch_size` bytes went there and the batch is full, or
    /// once twice `batch_size` did. Returns whether it switched.
    pub fn appended(&mut self, bytes: usize, batch_full: bool, batch_size: usize) -> bool {
        self.update(bytes, batch_full, batch_size)
    }

    fn update(&mut self, bytes: usize, enable_switch: bool, batch_size: usize) -> bool {
        if self.current.is_none() {
            return false;
        }
        self.produced += bytes;
        let limit = batch_size.max(1);
        if (enable_switch && self.produced >= limit) || self.produced >= limit.saturating_mul(2) {
            self.current = None;
            self.produced = 0;
            return true;
        }
        false
    }

    /// Bytes appended to the current partition since it was chosen.
    pub fn produced(&self) -> usize {
        self.produced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_java() {
        // Values from the Java client's UtilsTest (testMurmur2).
        let cases: [(&[u8], i32); 5] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
        ];
        for (k, want) in cases {
            assert_eq!(murmur2(k), want, "{}", String::from_utf8_lossy(k));
        }
    }

    fn counter() -> impl FnMut() -> u64 {
        let mut x = 0u64;
        move || {
            x += 1;
            x
        }
    }

    #[test]
    fn sticky_stays_past_batch_size_while_the_batch_is_not_full() {
        let mut s = StickyPartition::default();
        let mut rand = counter();
        let p = s.partition(6, &[], &mut rand);
        // 10 records of 15 bytes: 150 bytes produced, past batch.size = 100, but the
        // partition's batch still has room: no switch (the old rule switched at 100 bytes).
        for _ in 0..10 {
            assert_eq!(s.partition(6, &[], &mut rand), p);
            assert!(!s.appended(15, false, 100));
        }
        assert_eq!(s.produced(), 150);
        assert_eq!(s.partition(6, &[], &mut rand), p);
        // The batch fills with the next record: switch.
        assert!(s.appended(15, true, 100));
        assert_ne!(s.partition(6, &[], &mut rand), p);
        assert_eq!(s.produced(), 0);
    }

    #[test]
    fn sticky_does_not_switch_on_a_full_batch_before_batch_size() {
        // A batch that was partly filled before (keyed records, an earlier stay) fills up
        // after fewer bytes than batch.size: Java stays, and so do we.
        let mut s = StickyPartition::default();
        let mut rand = counter();
        let p = s.partition(6, &[], &mut rand);
        assert!(!s.appended(40, true, 100));
        assert!(!s.switch_if_due(100));
        assert_eq!(s.partition(6, &[], &mut rand), p);
        assert!(!s.appended(59, true, 100));
        assert!(s.appended(1, true, 100), "100 bytes and a full batch");
    }

    #[test]
    fn sticky_switches_before_a_new_batch_once_batch_size_went_there() {
        // The record that does not fit closes the batch; before it opens a new batch in the
        // same partition the accumulator asks, and the partition changes (Java's
        // `partitionChanged` check with every batch full).
        let mut s = StickyPartition::default();
        let mut rand = counter();
        let p = s.partition(6, &[], &mut rand);
        assert!(!s.switch_if_due(100), "nothing produced yet");
        assert!(!s.appended(99, false, 100));
        assert!(!s.switch_if_due(100), "99 bytes: not due");
        assert!(!s.appended(2, false, 100));
        assert!(s.switch_if_due(100));
        assert_ne!(s.partition(6, &[], &mut rand), p);
    }

    #[test]
    fn sticky_caps_the_stay_at_twice_batch_size() {
        let mut s = StickyPartition::default();
        let mut rand = counter();
        let p = s.partition(6, &[], &mut rand);
        assert!(!s.appended(150, false, 100));
        assert_eq!(s.partition(6, &[], &mut rand), p);
        assert!(
            s.appended(50, false, 100),
            "200 bytes: switch even with a batch open"
        );
        assert_ne!(s.partition(6, &[], &mut rand), p);
    }

    #[test]
    fn sticky_picks_partitions_with_a_leader_and_follows_a_shrinking_topic() {
        let mut s = StickyPartition::default();
        let mut rand = counter();
        assert_eq!(s.partition(6, &[4], &mut rand), 4);
        assert!(
            s.appended(1, true, 0),
            "batch.size 0 switches at every full batch"
        );
        assert_eq!(s.partition(6, &[2], &mut rand), 2);
        // Fewer partitions than the current one: a new pick at once.
        let mut s = StickyPartition::default();
        assert_eq!(s.partition(6, &[5], &mut rand), 5);
        assert_eq!(s.partition(3, &[1], &mut rand), 1);
    }
}
