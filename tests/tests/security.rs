//! TLS and SASL against a real broker (`kafka start --security`: a CA made for the cluster,
//! SCRAM users created at format time, PLAIN users in the listener's JAAS config, Kafka's
//! unsecured OAUTHBEARER validator), checked with Java's console tools over the same listener:
//! every record we produce is read by Java, every record Java produces is read by us. And the
//! errors a user meets, each triggered on purpose: its message names the broker and the key to
//! fix, and reaches `send()` and `poll()` within their time bounds.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crac_tests::kafka::{Access, Cluster, JavaRecord};
use crac_tests::process::{Proc, TempDir, crac_checkpoint, crac_command, must, wait_acked};
use crac_tests::stream::check_stream;
use kafka_client::admin::{NewTopic, OffsetSpec, Options};
use kafka_client::{
    Admin, AdminError, Consumer, ConsumerConfig, ConsumerError, ProduceError, Producer,
    ProducerConfig, ProducerRecord, TopicPartition,
};

fn kafka() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let k = Cluster::start_secure(1, Some(Duration::from_secs(4)));
        // Where the password probes of the checkpoint tests write.
        k.create_topic("password-probe", 1, 1);
        k
    })
}

fn producer_config(a: &Access, extra: &[(&str, &str)]) -> ProducerConfig {
    let mut props = a.properties();
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    props.push(("crac.register".into(), "false".into()));
    ProducerConfig::from_properties(props).unwrap()
}

fn consumer_config(a: &Access, extra: &[(&str, &str)]) -> ConsumerConfig {
    let mut props = a.properties();
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    props.push(("crac.register".into(), "false".into()));
    props.push(("auto.offset.reset".into(), "earliest".into()));
    ConsumerConfig::from_properties(props).unwrap()
}

/// Our records to Java and Java's to us, over one listener.
fn round_trip(k: &Cluster, a: &Access, topic: &str) {
    k.create_topic(topic, 2, 1);
    let n = 200;
    let producer = Producer::new(producer_config(a, &[])).unwrap();
    let reports: Vec<_> = (0..n)
        .map(|i| {
            let key = format!("k{i}");
            let value = format!("ours-{i}");
            producer
                .send(
                    ProducerRecord::new(topic)
                        .key(key.as_bytes())
                        .value(value.as_bytes()),
                )
                .unwrap()
        })
        .collect();
    producer.flush().unwrap();
    for r in reports {
        r.wait()
            .unwrap_or_else(|e| panic!("{} {topic}: {e}", a.listener));
    }
    producer.close(Duration::from_secs(10)).unwrap();
    let java = k.consume_all_via(a, topic, n, Duration::from_secs(30));
    let mut values: Vec<String> = java.into_iter().filter_map(|r| r.value).collect();
    values.sort_by_key(|v| v[5..].parse::<usize>().unwrap());
    assert_eq!(
        values,
        (0..n).map(|i| format!("ours-{i}")).collect::<Vec<_>>()
    );

    let theirs: Vec<JavaRecord> = (0..50)
        .map(|i| JavaRecord::new(Some("j"), &format!("java-{i}")))
        .collect();
    k.java_produce_via(a, topic, &theirs);
    let consumer = Consumer::new(consumer_config(a, &[])).unwrap();
    consumer
        .assign(&[TopicPartition::new(topic, 0), TopicPartition::new(topic, 1)])
        .unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < n + theirs.len() {
        assert!(
            Instant::now() < deadline,
            "{}: read {} records",
            a.listener,
            got.len()
        );
        for r in consumer.poll(Duration::from_millis(200)).unwrap() {
            got.push(String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap());
        }
    }
    let java_read: Vec<&String> = got.iter().filter(|v| v.starts_with("java-")).collect();
    assert_eq!(java_read.len(), theirs.len());
    // Per partition in order: Java's records all went to one partition (one key).
    let order: Vec<usize> = java_read.iter().map(|v| v[5..].parse().unwrap()).collect();
    assert_eq!(order, (0..theirs.len()).collect::<Vec<_>>());
    consumer.close(Duration::from_secs(10)).unwrap();
}

#[test]
fn ssl_round_trip_with_java() {
    let k = kafka();
    round_trip(k, &k.access("SSL", None), "over-ssl");
}

#[test]
fn mutual_tls_round_trip_with_java() {
    let k = kafka();
    round_trip(k, &k.access("MTLS", None), "over-mtls");
}

