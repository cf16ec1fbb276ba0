//! A checkpoint of one member does not stop its group (issue 15), against a real broker with
//! real CRIU, in a group of three: two of our consumers (`src/bin/kafka_consumer_service.rs`)
//! and a Java console consumer (`crac_tests::java_member`), once with the classic protocol and
//! `cooperative-sticky` (KIP-429), once with `group.protocol=consumer` (KIP-848), each with
//! the checkpointed member A static and dynamic.
//!
//! Static (`group.instance.id`): before the image A commits and leaves only for now (classic:
//! no LeaveGroup; KIP-848: epoch -2), so its partitions wait for it and nothing moves; the
//! restorer gives the restored copy its instance id back (`--env KAFKA_GROUP_INSTANCE_ID=…`),
//! and within the session timeout it takes its own partitions back without a rebalance.
//! Shown:
//! - the other members (ours B, Java's J) keep their partitions throughout: no revocation and
//!   no loss from the moment the group of three formed to the end of the test, and both
//!   consume records during the freeze;
//! - the restored copy has A's partitions again and goes on exactly where A's checkpoint
//!   committed (the first offset it reads of each is the one after A's last);
//! - every record produced is processed at least once.
//!
//! Dynamic: A leaves for good before the image (LeaveGroup; KIP-848: epoch -1), and only its
//! partitions move: B and J keep their own and take A's, revoking nothing and losing nothing
//! while A is frozen, and consume during the freeze (A's former partitions included). The
//! restored copy joins as a new member; what B and J give up then goes to it, nothing else
//! moves, and every record is processed at least once.
//!
//! Needs root, `CRAC_CRIU` and Kafka's jars (scripts/test sets all three up).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::java_member::{JavaMember, losses, rebalances};
use crac_tests::kafka::{Cluster, ConsumedRecord};
use crac_tests::process::{Proc, TempDir, crac_checkpoint, crac_command, must};
use crac_tests::service::{
    ServiceGroup, assignment_now, given_up_since, no_errors, processed, produced, producer,
    wait_until,
};
use crac_tests::stream::{check_stream, record_id};

const CONSUMER: &str = env!("CARGO_BIN_EXE_kafka_consumer_service");
const PRODUCER: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);
/// How long A stays frozen: well within the session timeout (45 s, both protocols), which is
/// how long a static member's partitions wait for it.
const FREEZE: Duration = Duration::from_secs(20);
const PARTITIONS: usize = 6;

fn kafka() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(1))
}

/// One protocol's settings.
struct Protocol {
    name: &'static str,
    /// Consumer properties of our members.
    ours: &'static str,
    /// The Java member's.
    java: &'static [(&'static str, &'static str)],
}

const COOPERATIVE: Protocol = Protocol {
    name: "cooperative",
    ours: "partition.assignment.strategy=cooperative-sticky,heartbeat.interval.ms=1000",
    java: &[
        ("group.protocol", "classic"),
        (
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        ),
        ("heartbeat.interval.ms", "1000"),
    ],
};

const KIP848: Protocol = Protocol {
    name: "kip848",
    ours: "group.protocol=consumer",
    java: &[("group.protocol", "consumer")],
};

/// How the checkpointed member A belongs to its group.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Membership {
    Static,
    Dynamic,
}

/// The partitions a Java member gave up after transcript line `from`, and its losses.
fn java_given_up_since(t: &str, from: usize) -> (BTreeSet<i32>, Vec<String>) {
    let revoked = rebalances(t)
        .into_iter()
        .filter(|r| r.line >= from)
        .flat_map(|r| r.revoked)
        .collect();
    (revoked, losses(t))
}

fn lines(p: &Proc) -> usize {
    p.transcript().lines().count()
}

/// Per partition, the first and last offset in `records`.
fn span(records: &[ConsumedRecord]) -> BTreeMap<i32, (i64, i64)> {
    let mut out: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for r in records {
        let e = out.entry(r.partition).or_insert((r.offset, r.offset));
        e.0 = e.0.min(r.offset);
        e.1 = e.1.max(r.offset);
    }
    out
}

/// How many of `records` the producer instance `b` (the one running during the freeze) wrote.
fn of_b(records: &[ConsumedRecord]) -> usize {
    records
        .iter()
        .filter(|r| record_id(r).is_some_and(|(i, _)| i == "b"))
        .count()
}

/// One run: the group, its members and what was seen of them.
struct Run<'a> {
    m: Membership,
    k: &'a Cluster,
    topic: String,
    dir: TempDir,
    instance: String,
    /// The input before and after the freeze (instance `a`).
    prod_a: Proc,
    b: Proc,
    j: JavaMember,
    a: Proc,
    /// The assignments once the group of three formed.
    own_a: BTreeSet<i32>,
    own_b: BTreeSet<i32>,
    own_j: BTreeSet<i32>,
    /// Transcript lines of B and J up to then.
    b_from: usize,
    j_from: usize,
}

