//! `crac`: restore an image, ask a running process to checkpoint itself, check the machine.
//!
//! ```text
//! crac restore DIR [--pidns] [--env K=V]... [--detach] [--pid-wait SECS]
//! crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
//! crac check
//! ```
//!
//! Messages go to stderr, prefixed `crac:`; stdout belongs to the restored process.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crac_criu::restore::{self, RestoreOptions};
use crac_criu::{control, criu};

const USAGE: &str = "usage:
  crac restore DIR [--pidns] [--env K=V]... [--detach] [--pid-wait SECS]
      restore the image in DIR; waits for the restored process and exits with its status
      (unless --detach). --pidns restores into a fresh PID namespace, so several copies of
      one image can run at once; --env passes configuration to the restored process.
  crac checkpoint PID [--leave-running | --stop] [--dir DIR] [--timeout SECS]
      ask a running crac-criu program to checkpoint itself (like jcmd PID JDK.checkpoint)
  crac check
      can checkpoints work here? criu, its version, `criu check`, privileges, kernel";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("restore") => cmd_restore(&args[1..]),
        Some("checkpoint") => cmd_checkpoint(&args[1..]),
        Some("check") => cmd_check(),
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            Ok(0)
        }
        _ => Err(format!("unknown command\n{USAGE}")),
    };
    match r {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("crac: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn cmd_restore(args: &[String]) -> Result<i32, String> {
    let mut opts = RestoreOptions {
        pid_wait: Duration::from_secs(10),
        ..RestoreOptions::default()
    };
    let mut detach = false;
    let mut dir = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--pidns" => opts.pidns = true,
            "--detach" | "-d" => detach = true,
            "--env" | "-e" => {
                let kv = value(args, &mut i, "--env")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--env {kv}: expected KEY=VALUE"))?;
                opts.env.push((k.to_owned(), v.to_owned()));
            }
            "--pid-wait" => {
                let s = value(args, &mut i, "--pid-wait")?;
                opts.pid_wait = Duration::from_secs_f64(
                    s.parse()
                        .map_err(|_| format!("--pid-wait {s}: not a number"))?,
                );
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a if dir.is_none() => dir = Some(PathBuf::from(a)),
            a => return Err(format!("unexpected argument {a}")),
        }
        i += 1;
    }
    opts.image_dir = dir.ok_or_else(|| format!("restore needs an image directory\n{USAGE}"))?;
    restore::become_subreaper().map_err(|e| e.to_string())?;
    let r = restore::restore(&opts, &mut |m| eprintln!("crac: {m}")).map_err(|e| e.to_string())?;
    match r.ns_pid {
        Some(ns) => eprintln!(
            "crac: restored pid {} (pid {ns} in its own PID namespace) from {} in {:.1} ms",
            r.pid,
            opts.image_dir.display(),
            r.took.as_secs_f64() * 1e3
        ),
        None => eprintln!(
            "crac: restored pid {} from {} in {:.1} ms",
            r.pid,
            opts.image_dir.display(),
            r.took.as_secs_f64() * 1e3
        ),
    }
    if detach {
        return Ok(0);
    }
    let pid = r.pid;
    let code = r.wait().map_err(|e| e.to_string())?;
    eprintln!("crac: restored pid {pid} exited with status {code}");
    Ok(code)
}

