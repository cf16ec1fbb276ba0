//! The admin client against real brokers (3 KRaft brokers): every call, its answers checked
//! against what the cluster holds (records produced, offsets committed by a real consumer,
//! Java's tools where they are the reference), and its errors (a topic that exists, one that
//! does not, an invalid config, the controller gone). Over SASL_SSL: `security.rs`.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use crac_tests::kafka::Cluster;
use kafka_client::admin::{ConfigOp, ConfigResource, ConfigSource, NewTopic, OffsetSpec, Options};
use kafka_client::{
    Admin, Consumer, ConsumerConfig, ErrorCode, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};

fn kafka() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| Cluster::start(3))
}

fn admin() -> Admin {
    let mut props = kafka().plaintext().properties();
    props.push(("crac.register".into(), "false".into()));
    props.push(("default.api.timeout.ms".into(), "60000".into()));
    Admin::from_properties(props).unwrap()
}

/// Polls `f` (every 50 ms, up to 30 s) until it has a value: what the controller committed
/// reaches every broker a moment later.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn opts() -> Options {
    Options::default()
}

fn producer() -> Producer {
    let mut props = kafka().plaintext().properties();
    props.push(("crac.register".into(), "false".into()));
    props.push(("linger.ms".into(), "0".into()));
    Producer::new(ProducerConfig::from_properties(props).unwrap()).unwrap()
}

/// Sends `n` records to `partition` of `topic`, the i-th with timestamp `ts0 + i`.
fn produce(topic: &str, partition: i32, n: i64, ts0: i64) {
    let p = producer();
    let reports: Vec<_> = (0..n)
        .map(|i| {
            p.send(
                ProducerRecord::new(topic)
                    .partition(partition)
                    .timestamp(ts0 + i)
                    .value(b"v"),
            )
            .unwrap()
        })
        .collect();
    for r in reports {
        r.wait().unwrap();
    }
    p.close(Duration::from_secs(30)).unwrap();
}

#[test]
fn describe_cluster_names_every_broker_and_a_controller() {
    let c = admin().describe_cluster(&opts()).unwrap();
    assert_eq!(
        c.brokers.iter().map(|b| b.id).collect::<Vec<_>>(),
        [1, 2, 3],
        "{c:?}"
    );
    assert!(c.brokers.iter().all(|b| b.host == "127.0.0.1"));
    let ports: Vec<u16> = c.brokers.iter().map(|b| b.port).collect();
    assert!(
        kafka().ports().iter().all(|p| ports.contains(p)),
        "{ports:?}"
    );
    assert!(c.controller.is_some_and(|id| (1..=3).contains(&id)));
    assert!(
        c.cluster_id.as_deref().is_some_and(|id| id.len() >= 22),
        "{c:?}"
    );
}

#[test]
fn describe_topics_matches_java_s_describe_and_unknown_topics_fail_alone() {
    let k = kafka();
    k.create_topic("adm-describe", 3, 2);
    let a = admin();
    let got = a
        .describe_topics(&["adm-describe", "adm-missing"], &opts())
        .unwrap();
    let d = got["adm-describe"].as_ref().unwrap();
    assert!(!d.topic_id.is_zero());
    assert!(!d.internal);
    let java: BTreeMap<i32, (i32, Vec<i32>)> = k
        .java_describe("adm-describe")
        .into_iter()
        .map(|p| (p.partition, (p.leader, p.replicas)))
        .collect();
    let ours: BTreeMap<i32, (i32, Vec<i32>)> = d
        .partitions
        .iter()
        .map(|p| (p.partition, (p.leader.unwrap_or(-1), p.replicas.clone())))
        .collect();
    assert_eq!(ours, java);
    assert!(d.partitions.iter().all(|p| p.isr.len() == 2), "{d:?}");
    let e = got["adm-missing"].as_ref().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownTopicOrPartition), "{e}");
    let listed = a.list_topics(false, &opts()).unwrap();
    assert_eq!(listed["adm-describe"].topic_id, d.topic_id);
    assert!(!listed.contains_key("__consumer_offsets"));
    let all = a.list_topics(true, &opts()).unwrap();
    assert!(
        all.values().all(|t| t.internal == t.name.starts_with("__")),
        "{all:?}"
    );
}

