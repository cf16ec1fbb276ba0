//! Offsets: a partition's (earliest, latest, by time) from its leader, records deleted up to
//! an offset at the leader, and a group's committed offsets at its coordinator (list, alter,
//! delete).

use std::collections::BTreeMap;

use super::io::{Call, Io};
use super::items::{Answers, at_leaders, per_item};
use super::topics::left_ms;
use super::{Admin, AdminError, GroupOffset, ListedOffset, OffsetSpec, Options, PerItem};
use crate::consumer::TopicPartition;
use crate::protocol::ErrorCode;
use crate::protocol::messages::MetadataResponse;
use crate::protocol::messages::delete_records::DeleteRecordsRequest;
use crate::protocol::messages::fetch::IsolationLevel;
use crate::protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use crate::protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use crate::protocol::messages::offset_delete::OffsetDeleteRequest;
use crate::protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};

/// `FindCoordinator` key type of a group.
pub(crate) const GROUP: i8 = 0;

impl Admin {
    /// The offsets `wanted` asks for, per partition, from each partition's leader
    /// (`read_committed`: "latest" is the last stable offset, as a `read_committed` consumer
    /// sees the end). A moved leader is looked up again within the call's time.
    pub fn list_offsets(
        &self,
        wanted: &[(TopicPartition, OffsetSpec)],
        read_committed: bool,
        opts: &Options,
    ) -> Result<PerItem<TopicPartition, ListedOffset>, AdminError> {
        let (call, mut s) = self.call("list_offsets", opts)?;
        let isolation = if read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        };
        let specs: BTreeMap<TopicPartition, OffsetSpec> = wanted.iter().cloned().collect();
        let items = specs.keys().cloned().collect();
        per_item(&mut s.io, &call, items, |io: &mut Io, pending| {
            at_leaders(
                io,
                &call,
                pending,
                |tps| list_offsets_request(tps, &specs, isolation, &call),
                |r| {
                    r.topics
                        .into_iter()
                        .flat_map(|t| {
                            t.partitions.into_iter().map(move |p| {
                                let tp = TopicPartition::new(t.name.as_str(), p.partition_index);
                                let r = AdminError::check(call.op, p.error_code, None)
                                    .map(|()| listed(p.offset, p.timestamp, p.leader_epoch));
                                (tp, r)
                            })
                        })
                        .collect()
                },
            )
        })
    }

    /// Deletes the records before each offset given (`-1`: up to the high watermark), at
    /// each partition's leader; answers each partition's new start (its low watermark).
    pub fn delete_records(
        &self,
        before: &[(TopicPartition, i64)],
        opts: &Options,
    ) -> Result<PerItem<TopicPartition, i64>, AdminError> {
        let (call, mut s) = self.call("delete_records", opts)?;
        let offsets: BTreeMap<TopicPartition, i64> = before.iter().cloned().collect();
        let items = offsets.keys().cloned().collect();
        per_item(&mut s.io, &call, items, |io: &mut Io, pending| {
            at_leaders(
                io,
                &call,
                pending,
                |tps| DeleteRecordsRequest {
                    topics: by_topic(tps)
                        .into_iter()
                        .map(|(t, ps)| {
                            let with = ps
                                .into_iter()
                                .map(|p| (p, offsets[&TopicPartition::new(t.as_str(), p)]))
                                .collect();
                            (t, with)
                        })
                        .collect(),
                    timeout_ms: left_ms(&call),
                },
                |r| {
                    r.topics
                        .into_iter()
                        .flat_map(|(t, parts)| {
                            parts.into_iter().map(move |p| {
                                let tp = TopicPartition::new(t.as_str(), p.partition_index);
                                let r = AdminError::check(call.op, p.error_code, None)
                                    .map(|()| p.low_watermark);
                                (tp, r)
                            })
                        })
                        .collect()
                },
            )
        })
    }

    /// Removes `group`'s committed offsets of `partitions`, at its coordinator (KIP-496):
    /// per partition (`GROUP_SUBSCRIBED_TO_TOPIC` while a member consumes the topic); a
    /// group-level refusal (`GROUP_ID_NOT_FOUND`) is every partition's.
    pub fn delete_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
        opts: &Options,
    ) -> Result<PerItem<TopicPartition, ()>, AdminError> {
        let (call, mut s) = self.call("delete_group_offsets", opts)?;
        let req = OffsetDeleteRequest {
            group_id: group.to_owned(),
            topics: by_topic(partitions).into_iter().collect(),
        };
        s.io.retrying(&call, |io: &mut Io| {
            let node = io.coordinator(&call, GROUP, group)?;
            let resp = io.request(&call, node, &req)?;
            let group_error = AdminError::check(call.op, resp.error_code, None);
            if group_error.as_ref().is_err_and(AdminError::is_retriable) {
                return group_error.map(|()| PerItem::new());
            }
            let mut out = PerItem::new();
            for tp in partitions {
                out.insert(tp.clone(), group_error.clone());
            }
            if group_error.is_ok() {
                for (t, parts) in resp.topics {
                    for (p, code) in parts {
                        let tp = TopicPartition::new(t.as_str(), p);
                        out.insert(tp, AdminError::check(call.op, code, None));
                    }
                }
            }
            Ok(out)
        })
    }

    /// The offsets `group` has committed (of `partitions`, or of every partition it
    /// committed), from its coordinator; only stable offsets (a pending transactional commit
    /// is waited for). Partitions without a committed offset are left out.
    pub fn list_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
        opts: &Options,
    ) -> Result<BTreeMap<TopicPartition, GroupOffset>, AdminError> {
        let (call, mut s) = self.call("list_group_offsets", opts)?;
        let req = OffsetFetchRequest {
            groups: vec![OffsetFetchRequestGroup {
                group_id: group.to_owned(),
                member_id: None,
                member_epoch: -1,
                topics: partitions.map(by_topic).map(|t| {
                    t.into_iter()
                        .map(|(name, partition_indexes)| OffsetFetchRequestTopics {
                            name,
                            partition_indexes,
                        })
                        .collect()
                }),
            }],
            require_stable: true,
        };
        s.io.retrying(&call, |io: &mut Io| {
            let node = io.coordinator(&call, GROUP, group)?;
            let resp = io.request(&call, node, &req)?;
            let Some(g) = resp.groups.into_iter().find(|g| g.group_id == group) else {
                return Err(AdminError::Protocol {
                    operation: call.op,
                    reason: format!("OffsetFetch answered without the group {group:?}"),
                });
            };
            AdminError::check(call.op, g.error_code, None)?;
            let mut out = BTreeMap::new();
            for t in g.topics {
                for p in t.partitions {
                    AdminError::check(call.op, p.error_code, None)?;
                    if p.committed_offset < 0 {
                        continue;
                    }
                    out.insert(
                        TopicPartition::new(t.name.as_str(), p.partition_index),
                        GroupOffset {
                            offset: p.committed_offset,
                            leader_epoch: (p.committed_leader_epoch >= 0)
                                .then_some(p.committed_leader_epoch),
                            metadata: p.metadata.unwrap_or_default(),
                        },
                    );
                }
            }
            Ok(out)
        })
    }

    /// Sets `group`'s committed offsets (Java's `alterConsumerGroupOffsets`): the group must
    /// have no active member (else each partition is refused, e.g. `UNKNOWN_MEMBER_ID`).
    pub fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
        opts: &Options,
    ) -> Result<PerItem<TopicPartition, ()>, AdminError> {
        let (call, mut s) = self.call("alter_group_offsets", opts)?;
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, offset) in offsets {
            if *offset < 0 {
                return Err(AdminError::invalid(
                    call.op,
                    format!("offset {offset} of {tp} is negative"),
                ));
            }
            topics
                .entry(&*tp.topic)
                .or_default()
                .push(OffsetCommitRequestPartition {
                    partition_index: tp.partition,
                    committed_offset: *offset,
                    committed_leader_epoch: -1,
                    committed_metadata: Some(String::new()),
                });
        }
        let req = OffsetCommitRequest {
            group_id: group.to_owned(),
            generation_id_or_member_epoch: -1,
            member_id: String::new(),
            group_instance_id: None,
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetCommitRequestTopic {
                    name: name.to_owned(),
                    partitions,
                })
                .collect(),
        };
        s.io.retrying(&call, |io: &mut Io| {
            let node = io.coordinator(&call, GROUP, group)?;
            let resp = io.request(&call, node, &req)?;
            let mut out = PerItem::new();
            for t in resp.topics {
                for p in t.partitions {
                    let r = AdminError::check(call.op, p.error_code, None);
                    // The coordinator moved or is loading: the whole commit again.
                    if matches!(
                        p.error_code,
                        ErrorCode::NotCoordinator
                            | ErrorCode::CoordinatorNotAvailable
                            | ErrorCode::CoordinatorLoadInProgress
                    ) {
                        return r.map(|()| PerItem::new());
                    }
                    out.insert(TopicPartition::new(t.name.as_str(), p.partition_index), r);
                }
            }
            Ok(out)
        })
    }
}

