//! The admin client (Java's `Admin`): topics, partitions, configs, consumer groups and their
//! offsets, records, producers and transactions, over the same connections, configuration
//! keys and security (TLS, SASL) as the producer and the consumer.
//!
//! Each call is blocking and bounded by its timeout ([`Options::timeout`], else
//! `default.api.timeout.ms`), retries included; requests go where Java's `KafkaAdminClient`
//! sends them (the controller, a group's or a transaction's coordinator, a partition's
//! leader, every broker) and are retried on the same errors. A call about several items (topics,
//! partitions, groups) answers per item: one failing does not fail the rest.
//!
//! Modules: [`io`] (the connections, driven by the calling thread; retries), `items` (calls
//! about several items, answered per item), one module per area: `cluster`, `topics`,
//! `configs`, `groups`, `offsets`, `transactions`; and the admin client as a CRaC resource
//! (`resource`).

mod cluster;
pub mod config;
mod configs;
mod error;
mod groups;
pub(crate) mod io;
mod items;
mod offsets;
mod resource;
mod topics;
mod transactions;
mod types;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

pub use self::config::AdminConfig;
pub use self::configs::{ConfigEntry, ConfigOp, ConfigResource, ConfigSource};
pub use self::error::AdminError;
pub use self::groups::{GroupDescription, GroupListing, MemberDescription};
use self::io::{Call, Io};
pub use self::transactions::{ActiveProducer, TransactionDescription, TransactionListing};
pub use self::types::*;

/// How a call runs: its timeout, and whether the broker only checks it.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The call's time, retries included (default: `default.api.timeout.ms`).
    pub timeout: Option<Duration>,
    /// Only validate (create topics, create partitions, alter configs): the broker checks the
    /// request and answers as if it were done, and changes nothing.
    pub validate_only: bool,
}

impl Options {
    /// A call of `timeout`.
    pub fn timeout(timeout: Duration) -> Self {
        Options {
            timeout: Some(timeout),
            ..Options::default()
        }
    }

    /// Only validate.
    pub fn validate_only(mut self) -> Self {
        self.validate_only = true;
        self
    }
}

/// The admin client. Cheap to clone (clones share the connections); calls from several
/// threads take turns on them.
#[derive(Clone)]
pub struct Admin {
    inner: Arc<AdminInner>,
}

pub(crate) struct AdminInner {
    config: AdminConfig,
    state: Mutex<State>,
    /// Signalled when a checkpoint ends (calls wait for it).
    resumed: Condvar,
}

struct State {
    io: Io,
    closed: bool,
    /// A checkpoint is under way: connections are closed and calls wait until it ends.
    checkpointing: bool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Admin {
    /// An admin client of `config` (nothing connects until the first call). By default it
    /// registers itself (weakly) in the global CRaC context (`crac.register`): it closes its
    /// connections before a checkpoint and bootstraps again after a restore.
    pub fn new(mut config: AdminConfig) -> Result<Self, config::ConfigError> {
        config.validate()?;
        if config.common.client_id.is_empty() {
            config.common.client_id =
                format!("adminclient-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        }
        let inner = Arc::new(AdminInner {
            state: Mutex::new(State {
                io: Io::new(&config.common),
                closed: false,
                checkpointing: false,
            }),
            config,
            resumed: Condvar::new(),
        });
        if inner.config.common.crac_register {
            crac_api::Core::global_context()
                .register_with_priority(&inner, crac_api::Priority::Network);
        }
        Ok(Admin { inner })
    }

    /// [`Admin::new`] from `key=value` properties (Java's admin keys).
    pub fn from_properties<K, V>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, config::ConfigError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        Self::new(AdminConfig::from_properties(props)?)
    }

    /// The admin client as a CRaC resource (to register in a context of your own when
    /// `crac.register=false`).
    pub fn as_resource(&self) -> Arc<dyn crac_api::Resource> {
        self.inner.clone()
    }

    /// Closes the connections; later calls fail with [`AdminError::Closed`].
    pub fn close(&self) {
        let mut s = self.inner.state.lock();
        s.closed = true;
        s.io.close_all();
    }

    /// Starts a call: its deadline, and the connections once no checkpoint holds them.
    fn call(
        &self,
        op: &'static str,
        opts: &Options,
    ) -> Result<(Call, MutexGuard<'_, State>), AdminError> {
        let call = Call::new(
            op,
            opts.timeout
                .unwrap_or(self.inner.config.default_api_timeout),
        );
        let mut s = self.inner.state.lock();
        while s.checkpointing {
            if self
                .inner
                .resumed
                .wait_until(&mut s, call.deadline)
                .timed_out()
            {
                return Err(AdminError::Timeout {
                    operation: op,
                    after: call.timeout,
                    last: Some("a checkpoint was under way".into()),
                });
            }
        }
        if s.closed {
            return Err(AdminError::Closed { operation: op });
        }
        Ok((call, s))
    }
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("client_id", &self.inner.config.common.client_id)
            .finish_non_exhaustive()
    }
}
