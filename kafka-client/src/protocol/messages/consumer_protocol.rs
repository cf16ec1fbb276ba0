//! The consumer protocol: what consumers put in JoinGroup's protocol metadata (a
//! [`ConsumerProtocolSubscription`]) and SyncGroup's assignments (a
//! [`ConsumerProtocolAssignment`]), encoded as the Java client's `ConsumerProtocol` encodes
//! them, so that our assignors and Java consumers can lead and follow each other in one group.
//!
//! The sticky assignors' user data is here too: [`StickyUserData`] (`sticky`: the member's
//! previous assignment and its generation) and [`cooperative_sticky_user_data`]
//! (`cooperative-sticky`: the generation alone), as Java's `StickyAssignor` and
//! `CooperativeStickyAssignor` write them.
//!
//! Both are an `i16` version followed by a struct in classic (non-flexible) encoding, versions
//! 0-3. As in Java, a version above 3 is read as 3 (newer versions may only append fields), and
//! bytes after the known fields are ignored; a negative version is an error. Java writes
//! version 3 ([`ConsumerProtocolSubscription::VERSION`]), and so do we.

use crate::protocol::DecodeError;
use crate::protocol::primitives::{ReadType, Reader, WriteExt, WriteType};

/// The protocol type of consumer groups in JoinGroup and SyncGroup.
pub const PROTOCOL_TYPE: &str = "consumer";

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPartitions {
    /// Topic.
    pub topic: String,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// What a member subscribes to, sent in JoinGroup for each assignor it supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerProtocolSubscription {
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Assignor-specific data.
    pub user_data: Option<Vec<u8>>,
    /// Partitions the member owns now (v1+): for cooperative and sticky assignors.
    pub owned_partitions: Vec<TopicPartitions>,
    /// The generation those were owned in (v2+), -1 if none.
    pub generation_id: i32,
    /// `client.rack` (v3+), for rack-aware assignment.
    pub rack_id: Option<String>,
}

impl Default for ConsumerProtocolSubscription {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

/// The partitions the leader assigned to a member, received in SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerProtocolAssignment {
    /// Assigned partitions.
    pub assigned_partitions: Vec<TopicPartitions>,
    /// Assignor-specific data.
    pub user_data: Option<Vec<u8>>,
}

fn read_version(r: &mut Reader<'_>) -> Result<i16, DecodeError> {
    match i16::read(r)? {
        v if v < 0 => Err(DecodeError::InvalidValue {
            what: "consumer protocol version",
            value: v as i64,
        }),
        v => Ok(v.min(ConsumerProtocolSubscription::VERSION)),
    }
}

fn write_topic_partitions(out: &mut Vec<u8>, v: &[TopicPartitions]) {
    out.put_length(Some(v.len()), false);
    for tp in v {
        out.put_string(&tp.topic, false);
        out.put_length(Some(tp.partitions.len()), false);
        for p in &tp.partitions {
            p.write(out);
        }
    }
}

fn read_topic_partitions(r: &mut Reader<'_>) -> Result<Vec<TopicPartitions>, DecodeError> {
    r.array_of(false, 6, |r| {
        Ok(TopicPartitions {
            topic: r.string(false)?,
            partitions: r.array_of(false, 4, i32::read)?,
        })
    })
}

impl ConsumerProtocolSubscription {
    /// The version written: the highest, as Java writes.
    pub const VERSION: i16 = 3;

    /// Encodes it (version prefix included) in `version` (0-3): fields newer than `version`
    /// are left out.
    pub fn encode(&self, version: i16) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        version.write(&mut out);
        out.put_length(Some(self.topics.len()), false);
        for t in &self.topics {
            out.put_string(t, false);
        }
        out.put_nullable_bytes(self.user_data.as_deref(), false);
        if version >= 1 {
            write_topic_partitions(&mut out, &self.owned_partitions);
        }
        if version >= 2 {
            self.generation_id.write(&mut out);
        }
        if version >= 3 {
            out.put_nullable_string(self.rack_id.as_deref(), false);
        }
        out
    }

    /// Decodes JoinGroup member metadata written by any consumer (ours, Java's, or another
    /// client's of the same protocol).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        let version = read_version(r)?;
        let topics = r.array_of(false, 2, |r| r.string(false))?;
        let user_data = r.nullable_bytes(false)?.map(<[u8]>::to_vec);
        let owned_partitions = if version >= 1 {
            read_topic_partitions(r)?
        } else {
            Vec::new()
        };
        let generation_id = if version >= 2 { i32::read(r)? } else { -1 };
        let rack_id = if version >= 3 {
            r.nullable_string(false)?
        } else {
            None
        };
        Ok(Self {
            topics,
            user_data,
            owned_partitions,
            generation_id,
            rack_id,
        })
    }
}

