//! What the producer benchmark binaries share: `bench_producer` (this project's producer) and
//! `tests/peers/rdkafka-bench` (librdkafka through the `rdkafka` crate, which includes this
//! file with `#[path]`). Same command line, same payload, same pacing, same latency histogram
//! and the same `result …` line, so `scripts/bench` treats them alike and only the client
//! differs.
//!
//! ```text
//! BIN --bootstrap HOST:PORT,… --topic T --records N --record-size BYTES
//!     [--rate RECORDS_PER_SEC] [--warmup-records W] [--transaction-records T]
//!     [--async [--window W]] [-X key=value]…
//! ```
//!
//! `--async` sends through the client's async API on a tokio current-thread runtime, pipelined:
//! each record is handed over in order (the next one once the client has taken it), and its
//! delivery report, a future, joins a queue of at most `--window` reports (default
//! [`DEFAULT_WINDOW`]) that is drained in send order as they resolve; when the queue is full,
//! the oldest is awaited before the next send. The latency of a record is then from the send to
//! the moment the task sees its report resolved (the runtime's wake-up included, as an async
//! application sees it), and throughput ends when the last report has resolved. See
//! [`Reports`].
//!
//! `--transaction-records T` makes the run transactional (the caller sets `transactional.id`
//! with `-X`): the producer's transactions are initialised before the clock starts, then every
//! `T` records are one transaction (begin, `T` sends, commit; the last one may be shorter), and
//! the time of the last commit ends the run. A second line, `transactions count=… commit_avg_ms=…
//! commit_max_ms=…`, gives how long the commits took (each commit waits for its records).
//!
//! Records have no key and no headers, and one payload of random capital letters (what Java's
//! `ProducerPerformance` sends). Latency is per record, from the `send()` call to its delivery
//! callback, into a log-linear histogram (1.6 % resolution, fixed memory, so peak RSS does not
//! grow with the record count); the first `--warmup-records` are left out of it (Java's tool
//! has the same option). Throughput is measured over every record, from just before the first
//! `send()` to the end of `flush()`, as Java's tool does (it stops at `close()`).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Delivery reports awaited at once in `--async` mode unless `--window` says otherwise: far
/// more than are in flight at the producers' throughput and latency, so the client's buffer (32
/// MiB for 1 KB records), not the window, is what makes a send wait.
pub const DEFAULT_WINDOW: usize = 100_000;

/// The command line.
pub struct Args {
    pub bootstrap: String,
    pub topic: String,
    pub records: u64,
    pub record_size: usize,
    /// Records per second; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Records at the start whose latency is not recorded.
    pub warmup: u64,
    /// Records per transaction; `None`: not transactional.
    pub transaction_records: Option<u64>,
    /// `--async`: the client's async API, pipelined (see the module documentation).
    pub async_api: bool,
    /// `--window`: at most this many delivery reports awaited at once in `--async` mode.
    pub window: usize,
    /// Client properties (`-X key=value`), passed through as they are.
    pub props: Vec<(String, String)>,
}

const USAGE: &str = "usage: --bootstrap HOST:PORT --topic T --records N --record-size BYTES \
                     [--rate RECORDS_PER_SEC] [--warmup-records W] [--transaction-records T] \
                     [--async [--window W]] [-X key=value]...";

impl Args {
    /// Parses `std::env::args()`; exits with a usage line on a bad argument.
    pub fn parse(name: &str) -> Args {
        match Self::try_parse(std::env::args().skip(1)) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{name}: {e}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }

    /// Whether record `i` opens a transaction.
    pub fn begins_transaction(&self, i: u64) -> bool {
        self.transaction_records.is_some_and(|t| i % t == 0)
    }

    /// Whether record `i` closes a transaction (the last record closes the last one).
    pub fn ends_transaction(&self, i: u64) -> bool {
        self.transaction_records
            .is_some_and(|t| (i + 1) % t == 0 || i + 1 == self.records)
    }

