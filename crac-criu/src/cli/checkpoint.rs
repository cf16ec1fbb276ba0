//! `crac checkpoint PID …`: the requester's side of the control channel.

use std::time::Duration;

use super::{Term, USAGE, seconds, value};
use crate::checkpoint::control;

pub(super) fn cmd_checkpoint(args: &[String], term: &mut Term<'_>) -> Result<i32, String> {
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
            "--timeout" => timeout = seconds(value(args, &mut i, "--timeout")?, "--timeout")?,
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            a if pid.is_none() => {
                pid = Some(
                    a.parse::<i32>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("{a}: not a pid"))?,
                )
            }
            a => return Err(format!("unexpected argument {a}")),
        }
        i += 1;
    }
    let pid = pid.ok_or_else(|| format!("checkpoint needs a pid\n{USAGE}"))?;
    let dir = match dir {
        Some(d) => Some(std::path::absolute(&d).map_err(|e| format!("{d}: {e}"))?),
        None => None,
    };
    let req = control::Request { mode, dir, timeout };
    match control::request(pid, &req)? {
        control::Answer::Answered(true, text) => {
            term.say(&format!("pid {pid}: {text}"));
            Ok(0)
        }
        control::Answer::Answered(false, text) => {
            term.say(&format!("pid {pid} did not checkpoint: {text}"));
            Ok(1)
        }
        control::Answer::Stopped(d) => {
            let d = control::printable(&d.display().to_string());
            term.say(&format!("pid {pid} checkpointed to {d} and stopped"));
            term.print(&d);
            Ok(0)
        }
    }
}
