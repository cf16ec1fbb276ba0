//! The listener inside the process for `crac checkpoint PID` (the channel and its protocol:
//! [`crate::control`]): a signal handler installed before `main` forwards each request
//! signal to the `crac-control` thread, which takes the request file and checkpoints.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crac_api::{CheckpointMode, CheckpointOptions, Core};

use crate::control::{control_file, open_channel, request_signal};
use crate::safe_dir::Dir;
use crate::sys;

/// This process's `XDG_RUNTIME_DIR` as it was when the program started (as the requester reads
/// it from `/proc/PID/environ`).
static OWN_XDG: OnceLock<Option<OsString>> = OnceLock::new();

/// Installs the signal handler and starts the `crac-control` thread. Runs before `main`.
pub fn init() {
    if !crate::settings::checkpoint_signal() {
        return;
    }
    let _ = OWN_XDG.set(std::env::var_os("XDG_RUNTIME_DIR"));
    let Ok((r, w)) = sys::pipe() else {
        return;
    };
    if sys::install_request_handler(request_signal(), w).is_err() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("crac-control".into())
        .spawn(move || listen(r));
}

fn listen(r: OwnedFd) {
    let mut f = fs::File::from(r);
    let mut msg = [0u8; 12];
    loop {
        if f.read_exact(&mut msg).is_err() {
            return;
        }
        let word = |i: usize| i32::from_ne_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
        let (sender, uid, token) = (word(0), word(4) as u32, word(8));
        handle(sender, uid, token);
    }
}

/// Reads and deletes the request file, if it is one this process may trust.
fn take_request(chan: &Dir, name: &str) -> Option<String> {
    let f = chan.open_file(name).ok()?;
    let m = f.metadata().ok()?;
    let owner_ok = m.uid() == 0 || m.uid() == sys::euid();
    if !m.is_file() || !owner_ok || m.mode() & 0o022 != 0 {
        tracing::warn!(file = name, "unsafe checkpoint request file ignored");
        return None;
    }
    let mut text = String::new();
    f.take(64 * 1024).read_to_string(&mut text).ok()?;
    chan.remove(name).ok();
    Some(text)
}

fn handle(sender: i32, uid: u32, token: i32) {
    let me = std::process::id() as i32;
    let my_uid = sys::euid();
    if uid != 0 && uid != my_uid {
        tracing::warn!(sender, uid, "checkpoint request from another user ignored");
        return;
    }
    let xdg = OWN_XDG.get().cloned().flatten();
    let chan = match open_channel(my_uid, xdg.as_deref(), false) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(sender, error = %e, "checkpoint signal, but no usable control channel; ignored");
            return;
        }
    };
    let Some(text) = take_request(&chan, &control_file(me, token, "req")) else {
        tracing::warn!(sender, "checkpoint signal without a request file; ignored");
        return;
    };
    let mut options = CheckpointOptions::new();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("mode", "leave-running")) => options.mode = Some(CheckpointMode::LeaveRunning),
            Some(("mode", "stop")) => options.mode = Some(CheckpointMode::StopAfterDump),
            Some(("dir", d)) if !d.is_empty() => options.image_dir = Some(PathBuf::from(d)),
            _ => {}
        }
    }
    let dir = crate::checkpoint::config::Config::resolve(&options)
        .map(|c| c.image_dir.display().to_string())
        .unwrap_or_default();
    let write = |ext: &str, text: &str| {
        let _ = chan.write_atomic(&control_file(me, token, ext), text.as_bytes(), 0o600);
    };
    // Through the broker the image is the broker's (named by the directory's last
    // component), out of the requester's reach: it is told so.
    let broker = match crate::checkpoint::via_broker::wanted() {
        Ok(true) => Path::new(&dir)
            .file_name()
            .map(|n| format!("broker={}\n", n.to_string_lossy()))
            .unwrap_or_default(),
        _ => String::new(),
    };
    write("ack", &format!("dir={dir}\n{broker}"));
    tracing::info!(sender, ?options, "checkpoint requested from outside");
    let result = Core::checkpoint_restore_with(&options);
    let text = match &result {
        Ok(o) if o.is_restored() => return, // a restored copy: the requester is long gone
        Ok(o) => match crate::checkpoint::engine::take_breakdown() {
            Some(b) => format!("ok\n{o}\n{b}\n"),
            None => format!("ok\n{o}\n"),
        },
        Err(e) => {
            let restored = matches!(
                e,
                crac_api::CheckpointError::Resources { outcome: Some(o), .. } if o.is_restored()
            );
            if restored {
                return;
            }
            format!("error\n{e}\n")
        }
    };
    write("res", &text);
}
