//! `multiarch enoexec-daemon`: one per node (DaemonSet).

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use multiarch_ebpf::{
    cgroup_id,
    cri::{ContainerDirectory, CriClient},
    locate::Locator,
    probe::{ExecProbe, ProbeError},
};
use multiarch_enoexec::daemon::{Daemon, DaemonOptions, metrics::DaemonMetrics};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::role::Role;
use crate::args::EnoexecDaemonArgs;

/// containerd's, CRI-O's and k3s's (and RKE2's) default sockets, through the DaemonSet's
/// mount of the host's /run first, then as seen on the host itself.
const RUNTIME_SOCKETS: [&str; 6] = [
    "/host/run/containerd/containerd.sock",
    "/host/run/crio/crio.sock",
    "/host/run/k3s/containerd/containerd.sock",
    "/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
    "/run/k3s/containerd/containerd.sock",
];

fn runtime_socket(endpoint: Option<&str>) -> anyhow::Result<PathBuf> {
    if let Some(endpoint) = endpoint {
        let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        return Ok(PathBuf::from(path));
    }
    RUNTIME_SOCKETS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .with_context(|| {
            format!(
                "no container runtime socket at {} (set --runtime-endpoint)",
                RUNTIME_SOCKETS.join(" or ")
            )
        })
}

pub async fn run(args: &EnoexecDaemonArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let client = args.client.connect().await?;
    // The kernel first: without it nothing else matters, and its error names what is missing.
    let mut probe = ExecProbe::attach()?;
    let socket = runtime_socket(args.runtime_endpoint.as_deref())?;
    let runtime = CriClient::connect(&socket, Duration::from_secs(5)).await?;
    let cgroup_base = args
        .cgroup_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"));
    let cgroup_root = cgroup_id::v2_root(&cgroup_base);
    let locator = Locator::new(args.proc_root.clone(), cgroup_root, runtime);
    let metrics = DaemonMetrics::default();
    metrics.register(&mut role.registry);
    let options = DaemonOptions {
        node_name: args.node_name.clone(),
        namespace: args.namespace.clone(),
        rate: args.rate,
        burst: args.burst,
        dedup_window: args.dedup_window,
        queue_capacity: args.queue_capacity,
        retry_backoff: Duration::from_secs(1),
    };
    let daemon = Daemon::start(client, locator, options, metrics.clone(), &role.tasks);
    let shutdown = role.tasks.shutdown().clone();
    role.tasks.spawn("kernel event reader", async move {
        read_events(&mut probe, &daemon, &metrics, &shutdown).await
    });
    info!(node = %args.node_name, socket = %socket.display(), "watching for exec format errors");
    role.serve_and_wait(args.ops.metrics_addr).await
}

/// Hands every kernel record to the daemon, and mirrors the kernel's lost-record counter.
async fn read_events<D: ContainerDirectory>(
    probe: &mut ExecProbe,
    daemon: &Daemon<D>,
    metrics: &DaemonMetrics,
    shutdown: &CancellationToken,
) -> Result<(), ProbeError> {
    let mut lost_seen = 0;
    loop {
        let batch = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            batch = probe.next_batch() => batch?,
        };
        for record in batch {
            daemon.handle(record).await;
        }
        let lost = probe.lost_events();
        if lost > lost_seen {
            metrics.lost.inc_by(lost - lost_seen);
            lost_seen = lost;
        }
    }
}
