//! Checking the numbered stream `kafka_service` produces (values `<instance>:<seq>`, keys
//! `k<seq % 64>`) as an independent consumer read it back: what was lost, what came twice,
//! what came out of order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::kafka::ConsumedRecord;

/// What a read-back stream holds, against what was expected.
#[derive(Debug, Default, Clone)]
pub struct StreamReport {
    /// Records read.
    pub read: usize,
    /// Distinct `(instance, seq)` read.
    pub distinct: usize,
    /// `(instance, seq)` read more than once, with the count.
    pub duplicates: Vec<((String, u64), usize)>,
    /// Expected and never read.
    pub lost: Vec<(String, u64)>,
    /// Read although not expected.
    pub unexpected: Vec<(String, u64)>,
    /// `partition: instance:seq after instance:prev` — an instance's sequence going backwards
    /// within a partition.
    pub out_of_order: Vec<String>,
    /// Records whose key is not `k<seq % 64>` or whose value is not `instance:seq`.
    pub malformed: Vec<String>,
}

impl StreamReport {
    /// Nothing lost, duplicated, unexpected, reordered or malformed.
    pub fn is_clean(&self) -> bool {
        self.duplicates.is_empty()
            && self.lost.is_empty()
            && self.unexpected.is_empty()
            && self.out_of_order.is_empty()
            && self.malformed.is_empty()
    }
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn some<T: fmt::Debug>(v: &[T]) -> String {
            let head: Vec<String> = v.iter().take(10).map(|x| format!("{x:?}")).collect();
            if v.len() > 10 {
                format!("{} … ({} in all)", head.join(", "), v.len())
            } else {
                head.join(", ")
            }
        }
        write!(
            f,
            "read {}, distinct {}, lost {}, duplicated {}, unexpected {}, out of order {}, malformed {}",
            self.read,
            self.distinct,
            self.lost.len(),
            self.duplicates.len(),
            self.unexpected.len(),
            self.out_of_order.len(),
            self.malformed.len()
        )?;
        if !self.lost.is_empty() {
            write!(f, "\n  lost: {}", some(&self.lost))?;
        }
        if !self.duplicates.is_empty() {
            write!(f, "\n  duplicated: {}", some(&self.duplicates))?;
        }
        if !self.unexpected.is_empty() {
            write!(f, "\n  unexpected: {}", some(&self.unexpected))?;
        }
        if !self.out_of_order.is_empty() {
            write!(f, "\n  out of order: {}", some(&self.out_of_order))?;
        }
        if !self.malformed.is_empty() {
            write!(f, "\n  malformed: {}", some(&self.malformed))?;
        }
        Ok(())
    }
}

/// `(instance, seq)` of a record `instance:seq`.
pub fn record_id(r: &ConsumedRecord) -> Option<(String, u64)> {
    let (i, s) = r.value.as_deref()?.split_once(':')?;
    Some((i.to_owned(), s.parse().ok()?))
}

/// Checks `records` against `expected` (instance -> the seq numbers it must have produced):
/// each exactly once, each instance's sequence increasing within every partition, keys as
/// the service writes them. Returns the report and the set of ids read.
pub fn check_stream(
    records: &[ConsumedRecord],
    expected: &BTreeMap<String, std::ops::Range<u64>>,
) -> (StreamReport, BTreeSet<(String, u64)>) {
    let mut rep = StreamReport {
        read: records.len(),
        ..StreamReport::default()
    };
    let mut count: BTreeMap<(String, u64), usize> = BTreeMap::new();
    let mut sorted: Vec<&ConsumedRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut last: BTreeMap<(i32, String), u64> = BTreeMap::new();
    for r in sorted {
        let Some((inst, seq)) = record_id(r) else {
            rep.malformed.push(format!(
                "partition {} offset {}: value {:?}",
                r.partition, r.offset, r.value
            ));
            continue;
        };
        if r.key.as_deref() != Some(format!("k{}", seq % 64).as_str()) {
            rep.malformed
                .push(format!("{inst}:{seq}: key {:?}", r.key.as_deref()));
        }
        if let Some(prev) = last.insert((r.partition, inst.clone()), seq)
            && seq <= prev
        {
            rep.out_of_order.push(format!(
                "partition {}: {inst}:{seq} after {inst}:{prev}",
                r.partition
            ));
        }
        *count.entry((inst, seq)).or_default() += 1;
    }
    for (id, n) in &count {
        if *n > 1 {
            rep.duplicates.push((id.clone(), *n));
        }
        let wanted = expected.get(&id.0).is_some_and(|r| r.contains(&id.1));
        if !wanted {
            rep.unexpected.push(id.clone());
        }
    }
    for (inst, range) in expected {
        for s in range.clone() {
            if !count.contains_key(&(inst.clone(), s)) {
                rep.lost.push((inst.clone(), s));
            }
        }
    }
    rep.distinct = count.len();
    (rep, count.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(partition: i32, offset: i64, v: &str) -> ConsumedRecord {
        let seq: u64 = v.split_once(':').unwrap().1.parse().unwrap();
        ConsumedRecord {
            partition,
            offset,
            timestamp: 0,
            key: Some(format!("k{}", seq % 64)),
            value: Some(v.to_owned()),
            headers: Vec::new(),
        }
    }

    #[test]
    fn finds_loss_duplicates_and_reordering() {
        let records = vec![
            rec(0, 0, "a:0"),
            rec(0, 1, "a:2"),
            rec(0, 2, "a:1"),
            rec(1, 0, "a:2"),
            rec(1, 1, "b:7"),
        ];
        let expected = BTreeMap::from([("a".to_owned(), 0..4)]);
        let (rep, ids) = check_stream(&records, &expected);
        assert_eq!(rep.lost, vec![("a".to_owned(), 3)]);
        assert_eq!(rep.duplicates, vec![(("a".to_owned(), 2), 2)]);
        assert_eq!(rep.unexpected, vec![("b".to_owned(), 7)]);
        assert_eq!(rep.out_of_order.len(), 1, "{rep}");
        assert!(!rep.is_clean());
        assert!(ids.contains(&("b".to_owned(), 7)));

        let clean = vec![rec(0, 0, "a:0"), rec(1, 0, "a:1")];
        let (rep, _) = check_stream(&clean, &BTreeMap::from([("a".to_owned(), 0..2)]));
        assert!(rep.is_clean(), "{rep}");
    }
}