/// The client key encrypted (PKCS#8, PBES2), with `ssl.key.password` from a config provider,
/// and the key and chain given inline (`ssl.keystore.key`, `ssl.keystore.certificate.chain`).
#[test]
fn mutual_tls_with_an_encrypted_inline_key() {
    let k = kafka();
    let key = std::fs::read_to_string(k.tls_file("client-encrypted-key.pem")).unwrap();
    let chain = std::fs::read_to_string(k.tls_file("client.crt")).unwrap();
    // The password in a properties file (a file's whole content would keep its line break).
    let dir = TempDir::new("key-password");
    let password_file = dir.join("tls.properties");
    let password = std::fs::read_to_string(k.tls_file("client-key-password")).unwrap();
    std::fs::write(
        &password_file,
        format!("key.password={}\n", password.trim()),
    )
    .unwrap();
    let a = k
        .access("SSL", None)
        .with("ssl.keystore.type", "PEM")
        .with("ssl.keystore.key", &key.replace('\n', "\\n"))
        .with(
            "ssl.keystore.certificate.chain",
            &chain.replace('\n', "\\n"),
        );
    let mtls = Access {
        bootstrap: k.access("MTLS", None).bootstrap,
        ..a
    };
    let topic = "over-mtls-inline";
    k.create_topic(topic, 1, 1);
    let mut props = mtls.properties();
    // The properties file escapes line breaks; our config takes the PEM text itself.
    for (key, v) in props.iter_mut() {
        if key.starts_with("ssl.keystore.") {
            *v = v.replace("\\n", "\n");
        }
    }
    props.push((
        "ssl.key.password".into(),
        format!("${{file:{}:key.password}}", password_file.display()),
    ));
    props.push(("crac.register".into(), "false".into()));
    // The key is loaded when the broker asks for a certificate: a wrong password is then the
    // connection's error, naming the key to fix.
    let mut wrong = props.clone();
    wrong.retain(|(k, _)| k != "ssl.key.password");
    wrong.push(("ssl.key.password".into(), "not-the-password".into()));
    wrong.push(("max.block.ms".into(), MAX_BLOCK.as_millis().to_string()));
    wrong.push(("reconnect.backoff.max.ms".into(), "500".into()));
    let p = Producer::from_properties(wrong).unwrap();
    let e = match p.send(ProducerRecord::new(topic).value(b"never")) {
        Err(e) => e,
        Ok(report) => report.wait().unwrap_err(),
    };
    let msg = e.to_string();
    assert!(
        msg.contains("ssl.key.password") && msg.contains("wrong password"),
        "{msg}"
    );
    p.close(Duration::from_secs(5)).unwrap();
    let producer = Producer::from_properties(props).unwrap();
    producer
        .send(ProducerRecord::new(topic).value(b"inline"))
        .unwrap()
        .wait()
        .unwrap();
    producer.close(Duration::from_secs(10)).unwrap();
    let got = k.consume_all_via(&k.access("MTLS", None), topic, 1, Duration::from_secs(30));
    assert_eq!(got[0].value.as_deref(), Some("inline"));
}

/// The admin client over SASL_SSL (SCRAM-SHA-512): creates a topic, sees it and its end
/// offset; a wrong password is an authentication error within the call's time, not a hang.
#[test]
fn the_admin_client_works_over_sasl_ssl_and_names_a_wrong_password() {
    let k = kafka();
    let access = k.access("SASL_SSL", Some("SCRAM-SHA-512"));
    let admin_of = |a: &Access| {
        let mut props = a.properties();
        props.push(("crac.register".into(), "false".into()));
        Admin::from_properties(props).unwrap()
    };
    let a = admin_of(&access);
    let opts = Options::default();
    let created = a
        .create_topics(&[NewTopic::new("admin-over-sasl", 2, 1)], &opts)
        .unwrap();
    assert!(created["admin-over-sasl"].is_ok(), "{created:?}");
    let c = a.describe_cluster(&opts).unwrap();
    assert_eq!(c.brokers.len(), 1);
    let port = access.bootstrap.rsplit_once(':').unwrap().1;
    assert_eq!(
        c.brokers[0].port.to_string(),
        port,
        "the SASL_SSL listener's address"
    );
    let tp = TopicPartition::new("admin-over-sasl", 1);
    let end = (0..100)
        .find_map(|_| {
            let got = a
                .list_offsets(&[(tp.clone(), OffsetSpec::Latest)], false, &opts)
                .unwrap();
            let r = got[&tp].clone().ok();
            if r.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            r
        })
        .expect("the new topic's end offset");
    assert_eq!(end.offset, 0);

    let wrong =
        admin_of(&access.with("sasl.jaas.config", &scram_jaas("alice", "not-her-password")));
    let started = Instant::now();
    let e = wrong
        .describe_cluster(&Options::timeout(Duration::from_secs(5)))
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let AdminError::Timeout { last, .. } = &e else {
        panic!("{e}")
    };
    assert!(
        last.as_deref()
            .is_some_and(|l| l.to_lowercase().contains("authentication")),
        "{e}"
    );
}

fn scram_jaas(user: &str, password: &str) -> String {
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{password}\";"
    )
}

#[test]
fn sasl_ssl_plain_round_trip_with_java() {
    let k = kafka();
    round_trip(k, &k.access("SASL_SSL", Some("PLAIN")), "over-plain");
}

#[test]
fn sasl_ssl_scram_sha_256_round_trip_with_java() {
    let k = kafka();
    round_trip(
        k,
        &k.access("SASL_SSL", Some("SCRAM-SHA-256")),
        "over-scram256",
    );
}

