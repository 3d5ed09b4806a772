//! `multiarch enoexec-daemon`: one per node (DaemonSet).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use multiarch_ebpf::{
    cgroup_id, cri::CriClient, cri_socket::runtime_socket, locate::Locator, probe::ExecProbe,
};
use multiarch_enoexec::daemon::{
    Daemon, DaemonOptions, kernel_reader::read_kernel_events, metrics::DaemonMetrics,
    node_level::keep_node_level, x86_64_level,
};
use tracing::{info, warn};

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
        log_read_interval: Duration::from_millis(200),
    };
    if args.no_node_level_label {
        info!("not labelling this node with its x86-64 level (--no-node-level-label)");
    } else if let Some(level) = x86_64_level_label(&args.proc_root) {
        info!(node = %args.node_name, level = %level, "keeping this node's x86-64 level label");
        role.tasks.spawn(
            "x86-64 level label",
            keep_node_level(
                client.clone(),
                args.node_name.clone(),
                level,
                metrics.clone(),
                role.tasks.shutdown().clone(),
            ),
        );
    }
    let daemon = Daemon::start(client, locator, options, metrics.clone(), &role.tasks);
    let shutdown = role.tasks.shutdown().clone();
    role.tasks.spawn("kernel event reader", async move {
        read_kernel_events(&mut probe, &daemon, &metrics, &shutdown).await
    });
    info!(node = %args.node_name, socket = %socket.display(), "watching for exec format errors");
    role.serve_and_wait(args.ops.metrics_addr).await
}

/// This node's x86-64 level label (`v3`), from the host's `/proc/cpuinfo`; `None` on
/// another architecture, or when cpuinfo cannot be read (said in the log: the node then
/// runs without a level, as before the label, and the exec format errors are still
/// watched).
fn x86_64_level_label(proc_root: &Path) -> Option<String> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let path = proc_root.join("cpuinfo");
    match std::fs::read_to_string(&path) {
        Ok(cpuinfo) => x86_64_level::variant_label(x86_64_level::of_cpu_flags(
            x86_64_level::cpuinfo_flags(&cpuinfo),
        )),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot read the CPU's flags: this node is not labelled with its x86-64 level");
            None
        }
    }
}
