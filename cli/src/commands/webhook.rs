//! `multiarch webhook`: the mutating admission webhook.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context;
use multiarch_admission::webhook::{
    configuration,
    decision::WebhookConfig,
    image_lookup::{AdmissionLookup, Credentials},
    metrics::WebhookMetrics,
    server::{ServerLimits, WebhookState, bind, serve_with},
    tls::server_config,
};
use multiarch_crd::PlacementMode;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{
    mutual_tls::{self, TlsDir},
    placement_config,
};
use tracing::info;

use super::{inspector_client::remote_inspector_at, role::Role};
use crate::args::WebhookArgs;

pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let (role, _) = Role::begin(&args.log, true);
    let tasks = &role.tasks;
    let config = Arc::new(RwLock::new(WebhookConfig::new(
        args.mode.unwrap_or(PlacementMode::Scheduler),
        args.scheduler_name
            .as_deref()
            .unwrap_or(multiarch_crd::names::DEFAULT_SCHEDULER_NAME),
        &args.namespace,
    )));
    if !args.no_kubernetes {
        // Until the ClusterPodPlacementConfig is read, the mode is a guess: not ready.
        if args.mode.is_none() {
            config
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .known = false;
        }
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
    let tls = match &args.client_ca {
        Some(ca) => mutual_tls::server_config(
            &TlsDir {
                cert: args.cert.clone(),
                key: args.key.clone(),
                ca: ca.clone(),
            },
            Duration::from_secs(10),
        )?,
        None => server_config(args.cert.clone(), args.key.clone(), Duration::from_secs(10))?,
    };
    let credentials = if args.client_ca.is_some() || args.callers_limited_to_api_server {
        Credentials::PodSecrets
    } else {
        Credentials::Anonymous
    };
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
    let shutdown = tasks.shutdown().clone();
    let shutdown_delay = args.shutdown_delay;
    tasks.spawn("admission server", async move {
        let limits = ServerLimits {
            shutdown_delay,
            // The API server gives a review at most 30 s (`timeoutSeconds`, 5 s here).
            request_timeout: Duration::from_secs(10),
            ..ServerLimits::default()
        };
        serve_with(listener, tls, state, shutdown, limits).await;
        Ok::<(), std::convert::Infallible>(())
    });
    // Its /metrics and /readyz are on the HTTPS port, with the reviews.
    role.wait().await
}
