//! Java's default partitioning: murmur2 of the key bytes for keyed records, sticky
//! partitions for records without a key (the `BuiltInPartitioner` of KIP-794, without its
//! queue-size weighting: a uniformly chosen partition with a leader, switched after
//! `batch.size` bytes).

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

/// The sticky partition of one topic for records without a key.
#[derive(Debug, Default)]
pub struct StickyPartition {
    current: Option<i32>,
    produced: usize,
}

impl StickyPartition {
    /// The partition for the next record of `size` bytes. `available` lists partitions with a
    /// leader (all partitions if empty); `rand` is a source of randomness.
    pub fn next(
        &mut self,
        size: usize,
        partitions: usize,
        available: &[i32],
        batch_size: usize,
        rand: &mut impl FnMut() -> u64,
    ) -> i32 {
        let switch = match self.current {
            None => true,
            Some(p) => p as usize >= partitions || self.produced >= batch_size.max(1),
        };
        if switch {
            let p = if available.is_empty() {
                (rand() % partitions.max(1) as u64) as i32
            } else {
                available[(rand() % available.len() as u64) as usize]
            };
            self.current = Some(p);
            self.produced = 0;
        }
        self.produced += size;
        self.current.unwrap_or(0)
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

    #[test]
    fn sticky_switches_after_batch_size() {
        let mut s = StickyPartition::default();
        let mut x = 0u64;
        let mut rand = || {
            x += 1;
            x
        };
        let p = s.next(10, 6, &[], 100, &mut rand);
        for _ in 0..9 {
            assert_eq!(s.next(10, 6, &[], 100, &mut rand), p);
        }
        assert_ne!(s.next(10, 6, &[], 100, &mut rand), p);
        assert_eq!(s.next(10, 6, &[4], 0, &mut rand), 4);
    }
}
