//! Test support: a scriptable engine and a recording resource.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crac_api::spi::{Engine, EngineError, EngineErrorKind, EngineOutcome, RestoreData};
use crac_api::{CheckpointOptions, Context, Resource, ResourceError};
use parking_lot::Mutex;

/// Tests in one binary share the global context: each test that checkpoints holds this.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub static ENGINE_CALLS: AtomicU64 = AtomicU64::new(0);
/// `Core::management().generation()` as the engine saw it while taking its last image.
pub static GENERATION_DURING: AtomicU64 = AtomicU64::new(u64::MAX);
static MODE: AtomicU8 = AtomicU8::new(0);

/// What the scripted engine does on its next calls.
#[derive(Clone, Copy)]
pub enum Mode {
    NoImage = 0,
    Restored = 1,
    Fail = 2,
    Continued = 3,
    Panic = 4,
}

pub fn set_mode(m: Mode) {
    MODE.store(m as u8, Ordering::SeqCst);
}

/// Outranks noop, so it is the engine these tests use; it counts the snapshots it is asked for.
pub struct ScriptedEngine;

impl Engine for ScriptedEngine {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn probe(&self) -> Result<(), EngineError> {
        Ok(())
    }
    fn checkpoint(&self, _: &CheckpointOptions) -> Result<EngineOutcome, EngineError> {
        ENGINE_CALLS.fetch_add(1, Ordering::SeqCst);
        GENERATION_DURING.store(crac_api::Core::management().generation(), Ordering::SeqCst);
        match MODE.load(Ordering::SeqCst) {
            0 => Ok(EngineOutcome::NoImage),
            1 => Ok(EngineOutcome::Restored(RestoreData {
                image_dir: Some("/images/test".into()),
                new_env: vec![("A".into(), "1".into()), ("A".into(), "2".into())],
                restore_started: None,
            })),
            3 => Ok(EngineOutcome::Continued {
                image_dir: "/images/test".into(),
            }),
            4 => panic!("scripted engine panic"),
            _ => Err(EngineError::new(
                EngineErrorKind::Snapshot,
                "scripted failure",
            )),
        }
    }
}

static ENGINE: ScriptedEngine = ScriptedEngine;
crac_api::register_engine!(&ENGINE, 1000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Before(u64),
    After(u64),
}

pub type Log = Arc<Mutex<Vec<Call>>>;

/// Records its calls in a shared log; fails or panics when told to.
pub struct Recorder {
    pub id: u64,
    pub log: Log,
    pub fail_before: bool,
    pub fail_after: bool,
    pub panic_before: bool,
}

impl Recorder {
    pub fn new(id: u64, log: &Log) -> Arc<Self> {
        Arc::new(Self {
            id,
            log: log.clone(),
            fail_before: false,
            fail_after: false,
            panic_before: false,
        })
    }
}

impl Resource for Recorder {
    fn before_checkpoint(&self, _: &Context) -> Result<(), ResourceError> {
        self.log.lock().push(Call::Before(self.id));
        if self.panic_before {
            panic!("recorder {} panics", self.id);
        }
        if self.fail_before {
            return Err(format!("recorder {} refuses", self.id).into());
        }
        Ok(())
    }
    fn after_restore(&self, _: &Context) -> Result<(), ResourceError> {
        self.log.lock().push(Call::After(self.id));
        if self.fail_after {
            return Err("after failed".into());
        }
        Ok(())
    }
    fn name(&self) -> String {
        format!("recorder-{}", self.id)
    }
}

pub fn befores(log: &Log) -> Vec<u64> {
    log.lock()
        .iter()
        .filter_map(|c| match c {
            Call::Before(i) => Some(*i),
            _ => None,
        })
        .collect()
}

pub fn afters(log: &Log) -> Vec<u64> {
    log.lock()
        .iter()
        .filter_map(|c| match c {
            Call::After(i) => Some(*i),
            _ => None,
        })
        .collect()
}
