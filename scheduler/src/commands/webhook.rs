//! `multiarch webhook`: the mutating admission webhook.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context;
use futures_util::StreamExt;
use kube::{
    Api,
    runtime::{WatchStreamExt, reflector, watcher},
};
use multiarch_crd::{ClusterPodPlacementConfig, PlacementMode, PodPlacementConfig};
use multiarch_scheduler::webhook::{
    decision::WebhookConfig,
    server::{WebhookMetrics, WebhookState, bind, serve},
    tls::server_config,
};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use multiarch_scheduler::ops::logging;

use crate::cli::WebhookArgs;

pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let _ = logging::init(args.log.log_format, &args.log.log_level);
    let config = Arc::new(RwLock::new(WebhookConfig {
        mode: args.mode.unwrap_or(PlacementMode::Scheduler),
        scheduler_name: args.scheduler_name.clone(),
        own_namespace: args.namespace.clone(),
        preferences_enabled: false,
        pod_configs: Arc::default(),
    }));
    if !args.no_kubernetes {
        // The mode and preferences follow the ClusterPodPlacementConfig, unless pinned.
        let client = kube::Client::try_default().await.context(
            "cannot reach the Kubernetes API (use --no-kubernetes with --mode outside a cluster)",
        )?;
        follow_pod_configs(client.clone(), config.clone());
        let pinned = args.mode.is_some();
        let shared = config.clone();
        tokio::spawn(async move {
            let api: Api<ClusterPodPlacementConfig> = Api::all(client);
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let spec = match event {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => Some(c.spec),
                    Ok(watcher::Event::Delete(_)) => None,
                    Ok(_) => continue,
                    Err(e) => {
                        warn!(error = %e, "cannot watch the ClusterPodPlacementConfig");
                        continue;
                    }
                };
                let mut config = shared
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let placement = spec
                    .as_ref()
                    .map(|s| s.placement_or_default())
                    .unwrap_or_default();
                if !pinned {
                    config.mode = placement.mode;
                }
                config.preferences_enabled = spec
                    .as_ref()
                    .and_then(|s| s.plugins.as_ref())
                    .and_then(|p| p.enabled_node_affinity_scoring())
                    .is_some();
                info!(mode = ?config.mode, "webhook configuration updated");
            }
        });
    }
    let tls = server_config(args.cert.clone(), args.key.clone(), Duration::from_secs(10))?;
    let metrics = WebhookMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let state = WebhookState {
        config,
        metrics,
        registry: Arc::new(registry),
    };
    let listener = bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(listen = %args.listen, "serving admission reviews on /mutate-pods");
    tokio::select! {
        () = serve(listener, tls, state) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Gate mode: a PodPlacementConfig that selects a pod decides its preferred-affinity label
/// like the cluster-wide config does. Kept whole in memory (a reflector, which relists
/// after a dropped watch); they are few.
fn follow_pod_configs(client: kube::Client, config: Arc<RwLock<WebhookConfig>>) {
    tokio::spawn(async move {
        let (store, writer) = reflector::store::<PodPlacementConfig>();
        let api: Api<PodPlacementConfig> = Api::all(client);
        let mut stream = reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => {
                    warn!(error = %e, "cannot watch PodPlacementConfigs");
                    continue;
                }
                // A relist fills the store's buffer and swaps it in at InitDone: copying
                // the unchanged store for each listed object would be quadratic.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => {}
            }
            let configs: Vec<PodPlacementConfig> =
                store.state().iter().map(|c| (**c).clone()).collect();
            config
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pod_configs = Arc::new(configs);
        }
    });
}
