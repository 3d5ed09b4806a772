//! `multiarch scheduler`: the secondary scheduler in a cluster.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, Inspector, cache::CacheOptions, grpc::RemoteInspector,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::KubeSecrets,
    settings::RegistrySettings,
};
use multiarch_scheduler::runtime::{
    self, RuntimeOptions, leader::ElectionConfig, metrics::SchedulerMetrics,
};
use prometheus_client::registry::Registry;
use tracing::info;

use multiarch_scheduler::ops::{
    http::{self, OpsState},
    logging,
};

use crate::cli::SchedulerArgs;

pub async fn run(args: &SchedulerArgs) -> anyhow::Result<()> {
    let filter = logging::init(args.log.log_format, &args.log.log_level);
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    let client = kube::Client::try_from(config).context("cannot build the Kubernetes client")?;

    let mut registry = Registry::default();
    let metrics = SchedulerMetrics::default();
    metrics.register(&mut registry);
    let inspector: Arc<dyn ImageInspector> = match &args.inspector_endpoint {
        Some(endpoint) => Arc::new(RemoteInspector::new(endpoint)?),
        None => {
            let settings = match &args.registries_config {
                Some(path) => RegistrySettings::load(path)?,
                None => RegistrySettings::default(),
            };
            let inspector_metrics = InspectorMetrics::default();
            inspector_metrics.register(&mut registry);
            Arc::new(Inspector::new(
                settings,
                RegistryOptions::default(),
                CacheOptions::default(),
                Arc::new(KubeSecrets::new(client.clone(), Duration::from_secs(30))),
                inspector_metrics,
            ))
        }
    };

    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let options = RuntimeOptions {
        scheduler_name: args.scheduler_name.clone(),
        identity: identity.clone(),
        election: args.leader_elect.then(|| ElectionConfig {
            namespace: args.namespace.clone(),
            lease_name: args
                .lease_name
                .clone()
                .unwrap_or_else(|| args.scheduler_name.clone()),
            identity: identity.clone(),
            lease_duration: args.lease_duration,
            renew_deadline: args.renew_deadline,
            retry_period: args.retry_period,
        }),
        bind_concurrency: args.bind_concurrency,
        report_capacity: 10_000,
        inspection_retry: Duration::from_secs(30),
        config_grace: Duration::from_secs(30),
        api_qps: args.kube_api_qps,
        api_burst: args.kube_api_burst,
    };
    let runtime = runtime::start(client, options, inspector, metrics);

    let ready = Arc::new(AtomicBool::new(false));
    let ops = OpsState {
        registry: Arc::new(registry),
        ready: ready.clone(),
    };
    http::spawn(args.metrics_addr, ops);
    if let Some(handle) = filter {
        let mut verbosity = runtime.log_verbosity.clone();
        tokio::spawn(async move {
            while verbosity.changed().await.is_ok() {
                let level = *verbosity.borrow();
                if handle
                    .reload(tracing_subscriber::EnvFilter::new(level.filter_directive()))
                    .is_ok()
                {
                    info!(
                        ?level,
                        "log verbosity changed by the ClusterPodPlacementConfig"
                    );
                }
            }
        });
    }
    let mut ready_rx = runtime.ready.clone();
    tokio::spawn(async move {
        while ready_rx.changed().await.is_ok() {
            ready.store(*ready_rx.borrow(), std::sync::atomic::Ordering::Relaxed);
        }
    });

    info!(name = %args.scheduler_name, %identity, "scheduler started");
    let mut task = runtime;
    tokio::select! {
        _ = shutdown_signal() => {
            info!("shutting down");
            task.shutdown().await?;
            Ok(())
        }
        result = &mut task.task => {
            result.context("scheduler loop panicked")??;
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let terminate = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "multiarch-scheduler".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{nanos:08x}")
}
