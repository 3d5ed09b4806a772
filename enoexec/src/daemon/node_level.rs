//! The node's x86-64 level as its `multiarch.openshift.io/arch-variant` label, kept true.
//!
//! The level is computed once, when the daemon starts: a CPU does not change under a
//! running kernel, and a new one (a resized VM, a replaced host) means a reboot, so a new
//! daemon. The label is written when the node lacks it or says otherwise (someone removed
//! or changed it), seen on a watch of this one node: one idle watch per node, no polling.
//! A failed write is retried with backoff and counted; a refusal (the admission policy
//! that lets a daemon label only its own node) is logged and waits for the node's next
//! change, as retrying cannot help.

use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use multiarch_crd::names::NODE_VARIANT_LABEL;
use multiarch_runtime::backoff::Backoff;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::metrics::DaemonMetrics;

/// Who writes the label (the node's managedFields say so).
pub const FIELD_MANAGER: &str = "multiarch-enoexec-daemon";

/// One write's deadline.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps `node`'s variant label at `level` until shutdown.
pub async fn keep_node_level(
    client: kube::Client,
    node: String,
    level: String,
    metrics: DaemonMetrics,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    // The watcher retries a failed list or watch with its own backoff; each error is
    // reported here and the stream goes on.
    let mut nodes = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let retry = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            next = nodes.try_next() => next,
        };
        match next {
            Ok(Some(seen)) => {
                if seen.labels().get(NODE_VARIANT_LABEL) != Some(&level) {
                    write(&api, &node, &level, &retry, &metrics, &shutdown).await;
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                warn!(node = %node, error = %e, "cannot watch this node to keep its x86-64 level label; retrying");
            }
        }
    }
}

/// Writes the label, retrying what may pass later until it does or shutdown comes.
async fn write(
    api: &Api<Node>,
    node: &str,
    level: &str,
    retry: &Backoff,
    metrics: &DaemonMetrics,
    shutdown: &CancellationToken,
) {
    // A merge patch of the one label: nothing else of the node is sent, so nothing else
    // can be overwritten (and the admission policy sees only this label change).
    let patch = json!({"metadata": {"labels": {NODE_VARIANT_LABEL: level}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let mut attempt = 1;
    loop {
        let result = tokio::time::timeout(
            WRITE_TIMEOUT,
            api.patch(node, &params, &Patch::Merge(&patch)),
        )
        .await;
        let (error, refused) = match result {
            Ok(Ok(_)) => {
                metrics.count_label_write("written");
                info!(node = %node, label = NODE_VARIANT_LABEL, level = %level, "labelled this node with its x86-64 level");
                return;
            }
            Ok(Err(kube::Error::Api(status))) => (
                status.message.clone(),
                status.code < 500 && status.code != 429,
            ),
            Ok(Err(e)) => (e.to_string(), false),
            Err(_) => (format!("no answer within {WRITE_TIMEOUT:?}"), false),
        };
        metrics.count_label_write("failed");
        if refused {
            warn!(node = %node, error = %error, "the API server refused this node's x86-64 level label; waiting for the node's next change");
            return;
        }
        let delay = retry.after(attempt);
        warn!(node = %node, error = %error, retry_in = ?delay, "cannot write this node's x86-64 level label; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        attempt = attempt.saturating_add(1);
    }
}
