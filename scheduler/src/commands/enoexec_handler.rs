//! `multiarch enoexec-handler`: leader-elected, in multiarch's namespace.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::Context;
use multiarch_inspector::{ImageInspector, grpc::RemoteInspector};
use multiarch_scheduler::{
    enoexec::handler::{HandlerMetrics, HandlerOptions, start},
    ops::{
        http::{self, OpsState},
        logging,
    },
    runtime::leader::ElectionConfig,
};
use prometheus_client::registry::Registry;
use tracing::info;

use crate::cli::EnoexecHandlerArgs;

pub async fn run(args: &EnoexecHandlerArgs) -> anyhow::Result<()> {
    let _ = logging::init(args.log.log_format, &args.log.log_level);
    let client = kube::Client::try_default()
        .await
        .context("no kubeconfig and not in a cluster")?;
    let inspector: Option<Arc<dyn ImageInspector>> = if args.inspector_endpoint.is_empty() {
        None
    } else {
        Some(Arc::new(RemoteInspector::new(&args.inspector_endpoint)?))
    };
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "multiarch-enoexec-handler".into());
    let metrics = HandlerMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let options = HandlerOptions {
        namespace: args.namespace.clone(),
        identity: identity.clone(),
        incomplete_grace: Duration::from_secs(60),
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
        election: Some(ElectionConfig {
            namespace: args.namespace.clone(),
            lease_name: "multiarch-enoexec-handler".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
    };
    let handler = start(client, inspector, options, metrics);
    let ops = OpsState {
        registry: Arc::new(registry),
        ready: Arc::new(AtomicBool::new(true)),
    };
    http::spawn(args.metrics_addr, ops);
    info!("ENoExecEvent handler started");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        result = handler.task => result.context("ENoExecEvent handler stopped"),
    }
}