#[test]
fn sasl_ssl_scram_sha_512_round_trip_with_java() {
    let k = kafka();
    round_trip(
        k,
        &k.access("SASL_SSL", Some("SCRAM-SHA-512")),
        "over-scram512",
    );
}

#[test]
fn sasl_ssl_oauthbearer_round_trip_with_java() {
    let k = kafka();
    round_trip(k, &k.access("SASL_SSL", Some("OAUTHBEARER")), "over-oauth");
}

/// An application's token provider for OAUTHBEARER (here it makes the unsecured JWS the
/// broker's test validator accepts): asked for a token each time a connection authenticates.
#[derive(Debug, Default)]
struct Tokens(std::sync::atomic::AtomicUsize);

impl kafka_client::OAuthBearerTokenProvider for Tokens {
    fn token(&self) -> Result<kafka_client::OAuthBearerToken, String> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let b64 = |s: &str| {
            let out = std::process::Command::new("openssl")
                .args(["base64", "-A"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    std::io::Write::write_all(c.stdin.as_mut().unwrap(), s.as_bytes())?;
                    c.wait_with_output()
                })
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .trim_end_matches('=')
                    .replace('+', "-")
                    .replace('/', "_"),
            )
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = format!(r#"{{"sub":"app","iat":{now},"exp":{}}}"#, now + 600);
        let token = format!("{}.{}.", b64(r#"{"alg":"none"}"#)?, b64(&claims)?);
        Ok(kafka_client::OAuthBearerToken {
            value: token.into(),
            extensions: Vec::new(),
        })
    }
}

#[test]
fn oauthbearer_tokens_from_the_application() {
    let k = kafka();
    let topic = "over-oauth-provider";
    k.create_topic(topic, 1, 1);
    let tokens = std::sync::Arc::new(Tokens::default());
    let mut props = k.access("SASL_SSL", Some("OAUTHBEARER")).properties();
    props.retain(|(key, _)| key != "sasl.jaas.config");
    props.push(("crac.register".into(), "false".into()));
    let config = ProducerConfig::from_properties(props.clone())
        .map(|c| c.oauthbearer_token_provider(tokens.clone()));
    // Without a provider the JAAS entry is required; with one it is not.
    assert!(
        config.is_err(),
        "sasl.jaas.config required without a provider"
    );
    let mut config = ProducerConfig::new(&props[0].1)
        .unwrap()
        .oauthbearer_token_provider(tokens.clone());
    for (key, v) in &props[1..] {
        config.set(key, v).unwrap();
    }
    let producer = Producer::new(config).unwrap();
    producer
        .send(ProducerRecord::new(topic).value(b"with a token"))
        .unwrap()
        .wait()
        .unwrap();
    producer.close(Duration::from_secs(5)).unwrap();
    assert!(tokens.0.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let got = k.consume_all_via(
        &k.access("SASL_SSL", Some("PLAIN")),
        topic,
        1,
        Duration::from_secs(30),
    );
    assert_eq!(got[0].value.as_deref(), Some("with a token"));
}

/// KIP-368: the SASL_PLAINTEXT listener limits sessions to 4 s. A producer and a consumer
/// that run for 12 s re-authenticate on their connections before each session ends (a broker
/// closes a connection whose session expired): no connection is lost, every record arrives.
#[test]
fn sessions_are_renewed_on_their_connections_before_the_broker_ends_them() {
    let k = kafka();
    let topic = "reauth";
    k.create_topic(topic, 1, 1);
    let a = k.access("SASL_PLAINTEXT", Some("SCRAM-SHA-256"));
    let producer = Producer::new(producer_config(&a, &[("linger.ms", "0")])).unwrap();
    let consumer = Consumer::new(consumer_config(&a, &[])).unwrap();
    consumer.assign(&[TopicPartition::new(topic, 0)]).unwrap();
    let start = Instant::now();
    let (mut sent, mut read) = (0usize, 0usize);
    while start.elapsed() < Duration::from_secs(12) {
        producer
            .send(ProducerRecord::new(topic).value(format!("r{sent}").as_bytes()))
            .unwrap()
            .wait()
            .unwrap();
        sent += 1;
        read += consumer.poll(Duration::from_millis(100)).unwrap().len();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < sent {
        assert!(Instant::now() < deadline, "read {read} of {sent}");
        read += consumer.poll(Duration::from_millis(200)).unwrap().len();
    }
    assert_eq!(read, sent);
    let m = producer.metrics();
    assert!(sent > 20, "sent {sent}");
    assert_eq!(
        m.disconnects, 0,
        "no connection lost to an expired session: {m:?}"
    );
    producer.close(Duration::from_secs(5)).unwrap();
    consumer.close(Duration::from_secs(5)).unwrap();
}

/// How long a failing `send()` may take: well within `max.block.ms` below.
const MAX_BLOCK: Duration = Duration::from_secs(20);

/// A producer's first `send()` with these settings: its error, and how long it took.
fn send_error(a: &Access, extra: &[(&str, &str)]) -> (String, Duration) {
    let producer = Producer::new(producer_config(
        a,
        &[
            extra,
            &[
                ("max.block.ms", &MAX_BLOCK.as_millis().to_string()),
                ("reconnect.backoff.max.ms", "500"),
            ],
        ]
        .concat(),
    ))
    .unwrap();
    let t = Instant::now();
    let e = match producer.send(ProducerRecord::new("errors").value(b"x")) {
        Err(e) => e,
        Ok(report) => report.wait().unwrap_err(),
    };
    let took = t.elapsed();
    assert!(matches!(e, ProduceError::Security(_)), "{e:?}");
    producer.close(Duration::from_secs(5)).unwrap();
    (e.to_string(), took)
}

/// A consumer's first error from `poll()` with these settings.
fn poll_error(a: &Access, extra: &[(&str, &str)]) -> String {
    let consumer = Consumer::new(consumer_config(a, extra)).unwrap();
    consumer
        .assign(&[TopicPartition::new("errors", 0)])
        .unwrap();
    let deadline = Instant::now() + MAX_BLOCK;
    loop {
        assert!(Instant::now() < deadline, "no error from poll()");
        match consumer.poll(Duration::from_millis(500)) {
            Err(e @ ConsumerError::Security(_)) => {
                let _ = consumer.close(Duration::from_secs(5));
                return e.to_string();
            }
            Err(e) => panic!("unexpected {e:?}"),
            Ok(r) => assert!(r.is_empty()),
        }
    }
}

fn assert_names(msg: &str, a: &Access, key: &str, detail: &str) {
    let broker = a.bootstrap.split(',').next().unwrap();
    let port = broker.rsplit(':').next().unwrap();
    assert!(msg.contains(port), "names the broker {broker}: {msg}");
    assert!(msg.contains(key), "names the key {key}: {msg}");
    assert!(msg.contains(detail), "says {detail:?}: {msg}");
}

#[test]
fn errors_name_the_broker_and_the_key_to_fix() {
    let k = kafka();
    k.create_topic("errors", 1, 1);
    // Untrusted: no trust store given, the system's does not know the cluster's CA.
    let ssl = k.access("SSL", None);
    let untrusted = Access {
        config: None,
        ..ssl.clone()
    };
    let (msg, took) = send_error(&untrusted, &[("security.protocol", "SSL")]);
    println!("untrusted certificate: {msg} ({took:?})");
    assert_names(&msg, &ssl, "ssl.truststore.location", "not trusted");
    assert!(took < MAX_BLOCK, "{took:?}");
    let msg = poll_error(&untrusted, &[("security.protocol", "SSL")]);
    assert_names(&msg, &ssl, "ssl.truststore.location", "not trusted");

    // Hostname mismatch: the certificate names 127.0.0.1, not localhost.
    let port = ssl.bootstrap.rsplit(':').next().unwrap();
    let by_name = Access {
        bootstrap: format!("localhost:{port}"),
        ..ssl.clone()
    };
    let (msg, took) = send_error(&by_name, &[]);
    println!("hostname mismatch: {msg} ({took:?})");
    assert_names(
        &msg,
        &ssl,
        "ssl.endpoint.identification.algorithm",
        "hostname mismatch",
    );
    // ... which the empty algorithm turns off (the chain is still verified).
    let p = Producer::new(producer_config(
        &by_name,
        &[("ssl.endpoint.identification.algorithm", "")],
    ))
    .unwrap();
    p.send(ProducerRecord::new("errors").value(b"by name"))
        .unwrap()
        .wait()
        .unwrap();
    p.close(Duration::from_secs(5)).unwrap();

    // Mutual TLS without a client certificate.
    let mtls_no_cert = Access {
        config: ssl.config.clone(),
        ..k.access("MTLS", None)
    };
    let (msg, _) = send_error(&mtls_no_cert, &[]);
    println!("no client certificate: {msg}");
    assert_names(
        &msg,
        &mtls_no_cert,
        "ssl.keystore.location",
        "client certificate",
    );

    // Wrong password.
    let scram = k
        .access("SASL_SSL", Some("SCRAM-SHA-512"))
        .with("sasl.jaas.config", &scram_jaas("alice", "wrong"));
    let (msg, took) = send_error(&scram, &[]);
    println!("wrong password: {msg} ({took:?})");
    assert_names(
        &msg,
        &scram,
        "sasl.jaas.config",
        "SASL_AUTHENTICATION_FAILED",
    );
    assert!(
        !msg.contains("wrong"),
        "the password is not repeated: {msg}"
    );
    let msg = poll_error(&scram, &[]);
    assert_names(
        &msg,
        &scram,
        "sasl.jaas.config",
        "SASL_AUTHENTICATION_FAILED",
    );

    // A mechanism the listener does not enable.
    let oauth = k.access("SASL_PLAINTEXT", Some("OAUTHBEARER"));
    let (msg, _) = send_error(&oauth, &[]);
    println!("mechanism not enabled: {msg}");
    assert_names(
        &msg,
        &oauth,
        "sasl.mechanism",
        "does not enable OAUTHBEARER",
    );

    // TLS spoken to a plaintext listener.
    let wrong_port = Access {
        bootstrap: k.bootstrap().to_owned(),
        ..ssl.clone()
    };
    let (msg, _) = send_error(&wrong_port, &[]);
    println!("not a TLS listener: {msg}");
    assert!(msg.contains("security.protocol"), "{msg}");
}

// --- Checkpoints over SASL_SSL under real CRIU --------------------------------------------------

const SERVICE: &str = env!("CARGO_BIN_EXE_kafka_service");
const CONSUMER: &str = env!("CARGO_BIN_EXE_kafka_consumer_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The producing service of `producer_criu.rs` over SASL_SSL with SCRAM-SHA-512, its password
/// named by `${file:…}`, its client certificate and key read from a PEM file.
fn secure_service(
    k: &Cluster,
    topic: &str,
    img: &std::path::Path,
    secrets: &std::path::Path,
    user: &str,
    env: &[(&str, &std::path::Path)],
) -> Proc {
    let props = sasl_ssl_props(k, secrets, user);
    let bootstrap = k.access("SASL_SSL", Some("SCRAM-SHA-512")).bootstrap;
    tls_service(topic, img, &bootstrap, &props, env)
}

/// The producing service of `producer_criu.rs` at `bootstrap` with the producer settings
/// `props` (`k=v,k=v`), checkpointed to `img`.
fn tls_service(
    topic: &str,
    img: &std::path::Path,
    bootstrap: &str,
    props: &str,
    env: &[(&str, &std::path::Path)],
) -> Proc {
    let mut c = std::process::Command::new(SERVICE);
    c.env("CRAC_CRIU", crac_tests::process::criu())
        .env("CRAC_CHECKPOINT_TO", img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", bootstrap)
        .env("SVC_TOPIC", topic)
        .env("SVC_STATE_MB", "8")
        .env("SVC_RATE", "300")
        .env("SVC_PROPS", props);
    for (key, v) in env {
        c.env(key, v);
    }
    Proc::spawn(&format!("kafka_service {topic}"), &mut c)
}

/// Whether `needle` occurs in any file under `dir`.
fn image_contains(dir: &std::path::Path, needle: &[u8]) -> Option<String> {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return Some(path.display().to_string());
            }
        }
    }
    None
}

/// Base64 body of a PEM file, and its DER.
fn pem_body(path: &std::path::Path) -> (Vec<String>, Vec<u8>) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .map(str::to_owned)
        .collect();
    let b64: String = lines.concat();
    let out = std::process::Command::new("openssl")
        .args(["base64", "-d", "-A"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            std::io::Write::write_all(c.stdin.as_mut().unwrap(), b64.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    (lines, out.stdout)
}

/// The producer under CRIU over SASL_SSL: checkpointed while producing, its password rotated
/// (in its file and on the broker) while it is an image; the restored copy authenticates with
/// the new one and goes on: every record exactly once. The image holds neither the password
/// nor the client's private key.
#[test]
fn producer_checkpoint_over_sasl_ssl_rotates_its_password_and_keeps_no_secret_in_the_image() {
    let k = kafka();
    let topic = "criu-sasl-ssl";
    k.create_topic(topic, 3, 1);
    let dir = TempDir::new("sasl-criu");
    let img = dir.join("image");
    let secrets = dir.join("secrets.properties");
    let user = "svc-producer";
    let old = set_password(k, user, &secrets);

    let mut s = secure_service(k, topic, &img, &secrets, user, &[]);
    let pid = s.pid();
    s.expect("first_ack", T);
    wait_acked(&mut s, 300, T);
    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "{text}");
    assert!(!s.wait(T).success(), "the process stops at the dump");

    // The image: no password, no private key (its PEM text or its DER).
    assert_image_has_no_secret(k, &img, &old);

    // Rotated while frozen: the broker knows only the new password, the file holds it.
    set_password(k, user, &secrets);

    let mut r = Proc::spawn(
        "restore",
        &mut crac_command(
            CRAC,
            &["restore", img.to_str().unwrap(), "--env", "SVC_FINAL=300"],
        ),
    );
    r.expect("restored ", T);
    r.expect("first_ack_after_restore", T);
    let done = r.expect("done ", T);
    assert_eq!(must(&done, "errors"), "0", "{}", r.transcript());
    assert!(r.wait(T).success(), "{}", r.transcript());
    let last: u64 = must(&done, "last_seq").parse().unwrap();
    let expected: std::collections::BTreeMap<String, std::ops::Range<u64>> =
        [("a".to_owned(), 0..last)].into_iter().collect();
    let records = k.consume_all_via(
        &k.access("SASL_SSL", Some("PLAIN")),
        topic,
        last as usize,
        T,
    );
    let (rep, _) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.read as u64, last, "{rep}");
}

/// The SASL_SSL settings of the checkpoint tests, as `SVC_PROPS`: SCRAM-SHA-512 with the
/// password named by `${file:…}`, the client certificate and key read from a PEM file.
fn sasl_ssl_props(k: &Cluster, secrets: &std::path::Path, user: &str) -> String {
    [
        "security.protocol=SASL_SSL".to_owned(),
        "ssl.truststore.type=PEM".to_owned(),
        format!("ssl.truststore.location={}", k.tls_file("ca.pem").display()),
        "ssl.keystore.type=PEM".to_owned(),
        format!("ssl.keystore.location={}", k.tls_file("client.pem").display()),
        "sasl.mechanism=SCRAM-SHA-512".to_owned(),
        format!(
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"${{file:{}:password}}\";",
            secrets.display()
        ),
    ]
    .join(",")
}

/// Asserts that no file of the image holds `password` or the client's private key (a line
/// of its PEM text, or bytes of its DER).
fn assert_image_has_no_secret(k: &Cluster, img: &std::path::Path, password: &str) {
    assert_eq!(
        image_contains(img, password.as_bytes()),
        None,
        "the password is in the image"
    );
    let (lines, der) = pem_body(&k.tls_file("client.key"));
    assert!(
        der.len() > 600,
        "DER of the client key: {} bytes",
        der.len()
    );
    for l in &lines[1..lines.len() - 1] {
        assert_eq!(
            image_contains(img, l.as_bytes()),
            None,
            "a PEM line of the key is in the image"
        );
    }
    for at in [der.len() / 4, der.len() / 2, 3 * der.len() / 4] {
        assert_eq!(
            image_contains(img, &der[at..at + 32]),
            None,
            "DER bytes of the key at {at} are in the image"
        );
    }
}

/// Produces `<instance>:<seq>` records (keys `k<seq % 64>`, the stream `check_stream` reads)
/// through the PLAINTEXT listener.
fn produce_stream(k: &Cluster, topic: &str, seqs: std::ops::Range<u64>) {
    let p = Producer::new(producer_config(&k.plaintext(), &[])).unwrap();
    let reports: Vec<_> = seqs
        .map(|i| {
            let key = format!("k{}", i % 64);
            let value = format!("a:{i}");
            p.send(
                ProducerRecord::new(topic)
                    .key(key.as_bytes())
                    .value(value.as_bytes()),
            )
            .unwrap()
        })
        .collect();
    for r in reports {
        r.wait().unwrap();
    }
    p.close(Duration::from_secs(10)).unwrap();
}

/// The consumer under CRIU over SASL_SSL: checkpointed while it consumes (it commits, leaves
/// its group and disconnects), its password rotated while it is an image; the restored copy
/// authenticates with the new one, rejoins and goes on from its commits: every record processed
/// exactly once. The image holds neither the password nor the client's private key.
#[test]
fn consumer_checkpoint_over_sasl_ssl_rotates_its_password_and_keeps_no_secret_in_the_image() {
    let k = kafka();
    let topic = "criu-consumer-sasl-ssl";
    k.create_topic(topic, 2, 1);
    let dir = TempDir::new("consumer-sasl-criu");
    let img = dir.join("image");
    let stop = dir.join("stop");
    let secrets = dir.join("secrets.properties");
    let user = "svc-consumer";
    let old = set_password(k, user, &secrets);
    produce_stream(k, topic, 0..400);

    let mut c = std::process::Command::new(CONSUMER);
    c.env("CRAC_CRIU", crac_tests::process::criu())
        .env("CRAC_CHECKPOINT_TO", &img)
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env(
            "SVC_BOOTSTRAP",
            &k.access("SASL_SSL", Some("SCRAM-SHA-512")).bootstrap,
        )
        .env("SVC_TOPIC", topic)
        .env("SVC_GROUP", "criu-sasl-group")
        .env("SVC_STOP_FILE", &stop)
        .env(
            "SVC_PROPS",
            format!(
                "heartbeat.interval.ms=1000,{}",
                sasl_ssl_props(k, &secrets, user)
            ),
        );
    let mut s = Proc::spawn("consumer", &mut c);
    let pid = s.pid();
    let deadline = Instant::now() + T;
    while s
        .transcript()
        .lines()
        .filter(|l| l.starts_with("rec "))
        .count()
        < 400
    {
        assert!(Instant::now() < deadline, "{}", s.transcript());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "{text}");
    assert!(!s.wait(T).success(), "the process stops at the dump");
    assert_image_has_no_secret(k, &img, &old);

    set_password(k, user, &secrets);
    produce_stream(k, topic, 400..700);

    let mut r = Proc::spawn(
        "restored consumer",
        &mut crac_command(CRAC, &["restore", img.to_str().unwrap()]),
    );
    r.expect("restored ", T);
    let deadline = Instant::now() + T;
    let count = |p: &Proc| {
        p.transcript()
            .lines()
            .filter(|l| l.starts_with("rec "))
            .count()
    };
    while count(&s) + count(&r) < 700 {
        assert!(Instant::now() < deadline, "{}", r.transcript());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&stop, "").unwrap();
    r.expect("done ", T);
    assert!(r.wait(T).success(), "{}", r.transcript());
    let records: Vec<crac_tests::kafka::ConsumedRecord> = [s.transcript(), r.transcript()]
        .iter()
        .flat_map(|t| {
            t.lines()
                .filter(|l| l.starts_with("rec "))
                .map(|l| crac_tests::kafka::ConsumedRecord {
                    partition: must(l, "p").parse().unwrap(),
                    offset: must(l, "o").parse().unwrap(),
                    timestamp: 0,
                    key: crac_tests::process::field(l, "k").map(str::to_owned),
                    value: crac_tests::process::field(l, "v").map(str::to_owned),
                    headers: Vec::new(),
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let expected: std::collections::BTreeMap<String, std::ops::Range<u64>> =
        [("a".to_owned(), 0..700)].into_iter().collect();
    let (rep, _) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.read, 700, "{rep}");
    for l in r.transcript().lines() {
        assert!(
            !l.starts_with("commit_error") && !l.starts_with("poll_error"),
            "`{l}`"
        );
    }
}

/// Gives `user` a new random SCRAM-SHA-512 password, on the broker and in `secrets` (a
/// properties file the client reads with `${file:…:password}`), and waits until the broker
/// takes it. Returns the password.
fn set_password(k: &Cluster, user: &str, secrets: &std::path::Path) -> String {
    let password = random_hex(16);
    k.set_scram_password(user, "SCRAM-SHA-512", &password);
    std::fs::write(secrets, format!("password={password}\n")).unwrap();
    wait_for_password(k, user, &password, "password-probe");
    password
}

/// Waits until the broker accepts `password` for `user` (a SCRAM update is applied a moment
/// after the controller commits it).
fn wait_for_password(k: &Cluster, user: &str, password: &str, topic: &str) {
    let a = k.access("SASL_SSL", Some("SCRAM-SHA-512")).with(
        "sasl.jaas.config",
        &format!(
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{password}\";"
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = Producer::new(producer_config(&a, &[("max.block.ms", "5000")])).unwrap();
        let ok = p
            .send(ProducerRecord::new(topic).partition(0).value(b"probe"))
            .map(|r| r.wait().is_ok())
            .unwrap_or(false);
        let _ = p.close(Duration::from_secs(5));
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the broker never accepted the new password"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Two clones of one image over TLS: every handshake of each draws its own randomness (the
/// key log's client randoms differ), because ring asks the OS for every draw.
#[test]
fn two_clones_over_tls_never_share_a_client_random() {
    let k = kafka();
    let topic = "criu-tls-clones";
    k.create_topic(topic, 3, 1);
    let dir = TempDir::new("tls-clones");
    let img = dir.join("image");
    let keylog = dir.join("keylog");
    let secrets = dir.join("secrets.properties");
    let user = "svc-clones";
    set_password(k, user, &secrets);
    // SSLKEYLOGFILE is read by each new TLS configuration (one per connection): the original
    // and both clones append to the file.
    let mut s = secure_service(
        k,
        topic,
        &img,
        &secrets,
        user,
        &[("SSLKEYLOGFILE", keylog.as_path())],
    );
    let pid = s.pid();
    wait_acked(&mut s, 200, T);
    let (code, text) = crac_checkpoint(CRAC, pid);
    assert_eq!(code, 0, "{text}");
    s.wait(T);
    let before = client_randoms(&keylog);
    assert!(!before.is_empty(), "the original logged its TLS secrets");

    let mut b = Proc::spawn(
        "clone b",
        &mut crac_command(
            CRAC,
            &[
                "restore",
                img.to_str().unwrap(),
                "--env",
                "SVC_INSTANCE=b",
                "--env",
                "SVC_FINAL=300",
            ],
        ),
    );
    let mut c = Proc::spawn(
        "clone c",
        &mut crac_command(
            CRAC,
            &[
                "restore",
                img.to_str().unwrap(),
                "--pidns",
                "--env",
                "SVC_INSTANCE=c",
                "--env",
                "SVC_FINAL=300",
            ],
        ),
    );
    for p in [&mut b, &mut c] {
        let done = p.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
        assert!(p.wait(T).success(), "{}", p.transcript());
    }
    let all = client_randoms(&keylog);
    let after = all.len() - before.len();
    assert!(
        after >= 2,
        "both clones connected over TLS ({after} handshakes after the restore)"
    );
    let unique: std::collections::HashSet<&String> = all.iter().collect();
    assert_eq!(
        unique.len(),
        all.len(),
        "a client random was drawn twice: {all:?}"
    );
}

/// The client random of each TLS 1.3 connection in a key log (one
/// `CLIENT_TRAFFIC_SECRET_0` line per handshake; `CLIENT_RANDOM` for TLS 1.2).
fn client_randoms(keylog: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(keylog)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("CLIENT_TRAFFIC_SECRET_0 ") || l.starts_with("CLIENT_RANDOM "))
        .filter_map(|l| l.split(' ').nth(1).map(str::to_owned))
        .collect()
}

/// The numbers of the client's RSA key (`d`, `p`, `q`, `dP`, `dQ`, `qInv`), big-endian without
/// leading zeros, as `openssl rsa -text` prints them.
fn rsa_numbers(key: &std::path::Path) -> Vec<(&'static str, Vec<u8>)> {
    let o = std::process::Command::new("openssl")
        .args(["rsa", "-noout", "-text", "-in"])
        .arg(key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let names = [
        ("privateExponent:", "d"),
        ("prime1:", "p"),
        ("prime2:", "q"),
        ("exponent1:", "dP"),
        ("exponent2:", "dQ"),
        ("coefficient:", "qInv"),
    ];
    let mut out = Vec::new();
    for (label, name) in names {
        let hex: String = text
            .lines()
            .skip_while(|l| l.trim() != label)
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .flat_map(|l| l.trim().split(':').map(str::to_owned).collect::<Vec<_>>())
            .filter(|h| !h.is_empty())
            .collect();
        let mut bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        while bytes.first() == Some(&0) {
            bytes.remove(0);
        }
        assert!(bytes.len() >= 100, "{name}: {} bytes", bytes.len());
        out.push((name, bytes));
    }
    out
}

/// Which 32-byte windows of the key's numbers (at every multiple of 32, big- and
/// little-endian: a parsed key holds little-endian limbs) occur in any file of `img`.
fn key_windows_in(img: &std::path::Path, numbers: &[(&str, Vec<u8>)]) -> (usize, Vec<String>) {
    let mut needles = Vec::new();
    for (name, be) in numbers {
        let le: Vec<u8> = be.iter().rev().copied().collect();
        for (order, bytes) in [("big-endian", be), ("little-endian", &le)] {
            for at in (0..bytes.len().saturating_sub(31)).step_by(32) {
                needles.push((
                    format!("{name} {order} at {at}"),
                    bytes[at..at + 32].to_vec(),
                ));
            }
        }
    }
    // Indexed by each window's first 4 bytes: one pass over the image.
    let mut by_head: std::collections::HashMap<[u8; 4], Vec<usize>> = Default::default();
    for (i, (_, n)) in needles.iter().enumerate() {
        by_head
            .entry(n[..4].try_into().unwrap())
            .or_default()
            .push(i);
    }
    let mut found = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(img).unwrap() {
        let path = e.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        for at in 0..data.len().saturating_sub(31) {
            let Some(cands) = by_head.get(&data[at..at + 4]) else {
                continue;
            };
            for &i in cands {
                if data[at..at + 32] == needles[i].1[..] {
                    found.insert(format!("{} in {}", needles[i].0, path.display()));
                }
            }
        }
    }
    (needles.len(), found.into_iter().collect())
}

/// The producing service checkpointed over TLS with a client key store, once on a listener
/// that requires client certificates (MTLS) and once on one that does not ask (SASL_SSL): the
/// image holds none of the key's numbers (d, p, q, dP, dQ, qInv, in 32-byte windows, big- or
/// little-endian) and not the password; the restored copy produces over TLS again (on MTLS it
/// loads the key again for its new connections). The service links `crac_api::WipeOnFree`,
/// so what the TLS library freed is zeroed; without a client-certificate request the key is
/// never parsed at all.
#[test]
fn the_image_of_a_tls_producer_holds_no_number_of_its_private_key() {
    let k = kafka();
    let numbers = rsa_numbers(&k.tls_file("client.key"));
    for listener in ["SASL_SSL", "MTLS"] {
        let topic = format!("key-in-image-{}", listener.to_lowercase());
        k.create_topic(&topic, 2, 1);
        let dir = TempDir::new("key-in-image");
        let img = dir.join("image");
        let secrets = dir.join("secrets.properties");
        let user = "svc-producer";
        let password = set_password(k, user, &secrets);
        let mut s = if listener == "MTLS" {
            let a = k.access("MTLS", None);
            let props: Vec<String> = a
                .properties()
                .into_iter()
                .filter(|(key, _)| key != "bootstrap.servers")
                .map(|(key, v)| format!("{key}={v}"))
                .collect();
            tls_service(&topic, &img, &a.bootstrap, &props.join(","), &[])
        } else {
            secure_service(k, &topic, &img, &secrets, user, &[])
        };
        let pid = s.pid();
        s.expect("first_ack", T);
        wait_acked(&mut s, 300, T);
        let (code, text) = crac_checkpoint(CRAC, pid);
        assert_eq!(code, 0, "{listener}: {text}");
        assert!(!s.wait(T).success(), "the process stops at the dump");

        let (windows, found) = key_windows_in(&img, &numbers);
        assert!(windows >= 56, "{windows} windows");
        assert!(
            found.is_empty(),
            "{listener}: {} of {windows} windows of the key's numbers are in the image:\n{}",
            found.len(),
            found.join("\n")
        );
        assert_eq!(
            image_contains(&img, password.as_bytes()),
            None,
            "{listener}: password"
        );

        let mut r = Proc::spawn(
            "restore",
            &mut crac_command(
                CRAC,
                &["restore", img.to_str().unwrap(), "--env", "SVC_FINAL=200"],
            ),
        );
        r.expect("first_ack_after_restore", T);
        let done = r.expect("done ", T);
        assert_eq!(must(&done, "errors"), "0", "{listener}: {}", r.transcript());
        assert!(r.wait(T).success(), "{listener}: {}", r.transcript());
    }
}
