//! The sticky assignment of the Java client's `AbstractStickyAssignor`, behind both `sticky`
//! (eager, KIP-54) and `cooperative-sticky` (KIP-429): as balanced as possible, and moving as
//! few partitions as balance allows from the members that own them.
//!
//! Two algorithms, as in Java:
//! - **constrained** (every member subscribes to the same topics): each member keeps up to its
//!   quota of what it owns (the lowest partition numbers first), the rest is dealt round-robin
//!   to the members under quota, in member id order;
//! - **general** (subscriptions differ): owned partitions are kept where still subscribed,
//!   unassigned ones go to the least loaded member that may take them, then partitions move
//!   one at a time from a member with two more than another that may take them, preferring
//!   to give a partition back to the member that owned it in an earlier generation, and
//!   undoing the whole rebalance if it did not improve the balance.
//!
//! Claims are settled first, as in Java: a partition claimed by two members of the same
//! generation is given up by both; of two different generations, the newer one keeps it.
//!
//! Where Java iterates a `HashMap` (whose order follows Java's string hashes), this iterates in
//! member id order: ties (which of two equally loaded members gets a partition) may be broken
//! differently, never validity, balance or stickiness, and only the leader's choice counts.
//! Rack-aware assignment (KIP-881) is not implemented: racks are ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::record::TopicPartition;

/// Java's `DEFAULT_GENERATION`: a member that reports none.
const NO_GENERATION: i32 = -1;

/// A member as the sticky algorithm sees it.
#[derive(Debug, Clone)]
pub(crate) struct StickyMember {
    /// Member id.
    pub id: String,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// The partitions it claims: its owned partitions (`cooperative-sticky`) or its previous
    /// assignment from its user data (`sticky`).
    pub owned: Vec<TopicPartition>,
    /// The generation of that claim, if it reported one.
    pub generation: Option<i32>,
}

/// What [`assign`] computed.
#[derive(Debug)]
pub(crate) struct StickyAssignment {
    /// Every member's partitions.
    pub assignment: BTreeMap<String, Vec<TopicPartition>>,
    /// The constrained algorithm's record of partitions handed from one member to another
    /// (partition -> new owner); `None` after the general algorithm, which leaves it to be
    /// computed from the claims.
    pub transferring: Option<HashMap<TopicPartition, String>>,
}

/// Assigns the partitions of `counts` (topic -> partition count, topics that exist) to
/// `members`.
pub(crate) fn assign(members: &[StickyMember], counts: &HashMap<String, i32>) -> StickyAssignment {
    let subscribed: HashSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let counts: HashMap<String, i32> = counts
        .iter()
        .filter(|(t, _)| subscribed.contains(t))
        .map(|(t, n)| (t.clone(), *n))
        .collect();
    let counts = &counts;
    let mut members: Vec<&StickyMember> = members.iter().collect();
    members.sort_by(|a, b| a.id.cmp(&b.id));
    members.dedup_by(|a, b| a.id == b.id);
    let claims = settle_claims(&members, counts);
    let first: BTreeSet<&String> = members
        .first()
        .map_or_else(BTreeSet::new, |m| m.topics.iter().collect());
    let all_equal = members
        .iter()
        .all(|m| m.topics.iter().collect::<BTreeSet<_>>() == first);
    if all_equal {
        let mut c = Constrained::new(&members, counts, claims);
        c.build();
        StickyAssignment {
            assignment: c.assignment,
            transferring: Some(c.transferring),
        }
    } else {
        StickyAssignment {
            assignment: General::new(&members, counts, claims).build(),
            transferring: None,
        }
    }
}

/// Partitions each member may keep, after conflicting claims are settled.
struct Claims {
    owned: BTreeMap<String, Vec<TopicPartition>>,
    /// Claimed by two members of one generation: taken from both.
    contested: HashSet<TopicPartition>,
    /// The newest generation any member reported.
    max_generation: i32,
}

fn exists(counts: &HashMap<String, i32>, tp: &TopicPartition) -> bool {
    counts
        .get(&*tp.topic)
        .is_some_and(|&n| tp.partition >= 0 && tp.partition < n)
}

