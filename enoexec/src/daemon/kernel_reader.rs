//! The daemon's input: the kernel probe's records, read until shutdown.

use multiarch_ebpf::{
    cri::ContainerDirectory,
    probe::{ExecProbe, ProbeError},
};
use tokio_util::sync::CancellationToken;

use super::{Daemon, metrics::DaemonMetrics};

/// Hands every kernel record to `daemon`, and mirrors the kernel's lost-record counter
/// into `metrics`; ends at shutdown, or when the probe fails.
pub async fn read_kernel_events<D: ContainerDirectory>(
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
