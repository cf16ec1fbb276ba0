//! The test services as the end-to-end tests run them, and what their output says: the
//! producing service (`src/bin/kafka_service.rs`: values `<instance>:<seq>`) and the consumer
//! group member (`src/bin/kafka_consumer_service.rs`: a `rec` line per record processed,
//! `assigned`/`revoked`/`lost` lines from its rebalance listener). A test passes the path of
//! the binary (`env!("CARGO_BIN_EXE_…")`, which only test targets see).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::kafka::{Cluster, ConsumedRecord};
use crate::process::{Proc, criu, field, must};

/// `kafka_service` producing `<instance>:<seq>` at `rate` records/s until `count` were sent.
pub fn producer(
    exe: &str,
    k: &Cluster,
    topic: &str,
    instance: &str,
    rate: u32,
    count: u64,
) -> Proc {
    let mut c = Command::new(exe);
    c.env_remove("CRAC_CHECKPOINT_TO")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_TOPIC", topic)
        .env("SVC_INSTANCE", instance)
        .env("SVC_STATE_MB", "1")
        .env("SVC_RATE", rate.to_string())
        .env("SVC_FINAL", count.to_string())
        .env("SVC_REGISTER", "0")
        .env("CRAC_CHECKPOINT_SIGNAL", "0");
    Proc::spawn(&format!("producer {instance}"), &mut c)
}

/// Waits for a producer's `done` line: the last sequence number it sent (exclusive).
pub fn produced(p: &mut Proc, timeout: Duration) -> u64 {
    let done = p.expect("done ", timeout);
    assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
    assert!(p.wait(timeout).success(), "{}", p.transcript());
    must(&done, "last_seq").parse().unwrap()
}

/// A consumer group the `kafka_consumer_service` members of a test join: the binary, the
/// cluster, the topic and the group.
#[derive(Clone, Copy)]
pub struct ServiceGroup<'a> {
    pub exe: &'a str,
    pub cluster: &'a Cluster,
    pub topic: &'a str,
    pub group: &'a str,
}

impl ServiceGroup<'_> {
    /// A member named `name`, checkpointable into `img` (with real CRIU), stopping when `stop`
    /// exists; `props` are consumer properties `k=v,k=v`.
    pub fn member(&self, name: &str, img: &Path, stop: &Path, props: &str) -> Proc {
        let mut c = Command::new(self.exe);
        c.env("CRAC_CRIU", criu())
            .env("CRAC_CHECKPOINT_TO", img)
            .env_remove("CRAC_CHECKPOINT_MODE")
            .env_remove("CRAC_ENGINE")
            .env("SVC_BOOTSTRAP", self.cluster.bootstrap())
            .env("SVC_TOPIC", self.topic)
            .env("SVC_GROUP", self.group)
            .env("SVC_NAME", name)
            .env("SVC_STOP_FILE", stop)
            .env("SVC_PROPS", props);
        Proc::spawn(&format!("consumer {name}"), &mut c)
    }
}

/// The records a consumer service printed (`rec` lines), as the stream checker reads them.
pub fn processed(transcript: &str) -> Vec<ConsumedRecord> {
    transcript
        .lines()
        .filter(|l| l.starts_with("rec "))
        .map(|l| ConsumedRecord {
            partition: must(l, "p").parse().unwrap(),
            offset: must(l, "o").parse().unwrap(),
            timestamp: 0,
            key: field(l, "k").map(str::to_owned),
            value: field(l, "v").map(str::to_owned),
            headers: Vec::new(),
        })
        .collect()
}

/// The partitions of a listener line (`partitions=0,3`).
pub fn partitions_of(line: &str) -> BTreeSet<i32> {
    must(line, "partitions")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A consumer service's assignment after its last rebalance, from its listener lines
/// (`assigned` adds, `revoked` and `lost` take away: this holds for the eager protocol, whose
/// `assigned` lines name everything, and for the cooperative ones, whose name what was added).
pub fn assignment_now(transcript: &str) -> BTreeSet<i32> {
    let mut now = BTreeSet::new();
    for l in transcript.lines() {
        if l.starts_with("assigned ") {
            now.extend(partitions_of(l));
        } else if l.starts_with("revoked ") || l.starts_with("lost ") {
            for p in partitions_of(l) {
                now.remove(&p);
            }
        }
    }
    now
}

/// The partitions a consumer service gave up (`revoked` or `lost`) in transcript lines from
/// index `from` on.
pub fn given_up_since(transcript: &str, from: usize) -> BTreeSet<i32> {
    transcript
        .lines()
        .skip(from)
        .filter(|l| l.starts_with("revoked ") || l.starts_with("lost "))
        .flat_map(partitions_of)
        .collect()
}

/// Fails on any line of a consumer service that reports an error.
pub fn no_errors(p: &Proc) {
    let t = p.transcript();
    for l in t.lines() {
        assert!(
            !l.starts_with("commit_error")
                && !l.starts_with("poll_error")
                && !l.starts_with("lost ")
                && !l.starts_with("error ")
                && !l.contains(" ERROR "),
            "`{l}` in:\n{t}"
        );
    }
}

/// Polls `f` every 200 ms until it holds; fails after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_listener_lines() {
        let t = "assigned name=A partitions=0,1,2 member_id=x\n\
                 rec name=A p=0 o=5 k=k1 v=a:1 gen=0\n\
                 revoked name=A partitions=2 gen=0\n\
                 assigned name=A partitions= member_id=x\n\
                 assigned name=A partitions=5 member_id=x";
        assert_eq!(assignment_now(t), BTreeSet::from([0, 1, 5]));
        assert_eq!(given_up_since(t, 0), BTreeSet::from([2]));
        assert!(given_up_since(t, 3).is_empty());
        let r = processed(t);
        assert_eq!(
            (r[0].partition, r[0].offset, r[0].value.as_deref()),
            (0, 5, Some("a:1"))
        );
    }
}
