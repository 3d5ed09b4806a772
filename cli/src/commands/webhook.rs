//! `multiarch webhook`: the mutating admission webhook.

use std::sync::Arc;

use anyhow::Context;
use multiarch_admission::webhook::{
    configuration,
    image_lookup::{AdmissionLookup, Credentials},
    metrics::WebhookMetrics,
    server::{WebhookState, serve_with, webhook_limits},
    tls::webhook_tls,
};
use multiarch_runtime::https_server::bind;
use tracing::info;

use super::{inspector_client::remote_inspector_at, role::Role};
use multiarch_flags::WebhookArgs;

pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = if args.no_kubernetes {
        None
    } else {
        Some(args.client.connect().await.context(
            "cannot reach the Kubernetes API (use --no-kubernetes with --mode outside a cluster)",
        )?)
    };
    let scheduler_name = args.scheduler_name.as_deref();
    let (namespace, tasks) = (&args.namespace, &role.tasks);
    let config = configuration::start(args.mode, scheduler_name, namespace, client.as_ref(), tasks);
    let tls = webhook_tls(args.cert.clone(), args.key.clone(), args.client_ca.clone())?;
    let credentials =
        Credentials::for_callers(args.client_ca.is_some() || args.callers_limited_to_api_server);
    let lookup = match &args.inspector_endpoint {
        Some(endpoint) => {
            let inspector = Arc::new(remote_inspector_at(endpoint, &args.inspector_tls)?);
            let deadline = args.admission_lookup_deadline;
            info!(%endpoint, ?deadline, ?credentials, "architecture constraint at admission");
            let in_flight = args.admission_lookups_in_flight;
            Some(AdmissionLookup::new(
                inspector,
                deadline,
                in_flight,
                credentials,
            ))
        }
        None => None,
    };
    let metrics = WebhookMetrics::default();
    metrics.register(&mut role.registry);
    // Its /metrics and /readyz are on the HTTPS port, with the reviews.
    let registry = Arc::new(std::mem::take(&mut role.registry));
    let state = WebhookState {
        config,
        metrics,
        registry,
        lookup,
        reviews_need_client_certificate: args.client_ca.is_some(),
    };
    let listener = bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(listen = %args.listen, "serving admission reviews on /mutate-pods");
    let limits = webhook_limits(args.shutdown_delay);
    let shutdown = role.tasks.shutdown().clone();
    let server = serve_with(listener, tls, state, shutdown, limits);
    role.tasks.spawn_infallible("admission server", server);
    role.wait().await
}