impl ConsumerProtocolAssignment {
    /// The version written: the highest, as Java writes (the fields are the same in 0-3).
    pub const VERSION: i16 = 3;

    /// Encodes it (version prefix included) in `version` (0-3).
    pub fn encode(&self, version: i16) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        version.write(&mut out);
        write_topic_partitions(&mut out, &self.assigned_partitions);
        out.put_nullable_bytes(self.user_data.as_deref(), false);
        out
    }

    /// Decodes a SyncGroup assignment. Empty bytes (what the coordinator hands a member the
    /// leader left out) are an empty assignment.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let r = &mut Reader::new(bytes);
        read_version(r)?;
        Ok(Self {
            assigned_partitions: read_topic_partitions(r)?,
            user_data: r.nullable_bytes(false)?.map(<[u8]>::to_vec),
        })
    }
}

/// The user data of the `sticky` assignor (eager; Java's `StickyAssignor`): the partitions
/// the member was assigned last and the generation of that assignment. No version prefix:
/// version 1 appends the generation to version 0, and a reader takes what is there.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StickyUserData {
    /// The previous assignment.
    pub partitions: Vec<TopicPartitions>,
    /// Its generation (absent in version 0).
    pub generation: Option<i32>,
}

impl StickyUserData {
    /// Encodes it as version 1 (version 0 without a generation).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        write_topic_partitions(&mut out, &self.partitions);
        if let Some(g) = self.generation {
            g.write(&mut out);
        }
        out
    }

    /// Decodes it; bytes after the known fields are ignored, as Java's reader ignores them.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        let partitions = read_topic_partitions(r)?;
        let generation = if r.remaining() >= 4 {
            Some(i32::read(r)?)
        } else {
            None
        };
        Ok(Self {
            partitions,
            generation,
        })
    }
}

/// The user data of `cooperative-sticky` (Java's `CooperativeStickyAssignor`): the generation
/// of the member's last assignment, for leaders that read subscriptions older than version 2.
pub fn cooperative_sticky_user_data(generation: i32) -> Vec<u8> {
    generation.to_be_bytes().to_vec()
}