fn settle_claims(members: &[&StickyMember], counts: &HashMap<String, i32>) -> Claims {
    let mut owned: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
    let mut owner: HashMap<TopicPartition, usize> = HashMap::new();
    let mut contested = HashSet::new();
    let mut max_generation = NO_GENERATION;
    for m in members {
        owned.insert(m.id.clone(), Vec::new());
    }
    for (i, m) in members.iter().enumerate() {
        let generation = m.generation.unwrap_or(NO_GENERATION);
        max_generation = max_generation.max(generation);
        for tp in m.owned.iter().filter(|tp| exists(counts, tp)) {
            let Some(&j) = owner.get(tp) else {
                owned.get_mut(&m.id).expect("every member").push(tp.clone());
                owner.insert(tp.clone(), i);
                continue;
            };
            if j == i {
                continue; // listed twice by the same member
            }
            let other = members[j].generation.unwrap_or(NO_GENERATION);
            if generation == other {
                tracing::warn!(partition = %tp, a = %m.id, b = %members[j].id, generation, "two members claim a partition in one generation: neither keeps it");
                contested.insert(tp.clone());
                owned
                    .get_mut(&members[j].id)
                    .expect("every member")
                    .retain(|p| p != tp);
                owner.insert(tp.clone(), i);
            } else if generation > other {
                owned
                    .get_mut(&members[j].id)
                    .expect("every member")
                    .retain(|p| p != tp);
                owned.get_mut(&m.id).expect("every member").push(tp.clone());
                owner.insert(tp.clone(), i);
            }
        }
    }
    Claims {
        owned,
        contested,
        max_generation,
    }
}

/// Every partition of `topics` (in that order), partitions in index order.
fn partitions_of<'a>(
    topics: impl IntoIterator<Item = &'a String>,
    counts: &HashMap<String, i32>,
) -> Vec<TopicPartition> {
    let mut out = Vec::new();
    for t in topics {
        let name: Arc<str> = Arc::from(t.as_str());
        let n = counts.get(t).copied().unwrap_or(0).max(0);
        out.extend((0..n).map(|p| TopicPartition::new(name.clone(), p)));
    }
    out
}

// --- constrained: every member subscribes to the same topics ---------------------------------

struct Constrained<'a> {
    counts: &'a HashMap<String, i32>,
    claims: Claims,
    min_quota: usize,
    max_quota: usize,
    /// Members that get one partition over the minimum (0 when the quotas are equal).
    expected_over_min: usize,
    over_min: usize,
    assignment: BTreeMap<String, Vec<TopicPartition>>,
    assigned: HashSet<TopicPartition>,
    /// Owned partitions a member did not keep, with that member.
    maybe_revoked: HashMap<TopicPartition, String>,
    under_min: Vec<String>,
    at_min: std::collections::VecDeque<String>,
    transferring: HashMap<TopicPartition, String>,
}

impl<'a> Constrained<'a> {
    fn new(members: &[&StickyMember], counts: &'a HashMap<String, i32>, claims: Claims) -> Self {
        let total: usize = members
            .first()
            .map_or(0, |m| partitions_of(&m.topics, counts).len());
        let n = members.len().max(1);
        Self {
            counts,
            claims,
            min_quota: total / n,
            max_quota: total.div_ceil(n),
            expected_over_min: total % n,
            over_min: 0,
            assignment: members.iter().map(|m| (m.id.clone(), Vec::new())).collect(),
            assigned: HashSet::new(),
            maybe_revoked: HashMap::new(),
            under_min: Vec::new(),
            at_min: std::collections::VecDeque::new(),
            transferring: HashMap::new(),
        }
    }

    fn build(&mut self) {
        let Some(topics) = self.topics() else {
            return;
        };
        self.keep_owned();
        let unassigned: Vec<TopicPartition> = partitions_of(&topics, self.counts)
            .into_iter()
            .filter(|tp| !self.assigned.contains(tp))
            .collect();
        self.under_min.sort();
        self.at_min.make_contiguous().sort();
        self.round_robin(unassigned);
    }

    /// The common subscription, sorted (topics that exist only).
    fn topics(&self) -> Option<Vec<String>> {
        let mut t: Vec<String> = self.counts.keys().cloned().collect();
        t.sort();
        (!self.assignment.is_empty()).then_some(t)
    }

