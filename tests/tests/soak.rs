//! Soak: a producing and consuming service (`src/bin/kafka_service.rs` with `SVC_CONSUME`: our
//! producer on the plaintext listener, our consumer over TLS) is checkpointed
//! `SOAK_CYCLES` times (default 200) in leave-running mode while it works, with the broker
//! restarted every 50 cycles; then one of those images is restored `SOAK_RESTORES` times
//! (default 50; lazily, each copy in its own PID namespace, 5 at a time), each copy producing
//! and reading before it exits. What one cycle leaks only shows after many, so every 20
//! cycles the original's descriptors, threads and RSS are taken (after the first 20: no new
//! descriptor or thread, RSS within 5 %), and nothing of ours may be left: no file in the temp
//! dir, `/run/crac` or the image directory, no zombie, no `criu` process. At the end the Java
//! console consumer reads everything the original and the copies produced: each record once.
//!
//! Its per-20-cycle table and the time figures go to stderr and to
//! `$CARGO_TARGET_TMPDIR/soak-report.txt` (`scripts/test` prints it).
//!
//! Needs root, `CRAC_CRIU` and Kafka's jars (scripts/test sets all three up). The long run:
//! `SOAK_CYCLES=2000 SOAK_RESTORES=200 scripts/test -p crac-tests --test soak`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crac_tests::kafka::Cluster;
use crac_tests::process::{Proc, TempDir, crac_command, criu, must, proc_status};
use crac_tests::stream::check_stream;

const SERVICE: &str = env!("CARGO_BIN_EXE_kafka_service");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");
const T: Duration = Duration::from_secs(180);
const TOPIC: &str = "soak";
const PARTITIONS: i32 = 3;
/// Records each restored copy sends before it exits.
const COPY_RECORDS: u64 = 100;

fn env_count(key: &str, default: usize) -> usize {
    std::env::var(key).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v}: not a count"))
    })
}

/// What the original looks like from outside at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    fds: usize,
    threads: usize,
    rss_kb: u64,
}

/// The original's descriptors and threads at their fewest over half a second (a connection
/// being replaced is not a leak), and its RSS.
fn sample(pid: i32) -> Sample {
    let mut s = Sample {
        fds: usize::MAX,
        threads: usize::MAX,
        rss_kb: 0,
    };
    for _ in 0..5 {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"));
        let threads: usize = proc_status(pid, "Threads")
            .and_then(|t| t.parse().ok())
            .expect("Threads");
        s.fds = s.fds.min(fds);
        s.threads = s.threads.min(threads);
        s.rss_kb = proc_status(pid, "VmRSS")
            .and_then(|v| v.trim_end_matches(" kB").trim().parse().ok())
            .expect("VmRSS");
        std::thread::sleep(Duration::from_millis(100));
    }
    s
}

/// Entries of `dir` (names), empty if it does not exist.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Files (not directories) anywhere below `dir`.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_below(&p)),
            _ => out.push(p),
        }
    }
    out
}

/// (pid, parent, state, command) of every process.
fn processes() -> Vec<(i32, i32, char, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        out.push((pid, ppid, state, comm));
    }
    out
}

/// What must not be left between cycles: our files in the temp dir (beside what was there
/// before), files in `/run/crac`, hidden (temporary) files in the image directory, zombies
/// of this test or of the service, `criu` processes.
struct Leftovers {
    tmp_before: BTreeSet<String>,
    /// What other tests' failed restores kept in `/run/crac` (criu's log) before this one.
    run_before: BTreeSet<PathBuf>,
    service: i32,
}

impl Leftovers {
    fn new(service: i32) -> Self {
        Self {
            tmp_before: names(&std::env::temp_dir()),
            run_before: files_below(Path::new("/run/crac")).into_iter().collect(),
            service,
        }
    }

