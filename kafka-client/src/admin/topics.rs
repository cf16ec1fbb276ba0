//! Topics: create and delete (at the controller), list and describe (from metadata).

use std::collections::BTreeMap;

use std::time::Instant;

use super::io::{Call, Io};
use super::items::per_item;
use super::{
    Admin, AdminError, CreatedTopic, NewTopic, Options, PartitionInfo, PerItem, TopicDescription,
    TopicId, TopicListing,
};
use crate::protocol::ErrorCode;
use crate::protocol::messages::create_partitions::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use crate::protocol::messages::create_topics::{CreatableTopic, CreateTopicsRequest};
use crate::protocol::messages::delete_topics::DeleteTopicsRequest;
use crate::protocol::messages::metadata::MetadataTopic;

impl Admin {
    /// Creates `topics` at the controller, per topic (`TOPIC_ALREADY_EXISTS`,
    /// `INVALID_REPLICATION_FACTOR`, `INVALID_CONFIG`, … fail that topic only). With
    /// [`Options::validate_only`] the controller only checks them. A topic's partitions get
    /// their leaders a moment after it is created: [`describe_topics`](Self::describe_topics)
    /// shows when.
    pub fn create_topics(
        &self,
        topics: &[NewTopic],
        opts: &Options,
    ) -> Result<PerItem<String, CreatedTopic>, AdminError> {
        const OP: &str = "create_topics";
        let wanted = check_new_topics(topics)?;
        let (call, mut s) = self.call(OP, opts)?;
        let names = wanted.keys().cloned().collect();
        per_item(&mut s.io, &call, names, |io: &mut Io, pending| {
            let node = io.controller(&call)?;
            let req = CreateTopicsRequest {
                topics: pending.iter().map(|n| creatable(wanted[n])).collect(),
                timeout_ms: left_ms(&call),
                validate_only: opts.validate_only,
            };
            let resp = io.request(&call, node, &req)?;
            Ok(resp
                .topics
                .into_iter()
                .map(|t| {
                    let r =
                        AdminError::check(OP, t.error_code, t.error_message.as_deref()).map(|()| {
                            CreatedTopic {
                                topic_id: TopicId(t.topic_id.0),
                                partitions: t.num_partitions,
                                replication_factor: t.replication_factor,
                            }
                        });
                    (t.name, r)
                })
                .collect())
        })
    }

    /// Deletes `topics` at the controller, per topic (`UNKNOWN_TOPIC_OR_PARTITION` for one
    /// that does not exist).
    pub fn delete_topics(
        &self,
        topics: &[&str],
        opts: &Options,
    ) -> Result<PerItem<String, ()>, AdminError> {
        const OP: &str = "delete_topics";
        let (call, mut s) = self.call(OP, opts)?;
        let mut names: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
        names.sort();
        names.dedup();
        per_item(&mut s.io, &call, names, |io: &mut Io, pending| {
            let node = io.controller(&call)?;
            let req = DeleteTopicsRequest {
                names: pending.to_vec(),
                timeout_ms: left_ms(&call),
            };
            let resp = io.request(&call, node, &req)?;
            Ok(resp
                .responses
                .into_iter()
                .map(|t| {
                    let r = AdminError::check(OP, t.error_code, t.error_message.as_deref());
                    (t.name.unwrap_or_default(), r)
                })
                .collect())
        })
    }

    /// Raises each topic's partition count to the total given, at the controller, per topic
    /// (`INVALID_PARTITIONS` for fewer than it has). With [`Options::validate_only`] only
    /// checks.
    pub fn create_partitions(
        &self,
        totals: &[(&str, i32)],
        opts: &Options,
    ) -> Result<PerItem<String, ()>, AdminError> {
        const OP: &str = "create_partitions";
        let (call, mut s) = self.call(OP, opts)?;
        let wanted: BTreeMap<String, i32> =
            totals.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        let names = wanted.keys().cloned().collect();
        per_item(&mut s.io, &call, names, |io: &mut Io, pending| {
            let node = io.controller(&call)?;
            let req = CreatePartitionsRequest {
                topics: pending
                    .iter()
                    .map(|n| CreatePartitionsTopic {
                        name: n.clone(),
                        count: wanted[n],
                        assignments: None,
                    })
                    .collect(),
                timeout_ms: left_ms(&call),
                validate_only: opts.validate_only,
            };
            let resp = io.request(&call, node, &req)?;
            Ok(resp
                .results
                .into_iter()
                .map(|t| {
                    let r = AdminError::check(OP, t.error_code, t.error_message.as_deref());
                    (t.name, r)
                })
                .collect())
        })
    }

