//! `multiarch scheduler`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, LeaseArgs, duration_flag},
};
use serde::Serialize;

use crate::inspector_client::InspectorTlsArgs;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct SchedulerArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub lease: LeaseArgs,

    /// The schedulerName of the pods this scheduler places.
    #[arg(
        long,
        default_value = "multiarch-scheduler",
        env = "MULTIARCH_SCHEDULER_NAME"
    )]
    pub scheduler_name: String,

    /// Namespace of the leader-election Lease (multiarch's own).
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// The Lease name; defaults to the scheduler name (never kube-scheduler's).
    #[arg(long)]
    pub lease_name: Option<String>,

    /// This replica's identity in the Lease and events; defaults to the pod name plus a suffix.
    #[arg(long, env = "MULTIARCH_IDENTITY")]
    pub identity: Option<String>,

    /// Concurrent pods/binding calls.
    #[arg(long, default_value_t = 16)]
    pub bind_concurrency: usize,

    /// Requests per second for per-pod writes (bindings, events, status); 0: unlimited.
    #[arg(long, default_value_t = 50.0, env = "MULTIARCH_KUBE_API_QPS")]
    pub kube_api_qps: f64,

    /// Requests that may go at once above the QPS.
    #[arg(long, default_value_t = 100, env = "MULTIARCH_KUBE_API_BURST")]
    pub kube_api_burst: u32,

    /// How long a pod's PersistentVolumeClaims may take to be bound (or provisioned)
    /// after the scheduler chose their volumes or node, before its binding fails and it
    /// is retried (kube-scheduler's `bindTimeoutSeconds`).
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub volume_bind_timeout: Duration,

    /// Use a remote inspector (`multiarch inspector`) instead of inspecting in-process.
    #[arg(long, env = "MULTIARCH_INSPECTOR_ENDPOINT")]
    pub inspector_endpoint: Option<String>,

    #[command(flatten)]
    #[serde(flatten)]
    pub inspector_tls: InspectorTlsArgs,

    /// Image platforms from this file (the `images:` map of the `simulate --scenario`
    /// format) instead of the registries: for `multiarch bench` and registry-less runs.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["inspector_endpoint", "registries_config"])]
    pub image_platforms: Option<PathBuf>,

    /// Registry settings for in-process inspection.
    #[arg(long, value_name = "FILE", env = "MULTIARCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,

    /// Metrics and health listen address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:10259", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(SchedulerArgs, "scheduler");