    fn check(&self, when: &str, image: Option<&Path>) {
        // What crac creates there: a lazy restore's work directory and a restore's pidfile
        // (other crates' unit tests use other `crac-` names, and may run meanwhile).
        let ours = |n: &String| {
            n.starts_with("crac-lazy-") || n.starts_with("crac-restore-") || n.starts_with("criu")
        };
        let tmp: Vec<String> = names(&std::env::temp_dir())
            .difference(&self.tmp_before)
            .filter(|n| ours(n))
            .cloned()
            .collect();
        assert!(tmp.is_empty(), "{when}: left in the temp dir: {tmp:?}");
        // CRIU's kernel probe, cached once per boot (`criu-kdat.*`), is meant to stay.
        let run: Vec<PathBuf> = files_below(Path::new("/run/crac"))
            .into_iter()
            .filter(|f| {
                !f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("criu-kdat."))
                    && !self.run_before.contains(f)
            })
            .collect();
        assert!(run.is_empty(), "{when}: left in /run/crac: {run:?}");
        if let Some(img) = image {
            let hidden: Vec<String> = names(img)
                .into_iter()
                // The seal's lock stays: a restore waiting for the seal holds it shared.
                .filter(|n| n.starts_with('.') && n != ".crac-seal.lock")
                .collect();
            assert!(hidden.is_empty(), "{when}: left in the image: {hidden:?}");
        }
        let me = std::process::id() as i32;
        for (pid, ppid, state, comm) in processes() {
            assert!(
                !(state == 'Z' && (ppid == me || ppid == self.service)),
                "{when}: zombie {pid} ({comm}), child of {ppid}"
            );
            assert!(
                comm != "criu",
                "{when}: criu still runs as {pid} (parent {ppid})"
            );
        }
    }
}

/// p50, p99 and max of `ms`, as `p50/p99/max ms`.
fn spread(ms: &mut [u64]) -> String {
    ms.sort_unstable();
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!("{}/{}/{} ms", at(0.5), at(0.99), ms[ms.len() - 1])
}

fn start_service(k: &Cluster, dir: &TempDir) -> Proc {
    let tls: Vec<String> = k
        .access("SSL", None)
        .properties()
        .into_iter()
        .map(|(key, v)| {
            assert!(
                !v.contains(','),
                "{key}={v}: SVC_CONSUME_PROPS splits at commas"
            );
            format!("{key}={v}")
        })
        .collect();
    let mut c = Command::new(SERVICE);
    c.env("CRAC_CRIU", criu())
        .env("CRAC_CHECKPOINT_TO", dir.join("unused"))
        .env_remove("CRAC_CHECKPOINT_MODE")
        .env_remove("CRAC_ENGINE")
        .env("SVC_BOOTSTRAP", k.bootstrap())
        .env("SVC_TOPIC", TOPIC)
        .env("SVC_STATE_MB", "16")
        .env("SVC_RATE", "200")
        .env("SVC_QUIESCE", "1")
        .env("SVC_CONSUME", PARTITIONS.to_string())
        .env("SVC_CONSUME_PROPS", tls.join(","))
        .env("SVC_FINAL_FILE", dir.join("final"));
    Proc::spawn("soak service", &mut c)
}

/// Waits until the service shows, from now on, both more records acknowledged and more
/// read, without an error; returns the acknowledged count.
fn wait_working(p: &mut Proc) -> u64 {
    p.skip("progress ");
    let counts = |p: &Proc, line: &str| -> (u64, u64) {
        for key in ["errors", "consume_errors"] {
            assert_eq!(must(line, key), "0", "{line}\n{}", p.transcript());
        }
        (
            must(line, "acked").parse().unwrap(),
            must(line, "consumed").parse().unwrap(),
        )
    };
    let line = p.expect("progress ", T);
    let (acked, read) = counts(p, &line);
    loop {
        let line = p.expect("progress ", T);
        let (a, r) = counts(p, &line);
        if a > acked && r > read {
            return a;
        }
    }
}

/// Figures of the checkpoint phase.
struct Cycles {
    table: String,
    checkpoint_ms: Vec<u64>,
    minutes: f64,
}

