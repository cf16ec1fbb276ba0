//! A Java consumer as a member of a consumer group, next to ours: the console consumer of the
//! same Kafka release, run for as long as a test needs it, printing every record it reads on
//! stdout and, on stderr, each rebalance it goes through (`KAFKA_TOOL_REBALANCE_LOG=INFO`, see
//! `scripts/kafka/log4j2-tools.properties`): its whole assignment after each one and what it
//! gave up. Both the classic protocol (cooperative: the log is the `ConsumerCoordinator`'s) and
//! the consumer protocol of KIP-848 (the membership manager's) write the same two lines.
//!
//! ```no_run
//! use crac_tests::java_member::{JavaMember, rebalances};
//! use crac_tests::kafka::Cluster;
//!
//! let k = Cluster::start(1);
//! let j = JavaMember::start(&k, "events", "readers", &[("group.protocol", "consumer")]);
//! // ... later
//! let now: Vec<_> = rebalances(&j.proc.transcript());
//! ```

use std::collections::BTreeSet;
use std::process::Command;

use crate::kafka::{Cluster, ConsumedRecord, kafka_script};
use crate::process::Proc;

/// A running Java group member.
pub struct JavaMember {
    /// The console consumer (its transcript holds records and rebalances; dropping it kills the
    /// JVM, which never leaves the group then).
    pub proc: Proc,
}

impl JavaMember {
    /// Joins `group` reading `topic` from the beginning, with extra consumer properties.
    pub fn start(k: &Cluster, topic: &str, group: &str, props: &[(&str, &str)]) -> JavaMember {
        let mut cmd = console_consumer(k, topic, group);
        cmd.env("KAFKA_TOOL_REBALANCE_LOG", "INFO").args([
            "--formatter-property",
            "print.partition=true",
            "--formatter-property",
            "print.offset=true",
            "--formatter-property",
            "print.key=true",
        ]);
        for (key, value) in props {
            cmd.arg("--command-property").arg(format!("{key}={value}"));
        }
        JavaMember {
            proc: Proc::spawn(&format!("java member of {group}"), &mut cmd),
        }
    }

    /// The records read so far.
    pub fn records(&self) -> Vec<ConsumedRecord> {
        records(&self.proc.transcript())
    }

    /// Its assignment now (empty before its first rebalance).
    pub fn assignment(&self) -> BTreeSet<i32> {
        rebalances(&self.proc.transcript())
            .last()
            .map(|r| r.assigned.clone())
            .unwrap_or_default()
    }
}

/// Java's console consumer reading `topic` from the beginning as a member of `group` (more
/// arguments may follow).
pub fn console_consumer(k: &Cluster, topic: &str, group: &str) -> Command {
    let mut cmd = Command::new(kafka_script());
    cmd.args([
        "tool",
        "console-consumer",
        "--bootstrap-server",
        k.bootstrap(),
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
    ]);
    cmd
}

/// One rebalance of a Java member, as it logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalance {
    /// The index of its first line in the transcript.
    pub line: usize,
    /// The whole assignment after it.
    pub assigned: BTreeSet<i32>,
    /// What it gave up (owned before, not assigned now).
    pub revoked: BTreeSet<i32>,
}

/// The partition numbers of a logged list `[t-0, t-3]`.
fn partitions(list: &str) -> BTreeSet<i32> {
    let inner = list.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .filter_map(|tp| tp.trim().rsplit_once('-')?.1.parse().ok())
        .collect()
}

/// The rebalances in a member's transcript, in order.
pub fn rebalances(transcript: &str) -> Vec<Rebalance> {
    let mut out: Vec<Rebalance> = Vec::new();
    for (i, l) in transcript.lines().enumerate() {
        if let Some((_, list)) = l.split_once("Assigned partitions:") {
            out.push(Rebalance {
                line: i,
                assigned: partitions(list),
                revoked: BTreeSet::new(),
            });
        } else if let Some((_, list)) = l.split_once("Revoked partitions (owned - assigned):")
            && let Some(last) = out.last_mut()
        {
            last.revoked = partitions(list);
        }
    }
    out
}

/// Lines that say the member lost its partitions (fenced, or its session expired).
pub fn losses(transcript: &str) -> Vec<String> {
    transcript
        .lines()
        .filter(|l| l.contains("Lost previously assigned partitions") || l.contains("to FENCED"))
        .map(str::to_owned)
        .collect()
}

/// The records in a member's transcript (`Partition:P\tOffset:O\tKEY\tVALUE` lines).
pub fn records(transcript: &str) -> Vec<ConsumedRecord> {
    transcript
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            let partition = f.next()?.strip_prefix("Partition:")?.parse().ok()?;
            let offset = f.next()?.strip_prefix("Offset:")?.parse().ok()?;
            let key = f.next()?;
            let value = f.next()?;
            Some(ConsumedRecord {
                partition,
                offset,
                timestamp: 0,
                key: (key != "null").then(|| key.to_owned()),
                value: (value != "null").then(|| value.to_owned()),
                headers: Vec::new(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_protocols_logs_and_records() {
        let t = "Partition:2\tOffset:7\tk3\ta:3\n\
                 stderr: [12:00:00.000] INFO Updating assignment with\n\
                 stderr: \tAssigned partitions:                       [t-0, t-4]\n\
                 stderr: \tCurrent owned partitions:                  [t-0, t-1, t-4]\n\
                 stderr: \tAdded partitions (assigned - owned):       []\n\
                 stderr: \tRevoked partitions (owned - assigned):     [t-1]\n\
                 stderr: [12:00:01.000] INFO Reconciling assignment with local epoch 3\n\
                 stderr: \tMember:                                    x\n\
                 stderr: \tAssigned partitions:                       []\n\
                 stderr: \tRevoked partitions (owned - assigned):     [t-0, t-4]\n\
                 stderr: ... Member x with epoch 3 transitioned from STABLE to FENCED.";
        let r = rebalances(t);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].assigned, BTreeSet::from([0, 4]));
        assert_eq!(r[0].revoked, BTreeSet::from([1]));
        assert_eq!(r[0].line, 2);
        assert!(r[1].assigned.is_empty());
        assert_eq!(r[1].revoked, BTreeSet::from([0, 4]));
        assert_eq!(losses(t).len(), 1);
        let recs = records(t);
        assert_eq!(recs.len(), 1);
        assert_eq!(
            (
                recs[0].partition,
                recs[0].offset,
                recs[0].key.as_deref(),
                recs[0].value.as_deref()
            ),
            (2, 7, Some("k3"), Some("a:3"))
        );
    }
}
