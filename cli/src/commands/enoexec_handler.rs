//! `multiarch enoexec-handler`: leader-elected, in multiarch's namespace.

use std::{sync::Arc, time::Duration};

use multiarch_enoexec::handler::{HandlerOptions, metrics::HandlerMetrics, start};
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{client, role_args::replica_identity};
use tracing::info;

use super::{inspector_client::remote_inspector, role::Role};
use multiarch_flags::EnoexecHandlerArgs;

/// The handler's Lease, and its replicas' name outside a pod.
const LEASE_NAME: &str = "multiarch-enoexec-handler";

pub async fn run(args: &EnoexecHandlerArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = args.client.connect().await?;
    let evictions = client::connect_without_retries(args.client.kubeconfig.as_deref()).await?;
    let inspector: Option<Arc<dyn ImageInspector>> = if args.inspector.endpoint.is_empty() {
        None
    } else {
        Some(Arc::new(remote_inspector(&args.inspector)?))
    };
    let identity = replica_identity(LEASE_NAME);
    let metrics = HandlerMetrics::default();
    metrics.register(&mut role.registry);
    let options = HandlerOptions {
        namespace: args.namespace.clone(),
        identity: identity.clone(),
        incomplete_grace: Duration::from_secs(60),
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
        correction_scan_interval: args.misplaced_scan_interval,
        correction_scan_max_pods: args.misplaced_scan_max_pods,
        election: args
            .lease
            .election(&args.namespace, LEASE_NAME, &identity)?,
    };
    start(client, evictions, inspector, options, metrics, &role.tasks);
    info!("ENoExecEvent handler started");
    role.serve_and_wait(args.ops.metrics_addr).await
}