/// `n` leave-running checkpoints of the service, the broker restarted every 50; keeps the
/// image of cycle `keep` in `kept`.
fn checkpoint_cycles(k: &Cluster, svc: &mut Proc, dir: &TempDir, n: usize, keep: usize) -> Cycles {
    let pid = svc.pid();
    let leftovers = Leftovers::new(pid);
    let mut table = String::from(
        "| cycles | fds | threads | RSS MB | checkpoint p50/max (last 20) | acked |\n|---|---|---|---|---|---|\n",
    );
    let mut checkpoint_ms = Vec::with_capacity(n);
    let mut baseline: Option<Sample> = None;
    wait_working(svc);
    let mut acked;
    let started = Instant::now();
    for cycle in 1..=n {
        let img = dir.join(&format!("cycle-{cycle}"));
        let t = Instant::now();
        let o = crac_command(
            CRAC,
            &[
                "checkpoint",
                &pid.to_string(),
                "--leave-running",
                "--dir",
                img.to_str().unwrap(),
                "--timeout",
                "120",
            ],
        )
        .output()
        .expect("run crac checkpoint");
        checkpoint_ms.push(t.elapsed().as_millis() as u64);
        assert!(
            o.status.success(),
            "checkpoint {cycle}: {}{}\nservice:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            svc.transcript()
        );
        leftovers.check(&format!("cycle {cycle}"), Some(&img));
        if cycle == keep {
            std::fs::rename(&img, dir.join("kept")).unwrap();
        } else {
            std::fs::remove_dir_all(&img).unwrap();
        }
        // It goes on working after each image: produces and reads.
        acked = wait_working(svc);
        if cycle % 20 == 0 {
            let s = sample(pid);
            let last = &mut checkpoint_ms[cycle - 20..].to_vec();
            last.sort_unstable();
            let _ = writeln!(
                table,
                "| {cycle} | {} | {} | {:.1} | {}/{} ms | {acked} |",
                s.fds,
                s.threads,
                s.rss_kb as f64 / 1024.0,
                last[last.len() / 2],
                last[last.len() - 1]
            );
            match baseline {
                None => baseline = Some(s),
                Some(b) => {
                    assert!(
                        s.fds <= b.fds,
                        "cycle {cycle}: descriptors {} > {} at cycle 20\n{table}",
                        s.fds,
                        b.fds
                    );
                    assert!(
                        s.threads <= b.threads,
                        "cycle {cycle}: threads {} > {} at cycle 20\n{table}",
                        s.threads,
                        b.threads
                    );
                    assert!(
                        s.rss_kb * 100 <= b.rss_kb * 105,
                        "cycle {cycle}: RSS {} kB, more than 5 % over {} kB at cycle 20\n{table}",
                        s.rss_kb,
                        b.rss_kb
                    );
                }
            }
        }
        // After the sample: records queued while the broker is down are not a leak.
        if cycle % 50 == 0 && cycle < n {
            k.stop_broker(1);
            k.start_broker(1);
            wait_working(svc);
        }
    }
    Cycles {
        table,
        checkpoint_ms,
        minutes: started.elapsed().as_secs_f64() / 60.0,
    }
}

/// What one restored copy did: its instance, the first and the end sequence it sent, how
/// long its restore took to the `restored` line and to its first acknowledged record.
struct Copy {
    instance: String,
    seqs: std::ops::Range<u64>,
    restore_ms: u64,
    first_ack_ms: u64,
}

