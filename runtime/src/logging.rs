//! Logging: text or JSON, level from `--log-level` (or `RUST_LOG`).

use tracing_subscriber::{EnvFilter, Registry, fmt, prelude::*, reload};

/// Changes the log filter at run time (from the ClusterPodPlacementConfig's
/// `logVerbosity`), unless `RUST_LOG` pins it.
pub type FilterHandle = reload::Handle<EnvFilter, Registry>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Logging flags shared by the long-running roles.
#[derive(Clone, Debug, PartialEq, clap::Args, serde::Serialize)]
pub struct LogArgs {
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "MULTIARCH_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// tracing filter (info, debug, multiarch=trace...); RUST_LOG wins when set.
    #[arg(long, default_value = "info", env = "MULTIARCH_LOG_LEVEL")]
    pub log_level: String,
}

/// Installs the global subscriber from the role's flags; see [`init`].
pub fn init_from(args: &LogArgs) -> Option<FilterHandle> {
    init(args.log_format, &args.log_level)
}

/// Installs the global subscriber; `RUST_LOG` wins over `level` when set. Returns the
/// handle that changes the filter, unless `RUST_LOG` is set.
pub fn init(format: LogFormat, level: &str) -> Option<FilterHandle> {
    let pinned = EnvFilter::try_from_default_env().ok();
    let from_env = pinned.is_some();
    let (filter, handle) = reload::Layer::new(pinned.unwrap_or_else(|| EnvFilter::new(level)));
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
    (!from_env).then_some(handle)
}