    fn try_parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            bootstrap: String::new(),
            topic: String::new(),
            records: 0,
            record_size: 100,
            rate: None,
            warmup: 0,
            transaction_records: None,
            async_api: false,
            window: DEFAULT_WINDOW,
            props: Vec::new(),
        };
        while let Some(flag) = it.next() {
            let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--bootstrap" => a.bootstrap = val()?,
                "--topic" => a.topic = val()?,
                "--records" => a.records = val()?.parse().map_err(|e| format!("--records: {e}"))?,
                "--record-size" => {
                    a.record_size = val()?.parse().map_err(|e| format!("--record-size: {e}"))?
                }
                "--rate" => {
                    let r: f64 = val()?.parse().map_err(|e| format!("--rate: {e}"))?;
                    if r <= 0.0 {
                        return Err("--rate must be positive".into());
                    }
                    a.rate = Some(r);
                }
                "--warmup-records" => {
                    a.warmup = val()?
                        .parse()
                        .map_err(|e| format!("--warmup-records: {e}"))?
                }
                "--transaction-records" => {
                    let t: u64 = val()?
                        .parse()
                        .map_err(|e| format!("--transaction-records: {e}"))?;
                    if t == 0 {
                        return Err("--transaction-records must be positive".into());
                    }
                    a.transaction_records = Some(t);
                }
                "--async" => a.async_api = true,
                "--window" => {
                    a.window = val()?.parse().map_err(|e| format!("--window: {e}"))?;
                    if a.window == 0 {
                        return Err("--window must be positive".into());
                    }
                }
                "-X" => {
                    let kv = val()?;
                    let (k, v) = kv.split_once('=').ok_or("-X needs key=value")?;
                    a.props.push((k.trim().into(), v.trim().into()));
                }
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        if a.bootstrap.is_empty() || a.topic.is_empty() || a.records == 0 {
            return Err("--bootstrap, --topic and --records are required".into());
        }
        if a.async_api && a.transaction_records.is_some() {
            return Err(
                "--async does not run transactions (leave out --transaction-records)".into(),
            );
        }
        Ok(a)
    }
}

/// How long the commits of a transactional run took.
#[derive(Default)]
pub struct Commits {
    count: u64,
    total: Duration,
    max: Duration,
}

impl Commits {
    /// Times one commit: `commit` runs and its duration is counted.
    pub fn time<T>(&mut self, commit: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = commit();
        let d = t0.elapsed();
        self.count += 1;
        self.total += d;
        self.max = self.max.max(d);
        r
    }

    /// The `transactions …` line of a transactional run.
    pub fn report(&self) {
        println!(
            "transactions count={} commit_avg_ms={:.3} commit_max_ms={:.3}",
            self.count,
            self.total.as_secs_f64() * 1e3 / self.count.max(1) as f64,
            self.max.as_secs_f64() * 1e3
        );
    }
}

/// One payload of `size` random capital letters, reused for every record (as Java's
/// `ProducerPerformance` does without a payload file).
pub fn payload(size: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'A' + (x % 26) as u8
        })
        .collect()
}

/// When record `i` is due at a fixed offered rate.
pub struct Pacer {
    start: Instant,
    rate: Option<f64>,
}

impl Pacer {
    pub fn new(start: Instant, rate: Option<f64>) -> Pacer {
        Pacer { start, rate }
    }

    /// How long to wait before sending record `i`: `None` when it is due (or no rate is set).
    /// Waits shorter than 1 ms are skipped, so a fast sender goes in short bursts instead of
    /// sleeping per record (Java's throttler sleeps at least 2 ms at a time).
    pub fn wait_before(&self, i: u64) -> Option<Duration> {
        let rate = self.rate?;
        let due = self.start + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        let ahead = due.checked_duration_since(now)?;
        (ahead >= Duration::from_millis(1)).then_some(ahead)
    }
}

/// Sub-buckets per power of two: values are kept to 1/64 (1.6 %).
const SUB: u64 = 64;
const LINEAR: u64 = 2 * SUB;
/// Exponents 7..=55: up to 2^56 µs, the most `record` keeps.
const BUCKETS: usize = (LINEAR + 49 * SUB) as usize;

/// A log-linear histogram of microseconds, filled from any thread with relaxed atomics.
pub struct Histogram {
    counts: Vec<AtomicU64>,
    total: AtomicU64,
    sum_us: AtomicU64,
    max_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
        }
    }
}

