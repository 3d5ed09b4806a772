//! `multiarch gate-controller`.

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, LeaseArgs, OpsArgs},
};
use serde::Serialize;

use crate::inspector_client::InspectorServiceArgs;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct GateControllerArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub inspector: InspectorServiceArgs,

    /// multiarch's namespace (never processed; holds the Lease).
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Pods processed at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,

    #[command(flatten)]
    #[serde(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(GateControllerArgs, "gate-controller", inspector_caller);
