//! `multiarch gate-controller`: the compatibility path for clusters that keep the
//! default scheduler (gate mode).

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use multiarch_inspector::{ImageInspector, grpc::RemoteInspector};
use multiarch_scheduler::{
    gate::controller::{GateMetrics, GateOptions, start},
    ops::{
        http::{self, OpsState},
        logging,
    },
    runtime::leader::ElectionConfig,
};
use prometheus_client::registry::Registry;
use tracing::info;

use crate::cli::GateControllerArgs;

pub async fn run(args: &GateControllerArgs) -> anyhow::Result<()> {
    let _ = logging::init(args.log.log_format, &args.log.log_level);
    let client = kube::Client::try_default()
        .await
        .context("no kubeconfig and not in a cluster")?;
    let inspector: Arc<dyn ImageInspector> =
        Arc::new(RemoteInspector::new(&args.inspector_endpoint)?);
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "multiarch-gate-controller".into());
    let metrics = GateMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let options = GateOptions {
        own_namespace: args.namespace.clone(),
        identity: identity.clone(),
        concurrency: args.concurrency,
        max_attempts: 5,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
        election: Some(ElectionConfig {
            namespace: args.namespace.clone(),
            lease_name: "multiarch-gate-controller".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
    };
    let controller = start(client, inspector, options, metrics);
    let ops = OpsState {
        registry: Arc::new(registry),
        ready: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    http::spawn(args.metrics_addr, ops);
    info!("gate controller started");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        result = controller.task => result.context("gate controller stopped"),
    }
}