fn bucket_of(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let e = 63 - u64::from(us.leading_zeros()); // >= 7
    let shift = e - 6;
    let sub = (us >> shift) - SUB; // 0..64
    ((LINEAR + (e - 7) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The middle of bucket `b`, in microseconds.
fn value_of(b: usize) -> f64 {
    let b = b as u64;
    if b < LINEAR {
        return b as f64;
    }
    let e = (b - LINEAR) / SUB + 7;
    let sub = (b - LINEAR) % SUB;
    let shift = e - 6;
    ((SUB + sub) << shift) as f64 + (1u64 << shift) as f64 / 2.0
}

impl Histogram {
    /// Records one latency.
    pub fn record(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX >> 8)) as u64;
        self.counts[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The `q` quantile (0..=1) in milliseconds; NaN when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let total = self.total.load(Ordering::Relaxed);
        if total == 0 {
            return f64::NAN;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return value_of(b) / 1e3;
            }
        }
        self.max_us.load(Ordering::Relaxed) as f64 / 1e3
    }

    fn mean_ms(&self) -> f64 {
        let total = self.total.load(Ordering::Relaxed);
        if total == 0 {
            return f64::NAN;
        }
        self.sum_us.load(Ordering::Relaxed) as f64 / total as f64 / 1e3
    }
}

/// The delivery reports of an `--async` run, oldest first, each with the time its record was
/// sent: drained in send order as they resolve (a latency recorded for each, the first failure
/// printed and every one counted), at most `--window` of them at once.
pub struct Reports<'a, F: Future> {
    queue: VecDeque<(Instant, bool, F)>,
    window: usize,
    name: &'static str,
    latency: &'a Histogram,
    failed: &'a AtomicU64,
    /// A resolved report's error, `None` when its record was delivered.
    error: fn(F::Output) -> Option<String>,
}

impl<'a, F: Future + Unpin> Reports<'a, F> {
    pub fn new(
        args: &Args,
        name: &'static str,
        latency: &'a Histogram,
        failed: &'a AtomicU64,
        error: fn(F::Output) -> Option<String>,
    ) -> Self {
        Reports {
            queue: VecDeque::with_capacity(args.window.min(1 << 20)),
            window: args.window,
            name,
            latency,
            failed,
            error,
        }
    }

    /// Adds the report of a record sent at `sent` (`measured`: its latency counts). With the
    /// window full it awaits the oldest; otherwise it takes what has resolved, without waiting.
    pub async fn push(&mut self, sent: Instant, measured: bool, report: F) {
        self.queue.push_back((sent, measured, report));
        if self.queue.len() >= self.window {
            self.oldest().await;
        } else {
            self.drain(&mut Context::from_waker(Waker::noop()));
        }
    }

    /// Awaits `f` (a send the client cannot take yet, a pause), taking reports as they resolve
    /// meanwhile.
    pub async fn during<T>(&mut self, f: impl Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        poll_fn(|cx| {
            let r = f.as_mut().poll(cx);
            if r.is_pending() {
                self.drain(cx);
            }
            r
        })
        .await
    }

    /// Awaits the oldest report and takes every one resolved behind it; returns how many it
    /// took (0 at once when there is none).
    pub async fn oldest(&mut self) -> usize {
        poll_fn(|cx| {
            if self.queue.is_empty() {
                return Poll::Ready(0);
            }
            match self.drain(cx) {
                0 => Poll::Pending,
                n => Poll::Ready(n),
            }
        })
        .await
    }

