//! `multiarch scheduler`: the secondary scheduler in a cluster.

use std::time::Duration;

use multiarch_scheduler::in_cluster::{
    self, SchedulerOptions,
    inspector_reach::{self, OwnPod, ProbeOptions},
    metrics::SchedulerMetrics,
};
use tracing::{info, warn};

use super::{role::Role, scheduler_images::image_source};
use multiarch_flags::SchedulerArgs;

pub async fn run(args: &SchedulerArgs) -> anyhow::Result<()> {
    let (mut role, log_filter) = Role::begin(&args.log, false);
    let client = args.client.connect().await?;

    let metrics = SchedulerMetrics::default();
    metrics.register(&mut role.registry);
    let images = image_source(args, &client, &mut role)?;

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
    let reach = images.remote.map(|remote| {
        let own_pod = own_pod();
        if own_pod.is_none() {
            warn!("POD_NAME or POD_NAMESPACE unset: whether the image inspector answers is told by readiness and metrics only, not on the pod");
        }
        let probes = ProbeOptions::default();
        inspector_reach::start(remote, probes, own_pod, client.clone(), metrics.clone(), &role.tasks)
    });
    if reach.is_none() {
        // Images are read in process (or from a file): nothing to reach.
        metrics.inspector_reachable.set(1);
    }
    let running = in_cluster::start(client, options, images.inspector, metrics, &role.tasks);

    super::role::follow_log_verbosity(&role, log_filter, running.log_verbosity.clone());
    match reach {
        // Ready once the lists are in and the inspector answers.
        Some(reach) => {
            let synced = running.ready.clone();
            role.ready_when(move || *synced.borrow() && reach.borrow().is_reachable());
        }
        None => role.ready_from(running.ready.clone()),
    }
    role.tasks.spawn("scheduling loop", async move {
        match running.task.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the scheduling loop panicked: {e}")),
        }
    });

    // The tunables tell whether the heap asked for huge pages (see `huge_pages`).
    let glibc_tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    info!(name = %args.scheduler_name, %identity, %glibc_tunables, "scheduler started");
    role.serve_and_wait(args.metrics_addr).await
}

/// The pod this process runs in, from the downward API the operator's Deployment sets.
fn own_pod() -> Option<OwnPod> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    Some(OwnPod {
        namespace: var("POD_NAMESPACE")?,
        name: var("POD_NAME")?,
    })
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