    /// Each member keeps up to its quota of what it owns, lowest partition numbers first.
    fn keep_owned(&mut self) {
        let members: Vec<String> = self.assignment.keys().cloned().collect();
        for m in members {
            let mut owned: Vec<TopicPartition> = self.claims.owned[&m]
                .iter()
                .filter(|tp| !self.claims.contested.contains(*tp))
                .cloned()
                .collect();
            owned.sort_by(|a, b| (a.partition, &a.topic).cmp(&(b.partition, &b.topic)));
            let keep = if owned.len() < self.min_quota {
                self.under_min.push(m.clone());
                owned.len()
            } else if owned.len() >= self.max_quota && self.over_min < self.expected_over_min {
                self.over_min += 1;
                if self.over_min == self.expected_over_min {
                    self.at_min.clear();
                }
                self.max_quota
            } else {
                if self.over_min < self.expected_over_min {
                    self.at_min.push_back(m.clone());
                }
                self.min_quota
            };
            for tp in owned.drain(keep..) {
                self.maybe_revoked.insert(tp, m.clone());
            }
            self.assigned.extend(owned.iter().cloned());
            self.assignment.get_mut(&m).expect("member").extend(owned);
        }
    }

    /// Deals the unassigned partitions to the members under the minimum quota in turn, then
    /// to those at the minimum that may still take one more.
    fn round_robin(&mut self, unassigned: Vec<TopicPartition>) {
        let mut next = 0;
        for tp in unassigned {
            let member = if next < self.under_min.len() {
                next += 1;
                self.under_min[next - 1].clone()
            } else if !self.under_min.is_empty() {
                next = 1;
                self.under_min[0].clone()
            } else if let Some(m) = self.at_min.pop_front() {
                m
            } else {
                tracing::error!(partition = %tp, "sticky assignor: no member left under its quota; giving it to the least loaded");
                self.least_loaded()
            };
            let count = self.give(tp, &member);
            if count == self.min_quota && next > 0 && self.under_min.get(next - 1) == Some(&member)
            {
                next -= 1;
                self.under_min.remove(next);
                self.at_min.push_back(member);
            } else if count == self.max_quota {
                self.over_min += 1;
            }
        }
    }

    fn least_loaded(&self) -> String {
        self.assignment
            .iter()
            .min_by_key(|(id, v)| (v.len(), *id))
            .map(|(id, _)| id.clone())
            .expect("members exist")
    }

    fn give(&mut self, tp: TopicPartition, member: &str) -> usize {
        let moved = self
            .maybe_revoked
            .get(&tp)
            .is_some_and(|from| from != member);
        if moved || self.claims.contested.contains(&tp) {
            self.transferring.insert(tp.clone(), member.to_owned());
        }
        let list = self.assignment.get_mut(member).expect("member");
        list.push(tp);
        list.len()
    }
}

// --- general: subscriptions differ --------------------------------------------------------------

/// The partitions of one topic moved from one member to another, by (from, to).
type PairMoves = BTreeMap<(String, String), BTreeSet<TopicPartition>>;

/// Partitions moved in this rebalance, by topic and (from, to), so that a partition moving
/// back towards a member that gave one up moves that one instead (no A->B and B->A of one
/// topic in one rebalance).
#[derive(Default)]
struct Movements {
    by_topic: HashMap<Arc<str>, PairMoves>,
    of: HashMap<TopicPartition, (String, String)>,
}

impl Movements {
    fn forget(&mut self, tp: &TopicPartition) -> Option<(String, String)> {
        let pair = self.of.remove(tp)?;
        if let Some(topic) = self.by_topic.get_mut(&tp.topic) {
            if let Some(set) = topic.get_mut(&pair) {
                set.remove(tp);
                if set.is_empty() {
                    topic.remove(&pair);
                }
            }
            if topic.is_empty() {
                self.by_topic.remove(&tp.topic);
            }
        }
        Some(pair)
    }

    fn record(&mut self, tp: &TopicPartition, pair: (String, String)) {
        self.of.insert(tp.clone(), pair.clone());
        self.by_topic
            .entry(tp.topic.clone())
            .or_default()
            .entry(pair)
            .or_default()
            .insert(tp.clone());
    }

    fn moved(&mut self, tp: &TopicPartition, from: &str, to: &str) {
        match self.forget(tp) {
            Some((src, _)) if src == to => {} // back where it started
            Some((src, _)) => self.record(tp, (src, to.to_owned())),
            None => self.record(tp, (from.to_owned(), to.to_owned())),
        }
    }

