//! Partition assignors of the classic group protocol, computed by the group's leader: `range`
//! and `roundrobin`, exactly as the Java client's `RangeAssignor` and `RoundRobinAssignor`
//! assign, and `sticky` and `cooperative-sticky` with Java's sticky algorithm (`sticky`),
//! so a group may mix our members and Java's (Java 4 offers `[range, cooperative-sticky]` by
//! default: the common `range` is chosen, unless every member offers `cooperative-sticky`
//! first).
//!
//! `cooperative-sticky` is the only assignor of the cooperative protocol (KIP-429): a member
//! keeps its partitions through a rebalance, and a partition that moves is first revoked by its
//! owner, then given to its new member in a second rebalance. As in Java, a member uses the
//! cooperative protocol only when every assignor it offers supports it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::record::TopicPartition;
use super::sticky::{self, StickyMember};
use crate::protocol::messages::consumer_protocol::{
    StickyUserData, TopicPartitions, cooperative_sticky_generation, cooperative_sticky_user_data,
};

/// How members hand partitions over in a rebalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceProtocol {
    /// Every member gives up every partition before joining (`range`, `roundrobin`, `sticky`).
    Eager,
    /// Members keep their partitions; only those that move are revoked (KIP-429).
    Cooperative,
}

impl RebalanceProtocol {
    /// The protocol of a member offering `assignors`: cooperative only if all support it.
    pub fn of(assignors: &[AssignorKind]) -> Self {
        if !assignors.is_empty() && assignors.iter().all(|a| a.supports_cooperative()) {
            Self::Cooperative
        } else {
            Self::Eager
        }
    }
}

/// An assignor (a protocol name in JoinGroup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignorKind {
    /// `range`: per topic, consecutive partitions to members sorted by id.
    Range,
    /// `roundrobin`: all partitions, sorted, dealt to the members in turn.
    RoundRobin,
    /// `sticky`: balanced, moving as few partitions as possible (eager; Java's `StickyAssignor`,
    /// each member's previous assignment in its user data).
    Sticky,
    /// `cooperative-sticky`: the sticky assignment for the cooperative protocol (Java's
    /// `CooperativeStickyAssignor`): a partition moving between members is left out until its
    /// owner has revoked it.
    CooperativeSticky,
}

impl AssignorKind {
    /// The protocol name the group coordinator matches members on.
    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::Range => "range",
            AssignorKind::RoundRobin => "roundrobin",
            AssignorKind::Sticky => "sticky",
            AssignorKind::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Whether the cooperative protocol may be used with it.
    pub fn supports_cooperative(self) -> bool {
        self == AssignorKind::CooperativeSticky
    }

    /// What a member puts in its subscription's user data for this assignor, given its last
    /// assignment (as Java's assignors remember it between rebalances).
    pub fn user_data(self, last: &LastAssignment) -> Option<Vec<u8>> {
        match self {
            AssignorKind::Range | AssignorKind::RoundRobin => None,
            AssignorKind::CooperativeSticky => Some(cooperative_sticky_user_data(last.generation)),
            AssignorKind::Sticky => last.partitions.as_ref().map(|p| {
                StickyUserData {
                    partitions: group_by_topic(p),
                    generation: Some(last.generation),
                }
                .encode()
            }),
        }
    }

    /// The assignor of a protocol name chosen by the coordinator.
    pub fn from_protocol(name: &str) -> Option<Self> {
        match name {
            "range" => Some(AssignorKind::Range),
            "roundrobin" => Some(AssignorKind::RoundRobin),
            "sticky" => Some(AssignorKind::Sticky),
            "cooperative-sticky" => Some(AssignorKind::CooperativeSticky),
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
            AssignorKind::Sticky | AssignorKind::CooperativeSticky => {
                self.sticky(members, partitions_per_topic)
            }
        }
    }

