//! End-to-end test support.

pub mod criu_app;
pub mod java_member;
pub mod kafka;
pub mod netns;
pub mod process;
pub mod registry;
pub mod resident;
pub mod service;
pub mod stream;
pub mod users;
pub mod warm;

/// Logging of the test services: `tracing` to stderr, filtered by `SVC_LOG` (default `warn`).
pub fn service_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SVC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
