//! `multiarch scheduler`: the secondary scheduler in a cluster.

use std::time::Duration;

use multiarch_scheduler::in_cluster::{self, SchedulerOptions, metrics::SchedulerMetrics};
use tracing::info;

use super::{role::Role, scheduler_images::image_source};
use multiarch_flags::SchedulerArgs;

pub async fn run(args: &SchedulerArgs) -> anyhow::Result<()> {
    let (mut role, log_filter) = Role::begin(&args.log, false);
    let client = args.client.connect().await?;

    let metrics = SchedulerMetrics::default();
    metrics.register(&mut role.registry);
    let inspector = image_source(args, &client, &mut role)?;

    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let lease_name = args.lease_name.as_ref().unwrap_or(&args.scheduler_name);
    let options = SchedulerOptions {
        scheduler_name: args.scheduler_name.clone(),
        identity: identity.clone(),
        election: args
            .lease
            .election(&args.namespace, lease_name, &identity)?,
        bind_concurrency: args.bind_concurrency,
        report_capacity: 10_000,
        inspection_retry: Duration::from_secs(30),
        config_grace: Duration::from_secs(30),
        api_qps: args.kube_api_qps,
        api_burst: args.kube_api_burst,
        volume_bind_timeout: args.volume_bind_timeout,
    };
    let running = in_cluster::start(client, options, inspector, metrics, &role.tasks);

    super::role::follow_log_verbosity(&role, log_filter, running.log_verbosity.clone());
    role.ready_from(running.ready.clone());
    role.tasks.spawn("scheduling loop", async move {
        match running.task.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the scheduling loop panicked: {e}")),
        }
    });

    info!(name = %args.scheduler_name, %identity, "scheduler started");
    role.serve_and_wait(args.metrics_addr).await
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
