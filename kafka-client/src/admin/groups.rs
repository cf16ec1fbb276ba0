//! Consumer groups: list them (every broker coordinates some), describe them (at each
//! group's coordinator: DescribeGroups for a classic group, ConsumerGroupDescribe for one of
//! the KIP-848 protocol).

use super::io::Io;
use super::items::{at_every_broker, per_item};
use super::offsets::GROUP;
use super::{Admin, AdminError, Options, PerItem};
use crate::consumer::TopicPartition;
use crate::protocol::ErrorCode;
use crate::protocol::messages::consumer_group_describe::{
    AssignedTopic, ConsumerGroupDescribeRequest, DescribedConsumerGroup,
};
use crate::protocol::messages::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicPartitions,
};
use crate::protocol::messages::describe_groups::{DescribeGroupsRequest, DescribedGroup};
use crate::protocol::messages::list_groups::ListGroupsRequest;

/// A group in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Id.
    pub group_id: String,
    /// `classic`, `consumer` (KIP-848) or `share`.
    pub group_type: String,
    /// `consumer` for a consumer group of the classic protocol.
    pub protocol_type: String,
    /// State (`Stable`, `Empty`, …).
    pub state: String,
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Its host, as the coordinator saw it.
    pub host: String,
    /// The topics it subscribed to.
    pub subscription: Vec<String>,
    /// The partitions assigned to it.
    pub assignment: Vec<TopicPartition>,
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Id.
    pub group_id: String,
    /// `classic` or `consumer` (KIP-848).
    pub group_type: String,
    /// State (`Stable`, `Empty`, `PreparingRebalance`, …).
    pub state: String,
    /// `consumer` for a consumer group (of either protocol).
    pub protocol_type: String,
    /// The assignor the group uses (a member's for classic groups, the broker's for KIP-848).
    pub assignor: String,
    /// The coordinator's node id.
    pub coordinator: i32,
    /// Members.
    pub members: Vec<MemberDescription>,
}

impl Admin {
    /// Every group of the cluster (each broker lists those it coordinates), optionally only
    /// those in `states`. A broker that cannot answer within the call's time fails the call
    /// (a listing without it would be silently short).
    pub fn list_groups(
        &self,
        states: &[&str],
        opts: &Options,
    ) -> Result<Vec<GroupListing>, AdminError> {
        let (call, mut s) = self.call("list_groups", opts)?;
        let req = ListGroupsRequest {
            states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
            types_filter: Vec::new(),
        };
        s.io.retrying(&call, |io: &mut Io| {
            let mut out = Vec::new();
            for resp in at_every_broker(io, &call, &req)? {
                AdminError::check(call.op, resp.error_code, None)?;
                out.extend(resp.groups.into_iter().map(|g| GroupListing {
                    group_id: g.group_id,
                    group_type: g.group_type,
                    protocol_type: g.protocol_type,
                    state: g.group_state,
                }));
            }
            out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
            Ok(out)
        })
    }

    /// `groups` as their coordinators describe them: state, assignor, members with their
    /// subscriptions and assignments, per group (`GROUP_ID_NOT_FOUND` for one that does not
    /// exist).
    pub fn describe_groups(
        &self,
        groups: &[&str],
        opts: &Options,
    ) -> Result<PerItem<String, GroupDescription>, AdminError> {
        let (call, mut s) = self.call("describe_groups", opts)?;
        let items = groups.iter().map(|g| (*g).to_owned()).collect();
        per_item(&mut s.io, &call, items, |io: &mut Io, pending| {
            let mut answers = Vec::new();
            for g in pending {
                let r = io
                    .coordinator(&call, GROUP, g)
                    .and_then(|node| describe_one(io, &call, node, g));
                answers.push((g.clone(), r));
            }
            Ok(answers)
        })
    }
}

