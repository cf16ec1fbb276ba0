//! Checkpoint and restore wall time with real CRIU, for 10 MB, 200 MB and 1 GB of touched
//! heap, and time-to-first-work after a restore against a cold start that rebuilds the state.
//!
//! ```text
//! CRAC_CRIU=$(scripts/install-criu | tail -n1) cargo bench -p crac-tests --bench criu
//! BENCH_ROUNDS=5 BENCH_SIZES_MB=10,200 cargo bench -p crac-tests --bench criu
//! ```
//!
//! The subject is `criu_app` (built by cargo for this bench): it builds a table of the given
//! size (every page touched), then checkpoints itself in the default stop-after-dump mode.
//!
//! - checkpoint: from the app's `checkpointing` line (just before `checkpoint_restore()`) to
//!   the moment CRIU has killed it (the image is complete then); CRIU's own dump time, from
//!   its log, beside it.
//! - restore: `crac restore` started to the restored process's first line.
//! - first work after restore: `crac restore` started to the restored process having read its
//!   whole table once; cold start: the program started to the same work done on a table it
//!   had to build.
//!
//! State cost (`BENCH_COSTS`, default `1,32`): rounds of mixing per 8-byte entry when the app
//! builds its table; 1 is a plain memory fill (the case least favourable to a restore), 32 a
//! table that costs about as much CPU per byte as parsing or indexing real data.
//!
//! Medians over the rounds, with min–max; a markdown table on stdout.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const APP: &str = env!("CARGO_BIN_EXE_criu_app");
const CRAC: &str = env!("CARGO_BIN_EXE_crac-under-test");

#[derive(Default)]
struct Round {
    cold_ms: f64,
    checkpoint_ms: f64,
    criu_dump_ms: f64,
    image_mb: f64,
    restore_ms: f64,
    first_work_ms: f64,
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// CRIU's own duration of the dump: the timestamp of the last line of its log.
fn criu_log_ms(log: &Path) -> f64 {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find_map(|l| {
            let t = l.strip_prefix('(')?.split(')').next()?;
            t.trim().parse::<f64>().ok()
        })
        .map(|s| s * 1e3)
        .unwrap_or(f64::NAN)
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn one_round(mb: usize, cost: u32, img: &Path) -> Result<Round, String> {
    let _ = std::fs::remove_dir_all(img);
    let mut r = Round::default();

    // Cold start and checkpoint.
    let t0 = Instant::now();
    let mut app = Command::new(APP)
        .env("APP_MB", mb.to_string())
        .env("APP_COST", cost.to_string())
        .env("CRAC_CHECKPOINT_TO", img)
        .env("APP_STAY_MS", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start {APP}: {e}"))?;
    let mut lines = BufReader::new(app.stdout.take().expect("piped")).lines();
    let mut checkpoint_wall = None;
    for line in lines.by_ref() {
        let line = line.map_err(|e| e.to_string())?;
        if line.starts_with("ready ") {
            r.cold_ms = t0.elapsed().as_secs_f64() * 1e3;
        } else if line.starts_with("checkpointing ") {
            checkpoint_wall = field(&line, "wall_ns").and_then(|v| v.parse::<u128>().ok());
            break;
        }
    }
    let status = app.wait().map_err(|e| e.to_string())?;
    let killed_wall = wall_ns();
    let start = checkpoint_wall.ok_or("the app printed no `checkpointing` line")?;
    if !img.join("inventory.img").exists() {
        return Err(format!("no image (app ended with {status})"));
    }
    r.checkpoint_ms = (killed_wall.saturating_sub(start)) as f64 / 1e6;
    r.criu_dump_ms = criu_log_ms(&img.join("dump.log"));
    r.image_mb = dir_size(img) as f64 / (1 << 20) as f64;

    // Restore and first work.
    let t0 = Instant::now();
    let mut restore = Command::new(CRAC)
        .args(["restore", img.to_str().expect("utf-8 path")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start {CRAC}: {e}"))?;
    let mut first_line = None;
    for line in BufReader::new(restore.stdout.take().expect("piped")).lines() {
        let line = line.map_err(|e| e.to_string())?;
        if first_line.is_none() {
            first_line = Some(t0.elapsed());
        }
        if line.starts_with("first_work ") {
            r.first_work_ms = t0.elapsed().as_secs_f64() * 1e3;
        }
    }
    let st = restore.wait().map_err(|e| e.to_string())?;
    if !st.success() || r.first_work_ms == 0.0 {
        return Err(format!("restore failed ({st})"));
    }
    r.restore_ms = first_line.unwrap_or_default().as_secs_f64() * 1e3;
    let _ = std::fs::remove_dir_all(img);
    Ok(r)
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let med = if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!(
        "{med:.0} ({:.0}–{:.0})",
        v.first().copied().unwrap_or(f64::NAN),
        v.last().copied().unwrap_or(f64::NAN)
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test` builds benches but must not run one.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var_os("CRAC_CRIU").is_none() {
        eprintln!("set CRAC_CRIU=$(scripts/install-criu | tail -n1) (and run as root)");
        std::process::exit(2);
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES_MB")
        .unwrap_or_else(|_| "10,200,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let base: PathBuf = std::env::temp_dir().join(format!("crac-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).expect("bench dir");
    let img = base.join("image");

    let costs: Vec<u32> = std::env::var("BENCH_COSTS")
        .unwrap_or_else(|_| "1,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!(
        "| heap | state cost | image | cold start to first work | checkpoint (wall) | criu dump | restore to first line | restore to first work | cold / restore |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &mb in &sizes {
        for &cost in &costs {
            let mut rs = Vec::new();
            for i in 0..rounds {
                match one_round(mb, cost, &img) {
                    Ok(r) => rs.push(r),
                    Err(e) => {
                        eprintln!("{mb} MB round {i}: {e}");
                        std::process::exit(1);
                    }
                }
                // Let the dumped process's pid be reaped and the page cache settle a little.
                std::thread::sleep(Duration::from_millis(200));
            }
            let col = |f: fn(&Round) -> f64| stats(rs.iter().map(f).collect());
            let ratio: Vec<f64> = rs.iter().map(|r| r.cold_ms / r.first_work_ms).collect();
            let mut sorted = ratio.clone();
            sorted.sort_by(f64::total_cmp);
            println!(
                "| {mb} MB | {cost} | {} MB | {} ms | {} ms | {} ms | {} ms | {} ms | {:.1}× |",
                col(|r| r.image_mb),
                col(|r| r.cold_ms),
                col(|r| r.checkpoint_ms),
                col(|r| r.criu_dump_ms),
                col(|r| r.restore_ms),
                col(|r| r.first_work_ms),
                sorted[sorted.len() / 2],
            );
        }
    }
    println!(
        "\n{rounds} rounds per size, median (min–max); criu_app built with the bench profile."
    );
    let _ = std::fs::remove_dir_all(&base);
}