impl Run<'_> {
    /// The group forms: B, then J, then A, two partitions each, A processing.
    fn form<'a>(p: &'a Protocol, m: Membership, k: &'a Cluster) -> Run<'a> {
        let name = format!("{}-{m:?}", p.name).to_lowercase();
        let topic = format!("frozen-{name}");
        let group = format!("frozen-{name}-readers");
        k.create_topic(&topic, PARTITIONS as i32, 1);
        let dir = TempDir::new(&format!("group-{name}"));
        let instance = format!("frozen-a-{name}");
        let g = ServiceGroup {
            exe: CONSUMER,
            cluster: k,
            topic: &topic,
            group: &group,
        };
        let stop = dir.join("stop");
        let prod_a = producer(PRODUCER, k, &topic, "a", 50, 1500);
        let b = g.member("B", &dir.join("img-b"), &stop, p.ours);
        wait_until("B to own every partition", T, || {
            assignment_now(&b.transcript()).len() == PARTITIONS
        });
        let j = JavaMember::start(k, &topic, &group, p.java);
        let a_props = match m {
            Membership::Static => format!("{},group.instance.id={instance}", p.ours),
            Membership::Dynamic => p.ours.to_owned(),
        };
        let a = g.member("A", &dir.join("img-a"), &stop, &a_props);
        wait_until(
            "three members with two partitions each, A processing",
            T,
            || {
                assignment_now(&b.transcript()).len() == 2
                    && assignment_now(&a.transcript()).len() == 2
                    && j.assignment().len() == 2
                    && processed(&a.transcript()).len() >= 20
            },
        );
        let own_b = assignment_now(&b.transcript());
        let own_j = j.assignment();
        let own_a = assignment_now(&a.transcript());
        let mut all = own_a.clone();
        all.extend(&own_b);
        all.extend(&own_j);
        assert_eq!(all.len(), PARTITIONS, "A {own_a:?} B {own_b:?} J {own_j:?}");
        let (b_from, j_from) = (lines(&b), lines(&j.proc));
        Run {
            m,
            k,
            topic,
            dir,
            instance,
            prod_a,
            b,
            j,
            a,
            own_a,
            own_b,
            own_j,
            b_from,
            j_from,
        }
    }

    /// What B and J gave up (revoked or lost) since the group of three formed.
    fn others_gave_up(&self) -> BTreeSet<i32> {
        let (mut out, j_lost) = java_given_up_since(&self.j.proc.transcript(), self.j_from);
        assert!(j_lost.is_empty(), "J lost partitions: {j_lost:?}");
        out.extend(given_up_since(&self.b.transcript(), self.b_from));
        out
    }

    /// A frozen for [`FREEZE`] while instance `b` produces: B and J keep their own partitions
    /// (and, A dynamic, take A's). Returns the producer and what B and J consumed meanwhile.
    fn freeze(&mut self) -> (Proc, usize, usize) {
        let (code, text) = crac_checkpoint(CRAC, self.a.pid());
        assert_eq!(code, 0, "checkpoint: {text}");
        let frozen_at = Instant::now();
        assert!(!self.a.wait(T).success(), "the process stops at the dump");
        let prod_b = producer(
            PRODUCER,
            self.k,
            &self.topic,
            "b",
            50,
            FREEZE.as_secs() * 50,
        );
        if self.m == Membership::Dynamic {
            wait_until("B and J to take A's partitions", FREEZE, || {
                let mut both = assignment_now(&self.b.transcript());
                both.extend(self.j.assignment());
                both.len() == PARTITIONS
            });
        }
        std::thread::sleep(FREEZE.saturating_sub(frozen_at.elapsed()));
        let (now_b, now_j) = (assignment_now(&self.b.transcript()), self.j.assignment());
        let gave_up = self.others_gave_up();
        assert!(
            gave_up.is_empty(),
            "B or J gave {gave_up:?} up during the freeze"
        );
        let mut expected_b = self.own_b.clone();
        let mut expected_j = self.own_j.clone();
        if self.m == Membership::Dynamic {
            expected_b.extend(now_b.intersection(&self.own_a));
            expected_j.extend(now_j.intersection(&self.own_a));
        }
        assert_eq!(now_b, expected_b, "B's partitions during the freeze");
        assert_eq!(now_j, expected_j, "J's partitions during the freeze");
        let (b_during, j_during) = (
            of_b(&processed(&self.b.transcript())),
            of_b(&self.j.records()),
        );
        assert!(
            b_during > 0 && j_during > 0,
            "consumed during the freeze: B {b_during}, J {j_during}"
        );
        (prod_b, b_during, j_during)
    }

    /// The restore: static, under A's own instance id (A's partitions come back to it);
    /// dynamic, as a new member (what B and J give up goes to it). Returns the restored copy.
    fn restore(&mut self) -> Proc {
        let img = self.dir.join("img-a");
        let env = format!("KAFKA_GROUP_INSTANCE_ID={}", self.instance);
        let mut args = vec!["restore", img.to_str().unwrap()];
        if self.m == Membership::Static {
            args.extend(["--env", env.as_str()]);
        }
        let mut ra = Proc::spawn("restored A", &mut crac_command(CRAC, &args));
        let line = ra.expect("restored ", T);
        assert_eq!(must(&line, "gen"), "1", "{line}");
        wait_until(
            "the group of three to settle, two partitions each",
            T,
            || {
                let (a, b, j) = (
                    assignment_now(&ra.transcript()),
                    assignment_now(&self.b.transcript()),
                    self.j.assignment(),
                );
                a.len() == 2 && b.len() == 2 && j.len() == 2
            },
        );
        let now_a = assignment_now(&ra.transcript());
        match self.m {
            Membership::Static => assert_eq!(now_a, self.own_a),
            Membership::Dynamic => {
                let gave_up = self.others_gave_up();
                assert!(
                    gave_up.is_subset(&now_a),
                    "B and J gave {gave_up:?} up, the restored A got {now_a:?}"
                );
            }
        }
        ra
    }
}

