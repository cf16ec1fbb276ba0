//! Produces N records with keys, values and headers and prints a summary.
//!
//! ```text
//! cargo run --release -p kafka-client --example produce -- \
//!     --bootstrap 127.0.0.1:9092 --topic demo --records 100000 --value-size 100 \
//!     [--key-prefix key-] [--headers 1] [--acks all|1|0] [--linger-ms 5] [--batch-size 16384] \
//!     [--rate RECORDS_PER_SEC] [--partition N] [--no-keys] [-X key=value ...]
//! ```
//!
//! Keys are `<prefix><i>`, values `<i>` padded with `.` to `--value-size`, headers
//! `h<j>=<i>`. The last line is machine-readable: `records=… seconds=… records_per_sec=…
//! mb_per_sec=… failed=…`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kafka_client::{Header, Producer, ProducerConfig, ProducerRecord};

struct Args {
    bootstrap: String,
    topic: String,
    records: u64,
    value_size: usize,
    key_prefix: String,
    keys: bool,
    headers: usize,
    rate: Option<f64>,
    partition: Option<i32>,
    props: Vec<(String, String)>,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: produce --bootstrap HOST:PORT --topic T [--records N] [--value-size B] [--key-prefix P] [--no-keys] \
         [--headers H] [--acks 0|1|all] [--linger-ms MS] [--batch-size B] [--rate R] [--partition P] [-X key=value]..."
    );
    ExitCode::from(2)
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: "127.0.0.1:9092".into(),
        topic: String::new(),
        records: 100_000,
        value_size: 100,
        key_prefix: "key-".into(),
        keys: true,
        headers: 1,
        rate: None,
        partition: None,
        props: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = val()?,
            "--topic" => a.topic = val()?,
            "--records" => a.records = val()?.parse().map_err(|e| format!("--records: {e}"))?,
            "--value-size" => {
                a.value_size = val()?.parse().map_err(|e| format!("--value-size: {e}"))?
            }
            "--key-prefix" => a.key_prefix = val()?,
            "--no-keys" => a.keys = false,
            "--headers" => a.headers = val()?.parse().map_err(|e| format!("--headers: {e}"))?,
            "--rate" => a.rate = Some(val()?.parse().map_err(|e| format!("--rate: {e}"))?),
            "--partition" => {
                a.partition = Some(val()?.parse().map_err(|e| format!("--partition: {e}"))?)
            }
            "--acks" => a.props.push(("acks".into(), val()?)),
            "--linger-ms" => a.props.push(("linger.ms".into(), val()?)),
            "--batch-size" => a.props.push(("batch.size".into(), val()?)),
            "-X" => {
                let kv = val()?;
                let (k, v) = kv.split_once('=').ok_or("-X needs key=value")?;
                a.props.push((k.into(), v.into()));
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.topic.is_empty() {
        return Err("--topic is required".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("produce: {e}");
            return usage();
        }
    };
    let mut props = vec![("bootstrap.servers".to_owned(), args.bootstrap.clone())];
    props.extend(args.props.iter().cloned());
    let config = match ProducerConfig::from_properties(props) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("produce: {e}");
            return ExitCode::from(2);
        }
    };
    let producer = match Producer::new(config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("produce: {e}");
            return ExitCode::FAILURE;
        }
    };
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(parking_lot::Mutex::new(None::<String>));
    let header_names: Vec<String> = (0..args.headers).map(|j| format!("h{j}")).collect();
    let mut key = String::new();
    let mut value = Vec::with_capacity(args.value_size);
    let mut num = String::new();
    let start = Instant::now();
    for i in 0..args.records {
        if let Some(rate) = args.rate {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        num.clear();
        use std::fmt::Write;
        let _ = write!(num, "{i}");
        key.clear();
        key.push_str(&args.key_prefix);
        key.push_str(&num);
        value.clear();
        value.extend_from_slice(num.as_bytes());
        value.resize(args.value_size.max(num.len()), b'.');
        let headers: Vec<Header<'_>> = header_names
            .iter()
            .map(|h| Header::new(h, num.as_bytes()))
            .collect();
        let mut rec = ProducerRecord::new(&args.topic)
            .value(&value)
            .headers(&headers);
        if args.keys {
            rec = rec.key(key.as_bytes());
        }
        if let Some(p) = args.partition {
            rec = rec.partition(p);
        }
        let failed = failed.clone();
        let first_error = first_error.clone();
        if let Err(e) = producer.send_with_callback(rec, move |r| {
            if let Err(e) = r {
                failed.fetch_add(1, Ordering::Relaxed);
                first_error.lock().get_or_insert_with(|| e.to_string());
            }
        }) {
            eprintln!("produce: send failed at record {i}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = producer.flush() {
        eprintln!("produce: {e}");
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = producer.close(Duration::from_secs(30));
    let m = producer.metrics();
    let failed = failed.load(Ordering::Relaxed);
    let bytes = m.bytes_sent as f64;
    eprintln!(
        "produced {} records to {} in {:.3} s; batches {}, retries {}, failed {}",
        args.records, args.topic, secs, m.batches_sent, m.retries, failed
    );
    if let Some(e) = first_error.lock().as_ref() {
        eprintln!("first error: {e}");
    }
    println!(
        "records={} seconds={:.3} records_per_sec={:.0} mb_per_sec={:.2} failed={}",
        args.records,
        secs,
        args.records as f64 / secs,
        bytes / secs / 1e6,
        failed
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
