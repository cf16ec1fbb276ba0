//! The broker's clients: the engine's checkpoint through the broker, `crac restore --broker
//! NAME`, and `crac check`'s question whether the broker is there.
//!
//! A checkpoint: the process makes a pipe and records its read end in the metadata as the
//! pipe a restorer feeds (as a direct checkpoint does), sends the request with the write end
//! attached, closes its connection once the broker accepted (a connected socket to the
//! broker must not be in the image), and blocks reading the pipe. The original reads the
//! broker's `crac-dumped …` line there; a restored copy reads its restore payload instead, on
//! the pipe the restoring criu handed in for that read end.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crac_api::CheckpointMode;
use crac_api::spi::{EngineOutcome, RestoreData};

use super::{BROKER_ENV, MAX_PACKET, socket_path, valid_name};
use crate::checkpoint::engine::Config;
use crate::error::{Error, ErrorKind};
use crate::sys;

/// Whether this process checkpoints through the broker: [`BROKER_ENV`] `1` (then the socket
/// must be there), `0` never, unset when not root and the socket exists.
pub fn wanted() -> bool {
    match std::env::var(BROKER_ENV).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => sys::euid() != 0 && socket_path().exists(),
    }
}

fn unavailable(msg: String) -> Error {
    Error::new(ErrorKind::Unavailable, msg)
}

/// Connects to the broker, with a bound on every answer.
fn connect(bound: Duration) -> Result<OwnedFd, Error> {
    let path = socket_path();
    let conn = sys::seqpacket_connect(&path).map_err(|e| {
        unavailable(format!(
            "no checkpoint broker at {} ({e}); as root, start `crac daemon` (see \
             docs/non-root.md), or set {BROKER_ENV}=0 to use a criu with capabilities",
            path.display()
        ))
    })?;
    sys::set_recv_timeout(&conn, Some(bound))
        .map_err(|e| unavailable(format!("SO_RCVTIMEO: {e}")))?;
    Ok(conn)
}

/// Receives one answer packet as text.
fn answer(conn: &impl AsFd) -> Result<String, Error> {
    let mut buf = vec![0u8; MAX_PACKET];
    let n = sys::recv(conn, &mut buf)
        .map_err(|e| unavailable(format!("the checkpoint broker did not answer: {e}")))?;
    if n == 0 {
        return Err(unavailable(
            "the checkpoint broker closed the connection".into(),
        ));
    }
    Ok(crate::checkpoint::control::printable(
        &String::from_utf8_lossy(&buf[..n]),
    ))
}

/// Checkpoints this process through the broker, as configured: the image is the broker's,
/// named by the last component of the configured image directory.
pub fn checkpoint(cfg: &Config) -> Result<EngineOutcome, Error> {
    let name = cfg
        .image_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::new(ErrorKind::Config, "no image name".to_owned()))
        .and_then(|n| valid_name(n).map_err(|e| Error::new(ErrorKind::Config, e)))?
        .to_owned();
    let scan = crate::checkpoint::engine::checked_fds()?;
    let (r, w) = sys::pipe().map_err(|e| unavailable(format!("pipe: {e}")))?;
    let leave_running = cfg.mode == CheckpointMode::LeaveRunning;
    let external = crate::checkpoint::engine::externals(&scan);
    let meta = crate::checkpoint::engine::image_metadata(leave_running, &external, &r, None);
    let mode = if leave_running {
        "leave-running"
    } else {
        "stop"
    };
    let request = format!("checkpoint\nname={name}\nmode={mode}\n\n{}", meta.to_text());
    let conn = connect(Duration::from_secs(30))?;
    sys::send_with_fds(&conn, request.as_bytes(), &[w.as_fd()])
        .map_err(|e| unavailable(format!("sending the request to the broker: {e}")))?;
    drop(w);
    let a = answer(&conn)?;
    if a != "accepted" {
        let why = a.strip_prefix("error ").unwrap_or(&a);
        return Err(Error::new(
            ErrorKind::Refused,
            format!("the checkpoint broker refused: {why}"),
        ));
    }
    drop(conn);
    let timeout = crate::criu::criu_timeout()? + Duration::from_secs(30);
    let text = read_pipe(r, timeout)?;
    outcome(&text)
}

