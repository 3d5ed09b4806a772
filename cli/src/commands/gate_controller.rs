//! `multiarch gate-controller`: the compatibility path for clusters that keep the
//! default scheduler (gate mode).

use std::{sync::Arc, time::Duration};

use multiarch_admission::gate::{controller::start, metrics::GateMetrics, options::GateOptions};
use multiarch_inspector::ImageInspector;
use multiarch_runtime::role_args::replica_identity;
use tracing::info;

use super::{inspector_client::remote_inspector, role::Role};
use multiarch_flags::GateControllerArgs;

/// The gate controller's Lease, and its replicas' name outside a pod.
const LEASE_NAME: &str = "multiarch-gate-controller";

pub async fn run(args: &GateControllerArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = args.client.connect().await?;
    let inspector: Arc<dyn ImageInspector> = Arc::new(remote_inspector(&args.inspector)?);
    let identity = replica_identity(LEASE_NAME);
    let metrics = GateMetrics::default();
    metrics.register(&mut role.registry);
    let options = GateOptions {
        own_namespace: args.namespace.clone(),
        identity: identity.clone(),
        concurrency: args.concurrency,
        images_at_once: 4,
        // Longer than one inspection's own deadline (30 s): one slow image still gets it.
        pod_inspection_deadline: Duration::from_secs(40),
        max_attempts: 5,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
        election: args
            .lease
            .election(&args.namespace, LEASE_NAME, &identity)?,
    };
    start(client, inspector, options, metrics, &role.tasks);
    info!("gate controller started");
    role.serve_and_wait(args.ops.metrics_addr).await
}