    /// The partition to move from `from` to `to` in place of `tp`.
    fn actual(&self, tp: &TopicPartition, from: &str, to: &str) -> TopicPartition {
        let Some(topic) = self.by_topic.get(&tp.topic) else {
            return tp.clone();
        };
        let from = self.of.get(tp).map_or(from, |(src, _)| src.as_str());
        topic
            .get(&(to.to_owned(), from.to_owned()))
            .and_then(|set| set.iter().next().cloned())
            .unwrap_or_else(|| tp.clone())
    }
}

struct General<'a> {
    counts: &'a HashMap<String, i32>,
    topic_members: BTreeMap<String, Vec<String>>,
    member_topics: BTreeMap<String, Vec<String>>,
    current: BTreeMap<String, Vec<TopicPartition>>,
    owner: HashMap<TopicPartition, String>,
    /// Members by (partitions assigned, id): the least loaded first.
    by_load: BTreeSet<(usize, String)>,
    /// For each partition, its owner in the newest generation before the current one.
    previous: HashMap<TopicPartition, (String, i32)>,
    revocation_required: bool,
    movements: Movements,
}

impl<'a> General<'a> {
    fn new(members: &[&StickyMember], counts: &'a HashMap<String, i32>, claims: Claims) -> Self {
        let mut topic_members: BTreeMap<String, Vec<String>> =
            counts.keys().map(|t| (t.clone(), Vec::new())).collect();
        let mut member_topics = BTreeMap::new();
        for m in members {
            let mut mine = Vec::new();
            for t in &m.topics {
                if let Some(list) = topic_members.get_mut(t)
                    && !mine.contains(t)
                {
                    mine.push(t.clone());
                    list.push(m.id.clone());
                }
            }
            member_topics.insert(m.id.clone(), mine);
        }
        let mut previous: HashMap<TopicPartition, (String, i32)> = HashMap::new();
        for m in members {
            let generation = match m.generation {
                Some(g) if g < claims.max_generation => g,
                None if claims.max_generation > NO_GENERATION => NO_GENERATION,
                _ => continue,
            };
            for tp in &m.owned {
                let newer = previous.get(tp).is_none_or(|(_, g)| generation > *g);
                if newer {
                    previous.insert(tp.clone(), (m.id.clone(), generation));
                }
            }
        }
        let owner = claims
            .owned
            .iter()
            .flat_map(|(m, v)| v.iter().map(move |tp| (tp.clone(), m.clone())))
            .collect();
        Self {
            counts,
            topic_members,
            member_topics,
            current: claims.owned,
            owner,
            by_load: BTreeSet::new(),
            previous,
            revocation_required: false,
            movements: Movements::default(),
        }
    }

