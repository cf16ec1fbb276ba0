//! ConsumerGroupDescribe (key 69): a consumer group of the KIP-848 protocol as its coordinator
//! holds it: epochs, the broker-side assignor, each member's subscription and its current and
//! target assignments.
//!
//! Version 0 (flexible).

use crate::protocol::primitives::{ReadType, Reader, Uuid, WriteExt, WriteType};
use crate::protocol::{ApiKey, DecodeError, ErrorCode, Request, Response};

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescribeRequest {
    /// Group ids.
    pub group_ids: Vec<String>,
    /// Also the operations the caller may perform.
    pub include_authorized_operations: bool,
}

impl Request for ConsumerGroupDescribeRequest {
    const API_KEY: ApiKey = ApiKey::ConsumerGroupDescribe;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;
    const FLEXIBLE_FROM: i16 = 0;
    // Java's response does not ask the client to throttle: the broker delays it itself.
    type Response = ConsumerGroupDescribeResponse;

    fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        out.put_length(Some(self.group_ids.len()), true);
        for g in &self.group_ids {
            out.put_string(g, true);
        }
        self.include_authorized_operations.write(out);
        out.put_empty_tagged_fields(true);
    }
}

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedTopic {
    /// Topic id.
    pub topic_id: Uuid,
    /// Topic name.
    pub topic_name: String,
    /// Partitions.
    pub partitions: Vec<i32>,
}

/// A member of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// The member's epoch.
    pub member_epoch: i32,
    /// `client.id`.
    pub client_id: String,
    /// Its host.
    pub client_host: String,
    /// Topics it subscribed to by name.
    pub subscribed_topic_names: Vec<String>,
    /// The pattern it subscribed with.
    pub subscribed_topic_regex: Option<String>,
    /// What it owns now.
    pub assignment: Vec<AssignedTopic>,
    /// What the coordinator wants it to own.
    pub target_assignment: Vec<AssignedTopic>,
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConsumerGroup {
    /// Error (`GROUP_ID_NOT_FOUND` also for a classic group).
    pub error_code: ErrorCode,
    /// The coordinator's message.
    pub error_message: Option<String>,
    /// Id.
    pub group_id: String,
    /// State: `Empty`, `Assigning`, `Reconciling`, `Stable`, `Dead`.
    pub group_state: String,
    /// The group's epoch.
    pub group_epoch: i32,
    /// The epoch of its target assignment.
    pub assignment_epoch: i32,
    /// The broker-side assignor.
    pub assignor_name: String,
    /// Members.
    pub members: Vec<ConsumerGroupMember>,
    /// Operations the caller may perform (`i32::MIN` when not asked).
    pub authorized_operations: i32,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescribeResponse {
    /// Throttle.
    pub throttle_time_ms: i32,
    /// Per group.
    pub groups: Vec<DescribedConsumerGroup>,
}

fn read_assignment(r: &mut Reader<'_>) -> Result<Vec<AssignedTopic>, DecodeError> {
    let topics = r.array_of(true, 19, |r| {
        let t = AssignedTopic {
            topic_id: Uuid::read(r)?,
            topic_name: r.string(true)?,
            partitions: r.array_of(true, 4, i32::read)?,
        };
        r.skip_tagged_fields(true)?;
        Ok(t)
    })?;
    r.skip_tagged_fields(true)?;
    Ok(topics)
}

fn write_assignment(out: &mut Vec<u8>, topics: &[AssignedTopic]) {
    out.put_length(Some(topics.len()), true);
    for t in topics {
        t.topic_id.write(out);
        out.put_string(&t.topic_name, true);
        out.put_length(Some(t.partitions.len()), true);
        for p in &t.partitions {
            p.write(out);
        }
        out.put_empty_tagged_fields(true);
    }
    out.put_empty_tagged_fields(true);
}

impl Response for ConsumerGroupDescribeResponse {
    fn decode(r: &mut Reader<'_>, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = i32::read(r)?;
        let groups = r.array_of(true, 20, |r| {
            let error_code = ErrorCode::from_i16(i16::read(r)?);
            let error_message = r.nullable_string(true)?;
            let group_id = r.string(true)?;
            let group_state = r.string(true)?;
            let group_epoch = i32::read(r)?;
            let assignment_epoch = i32::read(r)?;
            let assignor_name = r.string(true)?;
            let members = r.array_of(true, 16, |r| {
                let m = ConsumerGroupMember {
                    member_id: r.string(true)?,
                    instance_id: r.nullable_string(true)?,
                    rack_id: r.nullable_string(true)?,
                    member_epoch: i32::read(r)?,
                    client_id: r.string(true)?,
                    client_host: r.string(true)?,
                    subscribed_topic_names: r.array_of(true, 1, |r| r.string(true))?,
                    subscribed_topic_regex: r.nullable_string(true)?,
                    assignment: read_assignment(r)?,
                    target_assignment: read_assignment(r)?,
                };
                r.skip_tagged_fields(true)?;
                Ok(m)
            })?;
            let authorized_operations = i32::read(r)?;
            r.skip_tagged_fields(true)?;
            Ok(DescribedConsumerGroup {
                error_code,
                error_message,
                group_id,
                group_state,
                group_epoch,
                assignment_epoch,
                assignor_name,
                members,
                authorized_operations,
            })
        })?;
        r.skip_tagged_fields(true)?;
        Ok(Self {
            throttle_time_ms,
            groups,
        })
    }

    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }
}