/// `count` copies of the image `img`, `parallel` at a time; each produces and reads, then
/// exits 0.
fn restore_copies(img: &Path, count: usize, parallel: usize, leftovers: &Leftovers) -> Vec<Copy> {
    let mut copies = Vec::with_capacity(count);
    for wave in 0..count.div_ceil(parallel) {
        let mut running = Vec::new();
        for i in wave * parallel..((wave + 1) * parallel).min(count) {
            let instance = format!("copy{i}");
            let (env_instance, env_final) = (
                format!("SVC_INSTANCE={instance}"),
                format!("SVC_FINAL={COPY_RECORDS}"),
            );
            let args = [
                "restore",
                img.to_str().unwrap(),
                "--lazy",
                "--pidns",
                "--env",
                &env_instance,
                "--env",
                &env_final,
            ];
            let t = Instant::now();
            running.push((
                instance.clone(),
                t,
                Proc::spawn(&instance, &mut crac_command(CRAC, &args)),
            ));
        }
        for (instance, t, mut p) in running {
            let restored = p.expect("restored ", T);
            let restore_ms = t.elapsed().as_millis() as u64;
            assert_eq!(must(&restored, "instance"), instance, "{restored}");
            let first: u64 = must(&restored, "next_seq").parse().unwrap();
            let read_at_restore: u64 = must(&restored, "consumed").parse().unwrap();
            let ack = p.expect("first_ack_after_restore ", T);
            let first_ack_ms = must(&ack, "ms").parse().unwrap();
            let done = p.expect("done ", T);
            assert!(p.wait(T).success(), "{instance}:\n{}", p.transcript());
            assert_eq!(must(&done, "errors"), "0", "{}", p.transcript());
            assert_eq!(must(&done, "consume_errors"), "0", "{}", p.transcript());
            assert_eq!(must(&done, "close"), "ok", "{}", p.transcript());
            let read: u64 = must(&done, "consumed").parse().unwrap();
            assert!(
                read > read_at_restore,
                "{instance} read nothing:\n{}",
                p.transcript()
            );
            let end: u64 = must(&done, "last_seq").parse().unwrap();
            copies.push(Copy {
                instance,
                seqs: first..end,
                restore_ms,
                first_ack_ms,
            });
        }
        leftovers.check(&format!("restore wave {wave}"), None);
    }
    copies
}

#[test]
fn hundreds_of_checkpoints_and_restores_leak_lose_and_duplicate_nothing() {
    let cycles = env_count("SOAK_CYCLES", 200);
    let restores = env_count("SOAK_RESTORES", 50);
    assert!(
        cycles >= 40,
        "SOAK_CYCLES={cycles}: at least 40 (the baseline is cycle 20)"
    );
    let k = Cluster::start_secure(1, None);
    k.create_topic(TOPIC, PARTITIONS, 1);
    let dir = TempDir::new("soak");
    let mut svc = start_service(&k, &dir);
    let pid = svc.pid();
    svc.expect("first_ack ", T);

    let c = checkpoint_cycles(&k, &mut svc, &dir, cycles, cycles / 2);
    let leftovers = Leftovers::new(pid);
    let copies = restore_copies(&dir.join("kept"), restores, 5, &leftovers);

    // The original finishes: 200 more records, then it closes.
    let tmp = dir.join("final.tmp");
    std::fs::write(&tmp, "200").unwrap();
    std::fs::rename(&tmp, dir.join("final")).unwrap();
    let done = svc.expect("done ", T);
    assert!(svc.wait(T).success(), "{}", svc.transcript());
    assert_eq!(must(&done, "consume_errors"), "0", "{}", svc.transcript());
    let original_end: u64 = must(&done, "last_seq").parse().unwrap();
    leftovers.check("the end", None);

    let mut expected: BTreeMap<String, std::ops::Range<u64>> =
        BTreeMap::from([("a".to_owned(), 0..original_end)]);
    for copy in &copies {
        expected.insert(copy.instance.clone(), copy.seqs.clone());
    }
    let total: u64 = expected.values().map(|r| r.end - r.start).sum();
    let records = k.consume_all(TOPIC, total as usize, T);
    let (rep, _) = check_stream(&records, &expected);
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.read as u64, total, "{rep}");

    let mut checkpoint_ms = c.checkpoint_ms.clone();
    let mut restore_ms: Vec<u64> = copies.iter().map(|c| c.restore_ms).collect();
    let mut first_ack_ms: Vec<u64> = copies.iter().map(|c| c.first_ack_ms).collect();
    let report = format!(
        "soak: {cycles} leave-running checkpoints in {:.1} min ({:.0} per minute), checkpoint {}; \
         {restores} lazy --pidns restores 5 at a time, restore to `restored` {}, first ack after restore {}; \
         {total} records read back, 0 lost, 0 duplicated\n{}",
        c.minutes,
        cycles as f64 / c.minutes,
        spread(&mut checkpoint_ms),
        spread(&mut restore_ms),
        spread(&mut first_ack_ms),
        c.table
    );
    eprintln!("{report}");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak-report.txt");
    std::fs::write(&out, &report).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
