//! A checkpoint of this process through the checkpoint broker (`crate::broker`), chosen when
//! the process is not root and the broker's socket is there.
//!
//! The exchange: the process makes a pipe and records its read end in the metadata as the
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

use super::config::Config;
use super::preflight;
use crate::broker::{answer, connect, socket_path, valid_name};
use crate::error::{Error, ErrorKind};
use crate::{settings, sys};

/// Whether this process checkpoints through the broker: `CRAC_BROKER=1` (then the socket
/// must be there), `0` never, unset when not root and the socket exists.
pub fn wanted() -> Result<bool, Error> {
    Ok(match settings::broker()? {
        Some(yes) => yes,
        None => sys::euid() != 0 && socket_path()?.exists(),
    })
}

fn unavailable(msg: String) -> Error {
    Error::new(ErrorKind::Unavailable, msg)
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
    let scan = preflight::checked_fds()?;
    let (r, w) = sys::pipe().map_err(|e| unavailable(format!("pipe: {e}")))?;
    let leave_running = cfg.mode == CheckpointMode::LeaveRunning;
    let external = preflight::externals(&scan);
    let meta = preflight::image_metadata(leave_running, &external, &r, None);
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
