//! Engine discovery: best rank wins, `CRAC_ENGINE` overrides. The environment is set on a child
//! process (this same test binary), never mutated in-process.

use std::process::Command;

use crac_api::Core;
use crac_noop as _;

mod common;

fn child(engine: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "report_engine",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd.env_remove("CRAC_ENGINE");
    if let Some(e) = engine {
        cmd.env("CRAC_ENGINE", e);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.split_once("ENGINE=").map(|(_, v)| v))
        .unwrap_or_else(|| panic!("child printed no engine: {text}"))
        .to_owned()
}

/// Run as a child: reports which engine a checkpoint would use and what it returned.
#[test]
fn report_engine() {
    let r = Core::checkpoint_restore();
    println!(
        "ENGINE={}|{}",
        Core::engine_name().unwrap_or("none"),
        match r {
            Ok(o) => o.to_string(),
            Err(e) => e.to_string(),
        }
    );
}

#[test]
fn both_engines_are_linked_best_rank_first() {
    let names: Vec<_> = crac_api::spi::linked_engines()
        .iter()
        .map(|r| r.engine.name())
        .collect();
    assert_eq!(names, vec!["scripted", "noop"]);
}

#[test]
fn best_ranked_engine_is_used_by_default() {
    assert!(child(None).starts_with("scripted|"));
}

#[test]
fn crac_engine_overrides_the_choice() {
    let r = child(Some("noop"));
    assert_eq!(r, "noop|no image taken");
}

#[test]
fn crac_engine_naming_an_unlinked_engine_is_a_clear_error() {
    let r = child(Some("criu"));
    assert!(r.starts_with("none|"), "{r}");
    assert!(
        r.contains("CRAC_ENGINE=criu names an engine that is not linked"),
        "{r}"
    );
    assert!(r.contains("scripted, noop"), "{r}");
}