#[test]
fn list_offsets_earliest_latest_and_by_time_match_the_log() {
    let k = kafka();
    k.create_topic("adm-offsets", 2, 3);
    let ts0 = 1_700_000_000_000;
    produce("adm-offsets", 0, 10, ts0);
    let (p0, p1) = (
        TopicPartition::new("adm-offsets", 0),
        TopicPartition::new("adm-offsets", 1),
    );
    let a = admin();
    let got = a
        .list_offsets(
            &[
                (p0.clone(), OffsetSpec::Latest),
                (p1.clone(), OffsetSpec::Earliest),
            ],
            false,
            &opts(),
        )
        .unwrap();
    assert_eq!(got[&p0].as_ref().unwrap().offset, 10);
    assert_eq!(got[&p1].as_ref().unwrap().offset, 0);
    // By time: the first record at or after ts0+4 is offset 4; the newest timestamp is at 9.
    let got = a
        .list_offsets(
            &[(p0.clone(), OffsetSpec::Timestamp(ts0 + 4))],
            false,
            &opts(),
        )
        .unwrap();
    let o = got[&p0].as_ref().unwrap();
    assert_eq!((o.offset, o.timestamp), (4, ts0 + 4));
    let got = a
        .list_offsets(&[(p0.clone(), OffsetSpec::MaxTimestamp)], true, &opts())
        .unwrap();
    let o = got[&p0].as_ref().unwrap();
    assert_eq!((o.offset, o.timestamp), (9, ts0 + 9));
    let got = a
        .list_offsets(
            &[(p0.clone(), OffsetSpec::Timestamp(ts0 + 1000))],
            false,
            &opts(),
        )
        .unwrap();
    assert_eq!(got[&p0].as_ref().unwrap().offset, -1, "no record that late");
    let got = a
        .list_offsets(
            &[(TopicPartition::new("adm-offsets", 7), OffsetSpec::Latest)],
            false,
            &opts(),
        )
        .unwrap();
    let e = got.values().next().unwrap().as_ref().unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownTopicOrPartition), "{e}");
}

#[test]
fn a_group_s_offsets_are_read_and_reset_as_a_consumer_sees_them() {
    let k = kafka();
    k.create_topic("adm-group", 2, 3);
    produce("adm-group", 0, 6, 1_700_000_000_000);
    let tp = TopicPartition::new("adm-group", 0);
    // A real consumer of the group commits 6, then leaves.
    {
        let mut props = k.plaintext().properties();
        props.extend(
            [
                ("group.id", "adm-g"),
                ("crac.register", "false"),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned())),
        );
        let c = Consumer::new(ConsumerConfig::from_properties(props).unwrap()).unwrap();
        c.subscribe(["adm-group"]).unwrap();
        let mut n = 0;
        while n < 6 {
            n += c.poll(Duration::from_secs(1)).unwrap().into_iter().count();
        }
        c.commit_sync().unwrap();
        c.close(Duration::from_secs(30)).unwrap();
    }
    let a = admin();
    let got = a.list_group_offsets("adm-g", None, &opts()).unwrap();
    assert_eq!(got[&tp].offset, 6, "{got:?}");
    // Reset to 2 while the group is empty: a new member starts there.
    let done = a
        .alter_group_offsets("adm-g", &[(tp.clone(), 2)], &opts())
        .unwrap();
    assert!(done[&tp].is_ok(), "{done:?}");
    let got = a
        .list_group_offsets("adm-g", Some(std::slice::from_ref(&tp)), &opts())
        .unwrap();
    assert_eq!(got[&tp].offset, 2);
    let committed = k.java_group_offsets("adm-g");
    assert_eq!(
        committed.get(&("adm-group".to_owned(), 0)),
        Some(&2),
        "Java agrees"
    );
}

