//! What the consumer benchmark binaries share: `bench_consumer` (this project's consumer) and
//! the `consume` mode of `tests/peers/rdkafka-bench` (librdkafka, which includes this file with
//! `#[path]`). Same command line, same measurement, same `result …` line, so `scripts/bench`
//! treats them alike and only the client differs.
//!
//! ```text
//! BIN --bootstrap HOST:PORT,… --topic T --records N --group G [--async] [-X key=value]…
//! ```
//!
//! The client subscribes to `T` in the fresh group `G` (`auto.offset.reset=earliest`, so it
//! reads from the beginning; `scripts/bench` passes `enable.auto.commit=false`) and reads until
//! it has `N` records. Throughput is measured as Java's `ConsumerPerformance` measures its
//! `fetch.nMsg.sec`: from the moment the partitions are assigned (the rebalance callback) to
//! the end of the `poll()` that brought the `N`-th record; joining the group is reported
//! apart (`join_ms`: client created to partitions assigned). Every record's key and value
//! length is added up, as Java's tool does, so that the payload is touched.
//!
//! `--async` reads through the client's async API instead, a stream of records awaited one by
//! one on a tokio current-thread runtime ([`with_watchdog`]): ours `Consumer::stream()`,
//! librdkafka's `StreamConsumer::stream()`.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The command line.
pub struct Args {
    pub bootstrap: String,
    pub topic: String,
    pub records: u64,
    pub group: String,
    /// `--async`: the client's stream of records (see the module documentation).
    pub async_api: bool,
    /// Client properties (`-X key=value`), passed through as they are.
    pub props: Vec<(String, String)>,
}

const USAGE: &str =
    "usage: --bootstrap HOST:PORT --topic T --records N --group G [--async] [-X key=value]...";

/// No record for this long ends the run as a failure.
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);

impl Args {
    /// Parses the arguments; exits with a usage line on a bad one.
    pub fn parse(name: &str, args: impl Iterator<Item = String>) -> Args {
        match Self::try_parse(args) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{name}: {e}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }

    fn try_parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            bootstrap: String::new(),
            topic: String::new(),
            records: 0,
            group: String::new(),
            async_api: false,
            props: Vec::new(),
        };
        while let Some(flag) = it.next() {
            let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--bootstrap" => a.bootstrap = val()?,
                "--topic" => a.topic = val()?,
                "--group" => a.group = val()?,
                "--records" => a.records = val()?.parse().map_err(|e| format!("--records: {e}"))?,
                "--async" => a.async_api = true,
                "-X" => {
                    let kv = val()?;
                    let (k, v) = kv.split_once('=').ok_or("-X needs key=value")?;
                    a.props.push((k.trim().into(), v.trim().into()));
                }
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        if a.bootstrap.is_empty() || a.topic.is_empty() || a.group.is_empty() || a.records == 0 {
            return Err("--bootstrap, --topic, --group and --records are required".into());
        }
        Ok(a)
    }
}

/// Runs `read`, an application's loop over a stream (`while let Some(item) =
/// stream.next().await`), and fails when `count` (the items it has read) stays the same for
/// [`IDLE_LIMIT`]: a watchdog beside the loop, polled only while the loop waits, so no timer is
/// armed per item and the loop's own await is all the harness adds to each item.
pub async fn with_watchdog<T>(
    count: &Cell<u64>,
    read: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let watchdog = async {
        let mut seen = count.get();
        loop {
            tokio::time::sleep(IDLE_LIMIT).await;
            if count.get() == seen {
                return Err(format!("no record for {IDLE_LIMIT:?} after {seen}"));
            }
            seen = count.get();
        }
    };
    let (mut read, mut watchdog) = (pin!(read), pin!(watchdog));
    poll_fn(|cx| match read.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending => watchdog.as_mut().poll(cx),
    })
    .await
}

/// The clock of a run: created with the client, told when the partitions came and when the
/// last record did.
pub struct Clock {
    created: Instant,
    assigned: Option<Instant>,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            created: Instant::now(),
            assigned: None,
        }
    }

    /// The first assignment with partitions (later ones, after a rebalance, do not restart it).
    pub fn assigned(&mut self, at: Instant) {
        self.assigned.get_or_insert(at);
    }

    /// Prints the machine-readable last line: `records` and `bytes` read, the run ending now.
    pub fn report(&self, records: u64, bytes: u64) {
        let end = Instant::now();
        let assigned = self.assigned.unwrap_or(self.created);
        let seconds = end.duration_since(assigned).as_secs_f64().max(1e-9);
        println!(
            "result records={records} bytes={bytes} seconds={seconds:.3} \
             records_per_sec={:.0} mb_per_sec={:.2} join_ms={:.1} total_seconds={:.3}",
            records as f64 / seconds,
            bytes as f64 / 1e6 / seconds,
            assigned.duration_since(self.created).as_secs_f64() * 1e3,
            end.duration_since(self.created).as_secs_f64(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = Args::try_parse(
            "--bootstrap b:1 --topic t --records 5 --group g -X enable.auto.commit=false"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        assert_eq!((a.records, a.group.as_str()), (5, "g"));
        assert_eq!(
            a.props,
            vec![("enable.auto.commit".to_owned(), "false".to_owned())]
        );
        assert!(!a.async_api);
        assert!(Args::try_parse("--topic t --records 5".split(' ').map(String::from)).is_err());
        let b = Args::try_parse(
            "--bootstrap b:1 --topic t --records 5 --group g --async"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        assert!(b.async_api);
    }
}
