//! `multiarch enoexec-handler`: leader-elected, in multiarch's namespace.

use std::{sync::Arc, time::Duration};

use multiarch_enoexec::handler::{HandlerOptions, metrics::HandlerMetrics, start};
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{client, leader_election::ElectionConfig};
use tracing::info;

use super::{inspector_client::remote_inspector, role::Role};
use crate::args::EnoexecHandlerArgs;

pub async fn run(args: &EnoexecHandlerArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = client::connect(None).await?;
    let evictions = client::connect_without_retries(None).await?;
    let inspector: Option<Arc<dyn ImageInspector>> = if args.inspector_endpoint.is_empty() {
        None
    } else {
        Some(Arc::new(remote_inspector(
            &args.inspector_endpoint,
            &args.inspector_tls,
        )?))
    };
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "multiarch-enoexec-handler".into());
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
        election: Some(ElectionConfig {
            namespace: args.namespace.clone(),
            lease_name: "multiarch-enoexec-handler".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
    };
    start(client, evictions, inspector, options, metrics, &role.tasks);
    info!("ENoExecEvent handler started");
    role.serve_and_wait(args.metrics_addr).await
}