#[test]
fn create_and_delete_answer_per_topic() {
    let k = kafka();
    k.create_topic("adm-exists", 1, 1);
    let a = admin();
    let got = a
        .create_topics(
            &[
                NewTopic::new("adm-new", 3, 2).config("retention.ms", "12345"),
                NewTopic::new("adm-exists", 1, 1),
                NewTopic::new("adm-badcfg", 1, 1).config("cleanup.policy", "sometimes"),
                NewTopic::new("adm-rf", 1, 5),
            ],
            &opts(),
        )
        .unwrap();
    let created = got["adm-new"].as_ref().unwrap();
    assert_eq!((created.partitions, created.replication_factor), (3, 2));
    assert!(!created.topic_id.is_zero());
    let code = |t: &str| got[t].as_ref().unwrap_err().code();
    assert_eq!(code("adm-exists"), Some(ErrorCode::TopicAlreadyExists));
    assert_eq!(code("adm-badcfg"), Some(ErrorCode::InvalidConfig));
    assert_eq!(code("adm-rf"), Some(ErrorCode::InvalidReplicationFactor));
    assert!(
        got["adm-rf"]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("replication factor"),
        "the controller's message is kept: {:?}",
        got["adm-rf"]
    );
    let id = eventually("every broker to know the new topic", || {
        let d = a.describe_topics(&["adm-new"], &opts()).unwrap();
        d["adm-new"].as_ref().ok().map(|d| d.topic_id)
    });
    assert_eq!(id, created.topic_id);
    // Java sees the topic as created, with its config.
    let parts = k.java_describe("adm-new");
    assert_eq!(parts.len(), 3);
    assert!(parts.iter().all(|p| p.replicas.len() == 2));
    let out = k.java_tool(
        "configs",
        &[
            "--bootstrap-server",
            k.bootstrap(),
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            "adm-new",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("retention.ms=12345"));

    // Only validated: answered as if created, and nothing is.
    let got = a
        .create_topics(
            &[NewTopic::new("adm-validate", 2, 1)],
            &opts().validate_only(),
        )
        .unwrap();
    assert_eq!(got["adm-validate"].as_ref().unwrap().partitions, 2);
    let d = a.describe_topics(&["adm-validate"], &opts()).unwrap();
    assert!(d["adm-validate"].is_err(), "{d:?}");

    let got = a.delete_topics(&["adm-new", "adm-never"], &opts()).unwrap();
    assert!(got["adm-new"].is_ok(), "{got:?}");
    assert_eq!(
        got["adm-never"].as_ref().unwrap_err().code(),
        Some(ErrorCode::UnknownTopicOrPartition)
    );
    eventually("the deleted topic to leave every broker's metadata", || {
        let listed = a.list_topics(false, &opts()).unwrap();
        (!listed.contains_key("adm-new")).then_some(())
    });
}

#[test]
fn a_create_reaches_the_controller_after_the_one_it_knew_is_gone() {
    // A cluster of its own: a broker of it is stopped.
    let k = Cluster::start(3);
    let mut props = k.plaintext().properties();
    props.push(("crac.register".into(), "false".into()));
    let a = Admin::from_properties(props).unwrap();
    let before = a.describe_cluster(&opts()).unwrap();
    let gone = before.controller.unwrap();
    k.stop_broker(gone);
    let got = a
        .create_topics(&[NewTopic::new("adm-moved", 2, 2)], &opts())
        .unwrap();
    assert!(got["adm-moved"].is_ok(), "{got:?}");
    let after = a.describe_cluster(&opts()).unwrap();
    assert_ne!(after.controller, Some(gone), "{after:?}");
    eventually("the new topic to reach every broker", || {
        let d = a.describe_topics(&["adm-moved"], &opts()).unwrap();
        d["adm-moved"].is_ok().then_some(())
    });
    assert_eq!(k.java_describe("adm-moved").len(), 2);
}

#[test]
fn configs_are_described_with_their_source_and_altered_key_by_key() {
    let k = kafka();
    k.create_topic_with_config("adm-configs", 1, 1, &[("retention.ms", "3600000")]);
    let a = admin();
    let topic = ConfigResource::Topic("adm-configs".into());
    let got = a
        .describe_configs(
            &[
                topic.clone(),
                ConfigResource::Broker(1),
                ConfigResource::Topic("adm-none".into()),
            ],
            &opts(),
        )
        .unwrap();
    let t = got[&topic].as_ref().unwrap();
    assert_eq!(t["retention.ms"].value.as_deref(), Some("3600000"));
    assert_eq!(t["retention.ms"].source, ConfigSource::DynamicTopic);
    assert_eq!(t["cleanup.policy"].source, ConfigSource::Default);
    assert!(t["retention.ms"].documentation.is_some());
    let b = got[&ConfigResource::Broker(1)].as_ref().unwrap();
    assert_eq!(b["node.id"].value.as_deref(), Some("1"));
    assert_eq!(
        got[&ConfigResource::Topic("adm-none".into())]
            .as_ref()
            .unwrap_err()
            .code(),
        Some(ErrorCode::UnknownTopicOrPartition)
    );

    let done = a
        .alter_configs(
            &[
                (
                    topic.clone(),
                    vec![
                        ConfigOp::Set("segment.ms".into(), "7200000".into()),
                        ConfigOp::Delete("retention.ms".into()),
                    ],
                ),
                (
                    ConfigResource::Topic("adm-none".into()),
                    vec![ConfigOp::Set("segment.ms".into(), "1".into())],
                ),
            ],
            &opts(),
        )
        .unwrap();
    assert!(done[&topic].is_ok(), "{done:?}");
    assert!(done[&ConfigResource::Topic("adm-none".into())].is_err());
    // The controller has it; each broker applies it a moment later.
    let t = eventually("the change to reach the broker asked", || {
        let t = a
            .describe_configs(std::slice::from_ref(&topic), &opts())
            .unwrap();
        let t = t[&topic].as_ref().unwrap().clone();
        (t["segment.ms"].value.as_deref() == Some("7200000")).then_some(t)
    });
    assert_eq!(
        t["retention.ms"].source,
        ConfigSource::Default,
        "back to the default"
    );

    // A bad value is refused for its resource, naming it; validate_only changes nothing.
    let bad = a
        .alter_configs(
            &[(
                topic.clone(),
                vec![ConfigOp::Set("cleanup.policy".into(), "sometimes".into())],
            )],
            &opts(),
        )
        .unwrap();
    assert_eq!(
        bad[&topic].as_ref().unwrap_err().code(),
        Some(ErrorCode::InvalidConfig),
        "{bad:?}"
    );
    a.alter_configs(
        &[(
            topic.clone(),
            vec![ConfigOp::Set("segment.ms".into(), "60000".into())],
        )],
        &opts().validate_only(),
    )
    .unwrap()[&topic]
        .as_ref()
        .unwrap();
    let t = a
        .describe_configs(std::slice::from_ref(&topic), &opts())
        .unwrap();
    assert_eq!(
        t[&topic].as_ref().unwrap()["segment.ms"].value.as_deref(),
        Some("7200000")
    );
    let e = a
        .describe_configs(&[ConfigResource::Broker(99)], &opts())
        .unwrap();
    assert!(
        matches!(
            e[&ConfigResource::Broker(99)],
            Err(kafka_client::AdminError::InvalidArgument { .. })
        ),
        "{e:?}"
    );
}

#[test]
fn groups_are_listed_from_every_broker_and_described_by_their_coordinator() {
    let k = kafka();
    k.create_topic("adm-live", 2, 2);
    let a = admin();
    // An empty group: offsets only.
    a.alter_group_offsets(
        "adm-empty",
        &[(TopicPartition::new("adm-live", 0), 0)],
        &opts(),
    )
    .unwrap();
    let mut props = k.plaintext().properties();
    props.extend(
        [
            ("group.id", "adm-live-g"),
            ("client.id", "adm-live-client"),
            ("crac.register", "false"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned())),
    );
    let c = Consumer::new(ConsumerConfig::from_properties(props).unwrap()).unwrap();
    c.subscribe(["adm-live"]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while c.assignment().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never assigned");
        c.poll(Duration::from_millis(200)).unwrap();
    }
    let all = a.list_groups(&[], &opts()).unwrap();
    let live = all
        .iter()
        .find(|g| g.group_id == "adm-live-g")
        .expect("listed");
    assert_eq!(
        (live.state.as_str(), live.group_type.as_str()),
        ("Stable", "classic"),
        "{live:?}"
    );
    let empty = a.list_groups(&["Empty"], &opts()).unwrap();
    assert!(empty.iter().any(|g| g.group_id == "adm-empty"), "{empty:?}");
    assert!(
        !empty.iter().any(|g| g.group_id == "adm-live-g"),
        "{empty:?}"
    );

    let got = a
        .describe_groups(&["adm-live-g", "adm-no-such-group"], &opts())
        .unwrap();
    let d = got["adm-live-g"].as_ref().unwrap();
    assert_eq!(d.state, "Stable");
    assert_eq!(d.protocol_type, "consumer");
    assert_eq!(d.members.len(), 1, "{d:?}");
    let m = &d.members[0];
    assert_eq!(m.client_id, "adm-live-client");
    assert_eq!(m.subscription, ["adm-live"]);
    assert_eq!(
        m.assignment,
        [
            TopicPartition::new("adm-live", 0),
            TopicPartition::new("adm-live", 1)
        ]
    );
    assert_eq!(
        got["adm-no-such-group"].as_ref().unwrap_err().code(),
        Some(ErrorCode::GroupIdNotFound)
    );
    // A group of the KIP-848 protocol is described by ConsumerGroupDescribe.
    let mut props = k.plaintext().properties();
    props.extend(
        [
            ("group.id", "adm-848-g"),
            ("group.protocol", "consumer"),
            ("crac.register", "false"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned())),
    );
    let c848 = Consumer::new(ConsumerConfig::from_properties(props).unwrap()).unwrap();
    c848.subscribe(["adm-live"]).unwrap();
    while c848.assignment().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "848 member never assigned"
        );
        c848.poll(Duration::from_millis(200)).unwrap();
    }
    let got = a.describe_groups(&["adm-848-g"], &opts()).unwrap();
    let d = got["adm-848-g"].as_ref().unwrap();
    assert_eq!(
        (d.group_type.as_str(), d.state.as_str()),
        ("consumer", "Stable"),
        "{d:?}"
    );
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].subscription, ["adm-live"]);
    assert_eq!(d.members[0].assignment.len(), 2);
    let listed = a.list_groups(&[], &opts()).unwrap();
    let g = listed
        .iter()
        .find(|g| g.group_id == "adm-848-g")
        .expect("listed");
    assert_eq!(g.group_type, "consumer");
    c848.close(Duration::from_secs(30)).unwrap();

    // A group's offsets of a topic it consumes cannot be deleted.
    let got = a
        .delete_group_offsets("adm-live-g", &[TopicPartition::new("adm-live", 0)], &opts())
        .unwrap();
    assert_eq!(
        got[&TopicPartition::new("adm-live", 0)]
            .as_ref()
            .unwrap_err()
            .code(),
        Some(ErrorCode::GroupSubscribedToTopic)
    );
    c.close(Duration::from_secs(30)).unwrap();
}

