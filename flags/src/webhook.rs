//! `multiarch webhook`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use multiarch_crd::PlacementMode;
use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, duration_flag},
};
use serde::Serialize;

use crate::inspector_client::InspectorTlsArgs;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct WebhookArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    /// HTTPS listen address.
    #[arg(long, default_value = "0.0.0.0:9443", env = "MULTIARCH_WEBHOOK_LISTEN")]
    pub listen: SocketAddr,

    /// PEM certificate chain; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.crt")]
    pub cert: PathBuf,

    /// PEM private key; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.key")]
    pub key: PathBuf,

    /// Pin the scheduler name pods are routed to [default: the ClusterPodPlacementConfig's
    /// `spec.placement.schedulerName`, followed as it changes; multiarch-scheduler without
    /// one or with --no-kubernetes].
    #[arg(long, env = "MULTIARCH_SCHEDULER_NAME")]
    pub scheduler_name: Option<String>,

    /// multiarch's namespace, whose pods are never touched.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Pin the mode instead of following the ClusterPodPlacementConfig.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<PlacementMode>,

    /// Do not watch the ClusterPodPlacementConfig (tests, or --mode pinned).
    #[arg(long)]
    pub no_kubernetes: bool,

    /// The inspector (`multiarch inspector`) that answers routed pods' image platforms, so
    /// the architecture constraint joins the admission patch. Without it pods are routed
    /// without the constraint.
    #[arg(long, env = "MULTIARCH_INSPECTOR_ENDPOINT")]
    pub inspector_endpoint: Option<String>,

    #[command(flatten)]
    #[serde(flatten)]
    pub inspector_tls: InspectorTlsArgs,

    /// CAs the callers' client certificates must chain to: the one the API server
    /// presents to webhooks (its admission configuration's kubeconfig). Other callers
    /// are refused at the handshake, and lookups at admission use the pod's pull secrets.
    /// Reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,

    /// Only the API server can reach this port (a NetworkPolicy that admits only its
    /// addresses, enforced by the network plugin): lookups at admission use the pod's
    /// pull secrets. Without it or --client-ca they use none: a crafted review naming
    /// another namespace's secrets learns nothing (private images are routed without
    /// the constraint; the scheduler still places them by their images).
    #[arg(long)]
    pub callers_limited_to_api_server: bool,

    /// After SIGTERM, how long the webhook goes on answering (with `/readyz` at 503)
    /// before it closes its port, so that the API server's requests already on their way
    /// while the pod leaves the Service's endpoints are answered.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,

    /// How long admission waits for the images' platforms before routing the pod without
    /// the constraint (well inside the webhook's `timeoutSeconds`).
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub admission_lookup_deadline: Duration,

    /// Image lookups at once, those finishing in the background included; a pod beyond
    /// them is routed without the constraint.
    #[arg(long, default_value_t = 256)]
    pub admission_lookups_in_flight: usize,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(WebhookArgs, "webhook");

fn parse_mode(text: &str) -> Result<PlacementMode, String> {
    match text {
        "Scheduler" => Ok(PlacementMode::Scheduler),
        "SchedulingGate" => Ok(PlacementMode::SchedulingGate),
        other => Err(format!(
            "unknown mode {other:?}: use Scheduler or SchedulingGate"
        )),
    }
}
