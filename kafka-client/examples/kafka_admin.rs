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
//!   add-partitions TOPIC TOTAL
//!   offsets TOPIC [earliest|latest|max|MS]   offsets per partition
//!   delete-records TOPIC:PARTITION=OFFSET...
//!   configs topic|broker NAME                configs that are not defaults
//!   set-config topic|broker NAME key=value... (key= removes the override)
//!   groups                                   groups, their type and state
//!   group GROUP                              state, members, committed offsets and lag
//!   reset-offsets GROUP TOPIC:PARTITION=OFFSET...
//!   delete-offsets GROUP TOPIC:PARTITION...
//!   producers TOPIC:PARTITION...             active producers
//!   transactions                             transactional ids and their state
//! ```
//!
//! `-X` takes any admin client key (TLS and SASL included). Output is one line per item,
//! `key=value` words; an item that failed prints `error=…` and the exit status is 1.

use std::process::ExitCode;

use kafka_client::admin::{
    ConfigOp, ConfigResource, ConfigSource, NewTopic, OffsetSpec, Options, PerItem,
};
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
        "add-partitions" => {
            let [topic, total] = args else {
                return Err("add-partitions TOPIC TOTAL".into());
            };
            let total = total.parse().map_err(|_| format!("bad count {total:?}"))?;
            let got = a
                .create_partitions(&[(topic.as_str(), total)], &o)
                .map_err(e)?;
            Ok(report("topic", got, |()| format!("partitions={total}")))
        }
        "delete-records" => {
            let before = args
                .iter()
                .map(|s| partition_value(s))
                .collect::<Result<Vec<_>, _>>()?;
            let got = a.delete_records(&before, &o).map_err(e)?;
            Ok(report("partition", got, |low| format!("start={low}")))
        }
        "configs" | "set-config" => configs(a, command, args, &o),
        "groups" => {
            for g in a.list_groups(&[], &o).map_err(e)? {
                println!(
                    "group={} type={} state={} protocol_type={}",
                    g.group_id, g.group_type, g.state, g.protocol_type
                );
            }
            Ok(true)
        }
        "group" => group(a, args, &o),
        "delete-offsets" => {
            let group = args
                .first()
                .ok_or("delete-offsets GROUP TOPIC:PARTITION...")?;
            let tps = args[1..]
                .iter()
                .map(|s| partition(s))
                .collect::<Result<Vec<_>, _>>()?;
            let got = a.delete_group_offsets(group, &tps, &o).map_err(e)?;
            Ok(report("partition", got, |()| "deleted".into()))
        }
        "producers" => {
            let tps = args
                .iter()
                .map(|s| partition(s))
                .collect::<Result<Vec<_>, _>>()?;
            let mut ok = true;
            for (tp, r) in a.describe_producers(&tps, &o).map_err(e)? {
                match r {
                    Ok(ps) => {
                        for p in ps {
                            println!(
                                "partition={tp} producer_id={} epoch={} last_sequence={} txn_start={}",
                                p.producer_id,
                                p.producer_epoch,
                                p.last_sequence,
                                p.transaction_start_offset
                                    .map_or("none".into(), |o| o.to_string())
                            );
                        }
                    }
                    Err(err) => ok = item_error(&format!("partition={tp}"), &err),
                }
            }
            Ok(ok)
        }
        "transactions" => {
            let ids: Vec<String> = a
                .list_transactions(&[], &o)
                .map_err(e)?
                .into_iter()
                .map(|t| t.transactional_id)
                .collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            Ok(report(
                "transactional_id",
                a.describe_transactions(&refs, &o).map_err(e)?,
                |t| {
                    format!(
                        "state={} producer_id={} epoch={} partitions={}",
                        t.state,
                        t.producer_id,
                        t.producer_epoch,
                        t.partitions.len()
                    )
                },
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

fn configs(a: &Admin, command: &str, args: &[String], o: &Options) -> Result<bool, String> {
    let (kind, name, changes) = match args {
        [kind, name, changes @ ..] => (kind.as_str(), name.as_str(), changes),
        _ => return Err(format!("{command} topic|broker NAME ...")),
    };
    let resource = match kind {
        "topic" => ConfigResource::Topic(name.to_owned()),
        "broker" => ConfigResource::Broker(
            name.parse()
                .map_err(|_| format!("bad broker id {name:?}"))?,
        ),
        _ => return Err(format!("{kind:?}: expected topic or broker")),
    };
    if command == "set-config" {
        let ops = changes
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, "")) => Ok(ConfigOp::Delete(k.to_owned())),
                Some((k, v)) => Ok(ConfigOp::Set(k.to_owned(), v.to_owned())),
                None => Err(format!("{kv:?}: expected key=value")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let got = a
            .alter_configs(&[(resource, ops)], o)
            .map_err(|e| e.to_string())?;
        return Ok(report("resource", got, |()| "altered".into()));
    }
    let got = a
        .describe_configs(std::slice::from_ref(&resource), o)
        .map_err(|e| e.to_string())?;
    Ok(report("resource", got, |entries| {
        entries
            .into_iter()
            .filter(|(_, c)| c.source != ConfigSource::Default)
            .map(|(k, c)| format!("{k}={}", c.value.unwrap_or_else(|| "(sensitive)".into())))
            .collect::<Vec<_>>()
            .join(" ")
    }))
}

/// A group's description, then its committed offsets with the lag behind each end.
fn group(a: &Admin, args: &[String], o: &Options) -> Result<bool, String> {
    let group = args.first().ok_or("group GROUP")?;
    let e = |e: AdminError| e.to_string();
    let d = a
        .describe_groups(&[group.as_str()], o)
        .map_err(e)?
        .remove(group.as_str())
        .ok_or("no answer")?
        .map_err(e)?;
    println!(
        "group={} type={} state={} assignor={} coordinator={}",
        d.group_id, d.group_type, d.state, d.assignor, d.coordinator
    );
    for m in &d.members {
        let assigned: Vec<String> = m.assignment.iter().map(ToString::to_string).collect();
        println!(
            "member={} client_id={} host={} assignment={}",
            m.member_id,
            m.client_id,
            m.host,
            assigned.join(",")
        );
    }
    let committed = a.list_group_offsets(group, None, o).map_err(e)?;
    let wanted: Vec<_> = committed
        .keys()
        .map(|tp| (tp.clone(), OffsetSpec::Latest))
        .collect();
    let ends = a.list_offsets(&wanted, false, o).map_err(e)?;
    for (tp, c) in committed {
        let lag = match ends.get(&tp) {
            Some(Ok(end)) => (end.offset - c.offset).to_string(),
            _ => "?".into(),
        };
        println!("partition={tp} committed={} lag={lag}", c.offset);
    }
    Ok(true)
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
