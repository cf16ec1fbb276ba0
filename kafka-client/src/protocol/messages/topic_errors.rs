//! The per-partition error array that several responses share: topics, each with
//! `(partition, error code)` pairs (AddPartitionsToTxn v2-3, TxnOffsetCommit v3-4).

use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};
use crate::protocol::{DecodeError, ErrorCode};

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitionErrors {
    /// Topic name.
    pub name: String,
    /// (partition, error) pairs.
    pub partitions: Vec<(i32, ErrorCode)>,
}

impl TopicPartitionErrors {
    /// Reads the topics array.
    pub(crate) fn read_array(r: &mut Reader<'_>, flexible: bool) -> Result<Vec<Self>, DecodeError> {
        // A partition is at least an i32 and an i16 (and its tagged fields when flexible).
        let min_partition = 6 + usize::from(flexible);
        r.array_of(flexible, 2, |r| {
            let name = r.string(flexible)?;
            let partitions = r.array_of(flexible, min_partition, |r| {
                let p = (i32::read(r)?, ErrorCode::from_i16(i16::read(r)?));
                r.skip_tagged_fields(flexible)?;
                Ok(p)
            })?;
            r.skip_tagged_fields(flexible)?;
            Ok(Self { name, partitions })
        })
    }

    /// Appends the topics array.
    pub(crate) fn write_array(topics: &[Self], flexible: bool, out: &mut Vec<u8>) {
        out.put_length(Some(topics.len()), flexible);
        for t in topics {
            out.put_string(&t.name, flexible);
            out.put_length(Some(t.partitions.len()), flexible);
            for (p, code) in &t.partitions {
                p.write(out);
                code.code().write(out);
                out.put_empty_tagged_fields(flexible);
            }
            out.put_empty_tagged_fields(flexible);
        }
    }

    /// Every (topic, partition, error), in the array's order.
    pub(crate) fn flatten(topics: &[Self]) -> impl Iterator<Item = (&str, i32, ErrorCode)> {
        topics.iter().flat_map(|t| {
            t.partitions
                .iter()
                .map(move |&(p, code)| (t.name.as_str(), p, code))
        })
    }
}
