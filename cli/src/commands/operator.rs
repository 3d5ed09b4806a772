//! `multiarch operator`: installs every role from the ClusterPodPlacementConfig and
//! serves the CRD conversion and validation webhooks.

use anyhow::Context;
use multiarch_operator::{
    install::{OPERATOR, Settings},
    metrics::OperatorMetrics,
    operand_image::operand_image,
    run::{OperatorOptions, start},
};
use multiarch_runtime::{https_server, role_args::replica_identity};
use tracing::info;

use super::role::Role;
use multiarch_flags::OperatorArgs;

pub async fn run(args: &OperatorArgs) -> anyhow::Result<()> {
    let (mut role, log_filter) = Role::begin(&args.log, false);
    let client = args.client.connect().await?;
    let pod_name = std::env::var("POD_NAME").ok();
    let pinned = args.operand_image.as_deref();
    let image = operand_image(&client, &args.namespace, pod_name.as_deref(), pinned).await?;
    let identity = replica_identity(OPERATOR);
    let options = OperatorOptions {
        settings: Settings::from_flags(args, image)?,
        election: args.lease.election(&args.namespace, OPERATOR, &identity)?,
        identity,
        drain_timeout: args.drain_timeout,
        route_settle: args.route_settle,
        certificate_check: args.certificate_check,
    };
    info!(image = %options.settings.image, namespace = %options.settings.namespace, "operator starting");
    let metrics = OperatorMetrics::default();
    metrics.register(&mut role.registry);
    let listener = https_server::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // The webhook server serves the same metrics as the operations server.
    let mut webhook_registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut webhook_registry);
    let running = start(
        client,
        options,
        listener,
        webhook_registry,
        metrics,
        &role.tasks,
    );
    super::role::follow_log_verbosity(&role, log_filter, running.log_verbosity.clone());
    // Ready once it serves its webhooks (with its certificate).
    let serving = running.serving.clone();
    role.ready_when(move || serving.is_set());
    role.serve_and_wait(args.ops.metrics_addr).await
}
