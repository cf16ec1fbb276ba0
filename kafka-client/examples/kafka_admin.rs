//! `kafka-admin`: the common admin operations from the command line, through
//! [`kafka_client::Admin`] (no JVM).
//!
//! ```text
//! cargo run -p crac-kafka --example kafka-admin -- --bootstrap 127.0.0.1:9092 [-X key=value]... COMMAND
//!   cluster                                  brokers, controller, cluster id
//!   topics [--internal]                      topic names and ids
//!   describe TOPIC...                        partitions, leaders, replicas, ISR
//!   create TOPIC PARTITIONS REPLICATION [key=value]...
//!   delete TOPIC...
//!   offsets TOPIC [earliest|latest|max|MS]   offsets per partition
//!   reset-offsets GROUP TOPIC:PARTITION=OFFSET...
//! ```
//!
//! `-X` takes any admin client key (TLS and SASL included). Output is one line per item,
//! `key=value` words; an item that failed prints `error=…` and the exit status is 1.

use std::process::ExitCode;

use kafka_client::admin::{NewTopic, OffsetSpec, Options, PerItem};
use kafka_client::{Admin, AdminError, TopicPartition};

fn usage() -> ExitCode {
    eprintln!(
        "usage: kafka-admin --bootstrap HOST:PORT [-X key=value]... COMMAND [ARGS]... \
         (see the source's header for the commands)"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut props = vec![
        ("bootstrap.servers".to_owned(), "127.0.0.1:9092".to_owned()),
        ("crac.register".to_owned(), "false".to_owned()),
    ];
    while args.first().is_some_and(|a| a.starts_with('-')) {
        let flag = args.remove(0);
        let Some(value) = (!args.is_empty()).then(|| args.remove(0)) else {
            return usage();
        };
        match flag.as_str() {
            "--bootstrap" => props[0].1 = value,
            "-X" => match value.split_once('=') {
                Some((k, v)) => props.push((k.to_owned(), v.to_owned())),
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    let Some(command) = (!args.is_empty()).then(|| args.remove(0)) else {
        return usage();
    };
    let admin = match Admin::from_properties(props) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kafka-admin: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&admin, &command, &args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kafka-admin {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `command`; `Ok(false)` when an item failed.
fn run(a: &Admin, command: &str, args: &[String]) -> Result<bool, String> {
    let o = Options::default();
    let e = |e: AdminError| e.to_string();
    match command {
        "cluster" => {
            let c = a.describe_cluster(&o).map_err(e)?;
            println!(
                "cluster_id={} controller={}",
                c.cluster_id.unwrap_or_default(),
                c.controller.map_or("none".into(), |c| c.to_string())
            );
            for b in c.brokers {
                println!(
                    "broker={} host={} port={} rack={}",
                    b.id,
                    b.host,
                    b.port,
                    b.rack.unwrap_or_default()
                );
            }
            Ok(true)
        }
        "topics" => {
            let internal = args.iter().any(|a| a == "--internal");
            for t in a.list_topics(internal, &o).map_err(e)?.into_values() {
                println!("topic={} id={} internal={}", t.name, t.topic_id, t.internal);
            }
            Ok(true)
        }
        "describe" => {
            let topics: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut ok = true;
            for (name, r) in a.describe_topics(&topics, &o).map_err(e)? {
                match r {
                    Ok(d) => {
                        for p in d.partitions {
                            println!(
                                "topic={name} id={} partition={} leader={} replicas={:?} isr={:?}",
                                d.topic_id,
                                p.partition,
                                p.leader.unwrap_or(-1),
                                p.replicas,
                                p.isr
                            );
                        }
                    }
                    Err(err) => ok = item_error(&format!("topic={name}"), &err),
                }
            }
            Ok(ok)
        }
        "create" => {
            let [name, partitions, replication, configs @ ..] = args else {
                return Err("create TOPIC PARTITIONS REPLICATION [key=value]...".into());
            };
            let mut t = NewTopic::new(
                name.as_str(),
                partitions
                    .parse()
                    .map_err(|_| format!("bad partition count {partitions:?}"))?,
                replication
                    .parse()
                    .map_err(|_| format!("bad replication {replication:?}"))?,
            );
            for kv in configs {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("{kv:?}: expected key=value"))?;
                t = t.config(k, v);
            }
            Ok(report(
                "topic",
                a.create_topics(&[t], &o).map_err(e)?,
                |c| format!("created id={} partitions={}", c.topic_id, c.partitions),
            ))
        }
        "delete" => {
            let topics: Vec<&str> = args.iter().map(String::as_str).collect();
            Ok(report(
                "topic",
                a.delete_topics(&topics, &o).map_err(e)?,
                |()| "deleted".into(),
            ))
        }
        "offsets" => offsets(a, args, &o),
        "reset-offsets" => {
            let group = args
                .first()
                .ok_or("reset-offsets GROUP TOPIC:PARTITION=OFFSET...")?;
            let wanted = args[1..]
                .iter()
                .map(|s| partition_value(s))
                .collect::<Result<Vec<_>, _>>()?;
            let mut ok = true;
            for (tp, r) in a.alter_group_offsets(group, &wanted, &o).map_err(e)? {
                match r {
                    Ok(()) => println!("group={group} partition={tp} reset=ok"),
                    Err(err) => ok = item_error(&format!("group={group} partition={tp}"), &err),
                }
            }
            Ok(ok)
        }
        _ => Err(format!("unknown command {command:?}")),
    }
}

fn offsets(a: &Admin, args: &[String], o: &Options) -> Result<bool, String> {
    let topic = args
        .first()
        .ok_or("offsets TOPIC [earliest|latest|max|MS]")?;
    let spec = match args.get(1).map(String::as_str) {
        None | Some("latest") => OffsetSpec::Latest,
        Some("earliest") => OffsetSpec::Earliest,
        Some("max") => OffsetSpec::MaxTimestamp,
        Some(ms) => OffsetSpec::Timestamp(ms.parse().map_err(|_| format!("bad time {ms:?}"))?),
    };
    let described = a
        .describe_topics(&[topic], o)
        .map_err(|e| e.to_string())?
        .remove(topic.as_str())
        .ok_or("no answer")?
        .map_err(|e| e.to_string())?;
    let wanted: Vec<_> = described
        .partitions
        .iter()
        .map(|p| (TopicPartition::new(topic.as_str(), p.partition), spec))
        .collect();
    let mut ok = true;
    for (tp, r) in a
        .list_offsets(&wanted, false, o)
        .map_err(|e| e.to_string())?
    {
        match r {
            Ok(l) => println!(
                "partition={tp} offset={} timestamp={}",
                l.offset, l.timestamp
            ),
            Err(err) => ok = item_error(&format!("partition={tp}"), &err),
        }
    }
    Ok(ok)
}

/// `topic:partition=value`.
fn partition_value(s: &str) -> Result<(TopicPartition, i64), String> {
    let (tp, v) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected TOPIC:PARTITION=VALUE"))?;
    let v = v.parse().map_err(|_| format!("{s:?}: bad value"))?;
    Ok((partition(tp)?, v))
}

/// `topic:partition`.
fn partition(s: &str) -> Result<TopicPartition, String> {
    let (t, p) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected TOPIC:PARTITION"))?;
    let p = p.parse().map_err(|_| format!("{s:?}: bad partition"))?;
    Ok(TopicPartition::new(t, p))
}

/// Prints one line per item; `false` when one failed.
fn report<K: std::fmt::Display, T>(
    what: &str,
    items: PerItem<K, T>,
    ok: impl Fn(T) -> String,
) -> bool {
    let mut all = true;
    for (k, r) in items {
        match r {
            Ok(v) => println!("{what}={k} {}", ok(v)),
            Err(err) => all = item_error(&format!("{what}={k}"), &err),
        }
    }
    all
}

/// Prints an item's error; `false`, for the exit status.
fn item_error(item: &str, e: &AdminError) -> bool {
    println!("{item} error={:?}", e.to_string());
    false
}