    /// Every topic (internal ones included when `internal`), by name.
    pub fn list_topics(
        &self,
        internal: bool,
        opts: &Options,
    ) -> Result<BTreeMap<String, TopicListing>, AdminError> {
        let (call, mut s) = self.call("list_topics", opts)?;
        let m =
            s.io.retrying(&call, |io: &mut Io| io.metadata(&call, None))?;
        Ok(m.topics
            .iter()
            .filter(|t| t.error_code.is_ok() && (internal || !t.is_internal))
            .filter_map(|t| {
                let name = t.name.clone()?;
                Some((
                    name.clone(),
                    TopicListing {
                        name,
                        topic_id: TopicId(t.topic_id.0),
                        internal: t.is_internal,
                    },
                ))
            })
            .collect())
    }

    /// `topics`' partitions, leaders, replicas and ISR, per topic (an unknown topic is
    /// `UNKNOWN_TOPIC_OR_PARTITION` for that topic only).
    pub fn describe_topics(
        &self,
        topics: &[&str],
        opts: &Options,
    ) -> Result<PerItem<String, TopicDescription>, AdminError> {
        const OP: &str = "describe_topics";
        let (call, mut s) = self.call(OP, opts)?;
        let names: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
        let m =
            s.io.retrying(&call, |io: &mut Io| io.metadata(&call, Some(names.clone())))?;
        let mut out: PerItem<String, TopicDescription> = m
            .topics
            .iter()
            .filter_map(|t| Some((t.name.clone()?, describe(t))))
            .filter(|(n, _)| names.contains(n))
            .collect();
        for n in names {
            out.entry(n).or_insert_with(|| {
                Err(AdminError::broker(
                    OP,
                    ErrorCode::UnknownTopicOrPartition,
                    None,
                ))
            });
        }
        Ok(out)
    }
}

/// A topic of a metadata answer, or its error.
fn describe(t: &MetadataTopic) -> Result<TopicDescription, AdminError> {
    const OP: &str = "describe_topics";
    AdminError::check(OP, t.error_code, None)?;
    let mut partitions: Vec<PartitionInfo> = t
        .partitions
        .iter()
        .map(|p| PartitionInfo {
            partition: p.partition_index,
            leader: (p.leader_id >= 0).then_some(p.leader_id),
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.clone(),
            isr: p.isr_nodes.clone(),
            offline: p.offline_replicas.clone(),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    Ok(TopicDescription {
        name: t.name.clone().unwrap_or_default(),
        topic_id: TopicId(t.topic_id.0),
        internal: t.is_internal,
        partitions,
    })
}

/// The topics by name, checked: a name given twice, or counts given beside explicit
/// assignments, is the caller's error.
fn check_new_topics(topics: &[NewTopic]) -> Result<BTreeMap<String, &NewTopic>, AdminError> {
    const OP: &str = "create_topics";
    let mut out = BTreeMap::new();
    for t in topics {
        if !t.assignments.is_empty() && (t.partitions.is_some() || t.replication_factor.is_some()) {
            return Err(AdminError::invalid(
                OP,
                format!(
                    "topic {}: give either partitions and replication factor or assignments",
                    t.name
                ),
            ));
        }
        if out.insert(t.name.clone(), t).is_some() {
            return Err(AdminError::invalid(
                OP,
                format!("topic {} given twice", t.name),
            ));
        }
    }
    Ok(out)
}

fn creatable(t: &NewTopic) -> CreatableTopic {
    CreatableTopic {
        name: t.name.clone(),
        num_partitions: t.partitions.unwrap_or(-1),
        replication_factor: t.replication_factor.unwrap_or(-1),
        assignments: t.assignments.clone(),
        configs: t
            .configs
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect(),
    }
}

/// The call's time left, for the broker's own `timeout_ms`.
pub(crate) fn left_ms(call: &Call) -> i32 {
    let left = call.deadline.saturating_duration_since(Instant::now());
    i32::try_from(left.as_millis()).unwrap_or(i32::MAX)
}