/// One group at its coordinator: as a classic group; one the coordinator does not know as
/// classic (`GROUP_ID_NOT_FOUND`) as a KIP-848 group, whose error is then the answer.
fn describe_one(
    io: &mut Io,
    call: &super::io::Call,
    node: i32,
    g: &str,
) -> Result<GroupDescription, AdminError> {
    let missing = |api: &str| AdminError::Protocol {
        operation: call.op,
        reason: format!("{api} answered without the group {g:?}"),
    };
    let req = DescribeGroupsRequest {
        groups: vec![g.to_owned()],
        include_authorized_operations: false,
    };
    let d = io
        .request(call, node, &req)?
        .groups
        .into_iter()
        .find(|d| d.group_id == g)
        .ok_or_else(|| missing("DescribeGroups"))?;
    match describe(d, node, call.op) {
        Err(e) if e.code() == Some(ErrorCode::GroupIdNotFound) => {
            let req = ConsumerGroupDescribeRequest {
                group_ids: vec![g.to_owned()],
                include_authorized_operations: false,
            };
            let d = io
                .request(call, node, &req)?
                .groups
                .into_iter()
                .find(|d| d.group_id == g)
                .ok_or_else(|| missing("ConsumerGroupDescribe"))?;
            describe_consumer(d, node, call.op)
        }
        r => r,
    }
}

/// A KIP-848 group of a ConsumerGroupDescribe answer, or its error.
fn describe_consumer(
    d: DescribedConsumerGroup,
    coordinator: i32,
    op: &'static str,
) -> Result<GroupDescription, AdminError> {
    AdminError::check(op, d.error_code, d.error_message.as_deref())?;
    let assigned = |topics: &[AssignedTopic]| {
        let mut out: Vec<TopicPartition> = topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.topic_name.as_str(), *p))
            })
            .collect();
        out.sort();
        out
    };
    let members = d
        .members
        .into_iter()
        .map(|m| MemberDescription {
            assignment: assigned(&m.assignment),
            member_id: m.member_id,
            instance_id: m.instance_id,
            client_id: m.client_id,
            host: m.client_host,
            subscription: m.subscribed_topic_names,
        })
        .collect();
    Ok(GroupDescription {
        group_id: d.group_id,
        group_type: "consumer".into(),
        state: d.group_state,
        protocol_type: "consumer".into(),
        assignor: d.assignor_name,
        coordinator,
        members,
    })
}

/// A group of a DescribeGroups answer, or its error. A `Dead` group (what versions before 6
/// answer for a group that does not exist) is `GROUP_ID_NOT_FOUND`.
fn describe(
    d: DescribedGroup,
    coordinator: i32,
    op: &'static str,
) -> Result<GroupDescription, AdminError> {
    AdminError::check(op, d.error_code, d.error_message.as_deref())?;
    if d.group_state == "Dead" {
        return Err(AdminError::broker(op, ErrorCode::GroupIdNotFound, None));
    }
    let consumer = d.protocol_type == "consumer";
    let members = d
        .members
        .into_iter()
        .map(|m| {
            // Only a consumer group's bytes are the consumer protocol's; others stay opaque.
            let subscription = consumer
                .then(|| ConsumerProtocolSubscription::decode(&m.member_metadata).ok())
                .flatten()
                .map(|s| s.topics)
                .unwrap_or_default();
            let assignment = consumer
                .then(|| ConsumerProtocolAssignment::decode(&m.member_assignment).ok())
                .flatten()
                .map(|a| partitions(&a.assigned_partitions))
                .unwrap_or_default();
            MemberDescription {
                member_id: m.member_id,
                instance_id: m.group_instance_id,
                client_id: m.client_id,
                host: m.client_host,
                subscription,
                assignment,
            }
        })
        .collect();
    Ok(GroupDescription {
        group_id: d.group_id,
        group_type: "classic".into(),
        state: d.group_state,
        protocol_type: d.protocol_type,
        assignor: d.protocol_data,
        coordinator,
        members,
    })
}

fn partitions(tps: &[TopicPartitions]) -> Vec<TopicPartition> {
    let mut out: Vec<TopicPartition> = tps
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.topic.as_str(), *p))
        })
        .collect();
    out.sort();
    out
}