    fn build(mut self) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut sorted_topics: Vec<String> = self.topic_members.keys().cloned().collect();
        sorted_topics.sort_by_key(|t| (self.topic_members[t].len(), t.clone()));
        let mut all = partitions_of(&sorted_topics, self.counts);
        let assigned = self.keep_owned();
        let mut unassigned: Vec<TopicPartition> = all
            .iter()
            .filter(|tp| !assigned.contains(*tp))
            .cloned()
            .collect();
        self.by_load = self
            .current
            .iter()
            .map(|(m, v)| (v.len(), m.clone()))
            .collect();
        let initializing = self.by_load.iter().next_back().is_none_or(|(n, _)| *n == 0);
        for tp in &unassigned {
            self.assign_to_least_loaded(tp);
        }
        // Only partitions with two or more possible members, and members that could hold
        // more or hold such partitions, take part in balancing.
        let fixed_topics: HashSet<&str> = self
            .topic_members
            .iter()
            .filter(|(_, m)| m.len() < 2)
            .map(|(t, _)| t.as_str())
            .collect();
        all.retain(|tp| !fixed_topics.contains(&*tp.topic));
        unassigned.retain(|tp| !fixed_topics.contains(&*tp.topic));
        let mut fixed = BTreeMap::new();
        let members: Vec<String> = self.member_topics.keys().cloned().collect();
        for m in members {
            if !self.may_move(&m) {
                let v = self.current.remove(&m).unwrap_or_default();
                self.by_load.remove(&(v.len(), m.clone()));
                fixed.insert(m, v);
            }
        }
        let before = self.current.clone();
        let owners_before = self.owner.clone();
        if !self.revocation_required {
            self.reassign(&unassigned);
        }
        let moved = self.reassign(&all);
        if !initializing && moved && score(&self.current) >= score(&before) {
            self.current = before;
            self.owner = owners_before;
        }
        self.current.extend(fixed);
        self.current
    }

    /// Keeps each member's owned partitions that it still subscribes to.
    fn keep_owned(&mut self) -> HashSet<TopicPartition> {
        let mut assigned = HashSet::new();
        for (m, parts) in self.current.iter_mut() {
            let topics = &self.member_topics[m];
            parts.retain(|tp| {
                if !self.topic_members.contains_key(&*tp.topic) {
                    self.owner.remove(tp);
                    false
                } else if !topics.iter().any(|t| **t == *tp.topic) {
                    self.revocation_required = true;
                    self.owner.remove(tp);
                    false
                } else {
                    assigned.insert(tp.clone());
                    true
                }
            });
        }
        assigned
    }

    fn subscribes(&self, member: &str, topic: &str) -> bool {
        self.member_topics
            .get(member)
            .is_some_and(|t| t.iter().any(|x| x == topic))
    }

    fn assign_to_least_loaded(&mut self, tp: &TopicPartition) {
        let Some((n, m)) = self
            .by_load
            .iter()
            .find(|(_, m)| self.subscribes(m, &tp.topic))
            .cloned()
        else {
            return;
        };
        self.by_load.remove(&(n, m.clone()));
        self.current.get_mut(&m).expect("member").push(tp.clone());
        self.owner.insert(tp.clone(), m.clone());
        self.by_load.insert((n + 1, m));
    }

    fn capacity(&self, member: &str) -> usize {
        self.member_topics[member]
            .iter()
            .map(|t| self.counts.get(t).copied().unwrap_or(0).max(0) as usize)
            .sum()
    }

    fn may_move(&self, member: &str) -> bool {
        let held = &self.current[member];
        held.len() < self.capacity(member)
            || held
                .iter()
                .any(|tp| self.topic_members[&*tp.topic].len() >= 2)
    }

    fn load(&self, member: &str) -> usize {
        self.current.get(member).map_or(0, Vec::len)
    }

    fn is_balanced(&self) -> bool {
        let (Some((min, _)), Some((max, _))) = (self.by_load.first(), self.by_load.last()) else {
            return true;
        };
        if *min + 1 >= *max {
            return true;
        }
        for (n, m) in &self.by_load {
            if *n == self.capacity(m) {
                continue;
            }
            let mine: HashSet<&TopicPartition> = self.current[m].iter().collect();
            for tp in partitions_of(&self.member_topics[m], self.counts) {
                if mine.contains(&tp) {
                    continue;
                }
                if let Some(other) = self.owner.get(&tp)
                    && n + 1 < self.load(other)
                {
                    return false;
                }
            }
        }
        true
    }

    /// Moves partitions of `candidates` until balanced or nothing moves. Returns whether any
    /// moved.
    fn reassign(&mut self, candidates: &[TopicPartition]) -> bool {
        let mut any = false;
        loop {
            let mut modified = false;
            for tp in candidates {
                if self.is_balanced() {
                    break;
                }
                let Some(owner) = self.owner.get(tp).cloned() else {
                    continue;
                };
                // Back to its owner of an earlier generation, if that member may still take it
                // (Java does not check the subscription here; a claim can be stale).
                if let Some((prev, _)) = self.previous.get(tp).cloned()
                    && self.current.contains_key(&prev)
                    && self.subscribes(&prev, &tp.topic)
                    && self.load(&owner) > self.load(&prev) + 1
                {
                    self.move_partition(tp, &owner, &prev);
                    any = true;
                    modified = true;
                    continue;
                }
                let lighter = self.topic_members[&*tp.topic]
                    .iter()
                    .any(|o| self.current.contains_key(o) && self.load(&owner) > self.load(o) + 1);
                if lighter
                    && let Some(to) = self
                        .by_load
                        .iter()
                        .find(|(_, m)| self.subscribes(m, &tp.topic))
                        .map(|(_, m)| m.clone())
                {
                    self.move_partition(tp, &owner, &to);
                    any = true;
                    modified = true;
                }
            }
            if !modified {
                return any;
            }
        }
    }

    fn move_partition(&mut self, tp: &TopicPartition, from: &str, to: &str) {
        let tp = self.movements.actual(tp, from, to);
        let Some(from) = self.owner.get(&tp).cloned() else {
            return;
        };
        let (nf, nt) = (self.load(&from), self.load(to));
        self.by_load.remove(&(nf, from.clone()));
        self.by_load.remove(&(nt, to.to_owned()));
        self.movements.moved(&tp, &from, to);
        self.current
            .get_mut(&from)
            .expect("member")
            .retain(|p| *p != tp);
        self.current.get_mut(to).expect("member").push(tp.clone());
        self.owner.insert(tp, to.to_owned());
        self.by_load.insert((self.load(to), to.to_owned()));
        self.by_load.insert((self.load(&from), from));
    }
}

