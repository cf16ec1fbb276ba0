//! Partition assignors of the classic group protocol, computed by the group's leader: `range`
//! and `roundrobin`, exactly as the Java client's `RangeAssignor` and `RoundRobinAssignor`
//! assign, so a group may mix our members and Java's (Java 4 offers `[range,
//! cooperative-sticky]` by default: the common `range` is chosen).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::record::TopicPartition;

/// An assignor (a protocol name in JoinGroup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignorKind {
    /// `range`: per topic, consecutive partitions to members sorted by id.
    Range,
    /// `roundrobin`: all partitions, sorted, dealt to the members in turn.
    RoundRobin,
}

impl AssignorKind {
    /// The protocol name the group coordinator matches members on.
    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::Range => "range",
            AssignorKind::RoundRobin => "roundrobin",
        }
    }

    /// The assignor of a protocol name chosen by the coordinator.
    pub fn from_protocol(name: &str) -> Option<Self> {
        match name {
            "range" => Some(AssignorKind::Range),
            "roundrobin" => Some(AssignorKind::RoundRobin),
            _ => None,
        }
    }

    /// Assigns the partitions of `partitions_per_topic` (topic -> partition count) to
    /// `members`; every member gets an entry, possibly empty.
    pub fn assign(
        self,
        members: &[GroupMember],
        partitions_per_topic: &HashMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        match self {
            AssignorKind::Range => range(members, partitions_per_topic),
            AssignorKind::RoundRobin => round_robin(members, partitions_per_topic),
        }
    }
}

impl FromStr for AssignorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        // Java names them by class; accept those too, so Java properties files work as they are.
        let short = s.trim().rsplit('.').next().unwrap_or("");
        match short {
            "range" | "RangeAssignor" => Ok(AssignorKind::Range),
            "roundrobin" | "RoundRobinAssignor" => Ok(AssignorKind::RoundRobin),
            _ => Err(format!(
                "unsupported assignor {s:?}: this client implements range and roundrobin \
                 (sticky and cooperative-sticky are not implemented)"
            )),
        }
    }
}

impl fmt::Display for AssignorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// Subscribed topics.
    pub topics: Vec<String>,
}

/// Java's `MemberInfo` order: static members first, by instance id; then by member id.
fn java_member_order(a: &GroupMember, b: &GroupMember) -> std::cmp::Ordering {
    match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    }
}

fn empty_assignment(members: &[GroupMember]) -> BTreeMap<String, Vec<TopicPartition>> {
    members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect()
}

fn range(
    members: &[GroupMember],
    partitions_per_topic: &HashMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out = empty_assignment(members);
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    for topic in topics {
        let Some(&n) = partitions_per_topic.get(topic.as_str()) else {
            continue;
        };
        let mut consumers: Vec<&GroupMember> = members
            .iter()
            .filter(|m| m.topics.iter().any(|t| t == topic))
            .collect();
        consumers.sort_by(|a, b| java_member_order(a, b));
        let name: Arc<str> = Arc::from(topic.as_str());
        let n = n.max(0) as usize;
        let per = n / consumers.len();
        let extra = n % consumers.len();
        for (i, m) in consumers.iter().enumerate() {
            let start = per * i + i.min(extra);
            let len = per + usize::from(i < extra);
            let list = out
                .get_mut(&m.member_id)
                .expect("every member has an entry");
            list.extend((start..start + len).map(|p| TopicPartition::new(name.clone(), p as i32)));
        }
    }
    out
}

