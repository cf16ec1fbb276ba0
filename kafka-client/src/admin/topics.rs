//! Topics: list and describe (from metadata).

use std::collections::BTreeMap;

use super::io::Io;
use super::{
    Admin, AdminError, Options, PartitionInfo, PerItem, TopicDescription, TopicId, TopicListing,
};
use crate::protocol::ErrorCode;
use crate::protocol::messages::metadata::MetadataTopic;

impl Admin {
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
