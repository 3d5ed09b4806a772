//! `multiarch inspector --listen ADDR`: the image-inspection gRPC service; in a cluster it
//! reads the pods' pull secrets itself.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, Inspector,
    cache::CacheOptions,
    grpc::InspectorService,
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::{KubeSecrets, SecretSource, StaticKeyring},
    settings::RegistrySettings,
};
use prometheus_client::registry::Registry;
use tracing::info;

use multiarch_scheduler::ops::{
    http::{OpsState, serve},
    logging,
};

use crate::cli::InspectorArgs;

pub async fn run(args: &InspectorArgs) -> anyhow::Result<()> {
    let _ = logging::init(args.log.log_format, &args.log.log_level);
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    let secrets: Arc<dyn SecretSource> = if args.no_kubernetes {
        Arc::new(StaticKeyring::default())
    } else {
        let client = kube::Client::try_default()
            .await
            .context("cannot reach the Kubernetes API to read pull secrets (use --no-kubernetes outside a cluster)")?;
        Arc::new(KubeSecrets::new(client, Duration::from_secs(30)))
    };
    let metrics = InspectorMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let cache = CacheOptions {
        capacity: args.cache_size,
        tag_ttl: args.tag_ttl,
        negative_ttl: args.negative_ttl,
    };
    let registry_options = RegistryOptions {
        connect_timeout: args.connect_timeout,
        total_timeout: args.timeout,
        ..RegistryOptions::default()
    };
    let inspector: Arc<dyn ImageInspector> = Arc::new(Inspector::new(
        settings,
        registry_options,
        cache,
        secrets,
        metrics,
    ));

    let ready = Arc::new(AtomicBool::new(true));
    let ops = OpsState {
        registry: Arc::new(registry),
        ready,
    };
    let metrics_addr = args.metrics_addr;
    tokio::spawn(async move {
        if let Err(e) = serve(metrics_addr, ops).await {
            tracing::error!(error = %e, "operations endpoint stopped");
        }
    });

    info!(listen = %args.listen, metrics = %args.metrics_addr, "serving image inspection");
    tonic::transport::Server::builder()
        .add_service(InspectorService::new(inspector))
        .serve_with_shutdown(args.listen, async {
            let _ = tokio::signal::ctrl_c().await;
            info!("shutting down");
        })
        .await
        .with_context(|| format!("cannot serve gRPC on {}", args.listen))
}
