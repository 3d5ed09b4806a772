//! `multiarch inspector`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, OpsArgs, duration_flag},
};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct InspectorArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    /// gRPC listen address.
    #[arg(
        long,
        default_value = "0.0.0.0:9443",
        env = "MULTIARCH_INSPECTOR_LISTEN"
    )]
    pub listen: SocketAddr,

    #[command(flatten)]
    #[serde(flatten)]
    pub ops: OpsArgs,

    /// Registry settings (YAML): CA bundles, plain-HTTP registries, mirrors, blocked.
    /// Followed: a change is in use within --registries-config-check.
    #[arg(long, value_name = "FILE", env = "MULTIARCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,

    /// The --registries-config file may be absent (an optional ConfigMap): no settings
    /// until it appears.
    #[arg(long, requires = "registries_config")]
    pub registries_config_optional: bool,

    /// How often the --registries-config file is checked for changes.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub registries_config_check: Duration,

    /// Do not read pull secrets from Kubernetes (anonymous pulls only).
    #[arg(long)]
    pub no_kubernetes: bool,

    /// Read the program each image's builds start (its ELF header and x86-64 level
    /// notes) in the background, and answer with what they need: an amd64 build's level,
    /// and no build whose program is of another architecture than its index entry says
    /// (the `binaryInspection` plugin). Costs the images' layers fetched once per build.
    #[arg(long)]
    pub read_binaries: bool,

    /// Inspection results kept in memory.
    #[arg(long, default_value_t = 10_000)]
    pub cache_size: usize,

    /// Memory the kept results may take in all, in MiB (estimated from their contents;
    /// the least recently used go first).
    #[arg(long, default_value_t = 64)]
    pub cache_max_mib: usize,

    /// How long an answer for a tag is trusted (digests never expire).
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "6h", value_parser = humantime::parse_duration)]
    pub tag_ttl: Duration,

    /// How long a failure is remembered before the registry is asked again.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub negative_ttl: Duration,

    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,

    /// For a whole inspection, retries and mirrors included.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// A directory with the gRPC port's certificate (`tls.crt`, `tls.key`) and the CAs
    /// every client's certificate must chain to (`ca.crt`): clients without one are
    /// refused at the handshake. Files are reloaded when they change. Without it the
    /// port speaks plain HTTP/2 to anyone who reaches it.
    #[arg(long, value_name = "DIR", env = "MULTIARCH_INSPECTOR_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(InspectorArgs, "inspector");
