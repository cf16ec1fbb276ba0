//! Reads N records of a topic as a member of a consumer group and prints a summary.
//!
//! ```text
//! cargo run --release -p kafka-client --example consume -- \
//!     --bootstrap 127.0.0.1:9092 --topic demo --group demo-reader --records 100000 \
//!     [--from earliest|latest] [--commit sync|async|auto|none] [--print] [-X key=value ...]
//! ```
//!
//! The last line is machine-readable: `records=… seconds=… records_per_sec=… mb_per_sec=…`
//! (the clock starts at the first record, so joining the group is not counted).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_client::{Consumer, ConsumerConfig};

struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    records: u64,
    from: String,
    commit: String,
    print: bool,
    props: Vec<(String, String)>,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: consume --bootstrap HOST:PORT --topic T [--group G] [--records N] \
         [--from earliest|latest] [--commit sync|async|auto|none] [--print] [-X key=value]..."
    );
    ExitCode::from(2)
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        bootstrap: "127.0.0.1:9092".into(),
        topic: String::new(),
        group: "consume-example".into(),
        records: 100_000,
        from: "earliest".into(),
        commit: "sync".into(),
        print: false,
        props: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = val()?,
            "--topic" => a.topic = val()?,
            "--group" => a.group = val()?,
            "--records" => a.records = val()?.parse().map_err(|_| "--records: a number")?,
            "--from" => a.from = val()?,
            "--commit" => a.commit = val()?,
            "--print" => a.print = true,
            "-X" => {
                let kv = val()?;
                let (k, v) = kv.split_once('=').ok_or("-X takes key=value")?;
                a.props.push((k.into(), v.into()));
            }
            _ => return Err(format!("unknown flag {flag}")),
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
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("consume: {e}");
            return usage();
        }
    };
    let mut props = vec![
        ("bootstrap.servers".to_owned(), a.bootstrap.clone()),
        ("group.id".to_owned(), a.group.clone()),
        ("auto.offset.reset".to_owned(), a.from.clone()),
        (
            "enable.auto.commit".to_owned(),
            (a.commit == "auto").to_string(),
        ),
        ("crac.register".to_owned(), "false".to_owned()),
    ];
    props.extend(a.props.iter().cloned());
    let config = match ConsumerConfig::from_properties(props) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("consume: {e}");
            return ExitCode::from(2);
        }
    };
    let consumer = match Consumer::new(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("consume: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = consumer.subscribe([&a.topic]) {
        eprintln!("consume: {e}");
        return ExitCode::FAILURE;
    }
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut start = None;
    let mut idle = Instant::now();
    while n < a.records {
        let records = match consumer.poll(Duration::from_millis(500)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("consume: poll: {e}");
                return ExitCode::FAILURE;
            }
        };
        if records.is_empty() {
            if idle.elapsed() > Duration::from_secs(30) {
                eprintln!("consume: no record for 30 s after {n}");
                break;
            }
            continue;
        }
        idle = Instant::now();
        start.get_or_insert_with(Instant::now);
        for r in &records {
            n += 1;
            bytes += r.value.as_ref().map_or(0, |b| b.len()) as u64;
            if a.print {
                println!(
                    "{}-{}@{} {}",
                    r.topic,
                    r.partition,
                    r.offset,
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
                );
            }
        }
        let committed = match a.commit.as_str() {
            "sync" => consumer.commit_sync(),
            "async" => consumer.commit_async(|r| {
                if let Err(e) = r {
                    eprintln!("consume: commit: {e}");
                }
            }),
            _ => Ok(()),
        };
        if let Err(e) = committed {
            eprintln!("consume: commit: {e}");
        }
    }
    let secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let _ = consumer.close(Duration::from_secs(30));
    println!(
        "records={n} seconds={secs:.3} records_per_sec={:.0} mb_per_sec={:.2}",
        n as f64 / secs.max(1e-9),
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}