    fn sticky(
        self,
        members: &[GroupMember],
        partitions_per_topic: &HashMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let sticky_members: Vec<StickyMember> =
            members.iter().map(|m| self.member_data(m)).collect();
        let out = sticky::assign(&sticky_members, partitions_per_topic);
        let mut assignment = out.assignment;
        if self == AssignorKind::CooperativeSticky {
            // A partition moving from one member to another is not given in this rebalance: its
            // owner revokes it first, then rejoins, and the next rebalance gives it.
            let moving = out
                .transferring
                .unwrap_or_else(|| sticky::transferring_from_claims(&sticky_members, &assignment));
            for (tp, to) in moving {
                if let Some(list) = assignment.get_mut(&to) {
                    list.retain(|p| *p != tp);
                }
            }
        }
        for m in members {
            assignment.entry(m.member_id.clone()).or_default();
        }
        assignment
    }

    /// What a sticky assignor reads of a member: its claimed partitions and their generation.
    fn member_data(self, m: &GroupMember) -> StickyMember {
        let (owned, generation) = if self == AssignorKind::CooperativeSticky {
            // Subscriptions from version 2 carry the generation; older ones in the user data.
            let generation = m
                .generation
                .or_else(|| m.user_data.as_deref().map(cooperative_sticky_generation));
            (m.owned.clone(), generation)
        } else {
            match m.user_data.as_deref().filter(|d| !d.is_empty()) {
                None => (Vec::new(), None),
                Some(d) => match StickyUserData::decode(d) {
                    Ok(u) => (flatten(&u.partitions), u.generation),
                    Err(_) => (Vec::new(), Some(-1)),
                },
            }
        };
        StickyMember {
            id: m.member_id.clone(),
            topics: m.topics.clone(),
            owned,
            generation,
        }
    }
}

/// What a member remembers of its last assignment for its next subscription's user data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastAssignment {
    /// The generation it was received in (-1: none yet).
    pub generation: i32,
    /// The partitions (`None`: none received yet).
    pub partitions: Option<Vec<TopicPartition>>,
}

impl Default for LastAssignment {
    fn default() -> Self {
        Self {
            generation: -1,
            partitions: None,
        }
    }
}

/// Partitions grouped by topic (topics sorted, partitions in the given order), as the consumer
/// protocol writes them.
pub(crate) fn group_by_topic(partitions: &[TopicPartition]) -> Vec<TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .map(|(t, p)| TopicPartitions {
            topic: t.to_owned(),
            partitions: p,
        })
        .collect()
}

/// The partitions of a consumer protocol list, in order (each topic name shared).
pub(crate) fn flatten(list: &[TopicPartitions]) -> Vec<TopicPartition> {
    let mut out = Vec::new();
    for t in list {
        let topic: Arc<str> = Arc::from(t.topic.as_str());
        out.extend(
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(topic.clone(), p)),
        );
    }
    out
}

/// The leader's check of a cooperative assignment (Java's `validateCooperativeAssignment`): no
/// partition may be given to one member while another still owns it. Returns the offenders.
pub(crate) fn cooperative_violations(
    members: &[GroupMember],
    assignment: &BTreeMap<String, Vec<TopicPartition>>,
) -> Vec<TopicPartition> {
    let mut added = HashSet::new();
    let mut revoked = HashSet::new();
    for m in members {
        let assigned = assignment.get(&m.member_id).map_or(&[][..], Vec::as_slice);
        let owned: HashSet<&TopicPartition> = m.owned.iter().collect();
        let now: HashSet<&TopicPartition> = assigned.iter().collect();
        added.extend(assigned.iter().filter(|tp| !owned.contains(tp)).cloned());
        revoked.extend(m.owned.iter().filter(|tp| !now.contains(tp)).cloned());
    }
    let mut v: Vec<TopicPartition> = added.intersection(&revoked).cloned().collect();
    v.sort();
    v
}

