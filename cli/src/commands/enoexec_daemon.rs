//! `multiarch enoexec-daemon`: one per node (DaemonSet).

use std::{path::PathBuf, time::Duration};

use multiarch_ebpf::{
    cgroup_id, cri::CriClient, cri_socket::runtime_socket, locate::Locator, probe::ExecProbe,
};
use multiarch_enoexec::daemon::{
    Daemon, DaemonOptions, kernel_reader::read_kernel_events, metrics::DaemonMetrics,
};
use tracing::info;

use super::role::Role;
use multiarch_flags::EnoexecDaemonArgs;

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
        read_kernel_events(&mut probe, &daemon, &metrics, &shutdown).await
    });
    info!(node = %args.node_name, socket = %socket.display(), "watching for exec format errors");
    role.serve_and_wait(args.ops.metrics_addr).await
}
