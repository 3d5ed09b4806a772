//! `multiarch enoexec-handler`.

use std::time::Duration;

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, LeaseArgs, OpsArgs, duration_flag},
};
use serde::Serialize;

use crate::inspector_client::InspectorServiceArgs;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct EnoexecHandlerArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub lease: LeaseArgs,

    /// multiarch's namespace: where ENoExecEvents and the Lease live.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    #[command(flatten)]
    #[serde(flatten)]
    pub inspector: InspectorServiceArgs,

    /// With `misplacedPodCorrection` on: how often running pods are compared with their
    /// nodes' architectures (exec format errors are acted on at once).
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub misplaced_scan_interval: Duration,

    /// Running pods one scan looks at, at most (their images are inspected, cached).
    #[arg(long, default_value_t = 2000)]
    pub misplaced_scan_max_pods: usize,

    #[command(flatten)]
    #[serde(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(EnoexecHandlerArgs, "enoexec-handler", inspector_caller);
