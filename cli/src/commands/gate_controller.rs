//! `multiarch gate-controller`: the compatibility path for clusters that keep the
//! default scheduler (gate mode).

use std::{sync::Arc, time::Duration};

use multiarch_admission::gate::{controller::start, metrics::GateMetrics, options::GateOptions};
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{client, leader_election::ElectionConfig};
use tracing::info;

use super::{inspector_client::remote_inspector, role::Role};
use crate::args::GateControllerArgs;

pub async fn run(args: &GateControllerArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = client::connect(None).await?;
    let inspector: Arc<dyn ImageInspector> = Arc::new(remote_inspector(
        &args.inspector_endpoint,
        &args.inspector_tls,
    )?);
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "multiarch-gate-controller".into());
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
        election: Some(ElectionConfig {
            namespace: args.namespace.clone(),
            lease_name: "multiarch-gate-controller".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
    };
    start(client, inspector, options, metrics, &role.tasks);
    info!("gate controller started");
    role.serve_and_wait(args.metrics_addr).await
}
