//! Logging: text or JSON, level from `--log-level` (or `RUST_LOG`).

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; `RUST_LOG` wins over `level` when set.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    // A second init (tests) keeps the first subscriber.
    drop(result);
}
