//! `multiarch webhook`: the mutating admission webhook.

use std::sync::Arc;

use anyhow::Context;
use multiarch_admission::webhook::{
    configuration,
    image_lookup::{AdmissionLookup, Credentials},
    metrics::WebhookMetrics,
    server::{WebhookState, bind, serve_with, webhook_limits},
    tls::webhook_tls,
};
use multiarch_inspector::ImageInspector;
use multiarch_runtime::placement_config;
use tracing::info;

use super::{inspector_client::remote_inspector_at, role::Role};
use crate::args::WebhookArgs;

pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let (role, _) = Role::begin(&args.log, true);
    let tasks = &role.tasks;
    let config = configuration::initial(
        args.mode,
        args.scheduler_name.as_deref(),
        &args.namespace,
        !args.no_kubernetes,
    );
    if !args.no_kubernetes {
        // The mode and preferences follow the ClusterPodPlacementConfig, unless pinned.
        let client = args.client.connect().await.context(
            "cannot reach the Kubernetes API (use --no-kubernetes with --mode outside a cluster)",
        )?;
        let configs = placement_config::follow(&client, tasks);
        let pinned = configuration::Pinned {
            mode: args.mode.is_some(),
            scheduler_name: args.scheduler_name.is_some(),
        };
        configuration::follow(configs, config.clone(), pinned, tasks);
    }
    let tls = webhook_tls(args.cert.clone(), args.key.clone(), args.client_ca.clone())?;
    let credentials =
        Credentials::for_callers(args.client_ca.is_some() || args.callers_limited_to_api_server);
    let metrics = WebhookMetrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let lookup = match &args.inspector_endpoint {
        Some(endpoint) => {
            let inspector: Arc<dyn ImageInspector> =
                Arc::new(remote_inspector_at(endpoint, &args.inspector_tls)?);
            info!(%endpoint, deadline = ?args.admission_lookup_deadline, ?credentials, "architecture constraint at admission");
            Some(AdmissionLookup::new(
                inspector,
                args.admission_lookup_deadline,
                args.admission_lookups_in_flight,
                credentials,
            ))
        }
        None => None,
    };
    let state = WebhookState {
        config,
        metrics,
        registry: Arc::new(registry),
        lookup,
    };
    let listener = bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(listen = %args.listen, "serving admission reviews on /mutate-pods");
    let limits = webhook_limits(args.shutdown_delay);
    let shutdown = tasks.shutdown().clone();
    role.spawn_server(
        "admission server",
        serve_with(listener, tls, state, shutdown, limits),
    );
    // Its /metrics and /readyz are on the HTTPS port, with the reviews.
    role.wait().await
}
