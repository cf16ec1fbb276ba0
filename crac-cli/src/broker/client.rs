//! The broker's clients in `crac`: `crac restore --broker NAME`, and `crac check`'s question
//! whether the broker is there. (The engine's checkpoint through the broker is in
//! `crac-criu`; the wire protocol is [`crac_criu::broker`].)

use std::os::fd::AsFd;
use std::time::Duration;

use crate::sys;
use crac_criu::broker::{answer, connect, valid_name};

/// What `crac restore --broker NAME` asks for.
pub struct BrokerRestore<'a> {
    /// This user's image in the broker's store.
    pub name: &'a str,
    /// The restore payload (`--env`).
    pub env: &'a [(String, String)],
    /// Return once the process runs, not when it ends.
    pub detach: bool,
    /// Into a fresh PID namespace (several copies of one image at once).
    pub pidns: bool,
    /// Lazy, eager, or lazy where the broker's host can.
    pub mode: crate::restore::Mode,
    /// `full`: every page file read against the seal before the process runs (the default
    /// when eager); `metadata`: page files whose identity the seal records read while it
    /// runs (the default when lazy).
    pub verify: Option<crate::restore::Verify>,
}

/// `crac restore --broker NAME`: asks the broker to restore this user's image with this
/// process's descriptors 0–2 and the restore payload on a pipe of its own; returns the
/// restored process's exit code (or 0 at once with `detach`).
pub fn restore(req: &BrokerRestore<'_>, say: &mut dyn FnMut(&str)) -> Result<i32, String> {
    let (name, env, detach) = (req.name, req.env, req.detach);
    valid_name(name)?;
    let mut request = format!("restore\nname={name}\npidns={}\n", u8::from(req.pidns));
    match req.mode {
        crate::restore::Mode::Lazy => request.push_str("lazy=1\n"),
        crate::restore::Mode::Eager => request.push_str("lazy=0\n"),
        crate::restore::Mode::Auto => {}
    }
    match req.verify {
        Some(crate::restore::Verify::Full) => request.push_str("verify=full\n"),
        Some(crate::restore::Verify::Metadata) => request.push_str("verify=metadata\n"),
        None => {}
    }
    let conn = connect(Duration::from_secs(600)).map_err(|e| e.to_string())?;
    // The restore payload on a pipe of ours: CRIU, running as this user, reopens the pipe
    // it replaces, which it may only if the pipe is this user's.
    let (payload_r, payload_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let payload =
        crac_criu::image::payload::encode_restore_payload(env, std::time::SystemTime::now());
    if payload.len() > 60 * 1024 {
        return Err("the --env values exceed 60 KiB".into());
    }
    std::io::Write::write_all(&mut std::fs::File::from(payload_w), &payload)
        .map_err(|e| format!("payload: {e}"))?;
    let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let fds = [i.as_fd(), o.as_fd(), e.as_fd(), payload_r.as_fd()];
    sys::send_with_fds(&conn, request.as_bytes(), &fds)
        .map_err(|e| format!("sending the request to the broker: {e}"))?;
    let a = answer(&conn).map_err(|e| e.to_string())?;
    let Some(rest) = a.strip_prefix("restored ") else {
        return Err(format!(
            "the checkpoint broker refused: {}",
            a.strip_prefix("error ").unwrap_or(&a)
        ));
    };
    say(&format!(
        "restored {rest} through the broker (image {name})"
    ));
    if detach {
        return Ok(0);
    }
    // The restored process may run for ever: wait as long as it does. The broker may say
    // first that it ended the copy (its pages did not match the seal).
    sys::set_recv_timeout(&conn, None).map_err(|e| e.to_string())?;
    let mut a = answer(&conn).map_err(|e| e.to_string())?;
    while let Some(why) = a.strip_prefix("error ") {
        say(&format!("the checkpoint broker: {why}"));
        a = answer(&conn).map_err(|e| e.to_string())?;
    }
    let code = a
        .strip_prefix("exit code=")
        .and_then(|c| c.trim().parse().ok())
        .ok_or_else(|| format!("the broker said {a:?}"))?;
    say(&format!("restored process exited with status {code}"));
    Ok(code)
}

/// Whether the broker answers this user: its word, or why not.
pub fn ping() -> Result<String, String> {
    let conn = connect(Duration::from_secs(5)).map_err(|e| e.to_string())?;
    sys::send(&conn, b"ping\n").map_err(|e| e.to_string())?;
    answer(&conn).map_err(|e| e.to_string())
}