/// Partitions by leader, and the answers of those that have none.
pub(crate) type ByLeader<T> = (
    BTreeMap<i32, Vec<TopicPartition>>,
    Answers<TopicPartition, T>,
);

/// Looks up the leaders of `pending`'s partitions: those with a leader, by leader; the
/// others answered at once with why not (no leader now: retried; no such partition: final).
pub(crate) fn by_leader<T>(
    io: &mut Io,
    call: &Call,
    pending: &[TopicPartition],
) -> Result<ByLeader<T>, AdminError> {
    let mut topics: Vec<String> = pending.iter().map(|tp| tp.topic.to_string()).collect();
    topics.sort();
    topics.dedup();
    let m = io.metadata(call, Some(topics))?;
    let mut grouped: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    let mut answers = Vec::new();
    for tp in pending {
        match leader(&m, tp, call.op) {
            Ok(node) => grouped.entry(node).or_default().push(tp.clone()),
            Err(e) => answers.push((tp.clone(), Err(e))),
        }
    }
    Ok((grouped, answers))
}

/// The leader of `tp` in a metadata answer.
pub(crate) fn leader(
    m: &MetadataResponse,
    tp: &TopicPartition,
    op: &'static str,
) -> Result<i32, AdminError> {
    let Some(t) = m
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(&*tp.topic))
    else {
        return Err(AdminError::broker(
            op,
            ErrorCode::UnknownTopicOrPartition,
            None,
        ));
    };
    if t.error_code == ErrorCode::UnknownTopicOrPartition {
        return Err(AdminError::Broker {
            operation: op,
            code: t.error_code,
            message: Some(format!("topic {} does not exist", tp.topic)),
        });
    }
    AdminError::check(op, t.error_code, None)?;
    let Some(p) = t
        .partitions
        .iter()
        .find(|p| p.partition_index == tp.partition)
    else {
        return Err(AdminError::Broker {
            operation: op,
            code: ErrorCode::UnknownTopicOrPartition,
            message: Some(format!("{tp} does not exist")),
        });
    };
    if p.leader_id < 0 {
        return Err(AdminError::broker(op, ErrorCode::LeaderNotAvailable, None));
    }
    Ok(p.leader_id)
}

fn list_offsets_request(
    tps: &[TopicPartition],
    specs: &BTreeMap<TopicPartition, OffsetSpec>,
    isolation: IsolationLevel,
    call: &Call,
) -> ListOffsetsRequest {
    let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for tp in tps {
        topics
            .entry(&tp.topic)
            .or_default()
            .push(ListOffsetsPartition {
                partition_index: tp.partition,
                current_leader_epoch: -1,
                timestamp: specs[tp].wire(),
            });
    }
    ListOffsetsRequest {
        isolation_level: isolation,
        topics: topics
            .into_iter()
            .map(|(name, partitions)| ListOffsetsTopic {
                name: name.to_owned(),
                partitions,
            })
            .collect(),
        timeout_ms: left_ms(call),
    }
}

fn listed(offset: i64, timestamp: i64, leader_epoch: i32) -> ListedOffset {
    ListedOffset {
        offset,
        timestamp,
        leader_epoch: (leader_epoch >= 0).then_some(leader_epoch),
    }
}

/// Partitions by topic, sorted.
pub(crate) fn by_topic(partitions: &[TopicPartition]) -> BTreeMap<String, Vec<i32>> {
    let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        out.entry(tp.topic.to_string())
            .or_default()
            .push(tp.partition);
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    out
}