#[test]
fn partitions_are_added_records_deleted_and_a_group_s_offsets_removed() {
    let k = kafka();
    k.create_topic("adm-grow", 2, 2);
    let a = admin();
    let got = a
        .create_partitions(&[("adm-grow", 4), ("adm-no-topic", 3)], &opts())
        .unwrap();
    assert!(got["adm-grow"].is_ok(), "{got:?}");
    assert_eq!(
        got["adm-no-topic"].as_ref().unwrap_err().code(),
        Some(ErrorCode::UnknownTopicOrPartition)
    );
    eventually("the new partitions to reach every broker", || {
        let d = a.describe_topics(&["adm-grow"], &opts()).unwrap();
        (d["adm-grow"].as_ref().ok()?.partitions.len() == 4).then_some(())
    });
    let got = a.create_partitions(&[("adm-grow", 3)], &opts()).unwrap();
    assert_eq!(
        got["adm-grow"].as_ref().unwrap_err().code(),
        Some(ErrorCode::InvalidPartitions)
    );

    // Records before offset 4 of partition 0 go; the log starts there.
    produce("adm-grow", 0, 10, 1_700_000_000_000);
    let (p0, p9) = (
        TopicPartition::new("adm-grow", 0),
        TopicPartition::new("adm-grow", 9),
    );
    let got = a
        .delete_records(&[(p0.clone(), 4), (p9.clone(), 1)], &opts())
        .unwrap();
    assert_eq!(*got[&p0].as_ref().unwrap(), 4);
    assert_eq!(
        got[&p9].as_ref().unwrap_err().code(),
        Some(ErrorCode::UnknownTopicOrPartition)
    );
    let first = a
        .list_offsets(&[(p0.clone(), OffsetSpec::Earliest)], false, &opts())
        .unwrap();
    assert_eq!(first[&p0].as_ref().unwrap().offset, 4);

    // An empty group's offsets of one partition are removed; the other's stay.
    let p1 = TopicPartition::new("adm-grow", 1);
    a.alter_group_offsets("adm-del-g", &[(p0.clone(), 6), (p1.clone(), 0)], &opts())
        .unwrap();
    let got = a
        .delete_group_offsets("adm-del-g", std::slice::from_ref(&p0), &opts())
        .unwrap();
    assert!(got[&p0].is_ok(), "{got:?}");
    let left = a.list_group_offsets("adm-del-g", None, &opts()).unwrap();
    assert_eq!(left.keys().collect::<Vec<_>>(), [&p1]);
    let got = a
        .delete_group_offsets("adm-no-such-g", std::slice::from_ref(&p0), &opts())
        .unwrap();
    assert_eq!(
        got[&p0].as_ref().unwrap_err().code(),
        Some(ErrorCode::GroupIdNotFound)
    );
}

