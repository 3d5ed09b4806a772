//! The rate-limited `ENoExecEvent` writer: one object per container, named after it, its
//! status set after creation; server errors retried with backoff, then counted.

use std::time::Duration;

use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use multiarch_crd::{ENoExecEvent, ENoExecEventSpec, ENoExecEventStatus};
use multiarch_ebpf::cri::ContainerInfo;
use multiarch_runtime::{backoff::Backoff, draining_queue::DrainingQueue, rate_limit::TokenBucket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{DaemonOptions, metrics::DaemonMetrics};
use multiarch_crd::names::LABEL_ENOEXEC_NODE;

/// Writes each located failure, until shutdown; then what is still queued.
pub(super) async fn write_loop(
    client: kube::Client,
    options: DaemonOptions,
    metrics: DaemonMetrics,
    rx: mpsc::Receiver<LocatedFailure>,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let api: Api<ENoExecEvent> = Api::namespaced(client, &options.namespace);
    let bucket = TokenBucket::new(options.rate, options.burst);
    let retry = Backoff::new(
        options.retry_backoff,
        options.retry_backoff.saturating_mul(1 << WRITE_ATTEMPTS),
    );
    // On shutdown what the queue holds is still written.
    let mut queue = DrainingQueue::new(rx, shutdown);
    while let Some(report) = queue.next().await {
        let loader_error = match &report.observed {
            Observed::ExecFormatError { .. } => None,
            Observed::LoaderRefusal { line } => Some(line.clone()),
        };
        write_with_retries(
            &api,
            &options.node_name,
            &report,
            loader_error,
            &bucket,
            retry,
            &metrics,
        )
        .await;
    }
    Ok(())
}

async fn write_with_retries(
    api: &Api<ENoExecEvent>,
    node: &str,
    report: &LocatedFailure,
    loader_error: Option<String>,
    bucket: &TokenBucket,
    retry: Backoff,
    metrics: &DaemonMetrics,
) {
    let info = &report.container;
    let mut attempt = 1;
    loop {
        bucket.acquire().await;
        match write(api, node, report, loader_error.clone()).await {
            Ok(Written::Created) if loader_error.is_some() => metrics.count("loader_refusal"),
            Ok(Written::Created) => metrics.count("reported"),
            Ok(Written::AlreadyThere) => metrics.count("duplicate"),
            Err(e) if attempt < WRITE_ATTEMPTS && retriable(&e) => {
                let delay: Duration = retry.after(attempt);
                debug!(pod = %info.pod_name, error = %e, retry_in = ?delay, "ENoExecEvent write failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
                continue;
            }
            Err(e) => {
                warn!(pod = %info.pod_name, namespace = %info.pod_namespace, error = %e, "cannot write the ENoExecEvent");
                metrics.count("write_failed");
            }
        }
        return;
    }
}

/// Attempts per report before it is dropped (and counted as `write_failed`).
const WRITE_ATTEMPTS: u32 = 3;

/// Server errors, throttling and lost connections pass; a 4xx answer will not change.
fn retriable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        _ => true,
    }
}

/// A located error waiting for the writer.
pub struct LocatedFailure {
    pub container: ContainerInfo,
    pub observed: Observed,
}

/// What the kernel program saw the container do.
pub enum Observed {
    /// An exec failed with `ENOEXEC`; the file passed to exec, when it could be read.
    ExecFormatError { executable: Option<String> },
    /// A process exited with 127 and the container's log has the loader's line.
    LoaderRefusal { line: String },
}

enum Written {
    Created,
    /// Reported before (by this daemon before a restart) and not handled yet.
    AlreadyThere,
}

/// The object is named after the container, so a restarted daemon cannot report a
/// container twice while its first report waits for the handler.
pub fn object_name(container_id: &str) -> String {
    let id = container_id
        .rsplit_once("://")
        .map_or(container_id, |(_, id)| id);
    format!("enoexec-{id}")
}

/// Creates the object, then sets its status (the API server ignores status on create). An
/// object whose status cannot be set is deleted again, as MTO does, so the handler never
/// sees it half-written for long.
async fn write(
    api: &Api<ENoExecEvent>,
    node: &str,
    report: &LocatedFailure,
    loader_error: Option<String>,
) -> Result<Written, kube::Error> {
    let info = &report.container;
    let name = object_name(&info.container_id);
    let object = ENoExecEvent {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(LABEL_ENOEXEC_NODE.to_owned(), node.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: ENoExecEventSpec {},
        status: None,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(Written::AlreadyThere),
        Err(e) => return Err(e),
    }
    let status = ENoExecEventStatus {
        node_name: Some(node.to_owned()),
        pod_name: Some(info.pod_name.clone()),
        pod_namespace: Some(info.pod_namespace.clone()),
        container_id: Some(info.container_id.clone()),
        executable: match &report.observed {
            Observed::ExecFormatError { executable } => {
                executable.clone().filter(|e| !e.is_empty())
            }
            Observed::LoaderRefusal { .. } => None,
        },
        loader_error,
    };
    let patch = serde_json::json!({ "status": status });
    if let Err(e) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        if let Err(cleanup) = api.delete(&name, &DeleteParams::default()).await {
            warn!(%name, error = %cleanup, "cannot delete the half-written ENoExecEvent");
        }
        return Err(e);
    }
    Ok(Written::Created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_follow_the_container() {
        let id = "4d3c1f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";
        assert_eq!(
            object_name(&format!("cri-o://{id}")),
            format!("enoexec-{id}")
        );
        assert_eq!(object_name(id), format!("enoexec-{id}"));
    }
}
