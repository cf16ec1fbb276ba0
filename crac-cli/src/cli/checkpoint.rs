//! `crac checkpoint PID …`: the requester's side of the control channel.

use super::Term;
use super::args::CheckpointArgs;
use crate::checkpoint_request as control;

/// Sends the request and reports the answer: 0 if the process checkpointed, 1 if it refused.
pub(super) fn cmd_checkpoint(a: &CheckpointArgs, term: &mut Term<'_>) -> Result<i32, String> {
    let pid = a.pid;
    let mode = match (a.leave_running, a.stop) {
        (true, _) => Some("leave-running"),
        (_, true) => Some("stop"),
        _ => None,
    };
    // Absolute: the process would resolve a relative path from its own working directory.
    let dir = match &a.dir {
        Some(d) => Some(std::path::absolute(d).map_err(|e| format!("{}: {e}", d.display()))?),
        None => None,
    };
    let req = control::Request {
        mode,
        dir,
        timeout: a.timeout,
    };
    match control::request(pid, &req)? {
        control::Answer::Answered(true, text) => {
            term.say(&format!("pid {pid}: {text}"));
            Ok(0)
        }
        control::Answer::Answered(false, text) => {
            term.say(&format!("pid {pid} did not checkpoint: {text}"));
            Ok(1)
        }
        control::Answer::Stopped(d, stats) => {
            let d = crac_criu::control::printable(&d.display().to_string());
            let how = stats.map(|s| format!(" (criu: {s})")).unwrap_or_default();
            term.say(&format!("pid {pid} checkpointed to {d} and stopped{how}"));
            term.print(&d);
            Ok(0)
        }
        control::Answer::StoppedToBroker(name) => {
            term.say(&format!(
                "pid {pid} checkpointed through the checkpoint broker as image {name} and \
                 stopped; restore it with crac restore --broker {name}"
            ));
            term.print(&name);
            Ok(0)
        }
    }
}