/// Reads the answer pipe to its end, bounded.
fn read_pipe(r: OwnedFd, timeout: Duration) -> Result<Vec<u8>, Error> {
    let deadline = Instant::now() + timeout;
    let mut data = Vec::new();
    let mut f = std::fs::File::from(r);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        if !sys::poll_readable(&f, ms).unwrap_or(false) {
            return Err(Error::new(
                ErrorKind::Snapshot,
                "the checkpoint broker did not answer within the CRIU timeout".to_owned(),
            ));
        }
        match f.read(&mut buf) {
            Ok(0) => return Ok(data),
            Ok(n) if data.len() + n <= 64 * 1024 => data.extend_from_slice(&buf[..n]),
            Ok(_) => return Ok(data),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(unavailable(format!("the answer pipe: {e}"))),
        }
    }
}

/// What the answer pipe said: the broker's word to the original, or a restorer's payload.
fn outcome(data: &[u8]) -> Result<EngineOutcome, Error> {
    let text = String::from_utf8_lossy(data);
    if let Some(rest) = text.strip_prefix("crac-dumped ") {
        let rest = rest.trim();
        return match rest.strip_prefix("ok ") {
            Some(dir) => Ok(EngineOutcome::Continued {
                image_dir: PathBuf::from(dir),
            }),
            None => Err(Error::new(
                ErrorKind::Snapshot,
                format!(
                    "the checkpoint broker: {}",
                    rest.strip_prefix("error ").unwrap_or(rest)
                ),
            )),
        };
    }
    let (new_env, restore_started) = crate::image::payload::parse_restore_payload(data);
    Ok(EngineOutcome::Restored(RestoreData {
        image_dir: None,
        new_env,
        restore_started,
    }))
}

/// `crac restore --broker NAME`: asks the broker to restore this user's image `name` with
/// this process's descriptors 0–2 and the restore payload (`env`) on a pipe of its own; returns the restored process's exit code (or 0 at once
/// with `detach`).
pub fn restore(
    name: &str,
    env: &[(String, String)],
    detach: bool,
    say: &mut dyn FnMut(&str),
) -> Result<i32, String> {
    valid_name(name)?;
    let request = format!("restore\nname={name}\n");
    let conn = connect(Duration::from_secs(600)).map_err(|e| e.to_string())?;
    // The restore payload on a pipe of ours: CRIU, running as this user, reopens the pipe
    // it replaces, which it may only if the pipe is this user's.
    let (payload_r, payload_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let payload = crate::image::payload::encode_restore_payload(env, std::time::SystemTime::now());
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
    // The restored process may run for ever: wait as long as it does.
    sys::set_recv_timeout(&conn, None).map_err(|e| e.to_string())?;
    let a = answer(&conn).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_pipe_tells_original_and_copy_apart() {
        match outcome(b"crac-dumped ok /var/lib/crac/images/1000/svc\n").unwrap() {
            EngineOutcome::Continued { image_dir } => {
                assert_eq!(image_dir, PathBuf::from("/var/lib/crac/images/1000/svc"))
            }
            o => panic!("{o:?}"),
        }
        let e = outcome(b"crac-dumped error criu dump failed\n").unwrap_err();
        assert!(e.to_string().contains("criu dump failed"), "{e}");
        let payload = crate::image::payload::encode_restore_payload(
            &[("A".into(), "1".into())],
            std::time::SystemTime::now(),
        );
        match outcome(&payload).unwrap() {
            EngineOutcome::Restored(r) => assert_eq!(r.new_env, vec![("A".into(), "1".into())]),
            o => panic!("{o:?}"),
        }
    }
}