    /// Awaits every report.
    pub async fn all(&mut self) {
        poll_fn(|cx| {
            self.drain(cx);
            if self.queue.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Takes the resolved reports at the front (one clock read for all of them); the task is
    /// woken when the first one still pending resolves. Returns how many it took.
    fn drain(&mut self, cx: &mut Context<'_>) -> usize {
        let mut now = None;
        let mut taken = 0;
        while let Some((_, _, report)) = self.queue.front_mut() {
            let Poll::Ready(out) = Pin::new(report).poll(cx) else {
                break;
            };
            let (sent, measured, _) = self.queue.pop_front().expect("the front");
            taken += 1;
            if measured {
                let now = *now.get_or_insert_with(Instant::now);
                self.latency.record(now.saturating_duration_since(sent));
            }
            if let Some(e) = (self.error)(out)
                && self.failed.fetch_add(1, Ordering::Relaxed) == 0
            {
                eprintln!("{}: delivery failed: {e}", self.name);
            }
        }
        taken
    }
}

/// The machine-readable last line every benchmark binary prints.
pub fn report(args: &Args, seconds: f64, failed: u64, lat: &Histogram) {
    let rps = args.records as f64 / seconds;
    println!(
        "result records={} failed={failed} seconds={seconds:.3} records_per_sec={rps:.0} \
         mb_per_sec={:.2} lat_avg_ms={:.3} lat_p50_ms={:.3} lat_p99_ms={:.3} \
         lat_p999_ms={:.3} lat_max_ms={:.3}",
        args.records,
        rps * args.record_size as f64 / 1e6,
        lat.mean_ms(),
        lat.quantile_ms(0.50),
        lat.quantile_ms(0.99),
        lat.quantile_ms(0.999),
        lat.max_us.load(Ordering::Relaxed) as f64 / 1e3,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_within_two_percent() {
        for us in [0u64, 1, 127, 128, 129, 1000, 4567, 1 << 20, 123_456_789] {
            let v = value_of(bucket_of(us));
            let err = (v - us as f64).abs() / (us.max(1) as f64);
            assert!(err <= 0.02 || us < LINEAR, "{us} -> {v}");
        }
        for b in 1..BUCKETS {
            assert!(value_of(b) > value_of(b - 1));
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        assert!((h.quantile_ms(0.5) - 0.5).abs() < 0.01);
        assert!((h.quantile_ms(0.99) - 0.99).abs() < 0.02);
    }

    #[test]
    fn arguments() {
        let a = Args::try_parse(
            "--bootstrap b:1 --topic t --records 5 --record-size 10 --rate 2.5 -X acks=all \
             --warmup-records 2 --transaction-records 2"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        assert_eq!(
            (a.records, a.record_size, a.rate, a.warmup),
            (5, 10, Some(2.5), 2)
        );
        assert_eq!(a.props, vec![("acks".to_owned(), "all".to_owned())]);
        assert!(Args::try_parse(["--topic".to_owned()].into_iter()).is_err());
        // Records 0..5 in transactions of 2: [0, 1], [2, 3], [4].
        let begins: Vec<u64> = (0..5).filter(|&i| a.begins_transaction(i)).collect();
        let ends: Vec<u64> = (0..5).filter(|&i| a.ends_transaction(i)).collect();
        assert_eq!((begins, ends), (vec![0, 2, 4], vec![1, 3, 4]));
        assert!(!a.async_api && a.window == DEFAULT_WINDOW);
        let parse = |s: &str| Args::try_parse(s.split(' ').map(String::from));
        let b = parse("--bootstrap b:1 --topic t --records 5 --async --window 7").unwrap();
        assert!(b.async_api && b.window == 7);
        assert!(
            parse("--bootstrap b:1 --topic t --records 5 --async --transaction-records 2").is_err()
        );
        assert!(parse("--bootstrap b:1 --topic t --records 5 --async --window 0").is_err());
    }

    /// Resolved reports are taken in order as they come: latencies recorded for the measured
    /// ones, failures counted.
    #[test]
    fn reports_drain_in_order() {
        let args = Args::try_parse(
            "--bootstrap b:1 --topic t --records 3 --async --window 2"
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        let (latency, failed) = (Histogram::default(), AtomicU64::new(0));
        let mut r = Reports::new(
            &args,
            "test",
            &latency,
            &failed,
            |out: Result<(), String>| out.err(),
        );
        let mut cx = Context::from_waker(Waker::noop());
        let now = Instant::now();
        for (measured, out) in [(false, Ok(())), (true, Err("no".into())), (true, Ok(()))] {
            let push = std::pin::pin!(r.push(now, measured, std::future::ready(out)));
            assert!(push.poll(&mut cx).is_ready());
        }
        assert!(std::pin::pin!(r.all()).poll(&mut cx).is_ready());
        assert_eq!(latency.total.load(Ordering::Relaxed), 2);
        assert_eq!(failed.load(Ordering::Relaxed), 1);
    }
}
