#!/usr/bin/env python3
"""The benchmarks of issue 7, run by `scripts/bench` (which installs and builds what is needed
and then runs this file). Everything a figure needs is started here and stopped again: local
Kafka clusters (scripts/kafka/kafka), the clients, the checkpointed service.

Sections (`--sections`, default all of them, in this order):

  startup     each producer's fixed cost: CPU and peak RSS of a run of 1,000 records
  producer    throughput of every peer (records/s, MB/s, CPU per million records, peak RSS),
              then delivery latency at a fixed offered rate (50 % of the slowest peer's
              throughput in that configuration), for each cluster x value size x acks
  consumer    throughput of every consumer reading a prefilled topic (records/s, MB/s, CPU per
              million records, peak RSS) for each cluster x value size x codec (none, zstd),
              and each consumer's fixed cost (a read of 1,000 records)
  async       the async APIs (issue 27) on 1 broker at the producer section's settings (acks=all),
              100 B and 1 KB values: producer throughput, CPU per million records and latency of
              ours blocking (send with a callback), ours async (send_async pipelined), rust-rdkafka's
              FutureProducer (send_result pipelined) and its BaseProducer; consumer throughput
              and CPU of ours blocking (poll), ours async (Consumer::stream), rust-rdkafka's
              StreamConsumer and its BaseConsumer, reading a topic prefilled as the consumer
              section's; in turns within each round (see ASYNC_CLIENTS)
  settings    producer throughput (acks=all) at each client's own settings: its defaults (nothing
              set but bootstrap.servers and acks=all), and tuned for throughput as its own
              documentation advises (see PRODUCER_SETTINGS)
  grow        ours with its growing batches (the default) against batch.grow.max.bytes=0 in
              the same rounds (issue 24): throughput and peak RSS, then delivery latency at the
              producer section's offered rates of docs/benchmarks.md (GROW_RATES), for each
              cluster x value size x acks
  baseline    ours against an earlier commit of ours (--baseline-rev, built by scripts/bench),
              in turns within each round: delivery latency at GROW_RATES (the offered rates of
              the producer table in docs/benchmarks.md, made by BASELINE_REV), then throughput
              and peak RSS with buffer.memory at BUFFER_BYTES and at FLOOR_BUFFER_BYTES (what
              peak RSS is beyond the buffer: the client's fixed cost under that load)
  overhead    our producer with and without its checkpoint resource (crac.register=false)
  security    what TLS and SASL cost: producer (acks=all) and consumer throughput of every
              peer over PLAINTEXT and over SASL_SSL (SCRAM-SHA-512, TLS 1.3 with the cluster's
              CA) on one `kafka start --security` broker, and each peer's SASL_SSL/PLAINTEXT
              ratio
  transactions
              transactional producer throughput (records/s, CPU per million records, how long a
              commit takes) at the same transaction size for every peer: every T records one
              transaction (begin, T sends, commit), T in TXN_SIZES, 100 B values, acks=all with
              idempotence; Java is scripts/bench-lib/TxnPerf.java (ProducerPerformance ends its
              transactions by time, not by count), ours and librdkafka take
              --transaction-records
  checkpoint  the real service (tests/src/bin/kafka_service.rs) under CRIU: checkpoint time
              split into hooks / drain / dump; restore, restore to first ack and all pages in,
              eager and lazy (`crac restore --eager` / `--lazy`), against a cold start that
              rebuilds the same state
  broker      a user who is not root checkpoints the service through `crac daemon` and restores it
              with `crac restore --broker NAME`, lazily and eagerly: the broker's answer and the
              restored copy's first acknowledged record (1 GB of state)
  images      images that travel (`crac push`/`crac pull`/`crac restore REF`) through a real OCI
              registry (Debian's docker-registry on 127.0.0.1, scripts/registry): for the demo's
              warm state (a catalog of 1,000,000 items) and for filled state of 200 MB and 1 GB,
              the image's size on disk and in the registry, push and pull times, and the time
              from `crac restore REF` (signature checked, pulled, restored lazily) to the
              restored service's first acknowledged record

The consumer section (ours: bench_consumer, Java's ConsumerPerformance, librdkafka: `rdkafka-bench
consume`) prefills a topic once per configuration with Java's producer (acks=1, the batch.size
and linger.ms below, compression.type none or zstd), then each consumer subscribes in a fresh
group (auto.offset.reset=earliest, enable.auto.commit=false: nothing is committed) and reads
every record of it. Its records/s is Java's fetch.nMsg.sec: from the partitions assigned (the
rebalance callback) to the last record; CPU and RSS are the whole process's, as for the
producers. Java's tool sets check.crcs=false and librdkafka's default is false; ours always
checks the CRC32C of every batch. zstd, not lz4: Java's producer writes new random capital
letters into every record, which zstd's entropy coder packs to about 60 % and lz4 not at all
(`--codecs none,lz4,zstd` measures lz4 too).

The producers run with the same settings, passed by their Java names (librdkafka knows the same
names): acks, batch.size, linger.ms, enable.idempotence (on with acks=all as Java's default is,
off with acks=1 where Java turns it off), no compression, 32 MiB of buffer (buffer.memory;
librdkafka: queue.buffering.max.kbytes), TCP_NODELAY (librdkafka: socket.nagle.disable).
Requests in flight per connection stay at each client's default: 5 in Java and ours, 5 in
librdkafka with idempotence and 1,000,000 without; librdkafka puts one partition in a produce
request where Java and ours put every ready partition of the broker, so a cap of 5 would starve
it. Records have no key (sticky partitioning in all three) and the same random payload.

Measures: records/s is what each client reports (first send to the end of flush/close). CPU is
utime+stime of the client process from wait4(2) (the JVM's JIT and GC threads included, the
broker excluded); peak RSS is its ru_maxrss (the kernel's VmHWM) as GNU time reports it.
Latency is per record from send() to the delivery callback; Java's tool reports whole
milliseconds.

Every figure is the median over rounds with min-max beside it; peers take turns within a round
(rotating who goes first) so that load from the rest of the machine spreads over all of them.
Results: results.json (every run), results.md, chart.png in --out.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "scripts" / "kafka" / "kafka"
PARTITIONS = 6
SIZES = [100, 1000]
# The consumer section's codecs (as Java's producer writes them when prefilling).
CODECS = ["none", "zstd"]
# What every consumer is given (besides a fresh group.id and auto.offset.reset=earliest).
CONSUMER_PROPS = {"enable.auto.commit": "false"}
CONSUMER_IDLE_MS = 30_000
ACKS = ["1", "all"]
# The grow section's offered rates: those of the producer section's latency table in
# docs/benchmarks.md (half the slowest client of that run), so its latency compares with that
# table at the same rates. (brokers, value size, acks) -> records/s.
GROW_RATES = {
    (1, 100, "1"): 262_600, (1, 100, "all"): 254_200, (1, 1000, "1"): 56_400, (1, 1000, "all"): 51_900,
    (3, 100, "1"): 61_700, (3, 100, "all"): 83_500, (3, 1000, "1"): 18_100, (3, 1000, "all"): 12_400,
}
# The commit whose bench_producer made the latency table of docs/benchmarks.md (the 08:02 run of
# 2026-12-04) and GROW_RATES: the baseline section's default other side.
BASELINE_REV = "57f977e"
# The baseline section's small buffer.memory: peak RSS with it, less it, is the fixed cost.
FLOOR_BUFFER_BYTES = 1 << 20
# How a fresh cluster is settled before anything is measured (Bench.settle): runs per size in a
# row that must agree, how closely, and how many runs at most.
SETTLE_WINDOW = 4
SETTLE_SPREAD = 0.12
SETTLE_MAX = 25
# The grow section's two variants of ours: tag -> extra properties.
GROW_VARIANTS = [("growing", None), ("not growing", {"batch.grow.max.bytes": "0"})]
# The transactions section: records per transaction, and how many transactions a run holds at
# most (fewer when the producer section's record count is reached first).
TXN_SIZES = [100, 1000, 10000]
TXN_PER_RUN = {"quick": 100, "full": 500}
BATCH_SIZE = int(os.environ.get("BENCH_BATCH_SIZE", "16384"))
LINGER_MS = int(os.environ.get("BENCH_LINGER_MS", "5"))
BUFFER_BYTES = 32 * 1024 * 1024
# The `settings` section: each client at its own defaults, and tuned for throughput as its own
# documentation advises. Java and ours (Java's keys and defaults): Confluent's "optimize a Kafka
# producer for throughput" (batch.size 100000-200000, linger.ms 10-100; its lz4 and acks=1 are
# left out so every client writes the same bytes with the same guarantee). librdkafka: its
# INTRODUCTION.md (High throughput: batch.size and linger.ms; batch.size is already 1,000,000 by
# default, 60x Java's), with idempotence on as the other two have it. acks=all everywhere.
PRODUCER_SETTINGS = {
    "defaults": {
        "ours": {"acks": "all"},
        "java": {"acks": "all"},
        "librdkafka": {"acks": "all"},
    },
    "tuned": {
        "ours": {"acks": "all", "batch.size": "200000", "linger.ms": "20"},
        "java": {"acks": "all", "batch.size": "200000", "linger.ms": "20"},
        "librdkafka": {"acks": "all", "linger.ms": "20", "enable.idempotence": "true"},
    },
}
# The async section's clients: run name -> (label, its producer API, its consumer API). The async
# producers send in order, each record once the client has taken the one before, and await their
# delivery reports in a window of ASYNC_WINDOW, oldest first, on a tokio current-thread runtime.
ASYNC_CLIENTS = {
    "ours": ("ours, blocking", "`send_with_callback()`, `flush()`", "`poll()`"),
    "ours-async": ("ours, async", "`send_async(r).accepted().await`, reports awaited in the window, `flush_async()` at the end",
                   "`Consumer::stream()`"),
    "librdkafka": ("rust-rdkafka, blocking", "`BaseProducer::send()` + `poll(0)`, `flush()`",
                   "`BaseConsumer::poll()`"),
    "librdkafka-async": ("rust-rdkafka, async", "`FutureProducer::send_result()` (on QueueFull: await the oldest "
                         "report), `DeliveryFuture`s awaited in the window", "`StreamConsumer::stream()`"),
}
ASYNC_WINDOW = 100_000
SETTINGS_TEXT = {
    "defaults": "each client's defaults: only bootstrap.servers and acks=all set (ours and Java: "
                "batch.size=16384, linger.ms=5, idempotence on; librdkafka: batch.size=1000000, "
                "linger.ms=5, idempotence off)",
    "tuned": "each client tuned for throughput as its documentation advises, acks=all and idempotence on "
             "for all three: ours and Java batch.size=200000, linger.ms=20 (Confluent's throughput guide); "
             "librdkafka linger.ms=20 with its default batch.size=1000000",
}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def fresh_page_cache():
    """Every configuration starts with the page cache emptied (as root: the kernel's clean
    cached pages dropped after a sync). A run writes GBs of log segments; once the page cache
    has taken all free memory, each new page is reclaimed first, and on 2 cores that kernel
    time is taken from the brokers: measured on 3 brokers, 1 KB records, acks=all, 16 GB
    cached and 2 GB free: 56-68 % of the CPU in the kernel and 85-122k records/s for either
    client; after dropping the cache 32-41 % and 152-217k. Without this, which configuration
    (and which client's turn) met a full cache depended on what the run had written before."""
    if os.geteuid() != 0:
        return
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as e:
        log(f"page cache not dropped: {e}")


def settled(rates):
    """The last SETTLE_WINDOW rates all within SETTLE_SPREAD of their median."""
    if len(rates) < SETTLE_WINDOW:
        return False
    last = rates[-SETTLE_WINDOW:]
    m = statistics.median(last)
    return all(abs(x - m) <= SETTLE_SPREAD * m for x in last)


def stats(values):
    """(median, min, max) of the finite values, or Nones."""
    v = sorted(x for x in values if x is not None and x == x)
    if not v:
        return (None, None, None)
    return (statistics.median(v), v[0], v[-1])


# --- processes ---------------------------------------------------------------------------------


class RunResult:
    def __init__(self, code, out, cpu_s, rss_kb, wall_s):
        self.code, self.out, self.cpu_s, self.rss_kb, self.wall_s = code, out, cpu_s, rss_kb, wall_s


TIME = shutil.which("time", path="/usr/bin:/bin")


def run_measured(argv, log_path, timeout, env=None):
    """Runs a client; returns its exit code, stdout, its CPU time from wait4(2) and its peak
    RSS from GNU time (%M, its wait4 of the client): a child forked from this Python process
    would report at least Python's own RSS as its ru_maxrss (the forked copy counts)."""
    t0 = time.monotonic()
    rss_file = Path(log_path).with_suffix(".rss")
    wrap = [TIME, "-f", "%M", "-o", str(rss_file)] if TIME else []
    with open(log_path, "ab") as err:
        err.write(f"\n$ {' '.join(map(str, argv))}\n".encode())
        err.flush()
        p = subprocess.Popen(wrap + [str(a) for a in argv], stdout=subprocess.PIPE, stderr=err, env=env,
                             start_new_session=True)
    killed = []

    def kill():
        killed.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    out = p.stdout.read().decode(errors="replace")
    p.stdout.close()
    _, status, ru = os.wait4(p.pid, 0)
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    code = p.returncode if not killed else -999
    rss_kb = ru.ru_maxrss
    if TIME:
        try:
            rss_kb = int(rss_file.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            rss_kb = float("nan")
    return RunResult(code, out, ru.ru_utime + ru.ru_stime, rss_kb, time.monotonic() - t0)


def kafka(*args, check=True, timeout=180):
    r = subprocess.run([str(KAFKA), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"kafka {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}")
    return r


class Cluster:
    def __init__(self, brokers, workdir, security=False):
        self.brokers = brokers
        self.dir = workdir / f"kafka-{brokers}{'-secure' if security else ''}"
        shutil.rmtree(self.dir, ignore_errors=True)
        log(f"starting a {brokers}-broker cluster in {self.dir}")
        extra = ["--security"] if security else []
        r = kafka("start", "--brokers", brokers, "--dir", self.dir, "--owner", os.getpid(), "--cleanup", *extra,
                  timeout=300)
        lines = r.stdout.strip().splitlines()
        self.bootstrap = lines[-1]
        # `kafka start --security` prints "NAME bootstrap" for each secure listener.
        self.listeners = dict(l.split(" ", 1) for l in lines[:-1] if " 127.0.0.1:" in l)

    def topics(self, *args, check=True):
        return kafka("--dir", self.dir, "topics", "--bootstrap-server", self.bootstrap, *args, check=check)

    def create_topic(self, name):
        fresh_page_cache()
        args = ["--create", "--topic", name, "--partitions", PARTITIONS, "--replication-factor", self.brokers]
        if self.brokers >= 3:
            args += ["--config", "min.insync.replicas=2"]
        self.topics(*args)
        # Every partition has a leader before a client starts.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            d = self.topics("--describe", "--topic", name, check=False).stdout
            leaders = re.findall(r"Leader: (-?\d+)", d)
            if len(leaders) == PARTITIONS and all(int(x) >= 0 for x in leaders):
                time.sleep(1)
                return
            time.sleep(0.5)
        raise RuntimeError(f"topic {name}: partitions without a leader")

    def delete_topic(self, name):
        self.topics("--delete", "--topic", name, check=False)

    def stop(self):
        kafka("--dir", self.dir, "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


# --- the peers ---------------------------------------------------------------------------------

RESULT = re.compile(r"^result (.*)$", re.M)
JAVA_STEADY = re.compile(
    r"(\d+) steady state records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)
JAVA_TOTAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


TRANSACTIONS = re.compile(r"^transactions (.*)$", re.M)


def parse_transactions(out):
    """The `transactions …` line of a transactional run ({} for other runs)."""
    m = TRANSACTIONS.findall(out)
    if not m:
        return {}
    kv = dict(w.split("=", 1) for w in m[-1].split())
    return {"transactions": int(kv["count"]), "commit_avg_ms": float(kv["commit_avg_ms"]),
            "commit_max_ms": float(kv["commit_max_ms"])}


def common_props(acks):
    return {
        "acks": acks,
        "batch.size": BATCH_SIZE,
        "linger.ms": LINGER_MS,
        "enable.idempotence": "true" if acks == "all" else "false",
        "compression.type": "none",
    }


class Peer:
    name = ""
    label = ""

    def props(self, acks):
        return common_props(acks)

    def producer_argv(self, bootstrap, topic, records, size, acks, rate, extra=None, warmup=0, base=None):
        """`base`: the properties to start from instead of the same-for-everyone ones."""
        raise NotImplementedError

    def consumer_argv(self, bootstrap, topic, records, group, extra=None):
        raise NotImplementedError

    def transactional_argv(self, bootstrap, topic, records, size, per_txn, txn_id):
        """A run in which every `per_txn` records are one transaction (acks=all)."""
        argv = self.producer_argv(bootstrap, topic, records, size, "all", None, extra={"transactional.id": txn_id})
        return argv + ["--transaction-records", per_txn]

    def sasl_ssl(self, cluster):
        """The settings of the SASL_SSL listener (SCRAM-SHA-512), by Java's names."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": cluster.dir / "tls" / "ca.pem",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                'username="alice" password="alice-secret";',
        }

    def parse_consumer(self, out):
        """The `result …` line of bench_consumer and `rdkafka-bench consume`."""
        m = RESULT.findall(out)
        if not m:
            return None
        kv = dict(w.split("=", 1) for w in m[-1].split())
        return {
            "consumed": int(kv["records"]),
            "bytes": int(kv["bytes"]),
            "seconds": float(kv["seconds"]),
            "records_per_sec": float(kv["records_per_sec"]),
            "join_ms": float(kv["join_ms"]),
        }

    def parse(self, out):
        m = RESULT.findall(out)
        if not m:
            return None
        kv = dict(w.split("=", 1) for w in m[-1].split())
        return {
            "records_per_sec": float(kv["records_per_sec"]),
            "lat_avg_ms": float(kv["lat_avg_ms"]),
            "lat_p50_ms": float(kv["lat_p50_ms"]),
            "lat_p99_ms": float(kv["lat_p99_ms"]),
            "lat_p999_ms": float(kv["lat_p999_ms"]),
            "lat_max_ms": float(kv["lat_max_ms"]),
            "failed": int(kv["failed"]),
        }


class Ours(Peer):
    name, label = "ours", "crac-rs kafka-client"

    def __init__(self, exe, consumer_exe=""):
        self.exe = exe
        self.consumer_exe = consumer_exe

    def props(self, acks):
        p = common_props(acks)
        p["buffer.memory"] = BUFFER_BYTES
        return p

    def producer_argv(self, bootstrap, topic, records, size, acks, rate, extra=None, warmup=0, base=None):
        argv = [self.exe, "--bootstrap", bootstrap, "--topic", topic, "--records", records, "--record-size", size]
        if rate:
            argv += ["--rate", f"{rate:.0f}"]
        if warmup:
            argv += ["--warmup-records", warmup]
        for k, v in {**(self.props(acks) if base is None else base), **(extra or {})}.items():
            argv += ["-X", f"{k}={v}"]
        return argv

    def consumer_cmd(self):
        return [self.consumer_exe]

    def consumer_argv(self, bootstrap, topic, records, group, extra=None):
        argv = self.consumer_cmd() + ["--bootstrap", bootstrap, "--topic", topic, "--records", records, "--group", group]
        for k, v in {**CONSUMER_PROPS, **(extra or {})}.items():
            argv += ["-X", f"{k}={v}"]
        return argv


class Rdkafka(Ours):
    name, label = "librdkafka", "librdkafka (rdkafka crate)"

    def props(self, acks):
        p = common_props(acks)
        p["compression.codec"] = p.pop("compression.type")
        p["queue.buffering.max.kbytes"] = BUFFER_BYTES // 1024
        # The byte limit above is the one that binds, as buffer.memory does in Java.
        p["queue.buffering.max.messages"] = 10_000_000
        # Java and ours set TCP_NODELAY; librdkafka leaves Nagle on unless told.
        p["socket.nagle.disable"] = "true"
        return p

    def consumer_cmd(self):
        return [self.exe, "consume"]

    def sasl_ssl(self, cluster):
        """librdkafka's names for the same settings (it takes no JAAS text)."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": cluster.dir / "tls" / "ca.pem",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }


class AsyncApi:
    """The same client through its async API (`--async` of its benchmark binary): the async section."""

    def producer_argv(self, *args, **kw):
        return super().producer_argv(*args, **kw) + ["--async", "--window", ASYNC_WINDOW]

    def consumer_argv(self, *args, **kw):
        return super().consumer_argv(*args, **kw) + ["--async"]


class OursAsync(AsyncApi, Ours):
    name, label = "ours-async", "crac-rs kafka-client, async API"


class RdkafkaAsync(AsyncApi, Rdkafka):
    name, label = "librdkafka-async", "rust-rdkafka, async API (FutureProducer, StreamConsumer)"


class Java(Peer):
    name, label = "java", "Java (ProducerPerformance)"

    def __init__(self, txn_classpath=""):
        self.txn_classpath = txn_classpath

    def props(self, acks):
        p = common_props(acks)
        p["buffer.memory"] = BUFFER_BYTES
        return p

    def producer_argv(self, bootstrap, topic, records, size, acks, rate, extra=None, warmup=0, base=None):
        argv = [KAFKA, "producer-perf", "--bootstrap-server", bootstrap, "--topic", topic,
                "--num-records", records, "--record-size", size,
                "--throughput", f"{rate:.0f}" if rate else "-1"]
        if warmup:
            argv += ["--warmup-records", warmup]
        props = {**(self.props(acks) if base is None else base), **(extra or {})}
        config = props.pop("__config_file", None)
        if config:
            argv += ["--command-config", config]
        argv += ["--command-property"]
        argv += [f"{k}={v}" for k, v in props.items()]
        return argv

    def transactional_argv(self, bootstrap, topic, records, size, per_txn, txn_id):
        """TxnPerf.java (compiled by scripts/bench) with the JVM options Kafka's script gives
        ProducerPerformance."""
        if not self.txn_classpath:
            raise RuntimeError("TxnPerf is not compiled (no javac): run scripts/bench")
        argv = ["java", "-Xmx1g", "-Xlog:disable", "-Xlog:all=error:stderr",
                f"-Dlog4j2.configurationFile={ROOT / 'scripts' / 'kafka' / 'log4j2-tools.properties'}",
                "-cp", self.txn_classpath, "TxnPerf", "--bootstrap", bootstrap, "--topic", topic,
                "--records", records, "--record-size", size, "--transaction-records", per_txn]
        for k, v in {**self.props("all"), "transactional.id": txn_id}.items():
            argv += ["-X", f"{k}={v}"]
        return argv

    def sasl_ssl(self, cluster):
        """The client settings file `kafka start --security` wrote (the JAAS text holds '=',
        which --command-property does not take)."""
        return {"__config_file": cluster.dir / "client-sasl_ssl-scram-sha-512.properties"}

    def parse(self, out):
        m = JAVA_TOTAL.findall(out)
        if not m:
            return None
        sent, rps, _mbps, avg, mx, p50, _p95, p99, p999 = m[0]
        steady = JAVA_STEADY.findall(out)
        if steady:  # with --warmup-records: latency of the records after the warm-up
            _, _, _, avg, mx, p50, _p95, p99, p999 = steady[-1]
        return {
            "records_per_sec": float(rps),
            "lat_avg_ms": float(avg),
            "lat_p50_ms": float(p50),
            "lat_p99_ms": float(p99),
            "lat_p999_ms": float(p999),
            "lat_max_ms": float(mx),
            "failed": 0,
            "sent": int(sent),
        }

    def consumer_argv(self, bootstrap, topic, records, group, extra=None):
        argv = [KAFKA, "consumer-perf", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", records,
                "--group", group, "--hide-header", "--timeout", CONSUMER_IDLE_MS]
        props = {**CONSUMER_PROPS, **(extra or {})}
        config = props.pop("__config_file", None)
        if config:
            argv += ["--command-config", config]
        for k, v in props.items():
            argv += ["--command-property", f"{k}={v}"]
        return argv

    def parse_consumer(self, out):
        """ConsumerPerformance's line: start.time, end.time, data.consumed.in.MB, MB.sec,
        data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec,
        fetch.nMsg.sec."""
        for line in reversed(out.splitlines()):
            f = [x.strip() for x in line.split(",")]
            if len(f) == 10 and re.match(r"\d{4}-\d\d-\d\d ", f[0]):
                return {
                    "consumed": int(f[4]),
                    "bytes": int(float(f[2]) * 2**20),
                    "seconds": float(f[7]) / 1e3,
                    "records_per_sec": float(f[9]),
                    "join_ms": float(f[6]),
                }
        return None


def run_rounds(bench, label, rows, keys, one_round):
    """`bench.rounds` rounds of `one_round(rnd)`, each row (or its error: the run goes on and the
    report says what failed) appended to `rows` with `keys` and the round."""
    for rnd in range(bench.rounds):
        log(f"{label}, round {rnd + 1}")
        try:
            row = one_round(rnd)
        except Exception as e:  # keep going: the report says what failed
            row = {"error": str(e)}
            log(f"  FAILED: {e}")
        row.update(keys, round=rnd)
        rows.append(row)


# --- the sections ------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.client_log = self.out / "clients.log"
        self.client_log.write_text("")
        self.rounds = args.rounds or (1 if self.quick else 3)
        self.records = {100: args.records_100 or (100_000 if self.quick else 1_000_000),
                        1000: args.records_1k or (25_000 if self.quick else 250_000)}
        self.latency_s = 2 if self.quick else 6
        # Records per consumer run (the whole prefilled topic), the same on 1 and 3 brokers.
        self.consumer_records = {100: args.consumer_records_100 or (200_000 if self.quick else 2_000_000),
                                 1000: args.consumer_records_1k or (50_000 if self.quick else 500_000)}
        self.codecs = args.codecs.split(",")
        peers = {"ours": Ours(args.ours, args.ours_consumer), "librdkafka": Rdkafka(args.rdkafka), "java": Java(args.java_txn_classpath)}
        # Without its executable (scripts/bench builds it only for the peer sections) librdkafka sits out.
        self.peers = [peers[p] for p in args.peers.split(",") if p != "librdkafka" or args.rdkafka]
        self.runs = []
        self.checkpoints = []
        self.images = []
        self.brokers = []
        self.meta = {}
        self.clusters = {}

    # One run of one producer; appended to self.runs.
    def producer_run(self, peer, cluster, topic, size, acks, mode, rnd, records, rate=None, extra=None, tag=None,
                     warmup=0, settings=None, bootstrap=None, per_txn=None):
        base = PRODUCER_SETTINGS[settings][peer.name] if settings else None
        if per_txn:
            txn_id = f"bench-{peer.name}-{time.time_ns()}"
            argv = peer.transactional_argv(bootstrap or cluster.bootstrap, topic, records, size, per_txn, txn_id)
        else:
            argv = peer.producer_argv(bootstrap or cluster.bootstrap, topic, records, size, acks, rate, extra, warmup,
                                      base)
        load = loadavg()
        r = run_measured(argv, self.client_log, timeout=600)
        # A transactional run prints the `result` line of the benchmark binaries (Java: TxnPerf).
        parsed = Peer.parse(peer, r.out) if per_txn else peer.parse(r.out)
        row = {
            "peer": peer.name, "brokers": cluster.brokers, "size": size, "acks": acks, "mode": mode,
            "round": rnd, "records": records, "rate": rate, "warmup": warmup, "tag": tag, "exit": r.code,
            "settings": settings, "per_txn": per_txn,
            "cpu_s": r.cpu_s, "rss_mb": r.rss_kb / 1024, "wall_s": r.wall_s, "load1": load,
        }
        if r.code != 0 or not parsed or parsed.get("failed"):
            row["error"] = f"exit {r.code}; output: {r.out.strip()[-300:]}"
            log(f"  {peer.name}: FAILED ({row['error']}); see {self.client_log}")
        else:
            row.update(parsed)
            row.update(parse_transactions(r.out))
            row["mb_per_sec"] = parsed["records_per_sec"] * size / 1e6
            row["cpu_s_per_m"] = r.cpu_s / records * 1e6
            log(f"  {peer.name:<10} {parsed['records_per_sec']:>10.0f} rec/s  cpu {r.cpu_s:6.2f} s  "
                f"rss {row['rss_mb']:6.1f} MB  p50 {parsed['lat_p50_ms']:.2f} p99 {parsed['lat_p99_ms']:.2f} ms  "
                f"(load {load:.1f})")
        self.runs.append(row)
        return row

    def cluster(self, brokers, warm=True):
        """The cluster of `brokers` (the other one stopped); `warm`: its produce path warmed up
        first (the consumer section's prefill is warm-up enough for what it measures)."""
        for b, c in list(self.clusters.items()):
            if b != brokers:
                c.stop()
                del self.clusters[b]
        if brokers not in self.clusters:
            c = Cluster(brokers, self.work)
            self.clusters[brokers] = c
        c = self.clusters[brokers]
        if warm and not getattr(c, "warmed", False):
            self.warm_up(c)
            c.warmed = True
        return c

    def count(self, size, c):
        """Records per throughput run: the same for every client; half as many on 3 brokers
        (replication makes every client slower there)."""
        return self.records[size] // (2 if c.brokers > 1 else 1)

    def warm_topic(self, c, topic, size, acks):
        """The first writes to a new topic are slower (segments and indexes created): one
        unmeasured run first."""
        peer = self.peers[0]
        argv = peer.producer_argv(c.bootstrap, topic, self.count(size, c) // 4, size, acks, None)
        run_measured(argv, self.client_log, timeout=600)

    def warm_up(self, c):
        """A fresh broker is slow until its JIT has compiled the produce path: every client
        sends some records first, unmeasured."""
        topic = "bench-warmup"
        c.create_topic(topic)
        n = 50_000 if self.quick else 300_000
        log(f"warming the broker(s) up: {n} records from each client")
        for peer in self.peers:
            for acks in ACKS:
                argv = peer.producer_argv(c.bootstrap, topic, n, 100, acks, None)
                r = run_measured(argv, self.client_log, timeout=600)
                if r.code != 0:
                    log(f"  warm-up of {peer.name} failed (exit {r.code}); see {self.client_log}")
        self.settle(c, topic)
        c.delete_topic(topic)

    def settle(self, c, topic):
        """A fresh broker keeps getting faster for a minute or more of produce load at 1 KB (its
        JIT; measured on 3 brokers, runs of 125,000 records of 1 KB back to back: 46,000 ->
        146,000 records/s over 13 runs, the same with the logs on disk or on tmpfs), so the
        clients measured first met a slower broker than those measured last. The first peer
        produces 1 KB and 100 B records with acks=all, unmeasured, until the last SETTLE_WINDOW
        runs of each size are within SETTLE_SPREAD of their median (at most SETTLE_MAX runs)."""
        peer = self.peers[0]
        if self.quick:
            return
        rates = {size: [] for size in SIZES}
        for i in range(SETTLE_MAX):
            for size in SIZES:
                argv = peer.producer_argv(c.bootstrap, topic, self.count(size, c), size, "all", None)
                r = run_measured(argv, self.client_log, timeout=600)
                parsed = peer.parse(r.out) if r.code == 0 else None
                if parsed and not parsed.get("failed"):
                    rates[size].append(parsed["records_per_sec"])
            if all(settled(v) for v in rates.values()):
                break
        log(f"  settled after {i + 1} runs of each size: " + ", ".join(
            f"{size} B {' '.join(f'{x / 1000:.0f}k' for x in v[-SETTLE_WINDOW:])}" for size, v in rates.items()))

    def stop_clusters(self):
        for c in self.clusters.values():
            c.stop()
        self.clusters = {}

    def wait_for_quiet(self):
        if not self.args.max_load:
            return
        deadline = time.monotonic() + 180
        while loadavg() > self.args.max_load and time.monotonic() < deadline:
            time.sleep(5)

    def section_startup(self):
        c = self.cluster(1)
        topic = "bench-startup"
        c.create_topic(topic)
        for rnd in range(self.rounds):
            for peer in self.peers:
                self.producer_run(peer, c, topic, 100, "1", "startup", rnd, 1000)
        c.delete_topic(topic)

    def section_producer(self):
        for brokers in self.args.brokers:
            c = self.cluster(brokers)
            for size in SIZES:
                for acks in ACKS:
                    self.producer_config(c, size, acks)

    def producer_config(self, c, size, acks):
        topic = f"bench-b{c.brokers}-s{size}-a{acks}"
        c.create_topic(topic)
        self.wait_for_quiet()
        self.warm_topic(c, topic, size, acks)
        log(f"throughput: {c.brokers} broker(s), {size} B values, acks={acks}, {self.count(size, c)} records")
        n = len(self.peers)
        for rnd in range(self.rounds):
            for i in range(n):
                peer = self.peers[(i + rnd) % n]
                self.producer_run(peer, c, topic, size, acks, "throughput", rnd, self.count(size, c))
        # Latency at a fixed offered rate: half the slowest peer's median throughput.
        medians = []
        for peer in self.peers:
            m = stats(r.get("records_per_sec") for r in self.runs
                      if r["mode"] == "throughput" and r["peer"] == peer.name and r["brokers"] == c.brokers
                      and r["size"] == size and r["acks"] == acks)[0]
            if m:
                medians.append(m)
        if medians:
            rate = round(0.5 * min(medians), -2) or 100
            # The first second is left out of the percentiles (start-up: metadata, producer id,
            # JIT), as Java's tool does with --warmup-records.
            records, warmup = self.latency_records(rate)
            log(f"latency: {rate:.0f} records/s offered, {records} records (the first {warmup} not counted)")
            for rnd in range(self.rounds):
                for i in range(n):
                    peer = self.peers[(i + rnd) % n]
                    self.producer_run(peer, c, topic, size, acks, "latency", rnd, records, rate=rate, warmup=warmup)
        c.delete_topic(topic)

    def fresh_topics(self, prefix):
        """For every cluster x value size x acks: (cluster, size, acks, topic), the topic created
        and warmed first and deleted after."""
        for brokers in self.args.brokers:
            c = self.cluster(brokers)
            for size in SIZES:
                for acks in ACKS:
                    topic = f"bench-{prefix}-b{brokers}-s{size}-a{acks}"
                    c.create_topic(topic)
                    self.wait_for_quiet()
                    self.warm_topic(c, topic, size, acks)
                    yield c, size, acks, topic
                    c.delete_topic(topic)

    def latency_records(self, rate):
        """(records, warm-up records) of a latency run at `rate`: the first second is left out."""
        warmup = int(rate * (0.5 if self.quick else 1))
        return warmup + int(rate * self.latency_s), warmup

    def section_grow(self):
        """Ours with growing batches against batch.grow.max.bytes=0, in turns within each round:
        throughput and peak RSS, then latency at GROW_RATES (issue 24's A/B)."""
        ours = next((p for p in self.peers if p.name == "ours"), None)
        if ours is None:
            log("grow: ours is not among --peers")
            return
        for c, size, acks, topic in self.fresh_topics("grow"):
            log(f"grow: {c.brokers} broker(s), {size} B values, acks={acks}, {self.count(size, c)} records")
            for rnd in range(self.rounds):
                for i in range(len(GROW_VARIANTS)):
                    tag, extra = GROW_VARIANTS[(i + rnd) % len(GROW_VARIANTS)]
                    self.producer_run(ours, c, topic, size, acks, "grow-throughput", rnd, self.count(size, c),
                                      extra=extra, tag=tag)
            rate = GROW_RATES.get((c.brokers, size, acks))
            if rate:
                records, warmup = self.latency_records(rate)
                log(f"grow latency: {rate} records/s offered, {records} records (the first {warmup} not counted)")
                for rnd in range(self.rounds):
                    for i in range(len(GROW_VARIANTS)):
                        tag, extra = GROW_VARIANTS[(i + rnd) % len(GROW_VARIANTS)]
                        self.producer_run(ours, c, topic, size, acks, "grow-latency", rnd, records, rate=rate,
                                          warmup=warmup, extra=extra, tag=tag)

    def section_baseline(self):
        """Ours against ours at --baseline-rev, in turns within each round: latency at
        GROW_RATES, then throughput and peak RSS at BUFFER_BYTES and at FLOOR_BUFFER_BYTES."""
        ours = next((p for p in self.peers if p.name == "ours"), None)
        if ours is None or not self.args.baseline:
            log("baseline: needs ours among --peers and --baseline (scripts/bench builds it)")
            return
        old = Ours(self.args.baseline)
        old.name = f"ours@{self.args.baseline_rev}"
        pair = [ours, old]
        for c, size, acks, topic in self.fresh_topics("base"):
            rate = GROW_RATES[(c.brokers, size, acks)]
            records, warmup = self.latency_records(rate)
            log(f"baseline: {c.brokers} broker(s), {size} B, acks={acks}: latency at {rate} records/s")
            for rnd in range(self.rounds):
                for i in range(2):
                    self.producer_run(pair[(i + rnd) % 2], c, topic, size, acks, "baseline-latency", rnd,
                                      records, rate=rate, warmup=warmup)
            log(f"baseline: throughput and peak RSS, buffer.memory {BUFFER_BYTES} and {FLOOR_BUFFER_BYTES}")
            for rnd in range(self.rounds):
                for i in range(2):
                    self.producer_run(pair[(i + rnd) % 2], c, topic, size, acks, "baseline-throughput", rnd,
                                      self.count(size, c))
                self.producer_run(ours, c, topic, size, acks, "floor", rnd, self.count(size, c),
                                  extra={"buffer.memory": FLOOR_BUFFER_BYTES})

    def section_settings(self):
        """Throughput with acks=all at each client's own settings (PRODUCER_SETTINGS)."""
        for brokers in self.args.brokers:
            c = self.cluster(brokers)
            for size in SIZES:
                topic = f"bench-settings-b{brokers}-s{size}"
                c.create_topic(topic)
                self.wait_for_quiet()
                self.warm_topic(c, topic, size, "all")
                n = len(self.peers)
                for settings in PRODUCER_SETTINGS:
                    log(f"throughput at {settings}: {brokers} broker(s), {size} B values, {self.count(size, c)} records")
                    for rnd in range(self.rounds):
                        for i in range(n):
                            peer = self.peers[(i + rnd) % n]
                            self.producer_run(peer, c, topic, size, "all", f"throughput-{settings}", rnd,
                                              self.count(size, c), settings=settings)
                c.delete_topic(topic)

    def section_transactions(self):
        """Transactional throughput at the same transaction size for every peer (TXN_SIZES),
        100 B values, acks=all, idempotence on, on each cluster of --brokers."""
        size = 100
        peers = [p for p in self.peers if p.name != "java" or p.txn_classpath]
        if len(peers) < len(self.peers):
            log("transactions: Java left out (TxnPerf.java not compiled: no javac)")
        for brokers in self.args.brokers:
            c = self.cluster(brokers)
            topic = f"bench-txn-b{brokers}"
            c.create_topic(topic)
            self.wait_for_quiet()
            self.warm_topic(c, topic, size, "all")
            # The brokers' transaction paths (and __transaction_state) warmed up, unmeasured.
            for peer in peers:
                run_measured(peer.transactional_argv(c.bootstrap, topic, 20_000, size, 1000, f"bench-warm-{peer.name}"),
                             self.client_log, timeout=600)
            for per_txn in TXN_SIZES:
                n = min(self.count(size, c), per_txn * TXN_PER_RUN["quick" if self.quick else "full"])
                log(f"transactions: {brokers} broker(s), {per_txn} records per transaction, {n} records")
                for rnd in range(self.rounds):
                    for i in range(len(peers)):
                        peer = peers[(i + rnd) % len(peers)]
                        self.producer_run(peer, c, topic, size, "all", "transactions", rnd, n, per_txn=per_txn)
            c.delete_topic(topic)

    # --- consumers ---------------------------------------------------------------------------

    def section_consumer(self):
        # The cluster left running by an earlier section first.
        for brokers in sorted(self.args.brokers, key=lambda b: b not in self.clusters):
            c = self.cluster(brokers, warm=False)
            for size in SIZES:
                for codec in self.codecs:
                    startup = brokers == min(self.args.brokers) and size == SIZES[0] and codec == self.codecs[0]
                    self.consumer_config(c, size, codec, startup)

    def consumer_config(self, c, size, codec, startup):
        n = self.consumer_records[size]
        topic = f"bench-consume-b{c.brokers}-s{size}-{codec}"
        c.create_topic(topic)
        self.wait_for_quiet()
        log(f"consumer: {c.brokers} broker(s), {size} B values, {codec}: prefilling {n} records with Java's producer")
        if not self.prefill(c, topic, size, codec, n, self.peers[0]):
            c.delete_topic(topic)
            return
        peers = self.peers
        if startup:
            log("consumer fixed cost: 1,000 records")
            for rnd in range(self.rounds):
                for peer in peers:
                    self.consumer_run(peer, c, topic, size, codec, "consume-startup", rnd, 1000)
        log(f"consumer throughput: {n} records")
        for rnd in range(self.rounds):
            for i in range(len(peers)):
                self.consumer_run(peers[(i + rnd) % len(peers)], c, topic, size, codec, "consume", rnd, n)
        c.delete_topic(topic)

    def prefill(self, c, topic, size, codec, n, warm, mode="prefill"):
        """Fills `topic` with `n` records by Java's producer (acks=1, compression.type `codec`), a
        row of `mode` in self.runs, then reads it once with `warm`, unmeasured (the broker's
        fetch path compiled, the log in the page cache). False if the prefill failed."""
        java = Java()
        argv = java.producer_argv(c.bootstrap, topic, n, size, "1", None, extra={"compression.type": codec})
        r = run_measured(argv, self.client_log, timeout=1200)
        p = java.parse(r.out)
        row = {"peer": "java", "brokers": c.brokers, "size": size, "acks": "1", "codec": codec, "mode": mode,
               "round": 0, "records": n, "tag": None, "exit": r.code, "cpu_s": r.cpu_s, "wall_s": r.wall_s,
               "stored_mb": topic_mb(c, topic) / c.brokers}
        if r.code != 0 or not p or p.get("sent") != n:
            row["error"] = f"prefill: exit {r.code}; output: {r.out.strip()[-300:]}"
            log(f"  prefill FAILED ({row['error']}); see {self.client_log}")
            self.runs.append(row)
            return False
        row["records_per_sec"] = p["records_per_sec"]
        self.runs.append(row)
        log(f"  prefilled at {p['records_per_sec']:.0f} records/s; {row['stored_mb']:.0f} MB per replica")
        run_measured(warm.consumer_argv(c.bootstrap, topic, n, f"bench-warm-{time.time_ns()}"), self.client_log,
                     timeout=600)
        return True

    # One run of one consumer; appended to self.runs.
    def consumer_run(self, peer, c, topic, size, codec, mode, rnd, records, bootstrap=None, extra=None, tag=None):
        group = f"bench-{peer.name}-{mode}-r{rnd}-{time.time_ns()}"
        argv = peer.consumer_argv(bootstrap or c.bootstrap, topic, records, group, extra)
        load = loadavg()
        r = run_measured(argv, self.client_log, timeout=600)
        parsed = peer.parse_consumer(r.out)
        row = {
            "peer": peer.name, "brokers": c.brokers, "size": size, "acks": None, "codec": codec, "mode": mode,
            "round": rnd, "records": records, "tag": tag, "exit": r.code,
            "cpu_s": r.cpu_s, "rss_mb": r.rss_kb / 1024, "wall_s": r.wall_s, "load1": load,
        }
        if r.code != 0 or not parsed or parsed["consumed"] < records:
            row["error"] = f"exit {r.code}; output: {r.out.strip()[-300:]}"
            log(f"  {peer.name}: FAILED ({row['error']}); see {self.client_log}")
        else:
            row.update(parsed)
            row["mb_per_sec"] = parsed["records_per_sec"] * size / 1e6
            row["cpu_s_per_m"] = r.cpu_s / parsed["consumed"] * 1e6
            log(f"  {peer.name:<10} {parsed['records_per_sec']:>10.0f} rec/s  cpu {r.cpu_s:6.2f} s  "
                f"rss {row['rss_mb']:6.1f} MB  join {parsed['join_ms']:.0f} ms  (load {load:.1f})")
        self.runs.append(row)
        return row

    def section_async(self):
        """The async APIs against the blocking ones (issue 27): on 1 broker, for each value size,
        the producers (acks=all, the producer section's settings) and then the consumers (a topic
        prefilled as the consumer section's, no compression), the clients of ASYNC_CLIENTS taking
        turns within each round."""
        names = [p.name for p in self.peers]
        clients = []
        if "ours" in names:
            clients += [Ours(self.args.ours, self.args.ours_consumer), OursAsync(self.args.ours, self.args.ours_consumer)]
        if "librdkafka" in names:
            clients += [Rdkafka(self.args.rdkafka), RdkafkaAsync(self.args.rdkafka)]
        else:
            log("async: rust-rdkafka left out (not among --peers, or rdkafka-bench not built)")
        if not clients:
            return
        n = len(clients)
        c = self.cluster(1)
        for size in SIZES:
            topic = f"bench-async-s{size}"
            c.create_topic(topic)
            self.wait_for_quiet()
            self.warm_topic(c, topic, size, "all")
            records = self.count(size, c)
            log(f"async producers: 1 broker, {size} B values, acks=all, {records} records")
            for rnd in range(self.rounds):
                for i in range(n):
                    self.producer_run(clients[(i + rnd) % n], c, topic, size, "all", "async-produce", rnd, records)
            c.delete_topic(topic)
        for size in SIZES:
            records = self.consumer_records[size]
            topic = f"bench-async-consume-s{size}"
            c.create_topic(topic)
            self.wait_for_quiet()
            log(f"async consumers: 1 broker, {size} B values: prefilling {records} records with Java's producer")
            if self.prefill(c, topic, size, "none", records, clients[0], mode="async-prefill"):
                log(f"async consumers: {records} records")
                for rnd in range(self.rounds):
                    for i in range(n):
                        self.consumer_run(clients[(i + rnd) % n], c, topic, size, "none", "async-consume", rnd,
                                          records)
            c.delete_topic(topic)

    def section_overhead(self):
        ours = next((p for p in self.peers if p.name == "ours"), None)
        if not ours:
            return
        c = self.cluster(1)
        topic = "bench-overhead"
        c.create_topic(topic)
        self.warm_topic(c, topic, 100, "1")
        rounds = max(self.rounds, 2 if self.quick else 5)
        log(f"overhead of the checkpoint resource: {rounds} rounds each")
        for rnd in range(rounds):
            variants = [("registered", {}), ("unregistered", {"crac.register": "false"})]
            if rnd % 2:
                variants.reverse()
            for tag, extra in variants:
                self.producer_run(ours, c, topic, 100, "1", "overhead", rnd, self.records[100], extra=extra, tag=tag)
        c.delete_topic(topic)

    def section_security(self):
        """PLAINTEXT against SASL_SSL on one broker started with --security: the producers
        (acks=all, the same settings as the producer section) and the consumers (a topic
        prefilled by Java's producer), each peer over both listeners in turn."""
        self.stop_clusters()
        c = Cluster(1, self.work, security=True)
        self.clusters[1] = c
        self.warm_up(c)
        c.warmed = True
        secure = c.listeners["SASL_SSL"]
        size = 1000
        n = self.records[size]
        topic = "bench-security"
        c.create_topic(topic)
        self.wait_for_quiet()
        self.warm_topic(c, topic, size, "all")
        log(f"TLS and SASL: producers, {size} B values, acks=all, {n} records, PLAINTEXT and SASL_SSL")
        for rnd in range(self.rounds):
            for i in range(len(self.peers)):
                peer = self.peers[(i + rnd) % len(self.peers)]
                order = ["PLAINTEXT", "SASL_SSL"] if rnd % 2 == 0 else ["SASL_SSL", "PLAINTEXT"]
                for proto in order:
                    extra = peer.sasl_ssl(c) if proto == "SASL_SSL" else {}
                    self.producer_run(peer, c, topic, size, "all", "security-produce", rnd, n, extra=extra,
                                      tag=proto, bootstrap=secure if proto == "SASL_SSL" else None)
        c.delete_topic(topic)
        # Consumers: one prefilled topic, read whole by every peer over both listeners.
        records = self.consumer_records[size]
        topic = "bench-security-consume"
        c.create_topic(topic)
        java = Java()
        r = run_measured(java.producer_argv(c.bootstrap, topic, records, size, "1", None), self.client_log,
                         timeout=1200)
        if r.code != 0:
            log(f"  prefill FAILED (exit {r.code}); see {self.client_log}")
            return
        log(f"TLS and SASL: consumers, {records} records of {size} B, PLAINTEXT and SASL_SSL")
        run_measured(self.peers[0].consumer_argv(c.bootstrap, topic, records, f"bench-warm-{time.time_ns()}"),
                     self.client_log, timeout=600)
        for rnd in range(self.rounds):
            for i in range(len(self.peers)):
                peer = self.peers[(i + rnd) % len(self.peers)]
                order = ["PLAINTEXT", "SASL_SSL"] if rnd % 2 == 0 else ["SASL_SSL", "PLAINTEXT"]
                for proto in order:
                    extra = peer.sasl_ssl(c) if proto == "SASL_SSL" else None
                    self.consumer_run(peer, c, topic, size, "none", "security-consume", rnd, records,
                                      bootstrap=secure if proto == "SASL_SSL" else None, extra=extra, tag=proto)
        c.delete_topic(topic)

    def section_checkpoint(self):
        c = self.cluster(1)
        topic = "bench-service"
        c.create_topic(topic)
        sizes = [int(s) for s in self.args.state_mb.split(",")] if self.args.state_mb else ([10] if self.quick else [10, 200, 1024])
        for mb in sizes:
            run_rounds(self, f"checkpoint/restore: {mb} MB of state", self.checkpoints, {"state_mb": mb},
                       lambda rnd: checkpoint_round(self, c, topic, mb, rnd))
        c.delete_topic(topic)


# --- checkpoint and restore of the real service ------------------------------------------------

# The timestamp of a tracing line; searched, not anchored: `crac restore` writes its own lines
# to the same stderr, and a line of the restored process can start in the middle of one.
TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\s")


def ts_ns(line):
    m = TS.search(line)
    if not m:
        return None
    whole, frac = m.group(1).split(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp()) * 10**9 + int(frac.ljust(9, "0")[:9])


class Lines:
    """Reads a process's stdout on a thread; `expect` waits for a line with a prefix."""

    def __init__(self, stream):
        self.lines, self.cv, self.eof = [], threading.Condition(), False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for raw in stream:
            with self.cv:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.eof = True
            self.cv.notify_all()

    def find(self, prefix, timeout):
        """The first line with `prefix`, or None if none came within `timeout`."""
        try:
            return self.expect(prefix, timeout)[0]
        except RuntimeError:
            return None

    def expect(self, prefix, timeout, after=0):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for i in range(after, len(self.lines)):
                    if self.lines[i].startswith(prefix):
                        return self.lines[i], i + 1
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    tail = "\n  ".join(self.lines[-5:])
                    raise RuntimeError(f"no `{prefix}` line ({'exited' if self.eof else 'timeout'}); last lines:\n  {tail}")
                self.cv.wait(left)


def field(line, key):
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S+)", line)
    return m.group(1) if m else None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def criu_log_ms(path):
    try:
        for line in reversed(Path(path).read_text(errors="replace").splitlines()):
            m = re.match(r"\((\s*[\d.]+)\)", line)
            if m:
                return float(m.group(1)) * 1e3
    except OSError:
        pass
    return None


def topic_mb(cluster, topic):
    """MB of log segments the topic's partitions hold on all brokers together."""
    total = 0
    for f in cluster.dir.glob(f"data-*/{topic}-*/*.log"):
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total / 1e6


def dir_mb(d):
    return sum(f.stat().st_size for f in Path(d).iterdir() if f.is_file()) / 2**20


def checkpoint_round(bench, cluster, topic, mb, rnd):
    a = bench.args
    img = bench.work / f"image-{mb}"
    shutil.rmtree(img, ignore_errors=True)
    errlog = bench.out / f"service-{mb}mb.log"
    env = dict(os.environ)
    for k in ("CRAC_CHECKPOINT_MODE", "CRAC_ENGINE", "SVC_FINAL"):
        env.pop(k, None)
    env.update({
        "CRAC_CRIU": a.criu, "CRAC_CHECKPOINT_TO": str(img), "SVC_BOOTSTRAP": cluster.bootstrap,
        "SVC_TOPIC": topic, "SVC_STATE_MB": str(mb), "SVC_RATE": "1000", "SVC_QUIESCE": "1",
        "SVC_LOG": "info,crac_api=debug",
    })
    row = {}
    svc_pid = None
    procs = []
    try:
        with open(errlog, "ab") as err:
            err.write(f"\n=== {mb} MB cold start\n".encode())
            err.flush()
            start_size = errlog.stat().st_size
            t_spawn = time.time_ns()
            p = subprocess.Popen([a.service], stdout=subprocess.PIPE, stderr=err, env=env)
        procs.append(p)
        svc_pid = p.pid
        out = Lines(p.stdout)
        ready, _ = out.expect("ready ", 600)
        row["state_build_ms"] = float(field(ready, "state_ms"))
        state_sum = field(ready, "state_sum")
        coarse, _ = out.expect("first_ack ", 120)
        precise = out.find("first_ack_of_gen gen=0 ", 2)
        if precise:
            row["cold_first_ack_ms"] = (int(field(precise, "unix_ns")) - t_spawn) / 1e6
        else:  # a service without the precise line: its own figure, from the start of main()
            row["cold_first_ack_ms"] = float(field(coarse, "ms_since_start"))
        # Let it produce for a moment, then checkpoint it from outside.
        _, pos = out.expect("progress ", 60)
        _, pos = out.expect("progress ", 60, pos)
        died = {}

        def waiter():
            p.wait()
            died["ns"] = time.time_ns()

        w = threading.Thread(target=waiter, daemon=True)
        w.start()
        t_req = time.time_ns()
        ck = subprocess.run([a.crac, "checkpoint", str(p.pid), "--timeout", "300"], capture_output=True,
                            text=True, env=env, timeout=330)
        w.join(60)
        if ck.returncode != 0 or not (img / "inventory.img").exists():
            raise RuntimeError(f"checkpoint failed: {ck.stdout}{ck.stderr}")
        t_dead = died["ns"]
        text = errlog.read_bytes()[start_size:].decode(errors="replace").splitlines()
        hooks_done = hooks_ms = drain_us = None
        for l in text:
            if "before_checkpoint done" in l and ts_ns(l) is not None:
                hooks_done, hooks_ms = ts_ns(l), float(field(l, "elapsed_ms"))
            elif "phase=before_checkpoint" in l and "kafka-producer[" in l and "hook done" in l:
                drain_us = float(field(l, "elapsed_us"))
        if hooks_done is None:
            raise RuntimeError(f"no `before_checkpoint done` line in {errlog}")
        row["checkpoint_total_ms"] = (t_dead - t_req) / 1e6
        row["hooks_ms"] = hooks_ms
        row["drain_ms"] = drain_us / 1e3 if drain_us is not None else None
        row["before_hooks_ms"] = (hooks_done - hooks_ms * 1e6 - t_req) / 1e6
        row["dump_ms"] = (t_dead - hooks_done) / 1e6
        row["criu_dump_ms"] = criu_log_ms(img / "dump.log")
        row["image_mb"] = dir_mb(img)

        # Restore the one image eagerly and lazily, in turns (who goes first rotates with the
        # round); each restored copy sends 200 more records and exits.
        modes = RESTORE_MODES if rnd % 2 == 0 else RESTORE_MODES[::-1]
        for mode in modes:
            for k, v in restore_run(a, img, env, errlog, mb, mode, state_sum).items():
                row[f"{k}_{mode}"] = v
            row[f"cold_over_restore_{mode}"] = row["cold_first_ack_ms"] / row[f"restore_first_ack_ms_{mode}"]
        log(f"  cold first ack {row['cold_first_ack_ms']:.0f} ms; checkpoint {row['checkpoint_total_ms']:.0f} ms "
            f"(hooks {row['hooks_ms']:.1f}, drain {row['drain_ms'] or 0:.1f}, dump {row['dump_ms']:.0f}, "
            f"criu {row['criu_dump_ms'] or 0:.0f}); image {row['image_mb']:.0f} MB; "
            + "; ".join(f"{m}: restore {row.get(f'restore_ms_{m}') or 0:.0f} ms, first ack {row[f'restore_first_ack_ms_{m}']:.0f} ms, "
                        f"all pages in {row.get(f'resident_ms_{m}') or 0:.0f} ms" for m in RESTORE_MODES))
        return row
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if svc_pid and alive(svc_pid):
            # The restored copy (same pid as the original) outlived its `crac restore`.
            try:
                os.kill(svc_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(img, ignore_errors=True)


# `crac restore --eager` reads every page before the process runs; `--lazy` runs it at once and
# streams its memory in (criu lazy-pages).
RESTORE_MODES = ["eager", "lazy"]


def follow_restored(r, what, state_sum):
    """Reads a restore's output (`r`, the restorer's process) until the restored service is
    done: its coarse and precise first-ack lines and its state check. Fails unless it exited
    with 0 and its state digest is the original's."""
    try:
        rout = Lines(r.stdout)
        coarse, _ = rout.expect("first_ack_after_restore ", 120)
        precise = rout.find("first_ack_of_gen gen=1 ", 2)
        checked, _ = rout.expect("state_checked gen=1 ", 300)
        rout.expect("done ", 120)
        code = r.wait(300)
    finally:
        if r.poll() is None:
            r.kill()
            r.wait()
    if code != 0:
        raise RuntimeError(f"{what}: the restored service exited with {code}")
    if field(checked, "state_sum") != state_sum:
        raise RuntimeError(f"{what}: state digest {field(checked, 'state_sum')}, the original's {state_sum}")
    return coarse, precise, checked


def restore_run(a, img, env, errlog, mb, mode, state_sum, extra=()):
    """`crac restore --MODE` of `img` until the restored service is done: restore, first ack,
    all pages in, each from `crac restore` started. Fails unless the restored state's digest
    (the service takes it after its first ack, reading every page) is the original's."""
    row = {}
    with open(errlog, "ab") as err:
        err.write(f"\n=== {mb} MB restore --{mode}\n".encode())
        err.flush()
        start_size = errlog.stat().st_size
        t0 = time.time_ns()
        r = subprocess.Popen([a.crac, "restore", str(img), f"--{mode}", "--env", "SVC_FINAL=200", *extra],
                             stdout=subprocess.PIPE, stderr=err, env=env)
    coarse, precise, checked = follow_restored(r, f"restore --{mode}", state_sum)
    row["digest_ms"] = float(field(checked, "digest_ms"))
    text = errlog.read_bytes()[start_size:].decode(errors="replace").splitlines()
    for l in text:
        if "crac_api::core: restored generation" in l and ts_ns(l) is not None:
            row["restore_ms"] = (ts_ns(l) - t0) / 1e6
        m = re.search(r"restored pid \d+ from \S+ in ([\d.]+) ms", l)
        if m:
            row["crac_restore_ms"] = float(m.group(1))
        m = re.search(r"all pages in memory ([\d.]+) ms after crac restore started", l)
        if m:
            row["resident_ms"] = float(m.group(1))
    if mode == "eager":  # every page is in before the process runs
        row["resident_ms"] = row.get("crac_restore_ms")
    elif "resident_ms" not in row:
        raise RuntimeError(f"restore --lazy: no `all pages in memory` line in {errlog}")
    if precise:
        row["restore_first_ack_ms"] = (int(field(precise, "unix_ns")) - t0) / 1e6
    else:  # the service's own figure (a poll every 250 ms) after the restore
        row["restore_first_ack_ms"] = row.get("restore_ms", 0) + float(field(coarse, "ms"))
    return row


# --- images that travel ---------------------------------------------------------------------

# The images section's states: the demo's warm state (scripts/demo: a catalog parsed and
# indexed), then filled tables (random bytes: the hardest case for compression).
IMAGE_STATES = {"quick": [("fill:10", 10)], "full": [("catalog:1000000", None), ("fill:200", 200), ("fill:1024", 1024)]}


def image_state_label(warm):
    kind, n = warm.split(":")
    return f"demo catalog ({int(n):,} items)" if kind == "catalog" else f"{n} MB filled"


# --- restores through the checkpoint broker -------------------------------------------------

BROKER_USER = "crac-bench-user"


def section_broker(bench):
    """A user who is not root checkpoints the service through `crac daemon` and restores it
    with `crac restore --broker NAME`, lazily and eagerly: from `crac restore` starting to
    the restored copy's first acknowledged record (issue 39)."""
    a = bench.args
    c = bench.cluster(1)
    topic = "bench-broker"
    c.create_topic(topic)
    sizes = [int(s) for s in a.state_mb.split(",")] if a.state_mb else ([10] if bench.quick else [1024])
    try:
        env = broker_setup(bench)
        for mb in sizes:
            run_rounds(bench, f"broker: {mb} MB of state", bench.brokers, {"state_mb": mb},
                       lambda rnd: broker_round(bench, env, c, topic, mb, rnd))
    finally:
        d = getattr(bench, "broker_daemon", None)
        if d and d.poll() is None:
            d.kill()
            d.wait()
        if getattr(bench, "broker_base", None):
            for f in bench.broker_base.glob("home/*.log"):
                shutil.copy2(f, bench.out / f"broker-{f.name}")
            shutil.rmtree(bench.broker_base, ignore_errors=True)
        c.delete_topic(topic)


def broker_setup(bench):
    """The user, executables it can run, and a daemon of the bench's own (its socket, store and
    key in the bench's work directory); returns the environment of the user's commands."""
    a = bench.args
    if subprocess.run(["id", BROKER_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", BROKER_USER],
                       check=True)
    # Outside the bench's work directory, which is root's alone: the user runs these.
    base = Path(tempfile.mkdtemp(prefix="crac-bench-broker-"))
    bench.broker_base = base
    (base / "bin").mkdir(parents=True)
    os.chmod(base, 0o755)
    os.chmod(base / "bin", 0o755)
    for exe in (a.service, a.crac):
        shutil.copy2(exe, base / "bin")
        os.chmod(base / "bin" / Path(exe).name, 0o755)
    home = base / "home"
    # The user's runtime directory (0700, its own): where `crac checkpoint PID`, as the user,
    # finds the service's control channel.
    xdg = home / "run"
    for d in (home, xdg):
        d.mkdir(mode=0o700)
        shutil.chown(d, BROKER_USER, BROKER_USER)
    socket = base / "run" / "daemon.sock"
    log_path = bench.out / "broker-daemon.log"
    denv = dict(os.environ, CRAC_CRIU=a.criu_plain)
    with open(log_path, "ab") as lf:
        bench.broker_daemon = subprocess.Popen(
            [a.crac, "daemon", "--socket", str(socket), "--store", str(base / "store"), "--key",
             str(base / "key" / "host.key")], stdout=lf, stderr=lf, env=denv)
    deadline = time.time() + 30
    while not socket.exists():
        if time.time() > deadline or bench.broker_daemon.poll() is not None:
            raise RuntimeError(f"crac daemon did not listen; see {log_path}")
        time.sleep(0.05)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_RUNTIME_DIR": str(xdg),
           "CRAC_BROKER_SOCKET": str(socket)}
    return {"env": env, "base": base, "home": home}


def as_user(argv):
    return ["setpriv", f"--reuid={BROKER_USER}", f"--regid={BROKER_USER}", "--init-groups", "--"] + argv


def broker_round(bench, u, cluster, topic, mb, rnd):
    base, home = u["base"], u["home"]
    svc, crac = str(base / "bin" / Path(bench.args.service).name), str(base / "bin" / "crac")
    name = f"svc-{mb}-{rnd}"
    env = dict(u["env"], CRAC_CHECKPOINT_TO=str(home / name), SVC_BOOTSTRAP=cluster.bootstrap, SVC_TOPIC=topic,
               SVC_STATE_MB=str(mb), SVC_RATE="1000", SVC_QUIESCE="1", SVC_LOG="info")
    errlog = home / f"service-{name}.log"
    row = {}
    # In a session of its own (setsid execs it, same pid), as a service is started.
    p = subprocess.Popen(as_user(["setsid", svc]), stdout=subprocess.PIPE, stderr=open(errlog, "ab"), env=env)
    try:
        out = Lines(p.stdout)
        ready, _ = out.expect("ready ", 600)
        state_sum = field(ready, "state_sum")
        out.expect("first_ack ", 120)
        _, pos = out.expect("progress ", 60)
        t_req = time.time_ns()
        ck = subprocess.run(as_user([crac, "checkpoint", str(p.pid), "--timeout", "300"]), capture_output=True,
                            text=True, env=env, timeout=330)
        if ck.returncode != 0:
            raise RuntimeError(f"checkpoint through the broker failed: {ck.stdout}{ck.stderr}")
        p.wait(120)
        row["checkpoint_total_ms"] = (time.time_ns() - t_req) / 1e6
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # The image is sealed a moment after the process is gone.
    time.sleep(1)
    modes = ["lazy", "eager"] if rnd % 2 == 0 else ["eager", "lazy"]
    for mode in modes:
        for k, v in broker_restore_run(crac, name, env, home, mode, state_sum).items():
            row[f"{k}_{mode}"] = v
    log(f"  checkpoint {row['checkpoint_total_ms']:.0f} ms; "
        + "; ".join(f"{m}: broker answered {row.get(f'answer_ms_{m}') or 0:.0f} ms, first ack "
                    f"{row[f'restore_first_ack_ms_{m}']:.0f} ms" for m in modes))
    return row


def broker_restore_run(crac, name, env, home, mode, state_sum):
    """`crac restore --broker NAME --MODE` as the user, its output through a pipe of the user's
    own (CRIU, as the user, reopens the pipes it hands in): first ack from `crac restore`
    starting, and the restored state's digest checked."""
    errlog = home / f"restore-{name}-{mode}.log"
    script = f'"$0" restore --broker {name} --{mode} --env SVC_FINAL=200 2>>{errlog} | cat'
    t0 = time.time_ns()
    r = subprocess.Popen(as_user(["/bin/sh", "-c", script, crac]), stdout=subprocess.PIPE, env=env)
    _, precise, checked = follow_restored(r, f"restore --broker --{mode} (see {errlog})", state_sum)
    if precise is None:
        raise RuntimeError(f"restore --broker --{mode}: no first_ack_of_gen line; see {errlog}")
    row = {"restore_first_ack_ms": (int(field(precise, "unix_ns")) - t0) / 1e6}
    m = re.search(r"restored pid=\d+ ms=([\d.]+)", errlog.read_text(errors="replace"))
    if m:
        row["answer_ms"] = float(m.group(1))
    return row


def broker_report(bench):
    rows = getattr(bench, "brokers", [])
    if not rows:
        return ""
    L = ["## Restores through the checkpoint broker", "",
         "A user who is not root (no criu group) checkpoints the service (`tests/src/bin/kafka_service.rs`) through "
         "`crac daemon` with `crac checkpoint PID`, then restores it with `crac restore --broker NAME --lazy` and "
         "`--eager` in turns. First ack: from `crac restore` starting to the restored copy's first acknowledged "
         "record; broker's answer: the broker's own time to `restored pid=N` (its checks, criu restore). The "
         "restored state's digest is checked each time.", "",
         "| state | round | checkpoint ms | broker answer ms lazy / eager | first ack ms lazy | eager |",
         "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            L.append(f"| {r['state_mb']} MB | {r['round'] + 1} | FAILED: {r['error'][:120]} | | | |")
            continue
        L.append(f"| {r['state_mb']} MB | {r['round'] + 1} | {fmt(r.get('checkpoint_total_ms'))} | "
                 f"{fmt(r.get('answer_ms_lazy'), 1)} / {fmt(r.get('answer_ms_eager'), 1)} | "
                 f"{fmt(r.get('restore_first_ack_ms_lazy'))} | {fmt(r.get('restore_first_ack_ms_eager'))} |")
    return "\n".join(L) + "\n"


def section_images(bench):
    c = bench.cluster(1)
    topic = "bench-images"
    c.create_topic(topic)
    reg_dir = bench.work / "registry"
    subprocess.run([str(ROOT / "scripts" / "registry"), "start", str(reg_dir)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    try:
        reg = dict(l.split("=", 1) for l in (reg_dir / "env").read_text().split())
        key, trust = signing_key(bench.work)
        for warm, mb in IMAGE_STATES["quick" if bench.quick else "full"]:
            run_rounds(bench, f"images: {image_state_label(warm)}", bench.images, {"warm": warm},
                       lambda rnd: image_round(bench, c, topic, warm, mb, rnd, reg["CRAC_REGISTRY_PLAIN"], key, trust))
    finally:
        subprocess.run([str(ROOT / "scripts" / "registry"), "stop", str(reg_dir)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(reg_dir, ignore_errors=True)
    c.delete_topic(topic)


def signing_key(work):
    key, trust = work / "signing.pem", work / "trusted"
    trust.mkdir(mode=0o700, exist_ok=True)
    if not key.exists():
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.chmod(key, 0o600)
        subprocess.run(["openssl", "pkey", "-pubout", "-in", str(key), "-out", str(trust / "bench.pub")], check=True)
    return str(key), str(trust)


def timed(argv, env, what):
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed: {r.stdout}{r.stderr}")
    return (time.monotonic() - t0) * 1e3, r.stderr


def image_round(bench, cluster, topic, warm, mb, rnd, registry, key, trust):
    """One image of the service with `warm` state: pushed, pulled, and restored from the registry."""
    a = bench.args
    img = bench.work / "image-travel"
    pulled = bench.work / "image-pulled"
    for d in (img, pulled):
        shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ)
    for k in ("CRAC_CHECKPOINT_MODE", "CRAC_ENGINE", "SVC_FINAL", "SVC_STATE_MB"):
        env.pop(k, None)
    env.update({"CRAC_CRIU": a.criu, "CRAC_CHECKPOINT_TO": str(img), "SVC_BOOTSTRAP": cluster.bootstrap,
                "SVC_TOPIC": topic, "SVC_WARM": warm, "SVC_RATE": "1000", "SVC_QUIESCE": "1",
                "SVC_LOG": "info", "CRAC_IMAGE_CACHE": str(bench.work / "image-cache")})
    errlog = bench.out / "service-images.log"
    row, procs = {}, []
    try:
        with open(errlog, "ab") as err:
            err.write(f"\n=== {warm} start\n".encode())
            p = subprocess.Popen([a.service], stdout=subprocess.PIPE, stderr=err, env=env)
        procs.append(p)
        out = Lines(p.stdout)
        ready, _ = out.expect("ready ", 900)
        state_sum = field(ready, "state_sum")
        _, pos = out.expect("first_ack ", 120)
        out.expect("progress ", 60, pos)
        ck = subprocess.run([a.crac, "checkpoint", str(p.pid), "--timeout", "300"], capture_output=True,
                            text=True, env=env, timeout=330)
        p.wait(120)
        if ck.returncode != 0 or not (img / "inventory.img").exists():
            raise RuntimeError(f"checkpoint failed: {ck.stdout}{ck.stderr}")
        row["image_mb"] = dir_mb(img) * 2**20 / 1e6
        ref = f"{registry}/bench/svc:{warm.replace(':', '-')}-r{rnd}"
        row["push_ms"], push_err = timed([a.crac, "push", str(img), ref, "--plain-http", "--sign", key], env, "push")
        m = re.search(r"pushed ([\d.]+) MB of image as ([\d.]+) MB", push_err)
        if not m:
            raise RuntimeError(f"no push report: {push_err}")
        row["registry_mb"] = float(m.group(2))
        row["smaller"] = row["image_mb"] / row["registry_mb"]
        row["pull_ms"], _ = timed([a.crac, "pull", ref, str(pulled), "--plain-http", "--trust", trust], env, "pull")
        shutil.rmtree(pulled, ignore_errors=True)
        for k, v in restore_run(a, ref, env, errlog, warm, "lazy", state_sum,
                                extra=["--plain-http", "--trust", trust, "--pull-to", str(pulled)]).items():
            row[f"ref_{k}"] = v
        log(f"  image {row['image_mb']:.0f} MB, in the registry {row['registry_mb']:.0f} MB ({row['smaller']:.1f}x smaller); "
            f"push {row['push_ms']:.0f} ms, pull {row['pull_ms']:.0f} ms; restore REF to first ack {row['ref_restore_first_ack_ms']:.0f} ms")
        return row
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in (img, pulled):
            shutil.rmtree(d, ignore_errors=True)


def images_report(bench):
    rows = bench.images
    if not rows:
        return ""
    L = ["## Images that travel (OCI registry)\n",
         "The service's image (`crac checkpoint PID`, stop mode) pushed with `crac push --sign` (zstd level 3, "
         "32 MiB page pieces, 3 uploads at once) to Debian's docker-registry 2.8 on 127.0.0.1 (plain HTTP, filesystem "
         "storage), pulled with `crac pull --trust` into a new directory (4 layers at once, each digested and "
         "decompressed as it arrives), and restored with `crac restore REF --lazy --trust` (signature checked, "
         "pulled, restored): *restore REF → first ack* is from `crac restore` started to the restored copy's first "
         "acknowledged record, the pull included. Registry MB = config and layers as stored.\n",
         "| state | image MB on disk | in the registry MB | smaller | push ms | pull ms | restore REF → first ack ms |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for warm in dict.fromkeys(r["warm"] for r in rows):
        rs = [r for r in rows if r["warm"] == warm and "error" not in r]
        fails = len([r for r in rows if r["warm"] == warm and "error" in r])
        col = lambda k, d=0: spread([r.get(k) for r in rs], d)  # noqa: E731
        L.append(f"| {image_state_label(warm)} | {col('image_mb')} | {col('registry_mb')} | {col('smaller', 1)}× | "
                 f"{col('push_ms')} | {col('pull_ms')} | {col('ref_restore_first_ack_ms')} |"
                 + (f" ({fails} failed)" if fails else ""))
    L.append("")
    return "\n".join(L)


SECTIONS = {
    "startup": Bench.section_startup,
    "producer": Bench.section_producer,
    "consumer": Bench.section_consumer,
    "async": Bench.section_async,
    "settings": Bench.section_settings,
    "grow": Bench.section_grow,
    "baseline": Bench.section_baseline,
    "overhead": Bench.section_overhead,
    "security": Bench.section_security,
    "transactions": Bench.section_transactions,
    "checkpoint": Bench.section_checkpoint,
    "images": section_images,
    "broker": section_broker,
}


# --- facts about the machine and the versions --------------------------------------------------


def sh(*argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_facts(args):
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = ""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    os_name = ""
    try:
        os_name = re.search(r'PRETTY_NAME="([^"]*)"', Path("/etc/os-release").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    pom = (ROOT / "scripts" / "kafka" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka.version>(.*?)</kafka.version>", pom).group(1)
    lock = (ROOT / "tests" / "peers" / "rdkafka-bench" / "Cargo.lock").read_text()
    rd = re.search(r'name = "rdkafka"\nversion = "([^"]+)"', lock)
    rds = re.search(r'name = "rdkafka-sys"\nversion = "([^"]+)"', lock)
    java = sh("java", "-version").splitlines()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "os": os_name,
        "kernel": platform.release(),
        "rustc": sh("rustc", "--version"),
        "java": java[1] if len(java) > 1 else (java[0] if java else ""),
        "kafka": kafka_version,
        "rdkafka": f"rdkafka {rd.group(1) if rd else '?'}, rdkafka-sys {rds.group(1) if rds else '?'} (bundled librdkafka, built from source)",
        "criu": sh(args.criu, "--version").splitlines()[0] if args.criu else "",
        "commit": sh("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD")
        + (" (with uncommitted changes)" if sh("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no") else ""),
        "mode": "quick" if args.quick else "full",
        "load_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


# --- the report --------------------------------------------------------------------------------


def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def spread(values, digits=0):
    med, lo, hi = stats(values)
    if med is None:
        return "failed"
    if lo == hi:
        return fmt(med, digits)
    return f"{fmt(med, digits)} ({fmt(lo, digits)}–{fmt(hi, digits)})"


def pick(runs, **kw):
    return [r for r in runs if all(r.get(k) == v for k, v in kw.items()) and "error" not in r]


def ratio(a, b):
    return None if not a or not b else a / b


def configs(runs, mode=None):
    """(brokers, size, acks) of the runs (of `mode`, if given), in the order first run."""
    seen = []
    for r in runs:
        k = (r["brokers"], r["size"], r["acks"])
        if (mode is None or r["mode"] == mode) and k not in seen:
            seen.append(k)
    return seen


def cfg_label(b, size, acks):
    return f"{b} broker{'s, RF 3' if b > 1 else ''} · {size} B · acks={acks}"


def report(bench):
    m = bench.meta
    runs = bench.runs
    peers = bench.peers
    names = [p.name for p in peers]
    L = []
    L.append(f"# Benchmarks {m['date']} ({m['mode']})\n")
    L.append("Made by `scripts/bench` " + ("--quick " if bench.quick else "") + f"at commit {m['commit']}.\n")
    L.append("| machine | |\n|---|---|")
    for k in ("cpu", "cores", "memory", "os", "kernel", "load_at_start"):
        v = m[k] if not isinstance(m[k], list) else " ".join(m[k])
        L.append(f"| {k.replace('_', ' ')} | {v} |")
    for k in ("rustc", "java", "kafka", "rdkafka", "criu"):
        L.append(f"| {k} | {m[k]} |")
    L.append("")
    L.append(
        f"Settings, the same for every producer: {PARTITIONS} partitions (replication factor = brokers, "
        f"min.insync.replicas=2 with 3), batch.size={BATCH_SIZE}, linger.ms={LINGER_MS}, 32 MiB buffer, "
        "no compression, TCP_NODELAY, idempotence on with acks=all and off with acks=1, requests in flight per connection at each client's default (5; librdkafka: 5 with idempotence, 1,000,000 without, one partition per request), records "
        "without key or headers, one random payload. "
        f"Records per throughput run: {bench.records[100]:,} of 100 B and {bench.records[1000]:,} of 1 KB on 1 broker, half as many on 3; "
        f"{bench.rounds} round(s); "
        "the brokers and the client share the machine's cores. Each cluster is settled first (produced to, "
        "unmeasured, until its rate holds) and each configuration starts with the page cache dropped (as root). "
        "Figures: median (min–max) over the rounds. "
        "CPU is the client process's user+system time (wait4), RSS its peak (ru_maxrss = VmHWM, from GNU time); "
        "the JVM's figures include its JIT and GC threads.\n"
    )
    # Throughput.
    tp_cfgs = configs(runs, "throughput")
    if tp_cfgs:
        L.append("## Producer throughput\n")
        head = "| configuration | client | records/s | MB/s | CPU s / M records | peak RSS MB |"
        L.append(head)
        L.append("|---|---|---:|---:|---:|---:|")
        for (b, size, acks) in tp_cfgs:
            for p in peers:
                rs = pick(runs, mode="throughput", peer=p.name, brokers=b, size=size, acks=acks)
                L.append(f"| {cfg_label(b, size, acks)} | {p.name} | {spread([r['records_per_sec'] for r in rs])} | "
                         f"{spread([r['mb_per_sec'] for r in rs], 1)} | {spread([r['cpu_s_per_m'] for r in rs], 2)} | "
                         f"{spread([r['rss_mb'] for r in rs])} |")
        L.append("")
        L.append("### Ratios (same run, medians)\n")
        others = [n for n in names if n != "ours"]
        if "ours" in names and others:
            h = "| configuration |" + "".join(f" throughput ours/{o} | CPU per record ours/{o} |" for o in others)
            L.append(h)
            L.append("|---|" + "---:|---:|" * len(others))
            for (b, size, acks) in tp_cfgs:
                med = {n: (stats(r["records_per_sec"] for r in pick(runs, mode="throughput", peer=n, brokers=b, size=size, acks=acks))[0],
                           stats(r["cpu_s_per_m"] for r in pick(runs, mode="throughput", peer=n, brokers=b, size=size, acks=acks))[0])
                       for n in names}
                cells = ""
                for o in others:
                    cells += f" {fmt(ratio(med['ours'][0], med[o][0]), 2)}× | {fmt(ratio(med['ours'][1], med[o][1]), 2)}× |"
                L.append(f"| {cfg_label(b, size, acks)} |{cells}")
            L.append("\nThroughput ratio > 1: ours is faster; CPU ratio < 1: ours spends less CPU per record.\n")
    txn_md = transactions_summary(bench)
    if txn_md:
        L.append("## Transactional producers\n")
        L.append(txn_md)
    security_md = security_summary(bench)
    if security_md:
        L.append("## What TLS and SASL cost\n")
        L.append(security_md)
    settings_md = settings_summary(bench)
    if settings_md:
        L.append("## Producer throughput at each client's own settings\n")
        L.append(settings_md)
    lat_cfgs = configs(runs, "latency")
    if lat_cfgs:
        L.append("## Delivery latency at a fixed offered rate\n")
        L.append("Rate: half the slowest client's median throughput in that configuration. Latency per record from "
                 "send() to its callback; Java's tool reports whole milliseconds.\n")
        L.append("| configuration | rate rec/s | client | p50 ms | p99 ms | p99.9 ms | CPU s / M records |")
        L.append("|---|---:|---|---:|---:|---:|---:|")
        for (b, size, acks) in lat_cfgs:
            for p in peers:
                rs = pick(runs, mode="latency", peer=p.name, brokers=b, size=size, acks=acks)
                rate = rs[0]["rate"] if rs else None
                L.append(f"| {cfg_label(b, size, acks)} | {fmt(rate)} | {p.name} | {spread([r['lat_p50_ms'] for r in rs], 2)} | "
                         f"{spread([r['lat_p99_ms'] for r in rs], 2)} | {spread([r['lat_p999_ms'] for r in rs], 2)} | "
                         f"{spread([r['cpu_s_per_m'] for r in rs], 2)} |")
        L.append("")
    st = [r for r in runs if r["mode"] == "startup"]
    if st:
        L.append("## Fixed cost of a client (1,000 records of 100 B, 1 broker)\n")
        L.append("| client | CPU s | peak RSS MB | wall s |")
        L.append("|---|---:|---:|---:|")
        for p in peers:
            rs = pick(runs, mode="startup", peer=p.name)
            L.append(f"| {p.name} | {spread([r['cpu_s'] for r in rs], 2)} | {spread([r['rss_mb'] for r in rs])} | "
                     f"{spread([r['wall_s'] for r in rs], 2)} |")
        L.append("")
    ov = [r for r in runs if r["mode"] == "overhead"]
    if ov:
        reg = pick(runs, mode="overhead", tag="registered")
        unreg = pick(runs, mode="overhead", tag="unregistered")
        a = stats(r["records_per_sec"] for r in reg)[0]
        b = stats(r["records_per_sec"] for r in unreg)[0]
        L.append("## Overhead of being checkpoint-ready (ours, 1 broker, 100 B, acks=1)\n")
        L.append("| producer | records/s | CPU s / M records |")
        L.append("|---|---:|---:|")
        L.append(f"| resource registered (default) | {spread([r['records_per_sec'] for r in reg])} | {spread([r['cpu_s_per_m'] for r in reg], 2)} |")
        L.append(f"| `crac.register=false` | {spread([r['records_per_sec'] for r in unreg])} | {spread([r['cpu_s_per_m'] for r in unreg], 2)} |")
        if a and b:
            L.append(f"\nRegistered / unregistered throughput: {a / b:.3f} (medians of {len(reg)} and {len(unreg)} runs, "
                     "taken in alternation).\n")
    ck = bench.checkpoints
    if ck:
        L.append("## Checkpoint and restore of the producing service (CRIU)\n")
        L.append("`tests/src/bin/kafka_service.rs` builds its state, produces 1,000 records/s (acks=all, 1 broker), is "
                 "checkpointed from outside with `crac checkpoint PID` (stop after dump) and restored with `crac restore`. "
                 "Checkpoint = the request to the process gone with its image written: *request → hooks* = the signal "
                 "to the first hook (the control thread takes the request, the engine is selected), *hooks* = every `before_checkpoint` "
                 "(the loop parks, then the producer drains: every record acknowledged, connections closed), *dump* = "
                 "fd check, CRIU started and its dump until the process is killed (*CRIU* = CRIU's own log time). "
                 "Each image is restored twice, in turns: `crac restore --eager` (every page read before the process runs) "
                 "and `--lazy` (the process runs at once; `criu lazy-pages` serves the pages it touches and streams the rest). "
                 "Restore = `crac restore` started to the process running again; first ack = `crac restore` started (or, "
                 "cold, the program started) to the first record acknowledged by the broker; all pages in = `crac restore` "
                 "started to the last page resident (eager: the restore itself). Ratios are per round (one run each), then "
                 "their median.\n")
        L.append("| state | image MB | checkpoint ms | request → hooks | hooks ms | of which drain | dump ms | CRIU ms |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        groups = []
        for mb in sorted({r["state_mb"] for r in ck}):
            rs = [r for r in ck if r["state_mb"] == mb and "error" not in r]
            fails = len([r for r in ck if r["state_mb"] == mb and "error" in r])
            groups.append((mb, rs, fails))
        for mb, rs, fails in groups:
            col = lambda k, d=0: spread([r.get(k) for r in rs], d)  # noqa: E731
            L.append(f"| {mb} MB | {col('image_mb')} | {col('checkpoint_total_ms')} | {col('before_hooks_ms', 1)} | {col('hooks_ms', 1)} | {col('drain_ms', 1)} | "
                     f"{col('dump_ms')} | {col('criu_dump_ms')} |" + (f" ({fails} failed)" if fails else ""))
        L.append("")
        L.append("| state | restore ms eager / lazy | restore → first ack ms eager | lazy | cold start → first ack ms | "
                 "all pages in ms eager / lazy | cold / eager | cold / lazy | eager / lazy |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for mb, rs, fails in groups:
            col = lambda k, d=0: spread([r.get(k) for r in rs], d)  # noqa: E731
            eager_over_lazy = [ratio(r.get("restore_first_ack_ms_eager"), r.get("restore_first_ack_ms_lazy")) for r in rs]
            L.append(f"| {mb} MB | {col('restore_ms_eager')} / {col('restore_ms_lazy')} | {col('restore_first_ack_ms_eager')} | "
                     f"{col('restore_first_ack_ms_lazy')} | {col('cold_first_ack_ms')} | {col('resident_ms_eager')} / {col('resident_ms_lazy')} | "
                     f"{col('cold_over_restore_eager', 1)}× | {col('cold_over_restore_lazy', 1)}× | {spread(eager_over_lazy, 1)}× |"
                     + (f" ({fails} failed)" if fails else ""))
        L.append("")
    consumer_md = consumer_report(bench)
    if consumer_md:
        L.append(consumer_md)
    async_md = async_report(bench)
    if async_md:
        L.append(async_md)
    grow_md = grow_report(bench)
    if grow_md:
        L.append(grow_md)
    baseline_md = baseline_report(bench)
    if baseline_md:
        L.append(baseline_md)
    images_md = images_report(bench) + broker_report(bench)
    if images_md:
        L.append(images_md)
    failed = [r for r in runs if "error" in r] + [r for r in ck if "error" in r] + [r for r in bench.images if "error" in r]
    if failed:
        L.append(f"## Failed runs ({len(failed)})\n")
        for r in failed:
            L.append(f"- {json.dumps({k: v for k, v in r.items() if k != 'error'})}: {r['error'][:300]}")
        L.append("")
    return "\n".join(L)


def summary(bench):
    """The short tables docs/benchmarks.md shows: throughput and CPU with the ratios, latency at the
    fixed rate, checkpoint/restore, overhead."""
    runs, names = bench.runs, [p.name for p in bench.peers]
    label = {"ours": "ours", "librdkafka": "librdkafka", "java": "Java"}
    others = [n for n in names if n != "ours"]
    L = []

    def med(n, key, mode, b, size, acks):
        return stats(r.get(key) for r in pick(runs, mode=mode, peer=n, brokers=b, size=size, acks=acks))

    def cell(s, d=0):
        med_, lo, hi = s
        if med_ is None:
            return "–"
        pct = max(hi - med_, med_ - lo) / med_ * 100 if med_ else 0
        return f"{fmt(med_, d)} ±{pct:.0f}%"

    cfgs = configs(runs, "throughput")
    if cfgs and "ours" in names:
        L.append("| configuration | " + " | ".join(f"{label[n]} records/s" for n in names) + " | "
                 + " | ".join(f"ours/{label[o]}" for o in others) + " |")
        L.append("|---|" + "---:|" * (len(names) + len(others)))
        for (b, size, acks) in cfgs:
            m = {n: med(n, "records_per_sec", "throughput", b, size, acks) for n in names}
            L.append(f"| {cfg_label(b, size, acks)} | " + " | ".join(cell(m[n]) for n in names) + " | "
                     + " | ".join(f"**{fmt(ratio(m['ours'][0], m[o][0]), 2)}×**" for o in others) + " |")
        L.append("")
        L.append("| configuration | " + " | ".join(f"{label[n]} CPU s/M records" for n in names) + " | "
                 + " | ".join(f"ours/{label[o]}" for o in others) + " | peak RSS MB " + " / ".join(label[n] for n in names) + " |")
        L.append("|---|" + "---:|" * (len(names) + len(others) + 1))
        for (b, size, acks) in cfgs:
            m = {n: med(n, "cpu_s_per_m", "throughput", b, size, acks) for n in names}
            rss = " / ".join(fmt(med(n, "rss_mb", "throughput", b, size, acks)[0]) for n in names)
            L.append(f"| {cfg_label(b, size, acks)} | " + " | ".join(cell(m[n], 2) for n in names) + " | "
                     + " | ".join(f"**{fmt(ratio(m['ours'][0], m[o][0]), 2)}×**" for o in others) + f" | {rss} |")
        L.append("")
    lcfgs = configs(runs, "latency")
    if lcfgs:
        L.append("| configuration | offered rate | " + " | ".join(f"{label[n]} p50 / p99 ms" for n in names) + " |")
        L.append("|---|---:|" + "---:|" * len(names))
        for (b, size, acks) in lcfgs:
            rs = pick(runs, mode="latency", brokers=b, size=size, acks=acks)
            rate = rs[0]["rate"] if rs else None
            cells = []
            for n in names:
                p50 = med(n, "lat_p50_ms", "latency", b, size, acks)[0]
                p99 = med(n, "lat_p99_ms", "latency", b, size, acks)[0]
                d = 0 if n == "java" else 2
                cells.append(f"{fmt(p50, d)} / {fmt(p99, d)}")
            L.append(f"| {cfg_label(b, size, acks)} | {fmt(rate)}/s | " + " | ".join(cells) + " |")
        L.append("")
    ck = [r for r in bench.checkpoints if "error" not in r]
    if ck:
        L.append("| state | image | checkpoint (hooks; of which drain; dump) | restore eager / lazy | restore → first ack eager | "
                 "restore → first ack lazy | all pages in (lazy) | cold start → first ack | cold / eager | cold / lazy |")
        L.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for mb in sorted({r["state_mb"] for r in ck}):
            rs = [r for r in ck if r["state_mb"] == mb]
            g = lambda k: stats(r.get(k) for r in rs)[0]  # noqa: E731
            L.append(f"| {mb} MB | {fmt(g('image_mb'))} MB | {fmt(g('checkpoint_total_ms'))} ms ({fmt(g('hooks_ms'), 1)}; "
                     f"{fmt(g('drain_ms'), 1)}; {fmt(g('dump_ms'))}) | {fmt(g('restore_ms_eager'))} / {fmt(g('restore_ms_lazy'))} ms | "
                     f"{fmt(g('restore_first_ack_ms_eager'))} ms | {fmt(g('restore_first_ack_ms_lazy'))} ms | {fmt(g('resident_ms_lazy'))} ms | "
                     f"{fmt(g('cold_first_ack_ms'))} ms | **{fmt(g('cold_over_restore_eager'), 1)}×** | **{fmt(g('cold_over_restore_lazy'), 1)}×** |")
        L.append("")
    reg = pick(runs, mode="overhead", tag="registered")
    unreg = pick(runs, mode="overhead", tag="unregistered")
    if reg and unreg:
        a, b_ = stats(r["records_per_sec"] for r in reg), stats(r["records_per_sec"] for r in unreg)
        ca, cb = stats(r["cpu_s_per_m"] for r in reg), stats(r["cpu_s_per_m"] for r in unreg)
        L.append(f"Checkpoint-ready overhead (ours, 1 broker, 100 B, acks=1, {len(reg)} runs each, alternating): "
                 f"registered {fmt(a[0])} records/s and {fmt(ca[0], 2)} CPU s/M, `crac.register=false` {fmt(b_[0])} records/s "
                 f"and {fmt(cb[0], 2)} CPU s/M: ratio {fmt(ratio(a[0], b_[0]), 2)} (throughput), "
                 f"{fmt(ratio(ca[0], cb[0]), 2)} (CPU per record).")
        L.append("")
    settings_md = settings_summary(bench)
    if settings_md:
        L.append(settings_md)
    txn_md = transactions_summary(bench)
    if txn_md:
        L.append(txn_md)
    consumer_md = consumer_summary(bench)
    if consumer_md:
        L.append(consumer_md)
    async_md = async_ratios(bench)
    if async_md:
        L.append(async_md)
    return "\n".join(L)


def transactions_summary(bench):
    """The `transactions` section's table: each peer's throughput at each transaction size, the
    ratios, CPU per million records and the mean commit time; "" without its runs."""
    runs = [r for r in bench.runs if r["mode"] == "transactions"]
    if not runs:
        return ""
    label = {"ours": "ours", "librdkafka": "librdkafka", "java": "Java"}
    names = [p.name for p in bench.peers if any(r["peer"] == p.name for r in runs)]
    others = [n for n in names if n != "ours"] if "ours" in names else []
    cfgs = []
    for r in runs:
        k = (r["brokers"], r["per_txn"], r["records"])
        if k not in cfgs:
            cfgs.append(k)
    L = [f"Every T records one transaction (begin, T sends, commit), 100 B values, acks=all, idempotence on, "
         f"batch.size={BATCH_SIZE}, linger.ms={LINGER_MS}; records/s from the first send to the end of the last "
         "commit (initTransactions before); Java: scripts/bench-lib/TxnPerf.java.\n",
         "| brokers · records per transaction (records per run) | " + " | ".join(f"{label[n]} records/s" for n in names)
         + " | " + " | ".join(f"ours/{label[o]}" for o in others) + " | CPU s/M records "
         + " / ".join(label[n] for n in names) + " | mean commit ms " + " / ".join(label[n] for n in names) + " |",
         "|---|" + "---:|" * (len(names) + len(others) + 2)]
    for (b, per_txn, records) in cfgs:
        sel = {n: pick(runs, peer=n, brokers=b, per_txn=per_txn) for n in names}

        def med(n, key):
            return stats(r.get(key) for r in sel[n])[0]

        L.append(f"| {b} · {per_txn:,} ({records:,}) | "
                 + " | ".join(spread([r.get("records_per_sec") for r in sel[n]]) for n in names) + " | "
                 + " | ".join(f"**{fmt(ratio(med('ours', 'records_per_sec'), med(o, 'records_per_sec')), 2)}×**"
                              for o in others)
                 + " | " + " / ".join(fmt(med(n, "cpu_s_per_m"), 2) for n in names)
                 + " | " + " / ".join(fmt(med(n, "commit_avg_ms"), 1) for n in names) + " |")
    L.append("")
    return "\n".join(L)


def security_summary(bench):
    """The `security` section's table: each peer's throughput over PLAINTEXT and SASL_SSL, and
    the share of it SASL_SSL keeps; "" without its runs."""
    runs, names = bench.runs, [p.name for p in bench.peers]
    label = {"ours": "ours", "librdkafka": "librdkafka", "java": "Java"}
    L = []
    for mode, what in [("security-produce", "producer, acks=all"), ("security-consume", "consumer")]:
        if not any(r["mode"] == mode for r in runs):
            continue
        L.append(f"{what}, 1 broker, 1000 B values; SASL_SSL = SCRAM-SHA-512 over TLS 1.3:\n")
        L.append("| client | PLAINTEXT records/s | SASL_SSL records/s | SASL_SSL / PLAINTEXT | CPU s/M records PLAINTEXT / SASL_SSL |")
        L.append("|---|---:|---:|---:|---:|")
        for n in names:
            plain = [r.get("records_per_sec") for r in pick(runs, mode=mode, peer=n, tag="PLAINTEXT")]
            sec = [r.get("records_per_sec") for r in pick(runs, mode=mode, peer=n, tag="SASL_SSL")]
            cpu_p = stats(r.get("cpu_s_per_m") for r in pick(runs, mode=mode, peer=n, tag="PLAINTEXT"))[0]
            cpu_s = stats(r.get("cpu_s_per_m") for r in pick(runs, mode=mode, peer=n, tag="SASL_SSL"))[0]
            keeps = ratio(stats(sec)[0], stats(plain)[0])
            L.append(f"| {label[n]} | {spread(plain)} | {spread(sec)} | **{fmt(keeps, 2)}** | "
                     f"{fmt(cpu_p, 2)} / {fmt(cpu_s, 2)} |")
        L.append("")
    return "\n".join(L)


def settings_summary(bench):
    """The `settings` section's tables (each client at its defaults; each tuned), "" without
    its runs."""
    runs, names = bench.runs, [p.name for p in bench.peers]
    if "ours" not in names:
        return ""
    label = {"ours": "ours", "librdkafka": "librdkafka", "java": "Java"}
    others = [n for n in names if n != "ours"]
    L = []
    for settings, text in SETTINGS_TEXT.items():
        mode = f"throughput-{settings}"
        cfgs = configs(runs, mode)
        if not cfgs:
            continue

        def med(n, key, b, size, acks):
            return stats(r.get(key) for r in pick(runs, mode=mode, peer=n, brokers=b, size=size, acks=acks))

        def cell(st, d=0):
            m, lo, hi = st
            if m is None:
                return "–"
            return f"{fmt(m, d)} ±{max(hi - m, m - lo) / m * 100 if m else 0:.0f}%"

        L.append(f"At {text}:\n")
        L.append("| configuration | " + " | ".join(f"{label[n]} records/s" for n in names) + " | "
                 + " | ".join(f"ours/{label[o]}" for o in others) + " | CPU s/M records "
                 + " / ".join(label[n] for n in names) + " |")
        L.append("|---|" + "---:|" * (len(names) + len(others) + 1))
        for (b, size, acks) in cfgs:
            m = {n: med(n, "records_per_sec", b, size, acks) for n in names}
            cpu = " / ".join(fmt(med(n, "cpu_s_per_m", b, size, acks)[0], 2) for n in names)
            L.append(f"| {cfg_label(b, size, acks)} | " + " | ".join(cell(m[n]) for n in names) + " | "
                     + " | ".join(f"**{fmt(ratio(m['ours'][0], m[o][0]), 2)}×**" for o in others) + f" | {cpu} |")
        L.append("")
    return "\n".join(L)


# --- the async section's report ------------------------------------------------------------------


def async_settings(bench):
    """What the async section's clients were given, from the same props as its runs."""
    return (f"ours (blocking and async) -X {' '.join(f'{k}={v}' for k, v in Ours('').props('all').items())}; "
            f"rust-rdkafka (blocking and async) -X {' '.join(f'{k}={v}' for k, v in Rdkafka('').props('all').items())}")


def async_configs(runs):
    """(what, size) of the async section's runs, in run order."""
    seen = []
    for r in runs:
        k = (r["mode"], r["size"])
        if r["mode"] in ("async-produce", "async-consume") and k not in seen:
            seen.append(k)
    return seen


def async_label(mode, size):
    return f"{'producer' if mode == 'async-produce' else 'consumer'} · {size} B"


def async_ratios(bench):
    """The async section's ratios of medians: ours async against rust-rdkafka's async API and
    against our blocking API, and what async costs rust-rdkafka; "" without its runs."""
    runs = bench.runs
    cfgs = async_configs(runs)
    if not cfgs:
        return ""

    def med(peer, key, mode, size):
        return stats(r.get(key) for r in pick(runs, mode=mode, peer=peer, size=size))[0]

    def mark(ok):
        return "–" if ok is None else ("yes" if ok else "**no**")

    L = ["| configuration | records/s ours async / rust-rdkafka async | CPU per record ours async / rust-rdkafka async "
         "| records/s ours async / ours blocking | CPU per record ours async / ours blocking "
         "| records/s rust-rdkafka async / its blocking | ahead of rust-rdkafka async | within 10 % of ours blocking |",
         "|---|---:|---:|---:|---:|---:|---|---|"]
    for (mode, size) in cfgs:
        tp = {p: med(p, "records_per_sec", mode, size) for p in ASYNC_CLIENTS}
        cpu = {p: med(p, "cpu_s_per_m", mode, size) for p in ASYNC_CLIENTS}
        vs_rd = (ratio(tp["ours-async"], tp["librdkafka-async"]), ratio(cpu["ours-async"], cpu["librdkafka-async"]))
        vs_us = (ratio(tp["ours-async"], tp["ours"]), ratio(cpu["ours-async"], cpu["ours"]))
        ahead = None if None in vs_rd else (vs_rd[0] > 1 and vs_rd[1] < 1)
        within = None if None in vs_us else (vs_us[0] >= 0.9 and vs_us[1] <= 1.1)
        L.append(f"| {async_label(mode, size)} | **{fmt(vs_rd[0], 2)}×** | **{fmt(vs_rd[1], 2)}×** | {fmt(vs_us[0], 2)}× | "
                 f"{fmt(vs_us[1], 2)}× | {fmt(ratio(tp['librdkafka-async'], tp['librdkafka']), 2)}× | {mark(ahead)} | "
                 f"{mark(within)} |")
    L.append("\nThe goal (issue 27): ours async ahead of rust-rdkafka's async API (records/s ratio > 1, CPU ratio < 1) "
             "and within 10 % of our blocking API (records/s ratio ≥ 0.90, CPU ratio ≤ 1.10); medians of the rounds.\n")
    return "\n".join(L)


def grow_report(bench):
    """The grow section of results.md ("" without its runs)."""
    runs = [r for r in bench.runs if r["mode"] in ("grow-throughput", "grow-latency")]
    if not runs:
        return ""
    cfgs = configs(runs)
    rounds = 1 + max(r["round"] for r in runs)
    base = " ".join(f"{k}={v}" for k, v in Ours("").props("all").items() if k != "acks")
    L = ["## Growing batches against batch.grow.max.bytes=0 (ours)\n"]
    L.append(f"Ours at the producer section's settings ({base}, acks as given), once as it is (batches that cannot "
             "leave grow up to batch.grow.max.bytes, 1 MiB) and once with batch.grow.max.bytes=0, in turns within "
             f"each round; {rounds} round(s), median (min–max). Throughput runs as the producer section's; latency at "
             "the offered rates of the producer section's table in docs/benchmarks.md (GROW_RATES), the first second "
             "left out. Peak RSS is the whole client process's.\n")
    L.append("| configuration | records/s growing | records/s not growing | peak RSS MB growing / not | offered rate "
             "| p50 ms growing / not | p99 ms growing / not |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    for (b, size, acks) in cfgs:
        def col(mode, tag, key, d=0):
            return spread([r.get(key) for r in pick(runs, mode=mode, tag=tag, brokers=b, size=size, acks=acks)], d)
        (g, _), (n, _) = GROW_VARIANTS
        rate = GROW_RATES.get((b, size, acks))
        L.append(f"| {cfg_label(b, size, acks)} | {col('grow-throughput', g, 'records_per_sec')} "
                 f"| {col('grow-throughput', n, 'records_per_sec')} "
                 f"| {col('grow-throughput', g, 'rss_mb')} / {col('grow-throughput', n, 'rss_mb')} "
                 f"| {fmt(rate)}/s | {col('grow-latency', g, 'lat_p50_ms', 2)} / {col('grow-latency', n, 'lat_p50_ms', 2)} "
                 f"| {col('grow-latency', g, 'lat_p99_ms', 2)} / {col('grow-latency', n, 'lat_p99_ms', 2)} |")
    L.append("")
    return "\n".join(L)


def baseline_report(bench):
    """The baseline section of results.md ("" without its runs)."""
    runs = [r for r in bench.runs if r["mode"] in ("baseline-latency", "baseline-throughput", "floor")]
    if not runs:
        return ""
    old = next(r["peer"] for r in runs if r["peer"] != "ours")
    cfgs = configs(runs)
    rounds = 1 + max(r["round"] for r in runs)
    L = [f"## Ours against {old}\n"]
    L.append(f"Ours and {old} (the commit whose runs made the producer tables' offered rates, GROW_RATES) at the "
             f"producer section's settings, in turns within each round; {rounds} round(s), median (min–max). "
             "Latency at the offered rate, the first second left out. Fixed cost under load: our peak RSS in a "
             f"throughput run of the same configuration with buffer.memory={FLOOR_BUFFER_BYTES}, less that buffer "
             "(threads, connections, metadata, the kept request buffer, the allocator's arenas); the bound is "
             f"buffer.memory ({BUFFER_BYTES / 1e6:.1f} MB) plus that fixed cost.\n")
    L.append(f"| configuration | offered rate | p50 ms ours / {old} | p99 ms ours / {old} | records/s ours / {old} "
             f"| peak RSS MB ours / {old} | fixed cost MB | bound MB |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (b, size, acks) in cfgs:
        def col(mode, peer, key, d=0):
            return spread([r.get(key) for r in pick(runs, mode=mode, peer=peer, brokers=b, size=size, acks=acks)], d)

        def both(mode, key, d=0):
            return f"{col(mode, 'ours', key, d)} / {col(mode, old, key, d)}"
        floor = [r["rss_mb"] - FLOOR_BUFFER_BYTES / 1e6 for r in pick(runs, mode="floor", brokers=b, size=size,
                                                                       acks=acks) if "error" not in r]
        fixed = stats(floor)[0]
        bound = fmt(BUFFER_BYTES / 1e6 + fixed, 1) if fixed else "–"
        L.append(f"| {cfg_label(b, size, acks)} | {fmt(GROW_RATES.get((b, size, acks)))}/s "
                 f"| {both('baseline-latency', 'lat_p50_ms', 2)} | {both('baseline-latency', 'lat_p99_ms', 2)} "
                 f"| {both('baseline-throughput', 'records_per_sec')} | {both('baseline-throughput', 'rss_mb', 1)} "
                 f"| {spread(floor, 1)} | {bound} |")
    L.append("")
    return "\n".join(L)


def async_report(bench):
    """The async section of results.md ("" without its runs)."""
    runs = bench.runs
    cfgs = async_configs(runs)
    if not cfgs:
        return ""
    rounds = 1 + max(r["round"] for r in runs if r["mode"] in ("async-produce", "async-consume"))
    counts = {(m, s): max(r["records"] for r in runs if r["mode"] == m and r["size"] == s) for (m, s) in cfgs}
    L = ["## Async APIs against the blocking ones (1 broker)\n"]
    L.append(
        "Each client through its async API and through its blocking one, in turns within each round, on 1 broker "
        f"({PARTITIONS} partitions). Producers at the producer section's settings with acks=all: {async_settings(bench)}. "
        "The async producers run on a tokio current-thread runtime and send in order (each record once the client has "
        f"taken the one before), their delivery reports awaited oldest first in a window of at most {ASYNC_WINDOW:,} "
        "(a full window awaits the oldest); latency is from the send to the report seen resolved by the task (blocking: "
        "to the delivery callback); records/s from the first send to the last report, `flush_async()` awaited meanwhile as the blocking runs flush (blocking: to the end of flush). "
        "Consumers read a topic prefilled by Java's producer (acks=1, no compression) in a fresh group, "
        "auto.offset.reset=earliest, enable.auto.commit=false, each client's defaults otherwise; the async ones await "
        "record by record on a tokio current-thread runtime; records/s from the partitions assigned to the last record. "
        "CPU and peak RSS are the whole client process's. "
        + "; ".join(f"{async_label(m, s)}: {fmt(n)} records per run" for (m, s), n in counts.items())
        + f"; {rounds} round(s), median (min–max).\n")
    L.append("| client | producer API | consumer API |")
    L.append("|---|---|---|")
    for label, produce, consume in ASYNC_CLIENTS.values():
        L.append(f"| {label} | {produce} | {consume} |")
    L.append("")
    for what, last_head in (("async-produce", "p50 ms | p99 ms"), ("async-consume", "join ms")):
        if not any(m == what for (m, _) in cfgs):
            continue
        L.append(f"| configuration | client | records/s | MB/s | CPU s / M records | peak RSS MB | {last_head} |")
        L.append("|---|---|---:|---:|---:|---:|" + "---:|" * (2 if what == "async-produce" else 1))
        for (mode, size) in cfgs:
            if mode != what:
                continue
            for peer, (label, _, _) in ASYNC_CLIENTS.items():
                if not any(r["mode"] == mode and r["peer"] == peer for r in runs):
                    continue  # a client left out of the run
                rs = pick(runs, mode=mode, peer=peer, size=size)
                if mode == "async-produce":
                    last = f"{spread([r['lat_p50_ms'] for r in rs], 2)} | {spread([r['lat_p99_ms'] for r in rs], 2)}"
                else:
                    last = spread([r["join_ms"] for r in rs])
                L.append(f"| {async_label(mode, size)} | {label} | {spread([r['records_per_sec'] for r in rs])} | "
                         f"{spread([r['mb_per_sec'] for r in rs], 1)} | {spread([r['cpu_s_per_m'] for r in rs], 2)} | "
                         f"{spread([r['rss_mb'] for r in rs])} | {last} |")
        L.append("")
    L.append("### Async ratios (same run, medians)\n")
    L.append(async_ratios(bench))
    return "\n".join(L)


# --- the consumer section's report ---------------------------------------------------------------


def consumer_configs(runs, mode="consume"):
    seen = []
    for r in runs:
        k = (r["brokers"], r["size"], r.get("codec"))
        if r["mode"] == mode and k not in seen:
            seen.append(k)
    return seen


def consumer_label(b, size, codec):
    return f"{b} broker{'s, RF 3' if b > 1 else ''} · {size} B · {codec}"


def consumer_report(bench):
    """The consumer section of results.md ("" without consumer runs)."""
    runs, peers = bench.runs, bench.peers
    names = [p.name for p in peers]
    cfgs = consumer_configs(runs)
    if not cfgs:
        return ""
    rounds = 1 + max((r["round"] for r in runs if r["mode"] == "consume"), default=0)
    counts = {s: max((r["records"] for r in runs if r["mode"] == "consume" and r["size"] == s), default=0) for s in SIZES}
    L = ["## Consumer throughput (reading a prefilled topic)\n"]
    L.append(
        f"Each topic ({PARTITIONS} partitions, replication factor = brokers) is prefilled once by Java's "
        f"ProducerPerformance (acks=1, batch.size={BATCH_SIZE}, linger.ms={LINGER_MS}, compression.type as named, "
        "new random capital letters in every record), then every consumer reads all of it: it subscribes in a fresh "
        "group, auto.offset.reset=earliest, enable.auto.commit=false (nothing committed), each client's defaults "
        "otherwise (Java's tool sets check.crcs=false and a 2 MiB receive buffer; librdkafka does not check CRCs by "
        "default; ours always checks CRC32C). Ours is `bench_consumer` (`poll()` of up to 500 records), librdkafka "
        "`rdkafka-bench consume` (a `BaseConsumer`, one message per `poll()`), Java `ConsumerPerformance`. "
        "records/s is Java's fetch.nMsg.sec and measured alike for the others: from the partitions assigned (the "
        "rebalance callback) to the last record; *join* is the client created to the partitions assigned. "
        "CPU and peak RSS are the whole client process's, start-up and join included. "
        f"Records per run: {fmt(counts.get(100))} of 100 B, {fmt(counts.get(1000))} of 1 KB; {rounds} round(s), "
        "clients taking turns; median (min–max).\n")
    L.append("| configuration | client | records/s | MB/s | CPU s / M records | peak RSS MB | join ms |")
    L.append("|---|---|---:|---:|---:|---:|---:|")
    for (b, size, codec) in cfgs:
        for p in peers:
            rs = pick(runs, mode="consume", peer=p.name, brokers=b, size=size, codec=codec)
            L.append(f"| {consumer_label(b, size, codec)} | {p.name} | {spread([r['records_per_sec'] for r in rs])} | "
                     f"{spread([r['mb_per_sec'] for r in rs], 1)} | {spread([r['cpu_s_per_m'] for r in rs], 2)} | "
                     f"{spread([r['rss_mb'] for r in rs])} | {spread([r['join_ms'] for r in rs])} |")
    L.append("")
    others = [n for n in names if n != "ours"]
    if "ours" in names and others:
        L.append("### Consumer ratios (same run, medians)\n")
        L.append("| configuration |" + "".join(f" throughput ours/{o} | CPU per record ours/{o} |" for o in others))
        L.append("|---|" + "---:|---:|" * len(others))
        for (b, size, codec) in cfgs:
            med = {n: [stats(r[k] for r in pick(runs, mode="consume", peer=n, brokers=b, size=size, codec=codec))[0]
                       for k in ("records_per_sec", "cpu_s_per_m")] for n in names}
            cells = "".join(f" {fmt(ratio(med['ours'][0], med[o][0]), 2)}× | {fmt(ratio(med['ours'][1], med[o][1]), 2)}× |"
                            for o in others)
            L.append(f"| {consumer_label(b, size, codec)} |{cells}")
        L.append("\nThroughput ratio > 1: ours is faster; CPU ratio < 1: ours spends less CPU per record.\n")
    if any(r["mode"] == "consume-startup" for r in runs):
        L.append("### Fixed cost of a consumer (1,000 records: start, join, first fetches, close)\n")
        L.append("| client | CPU s | peak RSS MB | wall s | join ms |")
        L.append("|---|---:|---:|---:|---:|")
        for p in peers:
            rs = pick(runs, mode="consume-startup", peer=p.name)
            L.append(f"| {p.name} | {spread([r['cpu_s'] for r in rs], 2)} | {spread([r['rss_mb'] for r in rs])} | "
                     f"{spread([r['wall_s'] for r in rs], 2)} | {spread([r['join_ms'] for r in rs])} |")
        L.append("")
    pre = [r for r in runs if r["mode"] == "prefill"]
    if pre:
        L.append("### The prefilled topics\n")
        L.append("| configuration | records | values MB | log MB per replica | Java producer records/s |")
        L.append("|---|---:|---:|---:|---:|")
        for r in pre:
            L.append(f"| {consumer_label(r['brokers'], r['size'], r['codec'])} | {fmt(r['records'])} | "
                     f"{fmt(r['records'] * r['size'] / 1e6)} | {fmt(r.get('stored_mb'))} | "
                     f"{fmt(r.get('records_per_sec')) if 'error' not in r else 'failed'} |")
        L.append("")
    return "\n".join(L)


def consumer_summary(bench):
    """The consumer tables docs/benchmarks.md shows ("" without consumer runs)."""
    runs, names = bench.runs, [p.name for p in bench.peers]
    cfgs = consumer_configs(runs)
    if not cfgs or "ours" not in names:
        return ""
    label = {"ours": "ours", "librdkafka": "librdkafka", "java": "Java"}
    others = [n for n in names if n != "ours"]

    def med(n, key, b, size, codec, mode="consume"):
        return stats(r.get(key) for r in pick(runs, mode=mode, peer=n, brokers=b, size=size, codec=codec))

    def cell(s, d=0):
        m, lo, hi = s
        if m is None:
            return "–"
        return f"{fmt(m, d)} ±{max(hi - m, m - lo) / m * 100 if m else 0:.0f}%"

    L = ["| configuration | " + " | ".join(f"{label[n]} records/s" for n in names) + " | "
         + " | ".join(f"ours/{label[o]}" for o in others) + " |",
         "|---|" + "---:|" * (len(names) + len(others))]
    for (b, size, codec) in cfgs:
        m = {n: med(n, "records_per_sec", b, size, codec) for n in names}
        L.append(f"| {consumer_label(b, size, codec)} | " + " | ".join(cell(m[n]) for n in names) + " | "
                 + " | ".join(f"**{fmt(ratio(m['ours'][0], m[o][0]), 2)}×**" for o in others) + " |")
    L.append("")
    L.append("| configuration | " + " | ".join(f"{label[n]} CPU s/M records" for n in names) + " | "
             + " | ".join(f"ours/{label[o]}" for o in others) + " | peak RSS MB " + " / ".join(label[n] for n in names) + " |")
    L.append("|---|" + "---:|" * (len(names) + len(others) + 1))
    for (b, size, codec) in cfgs:
        m = {n: med(n, "cpu_s_per_m", b, size, codec) for n in names}
        rss = " / ".join(fmt(med(n, "rss_mb", b, size, codec)[0]) for n in names)
        L.append(f"| {consumer_label(b, size, codec)} | " + " | ".join(cell(m[n], 2) for n in names) + " | "
                 + " | ".join(f"**{fmt(ratio(m['ours'][0], m[o][0]), 2)}×**" for o in others) + f" | {rss} |")
    L.append("")
    st = [r for r in runs if r["mode"] == "consume-startup" and "error" not in r]
    if st:
        parts = []
        for n in names:
            rs = [r for r in st if r["peer"] == n]
            if rs:
                parts.append(f"{label[n]} {fmt(stats(r['cpu_s'] for r in rs)[0], 2)} s of CPU and "
                             f"{fmt(stats(r['rss_mb'] for r in rs)[0])} MB of peak RSS")
        L.append("A consumer's fixed cost (1,000 records read): " + ", ".join(parts) + ".")
        L.append("")
    return "\n".join(L)


def consumer_chart(bench, path):
    """chart-consumer.png: records/s and CPU per million records of every consumer."""
    cfgs = consumer_configs(bench.runs)
    if not cfgs:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no consumer chart")
        return False
    peers = bench.peers
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / len(peers)
    colors = {"ours": "#d62728", "librdkafka": "#1f77b4", "java": "#ff7f0e"}
    labels = {"ours": "crac-rs kafka-client", "librdkafka": "librdkafka (rdkafka crate)", "java": "Java (ConsumerPerformance)"}
    for ax, key, title in ((axes[0], "records_per_sec", "records/s read, log scale (higher is better)"),
                           (axes[1], "cpu_s_per_m", "client CPU s per million records, log scale (lower is better)")):
        for j, p in enumerate(peers):
            med, lo, hi = [], [], []
            for (b, size, codec) in cfgs:
                s = stats(r[key] for r in pick(bench.runs, mode="consume", peer=p.name, brokers=b, size=size, codec=codec))
                med.append(s[0] or 0)
                lo.append((s[0] or 0) - (s[1] or 0))
                hi.append((s[2] or 0) - (s[0] or 0))
            xs = [i + (j - (len(peers) - 1) / 2) * width for i in range(len(cfgs))]
            ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=labels.get(p.name, p.name), color=colors.get(p.name))
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels([f"{b}b {'100B' if s == 100 else '1KB'}\n{c}" for (b, s, c) in cfgs], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    m = bench.meta
    rounds = 1 + max((r["round"] for r in bench.runs if r["mode"] == "consume"), default=0)
    fig.suptitle(f"Kafka consumers reading a prefilled topic, {m['date']}, {m['cores']} cores ({m['mode']} mode); "
                 f"median of {rounds} round(s), bars = min–max", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def chart(bench, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no chart")
        return False
    runs = bench.runs
    cfgs = configs(runs, "throughput")
    if not cfgs:
        return False
    peers = bench.peers
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / len(peers)
    colors = {"ours": "#d62728", "librdkafka": "#1f77b4", "java": "#ff7f0e"}
    for ax, key, title in ((axes[0], "records_per_sec", "throughput, records/s, log scale (higher is better)"),
                           (axes[1], "cpu_s_per_m", "client CPU s per million records, log scale (lower is better)")):
        for j, p in enumerate(peers):
            med, lo, hi = [], [], []
            for (b, size, acks) in cfgs:
                s = stats(r[key] for r in pick(runs, mode="throughput", peer=p.name, brokers=b, size=size, acks=acks))
                med.append(s[0] or 0)
                lo.append((s[0] or 0) - (s[1] or 0))
                hi.append((s[2] or 0) - (s[0] or 0))
            xs = [i + (j - (len(peers) - 1) / 2) * width for i in range(len(cfgs))]
            ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=p.label, color=colors.get(p.name))
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels([f"{b}b {'100B' if s == 100 else '1KB'}\nacks={a}" for (b, s, a) in cfgs], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    m = bench.meta
    fig.suptitle(f"Kafka producers, {m['date']}, {m['cores']} cores ({m['mode']} mode); median of {bench.rounds} round(s), bars = min–max",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


class Loaded:
    """A finished run read back from its results.json (`--report-from`)."""

    def __init__(self, path):
        d = json.loads(Path(path).read_text())
        self.meta, self.runs, self.checkpoints = d["meta"], d["runs"], d["checkpoints"]
        self.images = d.get("images", [])
        self.out = Path(path).parent
        known = {"ours": Ours(""), "librdkafka": Rdkafka(""), "java": Java()}
        seen = []
        for r in self.runs:
            # The async and baseline sections' clients have reports of their own.
            if r["peer"] not in seen and r["mode"] != "prefill" and not r["mode"].startswith(("async-", "baseline-")) \
                    and r["mode"] != "floor":
                seen.append(r["peer"])
        self.peers = [known[n] for n in seen]
        self.quick = self.meta.get("mode") == "quick"
        self.rounds = 1 + max((r["round"] for r in self.runs if r["mode"] == "throughput"), default=0)
        self.records = {s: max((r["records"] for r in self.runs if r["mode"] == "throughput" and r["size"] == s), default=0)
                        for s in SIZES}


def write_reports(bench):
    md = report(bench)
    (bench.out / "results.md").write_text(md + "\n")
    (bench.out / "summary.md").write_text(summary(bench) + "\n")
    chart(bench, bench.out / "chart.png")
    consumer_chart(bench, bench.out / "chart-consumer.png")
    return md


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--report-from":
        print(write_reports(Loaded(sys.argv[2])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True, help="scratch directory (clusters, images)")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--peers", default="ours,librdkafka,java")
    ap.add_argument("--brokers", default=None, help="clusters for the producer and consumer sections, e.g. 1,3")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--records-100", type=int, default=0)
    ap.add_argument("--records-1k", type=int, default=0)
    ap.add_argument("--consumer-records-100", type=int, default=0, help="records per consumer run, 100 B values")
    ap.add_argument("--consumer-records-1k", type=int, default=0, help="records per consumer run, 1 KB values")
    ap.add_argument("--codecs", default=",".join(CODECS), help="the consumer section's codecs, e.g. none,lz4,zstd")
    ap.add_argument("--state-mb", default="", help="state sizes of the checkpoint section, e.g. 10,200,1024")
    ap.add_argument("--max-load", type=float, default=0, help="before each configuration wait (up to 3 min) until the 1-min load is below this")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ours-consumer", default="", help="bench_consumer (default: beside --ours)")
    ap.add_argument("--rdkafka", default="", help="rdkafka-bench (none: librdkafka sits out)")
    ap.add_argument("--baseline", default="", help="bench_producer built at --baseline-rev (the baseline section)")
    ap.add_argument("--baseline-rev", default=BASELINE_REV, help="the commit --baseline was built at")
    ap.add_argument("--service", required=True)
    ap.add_argument("--crac", required=True)
    ap.add_argument("--criu", default="")
    ap.add_argument("--criu-plain", default="", help="a criu without capabilities all can run (the broker section)")
    ap.add_argument("--java-txn-classpath", default="",
                    help="classpath of Kafka's jars and the compiled TxnPerf (the transactions section's Java peer)")
    args = ap.parse_args()
    args.ours_consumer = args.ours_consumer or str(Path(args.ours).with_name("bench_consumer"))
    args.brokers = [int(b) for b in (args.brokers or ("1" if args.quick else "1,3")).split(",")]
    bench = Bench(args)
    bench.meta = machine_facts(args)
    started = time.monotonic()
    unknown = [s for s in args.sections.split(",") if s not in SECTIONS]
    if unknown:
        sys.exit(f"bench: unknown section(s) {unknown}; known: {list(SECTIONS)}")
    try:
        for s in args.sections.split(","):
            log(f"=== {s}")
            SECTIONS[s](bench)
    finally:
        bench.stop_clusters()
        bench.meta["minutes"] = round((time.monotonic() - started) / 60, 1)
        bench.meta["load_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
        (bench.out / "results.json").write_text(json.dumps(
            {"meta": bench.meta, "runs": bench.runs, "checkpoints": bench.checkpoints, "images": bench.images,
             "brokers": bench.brokers}, indent=1))
        md = report(bench)
        (bench.out / "results.md").write_text(md + "\n")
        (bench.out / "summary.md").write_text(summary(bench) + "\n")
        if chart(bench, bench.out / "chart.png"):
            log(f"chart: {bench.out / 'chart.png'}")
        if consumer_chart(bench, bench.out / "chart-consumer.png"):
            log(f"consumer chart: {bench.out / 'chart-consumer.png'}")
        print(md)
        log(f"done in {bench.meta['minutes']} min; results in {bench.out}")
    failed = [r for r in bench.runs if "error" in r] + [r for r in bench.checkpoints if "error" in r] \
        + [r for r in bench.images if "error" in r] + [r for r in bench.brokers if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