fn cmd_checkpoint(args: &[String]) -> Result<i32, String> {
    let mut pid = None;
    let mut mode = None;
    let mut dir = None;
    let mut timeout = Duration::from_secs(300);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--leave-running" => mode = Some("leave-running"),
            "--stop" => mode = Some("stop"),
            "--dir" => dir = Some(value(args, &mut i, "--dir")?.to_owned()),
            "--timeout" => {
                let s = value(args, &mut i, "--timeout")?;
                timeout = Duration::from_secs_f64(
                    s.parse()
                        .map_err(|_| format!("--timeout {s}: not a number"))?,
                );
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a if pid.is_none() => {
                pid = Some(a.parse::<i32>().map_err(|_| format!("{a}: not a pid"))?)
            }
            a => return Err(format!("unexpected argument {a}")),
        }
        i += 1;
    }
    let pid = pid.ok_or_else(|| format!("checkpoint needs a pid\n{USAGE}"))?;
    if !restore::alive(pid) {
        return Err(format!("no running process {pid}"));
    }
    control::ensure_control_dir().map_err(|e| e.to_string())?;
    let token = std::process::id() as i32;
    let req = control::control_file(pid, token, "req");
    let ack = control::control_file(pid, token, "ack");
    let res = control::control_file(pid, token, "res");
    let mut text = String::new();
    if let Some(m) = mode {
        text.push_str(&format!("mode={m}\n"));
    }
    if let Some(d) = &dir {
        let abs = std::path::absolute(d).map_err(|e| format!("{d}: {e}"))?;
        text.push_str(&format!("dir={}\n", abs.display()));
    }
    control::write_control_file(&req, &text).map_err(|e| format!("{}: {e}", req.display()))?;
    restore::send_checkpoint_signal(pid, token).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let cleanup = || {
        for p in [&req, &ack, &res] {
            std::fs::remove_file(p).ok();
        }
    };
    loop {
        if let Ok(t) = std::fs::read_to_string(&res) {
            cleanup();
            let mut lines = t.lines();
            let status = lines.next().unwrap_or("");
            let rest: Vec<&str> = lines.collect();
            if status == "ok" {
                eprintln!("crac: pid {pid}: {}", rest.join("\n"));
                return Ok(0);
            }
            return Err(format!("pid {pid} did not checkpoint: {}", rest.join("\n")));
        }
        if !restore::alive(pid) {
            let dir = std::fs::read_to_string(&ack).ok().and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("dir=").map(str::to_owned))
            });
            cleanup();
            return match dir {
                Some(d) if PathBuf::from(&d).join("inventory.img").exists() => {
                    eprintln!("crac: pid {pid} checkpointed to {d} and stopped");
                    println!("{d}");
                    Ok(0)
                }
                Some(d) => Err(format!(
                    "pid {pid} exited during the checkpoint and {d} holds no complete image"
                )),
                None => Err(format!(
                    "pid {pid} exited without taking the request: is it a crac-criu program \
                     (`use crac_criu as _;`)? A program without the handler dies of the signal"
                )),
            };
        }
        if started.elapsed() > timeout {
            cleanup();
            return Err(format!(
                "pid {pid} did not answer within {:.0}s: is it a crac-criu program (`use \
                 crac_criu as _;`) with CRAC_CHECKPOINT_SIGNAL unset?",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn cmd_check() -> Result<i32, String> {
    let mut problems = 0;
    let ok = |what: &str| println!("ok      {what}");
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    ok(&format!("kernel {kernel}"));
    match criu::find() {
        Ok(c) => {
            println!(
                "ok      criu {}.{}.{} at {}",
                c.version.0,
                c.version.1,
                c.version.2,
                c.path.display()
            );
            match std::process::Command::new(&c.path).arg("check").output() {
                Ok(out) => {
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let relevant: Vec<&str> = text
                        .lines()
                        .filter(|l| !l.contains("RLIMIT_NOFILE") && !l.contains("kdat cache"))
                        .collect();
                    if out.status.success() && text.contains("Looks good") {
                        println!("ok      criu check: Looks good");
                    } else {
                        problems += 1;
                        println!(
                            "PROBLEM criu check failed:\n          {}\n        fix: use a kernel \
                             with the features listed (CONFIG_CHECKPOINT_RESTORE etc.) or a newer \
                             criu (scripts/install-criu)",
                            relevant.join("\n          ")
                        );
                    }
                }
                Err(e) => {
                    problems += 1;
                    println!("PROBLEM cannot run {} check: {e}", c.path.display());
                }
            }
        }
        Err(e) => {
            problems += 1;
            println!("PROBLEM {e}");
        }
    }
    match criu::check_privileges() {
        Ok(()) => println!("ok      privileges (root or CAP_CHECKPOINT_RESTORE+CAP_SYS_PTRACE)"),
        Err(e) => {
            problems += 1;
            println!("PROBLEM {e}");
        }
    }
    match std::process::Command::new("unshare")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => println!("ok      unshare found (for crac restore --pidns)"),
        _ => println!(
            "note    unshare (util-linux) not found: `crac restore --pidns` will not work; \
             install util-linux"
        ),
    }
    if problems == 0 {
        println!("checkpoints can work here");
        Ok(0)
    } else {
        println!("{problems} problem(s)");
        Ok(1)
    }
}