impl ConsumerGroupDescribeResponse {
    /// Appends the body (round-trip tests).
    pub fn encode(&self, _version: i16, out: &mut Vec<u8>) {
        self.throttle_time_ms.write(out);
        out.put_length(Some(self.groups.len()), true);
        for g in &self.groups {
            g.error_code.code().write(out);
            out.put_nullable_string(g.error_message.as_deref(), true);
            out.put_string(&g.group_id, true);
            out.put_string(&g.group_state, true);
            g.group_epoch.write(out);
            g.assignment_epoch.write(out);
            out.put_string(&g.assignor_name, true);
            out.put_length(Some(g.members.len()), true);
            for m in &g.members {
                out.put_string(&m.member_id, true);
                out.put_nullable_string(m.instance_id.as_deref(), true);
                out.put_nullable_string(m.rack_id.as_deref(), true);
                m.member_epoch.write(out);
                out.put_string(&m.client_id, true);
                out.put_string(&m.client_host, true);
                out.put_length(Some(m.subscribed_topic_names.len()), true);
                for t in &m.subscribed_topic_names {
                    out.put_string(t, true);
                }
                out.put_nullable_string(m.subscribed_topic_regex.as_deref(), true);
                write_assignment(out, &m.assignment);
                write_assignment(out, &m.target_assignment);
                out.put_empty_tagged_fields(true);
            }
            g.authorized_operations.write(out);
            out.put_empty_tagged_fields(true);
        }
        out.put_empty_tagged_fields(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::test_support::every_cut_fails_to_decode;

    #[test]
    fn the_response_round_trips_and_every_cut_fails() {
        let topic = AssignedTopic {
            topic_id: Uuid([4; 16]),
            topic_name: "t".into(),
            partitions: vec![0, 1],
        };
        let want = ConsumerGroupDescribeResponse {
            throttle_time_ms: 0,
            groups: vec![DescribedConsumerGroup {
                error_code: ErrorCode::None,
                error_message: None,
                group_id: "g".into(),
                group_state: "Stable".into(),
                group_epoch: 3,
                assignment_epoch: 3,
                assignor_name: "uniform".into(),
                members: vec![ConsumerGroupMember {
                    member_id: "m".into(),
                    instance_id: None,
                    rack_id: Some("r1".into()),
                    member_epoch: 3,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["t".into()],
                    subscribed_topic_regex: None,
                    assignment: vec![topic.clone()],
                    target_assignment: vec![topic],
                }],
                authorized_operations: i32::MIN,
            }],
        };
        let mut buf = Vec::new();
        want.encode(0, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(
            ConsumerGroupDescribeResponse::decode(&mut r, 0).unwrap(),
            want
        );
        r.expect_end().unwrap();
        every_cut_fails_to_decode(&buf, |r| ConsumerGroupDescribeResponse::decode(r, 0));
    }

    #[test]
    fn the_request_in_bytes() {
        let req = ConsumerGroupDescribeRequest {
            group_ids: vec!["g".into()],
            include_authorized_operations: true,
        };
        let mut out = Vec::new();
        req.encode(0, &mut out);
        assert_eq!(out, [2, 2, b'g', 1, 0]);
    }
}