impl FromStr for AssignorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        // Java names them by class; accept those too, so Java properties files work as they are.
        let short = s.trim().rsplit('.').next().unwrap_or("");
        match short {
            "range" | "RangeAssignor" => Ok(AssignorKind::Range),
            "roundrobin" | "RoundRobinAssignor" => Ok(AssignorKind::RoundRobin),
            "sticky" | "StickyAssignor" => Ok(AssignorKind::Sticky),
            "cooperative-sticky" | "CooperativeStickyAssignor" => {
                Ok(AssignorKind::CooperativeSticky)
            }
            _ => Err(format!(
                "unsupported assignor {s:?}: this client implements range, roundrobin, sticky \
                 and cooperative-sticky"
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
    /// The partitions it owns (subscription version 1+; empty under the eager protocol).
    pub owned: Vec<TopicPartition>,
    /// The generation it owns them in (subscription version 2+), if it reported one.
    pub generation: Option<i32>,
    /// Assignor-specific data.
    pub user_data: Option<Vec<u8>>,
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
            owned: Vec::new(),
            generation: None,
            user_data: None,
        }
    }

    fn owning(id: &str, owned: &[i32], generation: i32) -> GroupMember {
        let mut g = m(id, &["t"]);
        g.owned = owned.iter().map(|&p| TopicPartition::new("t", p)).collect();
        g.generation = Some(generation);
        g
    }

    #[test]
    fn cooperative_sticky_holds_back_what_moves_until_it_is_revoked() {
        let counts = HashMap::from([("t".to_owned(), 6)]);
        // a and b own 3 each; c joins: each keeps two, and the partition each gives up is not
        // given to c in this rebalance (no one may own it twice).
        let members = [
            owning("a", &[0, 2, 4], 5),
            owning("b", &[1, 3, 5], 5),
            m("c", &["t"]),
        ];
        let out = AssignorKind::CooperativeSticky.assign(&members, &counts);
        assert_eq!(names(&out["a"]), ["t-0", "t-2"]);
        assert_eq!(names(&out["b"]), ["t-1", "t-3"]);
        assert!(out["c"].is_empty(), "{out:?}");
        assert!(cooperative_violations(&members, &out).is_empty());
        // Next rebalance: a and b revoked them; c gets both.
        let members = [
            owning("a", &[0, 2], 6),
            owning("b", &[1, 3], 6),
            m("c", &["t"]),
        ];
        let out = AssignorKind::CooperativeSticky.assign(&members, &counts);
        assert_eq!(names(&out["c"]), ["t-4", "t-5"]);
        // The eager sticky assignor reads the previous assignment from the user data and gives
        // everything at once.
        let mut a = m("a", &["t"]);
        a.user_data = AssignorKind::Sticky.user_data(&LastAssignment {
            generation: 5,
            partitions: Some(vec![
                TopicPartition::new("t", 0),
                TopicPartition::new("t", 2),
                TopicPartition::new("t", 4),
            ]),
        });
        let out = AssignorKind::Sticky.assign(&[a, m("b", &["t"]), m("c", &["t"])], &counts);
        assert_eq!(names(&out["a"]), ["t-0", "t-2"]);
        assert_eq!(out["b"].len() + out["c"].len(), 4);
    }

    #[test]
    fn a_cooperative_violation_is_found() {
        let members = [owning("a", &[0, 1], 3), m("b", &["t"])];
        let out = BTreeMap::from([
            ("a".to_owned(), vec![TopicPartition::new("t", 0)]),
            ("b".to_owned(), vec![TopicPartition::new("t", 1)]),
        ]);
        assert_eq!(
            cooperative_violations(&members, &out),
            [TopicPartition::new("t", 1)]
        );
    }

    #[test]
    fn protocol_is_cooperative_only_if_every_assignor_is() {
        use AssignorKind::*;
        assert_eq!(
            RebalanceProtocol::of(&[CooperativeSticky]),
            RebalanceProtocol::Cooperative
        );
        assert_eq!(
            RebalanceProtocol::of(&[Range, CooperativeSticky]),
            RebalanceProtocol::Eager
        );
        assert_eq!(RebalanceProtocol::of(&[Sticky]), RebalanceProtocol::Eager);
        for name in [
            "cooperative-sticky",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        ] {
            assert_eq!(name.parse::<AssignorKind>(), Ok(CooperativeSticky));
        }
        assert_eq!("StickyAssignor".parse::<AssignorKind>(), Ok(Sticky));
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
        for kind in [
            AssignorKind::Range,
            AssignorKind::RoundRobin,
            AssignorKind::Sticky,
            AssignorKind::CooperativeSticky,
        ] {
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
                    if kind != AssignorKind::Range {
                        assert!(hi - lo <= 1, "{kind} {members} {parts}: {sizes:?}");
                    }
                }
            }
        }
    }
}