/// The generation in `cooperative-sticky` user data (Java: unreadable data counts as -1).
pub fn cooperative_sticky_generation(user_data: &[u8]) -> i32 {
    user_data
        .get(..4)
        .map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn subscription() -> ConsumerProtocolSubscription {
        ConsumerProtocolSubscription {
            topics: vec!["a".into(), "b".into()],
            user_data: Some(vec![9]),
            owned_partitions: vec![TopicPartitions {
                topic: "a".into(),
                partitions: vec![0, 2],
            }],
            generation_id: 5,
            rack_id: Some("r1".into()),
        }
    }

    fn assignment() -> ConsumerProtocolAssignment {
        ConsumerProtocolAssignment {
            assigned_partitions: vec![
                TopicPartitions {
                    topic: "a".into(),
                    partitions: vec![0, 1],
                },
                TopicPartitions {
                    topic: "b".into(),
                    partitions: vec![3],
                },
            ],
            user_data: None,
        }
    }

    #[test]
    fn java_bytes() {
        // ConsumerProtocol.serializeSubscription(new Subscription(["t"], null, [t-0], 1, "r"))
        // in Kafka's Java client: version 3, topics, null user data, owned partitions,
        // generation, rack.
        let want: &[u8] = &[
            0, 3, // version
            0, 0, 0, 1, 0, 1, b't', // topics
            0xff, 0xff, 0xff, 0xff, // user data: null
            0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 0, // owned: t-0
            0, 0, 0, 1, // generation
            0, 1, b'r', // rack
        ];
        let s = ConsumerProtocolSubscription {
            topics: vec!["t".into()],
            user_data: None,
            owned_partitions: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![0],
            }],
            generation_id: 1,
            rack_id: Some("r".into()),
        };
        assert_eq!(s.encode(ConsumerProtocolSubscription::VERSION), want);
        assert_eq!(ConsumerProtocolSubscription::decode(want).unwrap(), s);
        // serializeAssignment(new Assignment([t-0, t-1])): version 3, partitions, null user data.
        let want: &[u8] = &[
            0, 3, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff,
            0xff,
        ];
        let a = ConsumerProtocolAssignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![0, 1],
            }],
            user_data: None,
        };
        assert_eq!(a.encode(ConsumerProtocolAssignment::VERSION), want);
        assert_eq!(ConsumerProtocolAssignment::decode(want).unwrap(), a);
    }

    #[test]
    fn every_version_roundtrips() {
        for v in 0..=3 {
            let mut s = subscription();
            let bytes = s.encode(v);
            if v < 1 {
                s.owned_partitions.clear();
            }
            if v < 2 {
                s.generation_id = -1;
            }
            if v < 3 {
                s.rack_id = None;
            }
            assert_eq!(
                ConsumerProtocolSubscription::decode(&bytes).unwrap(),
                s,
                "v{v}"
            );
            for cut in 0..bytes.len() {
                assert!(ConsumerProtocolSubscription::decode(&bytes[..cut]).is_err());
            }
            let bytes = assignment().encode(v);
            assert_eq!(
                ConsumerProtocolAssignment::decode(&bytes).unwrap(),
                assignment()
            );
            for cut in 1..bytes.len() {
                assert!(ConsumerProtocolAssignment::decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn newer_versions_read_as_3_and_trailing_fields_are_ignored() {
        let mut bytes = subscription().encode(3);
        bytes[..2].copy_from_slice(&7i16.to_be_bytes());
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(
            ConsumerProtocolSubscription::decode(&bytes).unwrap(),
            subscription()
        );
        let mut bytes = assignment().encode(3);
        bytes[..2].copy_from_slice(&4i16.to_be_bytes());
        bytes.push(0);
        assert_eq!(
            ConsumerProtocolAssignment::decode(&bytes).unwrap(),
            assignment()
        );
        bytes[..2].copy_from_slice(&(-1i16).to_be_bytes());
        assert!(ConsumerProtocolAssignment::decode(&bytes).is_err());
        assert_eq!(
            ConsumerProtocolAssignment::decode(&[]).unwrap(),
            ConsumerProtocolAssignment::default()
        );
        assert!(ConsumerProtocolSubscription::decode(&[]).is_err());
    }

    #[test]
    fn sticky_user_data_java_bytes() {
        // StickyAssignor.serializeTopicPartitionAssignment([t-0, t-1], generation 4): an array of
        // (topic, partitions), then the generation; version 0 has no generation.
        let want: &[u8] = &[
            0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, // previous_assignment
            0, 0, 0, 4, // generation
        ];
        let d = StickyUserData {
            partitions: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![0, 1],
            }],
            generation: Some(4),
        };
        assert_eq!(d.encode(), want);
        assert_eq!(StickyUserData::decode(want).unwrap(), d);
        let v0 = StickyUserData::decode(&want[..want.len() - 4]).unwrap();
        assert_eq!(v0.generation, None);
        assert_eq!(v0.partitions, d.partitions);
        assert!(StickyUserData::decode(&want[..5]).is_err());
        assert_eq!(cooperative_sticky_user_data(7), [0, 0, 0, 7]);
        assert_eq!(cooperative_sticky_generation(&[0, 0, 0, 7, 9]), 7);
        assert_eq!(cooperative_sticky_generation(&[0, 0]), -1);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = ConsumerProtocolSubscription::decode(&bytes);
            let _ = ConsumerProtocolAssignment::decode(&bytes);
            let _ = StickyUserData::decode(&bytes);
        }

        #[test]
        fn mutations_never_panic(v in 0i16..=3, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut s = subscription().encode(v);
            let mut a = assignment().encode(v);
            for (i, b) in flips {
                let i1 = i % s.len();
                s[i1] = b;
                let i2 = i % a.len();
                a[i2] = b;
            }
            let _ = ConsumerProtocolSubscription::decode(&s);
            let _ = ConsumerProtocolAssignment::decode(&a);
        }
    }
}
