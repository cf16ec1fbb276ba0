//! `crac check`: whether checkpoints can work here, each problem with its fix.

use std::time::Duration;

use super::Term;
use crac_criu::criu::{self, kdat};

pub(super) fn cmd_check(term: &mut Term<'_>) -> i32 {
    let mut problems = 0;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    term.print(&format!("ok      kernel {kernel}"));
    match criu::find() {
        Ok(c) => {
            term.print(&format!(
                "ok      criu {}.{}.{} at {}",
                c.version.0,
                c.version.1,
                c.version.2,
                c.path.display()
            ));
            match criu::run_check(&c) {
                Ok(None) => term.print("ok      criu check: Looks good"),
                Ok(Some(note)) => term.print(&format!("ok      {note}")),
                Err(e) => {
                    problems += 1;
                    term.print(&format!("PROBLEM {e}"));
                }
            }
        }
        Err(e) => {
            problems += 1;
            term.print(&format!("PROBLEM {e}"));
        }
    }
    if let Ok(path) = criu::locate() {
        if let Some(p) = criu::exposure_problem(&path) {
            problems += 1;
            term.print(&format!("PROBLEM {p}"));
        } else if let Some(n) = criu::exposure_note(&path) {
            term.print(&format!("note    {n}"));
        }
    }
    match criu::check_privileges() {
        Ok(()) if criu::unprivileged() && criu::inherits_checkpoint_restore() => term.print(
            "ok      privileges: criu inherits cap_checkpoint_restore (root's bounding set \
             without CAP_SYS_ADMIN, or an ambient capability: a container) and runs in its \
             unprivileged mode",
        ),
        Ok(()) if criu::unprivileged() => term.print(
            "ok      privileges: not root; criu carries cap_checkpoint_restore and \
             cap_sys_ptrace and runs in its unprivileged mode",
        ),
        Ok(()) => term.print("ok      privileges: root"),
        Err(e) => {
            problems += 1;
            term.print(&format!("PROBLEM {e}"));
        }
    }
    if crate::sys::euid() != 0 {
        match crac_criu::broker::socket_path().map(|sock| (sock, crate::broker::client::ping())) {
            Ok((sock, Ok(a))) => term.print(&format!(
                "ok      checkpoint broker at {} answers ({a}): checkpoints go through it \
                 ({}=0 to use criu directly)",
                sock.display(),
                crac_criu::settings::BROKER
            )),
            Ok((_, Err(e))) => term.print(&format!("note    {e}")),
            Err(e) => {
                problems += 1;
                term.print(&format!("PROBLEM {e}"));
            }
        }
    }
    term.print(&format!(
        "ok      CPU features images from here record (a restore needs them all): {}",
        crac_criu::image::cpu::host_features().join(" ")
    ));
    match std::process::Command::new("unshare")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => {
            term.print("ok      unshare found (for crac restore --pidns)")
        }
        _ => term.print(
            "note    unshare (util-linux) not found: `crac restore --pidns` will not work; \
             install util-linux",
        ),
    }
    if let Ok(c) = criu::find() {
        let timeout = crac_criu::criu::criu_timeout().unwrap_or(Duration::from_secs(60));
        report_kdat(term, &kdat::facts(&c, timeout));
    }
    if problems == 0 {
        term.print("checkpoints can work here");
        0
    } else {
        term.print(&format!("{problems} problem(s)"));
        1
    }
}

/// `crac check`'s lines on CRIU's probe cache and on lazy restores.
fn report_kdat(term: &mut Term<'_>, f: &kdat::Facts) {
    match &f.cache {
        kdat::Cache::CriuOwn => {
            term.print("ok      /run is a tmpfs: criu keeps its kernel probe in /run/criu.kdat")
        }
        kdat::Cache::Installed { made_now } => term.print(&format!(
            "ok      /run is not a tmpfs: crac keeps criu's kernel probe in {} (made once per \
             boot, kernel and criu{}), so dumps and restores do not probe the kernel",
            kdat::KDAT_PATH,
            match made_now {
                Some(t) => format!("; made now in {:.0} ms", t.as_secs_f64() * 1e3),
                None => String::new(),
            }
        )),
        kdat::Cache::Absent(why) => term.print(&format!(
            "note    criu probes the kernel at every dump and restore (tens of ms each): {why}"
        )),
    }
    match &f.lazy_pages {
        Ok(()) => term.print(
            "ok      restores are lazy (memory served on demand while the rest streams in; \
             `criu check --feature uffd-noncoop` passes); `crac restore --eager` reads it all \
             first",
        ),
        Err(why) => term.print(&format!(
            "note    restores are eager (every page read before the process runs): {why}"
        )),
    }
}
