//! Exits with 127, told apart: a task of its own reads the end of each such container's
//! log for glibc's loader refusing the CPU, and hands the writer only the refusals. Log
//! reads wait for the runtime to copy the output, so they never run in the writer's way:
//! a tenant whose containers exit with 127 by the hundred can delay only this queue,
//! never an exec format error's report.

use std::{path::PathBuf, time::Duration};

use multiarch_ebpf::cri::ContainerInfo;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{
    metrics::DaemonMetrics,
    writer::{LocatedFailure, Observed},
};
use crate::loader_refusal::{LoaderRefusal, read_log_tail};

/// Reads of a log before its container is taken as not refused by the loader.
const LOG_READS: u32 = 5;

/// Reads each exited container's log until shutdown (what is queued then is dropped: an
/// exit not yet told apart is no report), queueing the loader's refusals for the writer.
pub(super) async fn read_exit_logs(
    mut exits: mpsc::Receiver<ContainerInfo>,
    writer: mpsc::Sender<LocatedFailure>,
    interval: Duration,
    metrics: DaemonMetrics,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    loop {
        let container = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            next = exits.recv() => match next {
                Some(container) => container,
                None => return Ok(()),
            },
        };
        let line = match loader_refusal(&container, interval).await {
            LogVerdict::Refused(refusal) => refusal.line,
            LogVerdict::NotRefused => {
                metrics.count("exit_127_other");
                continue;
            }
            LogVerdict::Unreadable => {
                metrics.count("log_unreadable");
                continue;
            }
        };
        let report = LocatedFailure {
            container,
            observed: Observed::LoaderRefusal { line },
        };
        if writer.try_send(report).is_err() {
            warn!("ENoExecEvent queue full; dropping a loader refusal");
            metrics.count("queue_full");
        }
    }
}

enum LogVerdict {
    Refused(LoaderRefusal),
    NotRefused,
    Unreadable,
}

/// Whether the container's log ends with the loader's refusal: read up to [`LOG_READS`]
/// times, `interval` apart, since the runtime copies what the process wrote a moment later.
async fn loader_refusal(container: &ContainerInfo, interval: Duration) -> LogVerdict {
    let Some(path) = container.log_path.as_deref().map(PathBuf::from) else {
        warn!(pod = %container.pod_name, namespace = %container.pod_namespace, container = %container.container_name, "the runtime gives no log path for a container that exited with 127; cannot tell a loader's refusal");
        return LogVerdict::Unreadable;
    };
    let mut last_error = None;
    for read in 1..=LOG_READS {
        let tail = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_log_tail(&path)).await
        };
        match tail {
            Ok(Ok((tail, whole))) => {
                last_error = None;
                if let Some(refusal) = LoaderRefusal::in_log_tail(&tail, whole) {
                    return LogVerdict::Refused(refusal);
                }
            }
            Ok(Err(e)) => last_error = Some(e.to_string()),
            Err(e) => last_error = Some(e.to_string()),
        }
        if read < LOG_READS {
            tokio::time::sleep(interval).await;
        }
    }
    match last_error {
        Some(error) => {
            warn!(pod = %container.pod_name, namespace = %container.pod_namespace, container = %container.container_name, path = %path.display(), %error, "cannot read the log of a container that exited with 127 (is the node's pod log directory mounted?)");
            LogVerdict::Unreadable
        }
        None => LogVerdict::NotRefused,
    }
}