fn frozen_member_does_not_stop_its_group(p: &Protocol, m: Membership) {
    let mut run = Run::form(p, m, kafka());
    let (mut prod_b, b_during, j_during) = run.freeze();
    let before_image = processed(&run.a.transcript());
    let mut ra = run.restore();
    let last_a = produced(&mut run.prod_a, T);
    let last_b = produced(&mut prod_b, T);
    let expected = BTreeMap::from([("a".to_owned(), 0..last_a), ("b".to_owned(), 0..last_b)]);
    let everything = |run: &Run, ra: &Proc| {
        let mut v = before_image.clone();
        v.extend(processed(&ra.transcript()));
        v.extend(processed(&run.b.transcript()));
        v.extend(run.j.records());
        v
    };
    wait_until("every record processed", T, || {
        let ids: BTreeSet<(String, u64)> =
            everything(&run, &ra).iter().filter_map(record_id).collect();
        ids.len() as u64 >= last_a + last_b
    });
    // Up to here (closing gives everything up): static, B and J gave nothing up at all;
    // dynamic, only what went to the restored A (checked by restore()).
    let gave_up = run.others_gave_up();
    match m {
        Membership::Static => assert!(gave_up.is_empty(), "B or J gave {gave_up:?} up"),
        Membership::Dynamic => {
            let now_a = assignment_now(&ra.transcript());
            assert!(
                gave_up.is_subset(&now_a),
                "B and J gave {gave_up:?} up, A has {now_a:?}"
            );
        }
    }
    std::fs::write(run.dir.join("stop"), b"").unwrap();
    for p in [&mut run.b, &mut ra] {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
        assert!(p.wait(T).success(), "{}", p.transcript());
        no_errors(p);
    }
    no_errors(&run.a);
    let after_restore = processed(&ra.transcript());
    if m == Membership::Static {
        // The restored copy goes on exactly where the checkpoint committed.
        let (before, after) = (span(&before_image), span(&after_restore));
        for tp in &run.own_a {
            let (Some((_, last)), Some((first, _))) = (before.get(tp), after.get(tp)) else {
                panic!("partition {tp}: before {before:?}, after {after:?}");
            };
            assert_eq!(
                *first,
                last + 1,
                "partition {tp}: resumed at {first} after {last}"
            );
        }
    }
    // Every record processed at least once (the Java member's auto-commit may repeat some).
    let mut unique: HashMap<(i32, i64), ConsumedRecord> = HashMap::new();
    for r in everything(&run, &ra) {
        unique.entry((r.partition, r.offset)).or_insert(r);
    }
    let unique: Vec<ConsumedRecord> = unique.into_values().collect();
    let (rep, _) = check_stream(&unique, &expected);
    assert!(rep.is_clean(), "{rep}");
    eprintln!(
        "{} {m:?}: {} records; A {} before the image + {} after, B {} ({b_during} while A was \
         frozen), J {} ({j_during}); A {:?} B {:?} J {:?}",
        p.name,
        last_a + last_b,
        before_image.len(),
        after_restore.len(),
        processed(&run.b.transcript()).len(),
        run.j.records().len(),
        run.own_a,
        run.own_b,
        run.own_j,
    );
}

#[test]
fn cooperative_sticky_group_with_a_java_member_keeps_its_partitions_while_a_static_one_is_frozen() {
    frozen_member_does_not_stop_its_group(&COOPERATIVE, Membership::Static);
}

#[test]
fn consumer_protocol_group_with_a_java_member_keeps_its_partitions_while_a_static_one_is_frozen() {
    frozen_member_does_not_stop_its_group(&KIP848, Membership::Static);
}

#[test]
fn cooperative_sticky_group_with_a_java_member_moves_only_a_dynamic_frozen_members_partitions() {
    frozen_member_does_not_stop_its_group(&COOPERATIVE, Membership::Dynamic);
}

#[test]
fn consumer_protocol_group_with_a_java_member_moves_only_a_dynamic_frozen_members_partitions() {
    frozen_member_does_not_stop_its_group(&KIP848, Membership::Dynamic);
}