/// Java's balance score: the sum of the size differences of every pair of members.
fn score(assignment: &BTreeMap<String, Vec<TopicPartition>>) -> usize {
    let sizes: Vec<usize> = assignment.values().map(Vec::len).collect();
    let mut s = 0;
    for (i, a) in sizes.iter().enumerate() {
        for b in &sizes[i + 1..] {
            s += a.abs_diff(*b);
        }
    }
    s
}

/// Partitions that `cooperative-sticky` must not hand over in this rebalance: assigned to one
/// member while another still owns them (the owner revokes first; the next rebalance gives them).
pub(crate) fn transferring_from_claims(
    members: &[StickyMember],
    assignment: &BTreeMap<String, Vec<TopicPartition>>,
) -> HashMap<TopicPartition, String> {
    let mut added = HashMap::new();
    let mut revoked = HashSet::new();
    for m in members {
        let Some(assigned) = assignment.get(&m.id) else {
            continue;
        };
        let owned: HashSet<&TopicPartition> = m.owned.iter().collect();
        let now: HashSet<&TopicPartition> = assigned.iter().collect();
        for tp in assigned {
            if !owned.contains(tp) {
                added.insert(tp.clone(), m.id.clone());
            }
        }
        revoked.extend(m.owned.iter().filter(|tp| !now.contains(tp)).cloned());
    }
    added.retain(|tp, _| revoked.contains(tp));
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    fn member(id: &str, topics: &[&str], owned: &[(&str, i32)], generation: i32) -> StickyMember {
        StickyMember {
            id: id.into(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            owned: owned.iter().map(|(t, p)| tp(t, *p)).collect(),
            generation: (generation >= 0).then_some(generation),
        }
    }

    fn counts(list: &[(&str, i32)]) -> HashMap<String, i32> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn sorted(v: &[TopicPartition]) -> Vec<String> {
        let mut s: Vec<String> = v.iter().map(ToString::to_string).collect();
        s.sort();
        s
    }

    /// Every existing partition of a subscribed topic assigned exactly once, and only to a
    /// member subscribed to its topic.
    fn check_valid(members: &[StickyMember], c: &HashMap<String, i32>, a: &StickyAssignment) {
        let mut seen = HashSet::new();
        for (m, parts) in &a.assignment {
            let topics = &members.iter().find(|x| &x.id == m).unwrap().topics;
            for p in parts {
                assert!(topics.iter().any(|t| **t == *p.topic), "{m} got {p}");
                assert!(
                    seen.insert(p.clone()),
                    "{p} assigned twice: {:?}",
                    a.assignment
                );
            }
        }
        let subscribed: HashSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
        let expected: usize = c
            .iter()
            .filter(|(t, _)| subscribed.contains(t))
            .map(|(_, n)| *n as usize)
            .sum();
        assert_eq!(seen.len(), expected, "{:?}", a.assignment);
    }

    #[test]
    fn first_assignment_deals_partitions_in_turn() {
        // Java's testTwoConsumersTwoTopicsSixPartitions (assignments are lists per member).
        let ms = [
            member("c1", &["t1", "t2"], &[], -1),
            member("c2", &["t1", "t2"], &[], -1),
        ];
        let c = counts(&[("t1", 3), ("t2", 3)]);
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert_eq!(sorted(&a.assignment["c1"]), ["t1-0", "t1-2", "t2-1"]);
        assert_eq!(sorted(&a.assignment["c2"]), ["t1-1", "t2-0", "t2-2"]);
    }

    #[test]
    fn members_keep_what_they_own_up_to_their_quota() {
        // c1 and c2 share 6 partitions; c3 joins: each keeps its two lowest, c3 gets the rest.
        let c = counts(&[("t", 6)]);
        let ms = [
            member("c1", &["t"], &[("t", 0), ("t", 2), ("t", 4)], 3),
            member("c2", &["t"], &[("t", 5), ("t", 1), ("t", 3)], 3),
            member("c3", &["t"], &[], -1),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert_eq!(a.assignment["c1"], [tp("t", 0), tp("t", 2)]);
        assert_eq!(a.assignment["c2"], [tp("t", 1), tp("t", 3)]);
        assert_eq!(sorted(&a.assignment["c3"]), ["t-4", "t-5"]);
        let moving: BTreeMap<_, _> = a.transferring.unwrap().into_iter().collect();
        assert_eq!(
            moving,
            BTreeMap::from([(tp("t", 4), "c3".into()), (tp("t", 5), "c3".into())])
        );
    }

    #[test]
    fn a_member_leaving_moves_only_its_partitions() {
        let c = counts(&[("t", 6)]);
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 3)], 4),
            member("c", &["t"], &[("t", 2), ("t", 5)], 4),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        for (m, owned) in [("a", [0, 3]), ("c", [2, 5])] {
            for p in owned {
                assert!(a.assignment[m].contains(&tp("t", p)), "{m} lost t-{p}");
            }
            assert_eq!(a.assignment[m].len(), 3);
        }
        assert!(a.transferring.unwrap().is_empty());
    }

    #[test]
    fn claims_of_one_generation_cancel_out_and_newer_generations_win() {
        let c = counts(&[("t", 4)]);
        // Java's testAssignmentWithConflictingPreviousGenerations-like: b claims t-0 at a newer
        // generation than a; a and c both claim t-1 at generation 2.
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 1)], 2),
            member("b", &["t"], &[("t", 0)], 3),
            member("c", &["t"], &[("t", 1)], 2),
        ];
        let claims = settle_claims(&ms.iter().collect::<Vec<_>>(), &c);
        assert_eq!(claims.owned["a"], Vec::<TopicPartition>::new());
        assert_eq!(claims.owned["b"], [tp("t", 0)]);
        assert!(claims.contested.contains(&tp("t", 1)));
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert!(a.assignment["b"].contains(&tp("t", 0)));
        assert!(a.transferring.unwrap().contains_key(&tp("t", 1)));
    }

    #[test]
    fn claims_to_partitions_that_do_not_exist_are_ignored() {
        let c = counts(&[("t", 2)]);
        let ms = [
            member("a", &["t"], &[("t", 7), ("gone", 0), ("t", -1)], 1),
            member("b", &["t"], &[], -1),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
    }

    #[test]
    fn general_case_balances_members_with_different_subscriptions() {
        // Java's testMultipleConsumersMixedTopicSubscriptions: t1 3, t2 2; c1 {t1}, c2 {t1,t2},
        // c3 {t1}: c2 gets t2's two partitions, c1 and c3 share t1's.
        let c = counts(&[("t1", 3), ("t2", 2)]);
        let ms = [
            member("c1", &["t1"], &[], -1),
            member("c2", &["t1", "t2"], &[], -1),
            member("c3", &["t1"], &[], -1),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert!(a.transferring.is_none());
        assert_eq!(sorted(&a.assignment["c1"]), ["t1-0", "t1-2"]);
        assert_eq!(sorted(&a.assignment["c2"]), ["t2-0", "t2-1"]);
        assert_eq!(sorted(&a.assignment["c3"]), ["t1-1"]);
    }

    #[test]
    fn general_case_keeps_owned_and_moves_the_fewest() {
        // c1 owns all 6 of t1; c2 subscribes to t1 and t2 and owns t2-0; c2 gets 2 of t1 at most.
        let c = counts(&[("t1", 6), ("t2", 1)]);
        let ms = [
            member(
                "c1",
                &["t1"],
                &[
                    ("t1", 0),
                    ("t1", 1),
                    ("t1", 2),
                    ("t1", 3),
                    ("t1", 4),
                    ("t1", 5),
                ],
                1,
            ),
            member("c2", &["t1", "t2"], &[("t2", 0)], 1),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert_eq!(a.assignment["c1"].len(), 4, "{:?}", a.assignment);
        assert_eq!(a.assignment["c2"].len(), 3, "{:?}", a.assignment);
        assert!(a.assignment["c2"].contains(&tp("t2", 0)));
        // The cooperative assignor holds back the two that move from c1 to c2.
        let moving = transferring_from_claims(&ms, &a.assignment);
        assert_eq!(moving.len(), 2);
        assert!(moving.values().all(|m| m == "c2"));
    }

    #[test]
    fn general_case_prefers_the_previous_owner() {
        // t-0 was c2's in generation 1; c1 took it in generation 2 and now has too many: it
        // goes back to c2 rather than to anyone else.
        let c = counts(&[("t", 3), ("u", 1)]);
        let ms = [
            member("c1", &["t"], &[("t", 0), ("t", 1), ("t", 2)], 2),
            member("c2", &["t", "u"], &[("t", 0)], 1),
            member("c3", &["t", "u"], &[("u", 0)], 2),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert!(
            a.assignment["c2"].contains(&tp("t", 0)),
            "{:?}",
            a.assignment
        );
    }

    #[test]
    fn a_stale_claim_never_gives_a_partition_to_a_member_not_subscribed_to_it() {
        // c2 owned t-0 in generation 1 but now subscribes to u only: t-0 moves to c3 instead.
        let c = counts(&[("t", 3), ("u", 1)]);
        let ms = [
            member("c1", &["t", "u"], &[("t", 0), ("t", 1), ("t", 2)], 2),
            member("c2", &["u"], &[("t", 0)], 1),
            member("c3", &["t", "u"], &[("u", 0)], 2),
        ];
        let a = assign(&ms, &c);
        check_valid(&ms, &c, &a);
        assert!(
            a.assignment["c3"].contains(&tp("t", 0)),
            "{:?}",
            a.assignment
        );
    }

    fn arbitrary_group() -> impl Strategy<Value = (Vec<StickyMember>, HashMap<String, i32>)> {
        let topics = proptest::collection::vec(0i32..8, 1..4);
        (topics, 1usize..7, any::<u64>(), any::<bool>()).prop_map(|(sizes, n, seed, same)| {
            let c: HashMap<String, i32> = sizes
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("t{i}"), *s))
                .collect();
            let names: Vec<String> = c.keys().cloned().collect();
            let mut x = seed;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut members = Vec::new();
            for i in 0..n {
                let topics: Vec<String> = if same {
                    names.clone()
                } else {
                    let t: Vec<String> =
                        names.iter().filter(|_| next() % 3 != 0).cloned().collect();
                    if t.is_empty() {
                        vec![names[0].clone()]
                    } else {
                        t
                    }
                };
                let owned = (0..next() % 5)
                    .map(|_| {
                        let t = &names[(next() % names.len() as u64) as usize];
                        TopicPartition::new(t.as_str(), (next() % 9) as i32)
                    })
                    .collect();
                members.push(StickyMember {
                    id: format!("m{i}"),
                    topics,
                    owned,
                    generation: Some((next() % 3) as i32),
                });
            }
            (members, c)
        })
    }

    proptest! {
        #[test]
        fn always_valid_and_balanced_when_subscriptions_agree((members, c) in arbitrary_group()) {
            let a = assign(&members, &c);
            check_valid(&members, &c, &a);
            if let Some(moving) = &a.transferring {
                let sizes: Vec<usize> = a.assignment.values().map(Vec::len).collect();
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "{:?}", a.assignment);
                // Transfers are exactly the partitions given to someone other than a claimer
                // whose claim was kept, or that were contested.
                for (tp, to) in moving {
                    prop_assert!(a.assignment[to].contains(tp));
                }
                // Sticky: a member keeps what it validly owns, up to the smallest quota.
                let refs: Vec<&StickyMember> = members.iter().collect();
                let mut subscribed = c.clone();
                subscribed.retain(|t, _| members[0].topics.contains(t));
                let claims = settle_claims(&refs, &subscribed);
                for (m, owned) in &claims.owned {
                    let kept = owned.iter().filter(|tp| a.assignment[m].contains(tp)).count();
                    let valid = owned.iter().filter(|tp| !claims.contested.contains(*tp)).count();
                    prop_assert!(kept >= valid.min(*lo), "{m} kept {kept} of {owned:?}: {:?}", a.assignment);
                }
            }
        }
    }
}