#[test]
fn an_open_transaction_is_seen_by_its_coordinator_and_its_partition_s_leader() {
    let k = kafka();
    k.create_topic("adm-txn", 1, 3);
    let mut props = k.plaintext().properties();
    props.extend(
        [("crac.register", "false"), ("transactional.id", "adm-tx-1")]
            .map(|(a, b)| (a.to_owned(), b.to_owned())),
    );
    let p = Producer::new(ProducerConfig::from_properties(props).unwrap()).unwrap();
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new("adm-txn").partition(0).value(b"x"))
        .unwrap()
        .wait()
        .unwrap();
    let a = admin();
    let tp = TopicPartition::new("adm-txn", 0);
    let listed = a.list_transactions(&["Ongoing"], &opts()).unwrap();
    let mine = listed
        .iter()
        .find(|t| t.transactional_id == "adm-tx-1")
        .expect("listed as ongoing");
    let got = a
        .describe_transactions(&["adm-tx-1", "adm-tx-never"], &opts())
        .unwrap();
    let d = got["adm-tx-1"].as_ref().unwrap();
    assert_eq!(d.state, "Ongoing");
    assert_eq!(d.producer_id, mine.producer_id);
    assert_eq!(d.partitions, std::slice::from_ref(&tp));
    assert!(d.start_time_ms.is_some());
    assert_eq!(
        got["adm-tx-never"].as_ref().unwrap_err().code(),
        Some(ErrorCode::TransactionalIdNotFound)
    );
    let producers = a
        .describe_producers(std::slice::from_ref(&tp), &opts())
        .unwrap();
    let active = producers[&tp].as_ref().unwrap();
    let me = active
        .iter()
        .find(|x| x.producer_id == mine.producer_id)
        .expect("the leader knows the producer");
    assert_eq!(me.transaction_start_offset, Some(0), "{me:?}");

    p.commit_transaction().unwrap();
    eventually("the commit to complete", || {
        let got = a.describe_transactions(&["adm-tx-1"], &opts()).unwrap();
        let d = got["adm-tx-1"].as_ref().unwrap();
        (d.state == "CompleteCommit" && d.partitions.is_empty()).then_some(())
    });
    p.close(Duration::from_secs(30)).unwrap();
}