fn round_robin(
    members: &[GroupMember],
    partitions_per_topic: &HashMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out = empty_assignment(members);
    let mut sorted: Vec<&GroupMember> = members.iter().collect();
    sorted.sort_by(|a, b| java_member_order(a, b));
    if sorted.is_empty() {
        return out;
    }
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let mut next = 0usize;
    for topic in topics {
        let Some(&n) = partitions_per_topic.get(topic.as_str()) else {
            continue;
        };
        let name: Arc<str> = Arc::from(topic.as_str());
        for p in 0..n.max(0) {
            // Java's CircularIterator: skip members not subscribed to the topic (one is).
            while !sorted[next % sorted.len()]
                .topics
                .iter()
                .any(|t| t == topic)
            {
                next += 1;
            }
            let m = sorted[next % sorted.len()];
            next += 1;
            out.get_mut(&m.member_id)
                .expect("every member has an entry")
                .push(TopicPartition::new(name.clone(), p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, topics: &[&str]) -> GroupMember {
        GroupMember {
            member_id: id.into(),
            group_instance_id: None,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    fn names(v: &[TopicPartition]) -> Vec<String> {
        v.iter().map(|tp| tp.to_string()).collect()
    }

    #[test]
    fn range_matches_java() {
        // RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions: t1 and t2 with 3 each.
        let counts = HashMap::from([("t1".to_owned(), 3), ("t2".to_owned(), 3)]);
        let a =
            AssignorKind::Range.assign(&[m("c1", &["t1", "t2"]), m("c0", &["t1", "t2"])], &counts);
        assert_eq!(names(&a["c0"]), ["t1-0", "t1-1", "t2-0", "t2-1"]);
        assert_eq!(names(&a["c1"]), ["t1-2", "t2-2"]);
        // 7 partitions over 3: 3, 2, 2.
        let counts = HashMap::from([("t".to_owned(), 7)]);
        let a =
            AssignorKind::Range.assign(&[m("a", &["t"]), m("b", &["t"]), m("c", &["t"])], &counts);
        assert_eq!(names(&a["a"]), ["t-0", "t-1", "t-2"]);
        assert_eq!(names(&a["c"]), ["t-5", "t-6"]);
        // A member subscribed to nothing known gets an empty list.
        let a = AssignorKind::Range.assign(&[m("a", &["t"]), m("z", &["missing"])], &counts);
        assert!(a["z"].is_empty());
        assert_eq!(a["a"].len(), 7);
    }

    #[test]
    fn static_members_sort_first_by_instance_id() {
        let counts = HashMap::from([("t".to_owned(), 2)]);
        let mut s = m("zzz", &["t"]);
        s.group_instance_id = Some("i-1".into());
        let a = AssignorKind::Range.assign(&[m("aaa", &["t"]), s], &counts);
        assert_eq!(names(&a["zzz"]), ["t-0"]);
        assert_eq!(names(&a["aaa"]), ["t-1"]);
    }

    #[test]
    fn round_robin_matches_java() {
        // RoundRobinAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
        let counts = HashMap::from([("t1".to_owned(), 3), ("t2".to_owned(), 3)]);
        let a = AssignorKind::RoundRobin
            .assign(&[m("c0", &["t1", "t2"]), m("c1", &["t1", "t2"])], &counts);
        assert_eq!(names(&a["c0"]), ["t1-0", "t1-2", "t2-1"]);
        assert_eq!(names(&a["c1"]), ["t1-1", "t2-0", "t2-2"]);
        // testMultipleConsumersMixedTopics: c0 {t1}, c1 {t1,t2}, c2 {t1}; t1 3, t2 2.
        let counts = HashMap::from([("t1".to_owned(), 3), ("t2".to_owned(), 2)]);
        let a = AssignorKind::RoundRobin.assign(
            &[m("c0", &["t1"]), m("c1", &["t1", "t2"]), m("c2", &["t1"])],
            &counts,
        );
        assert_eq!(names(&a["c0"]), ["t1-0"]);
        assert_eq!(names(&a["c1"]), ["t1-1", "t2-0", "t2-1"]);
        assert_eq!(names(&a["c2"]), ["t1-2"]);
    }

    #[test]
    fn every_partition_assigned_once() {
        for kind in [AssignorKind::Range, AssignorKind::RoundRobin] {
            for members in 1..6 {
                for parts in 0..13 {
                    let counts = HashMap::from([("a".to_owned(), parts), ("b".to_owned(), 3)]);
                    let ms: Vec<GroupMember> = (0..members)
                        .map(|i| m(&format!("m{i}"), &["a", "b"]))
                        .collect();
                    let out = kind.assign(&ms, &counts);
                    let mut all: Vec<String> = out.values().flat_map(|v| names(v)).collect();
                    all.sort();
                    let before = all.len();
                    all.dedup();
                    assert_eq!(before, all.len());
                    assert_eq!(all.len(), parts as usize + 3);
                    let sizes: Vec<usize> = out.values().map(Vec::len).collect();
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    if kind == AssignorKind::RoundRobin {
                        assert!(hi - lo <= 1, "{kind} {members} {parts}: {sizes:?}");
                    }
                }
            }
        }
    }
}
