//! What users see in `kubectl describe pod`: `Scheduled`, `FailedScheduling` and
//! `Preempted` events (events.k8s.io/v1, repeated ones folded into a series by kube's
//! Recorder), the `PodScheduled=False` condition and `status.nominatedNodeName`. Written
//! by a background task from a bounded queue, so a slow API server never slows the
//! scheduling loop (overflow is dropped and counted).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_runtime::{
    pod_events::{PodEvents, Severity, pod_reference},
    rate_limit::TokenBucket,
    supervisor::Tasks,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::metrics::SchedulerMetrics;

/// An event about a pod.
#[derive(Debug)]
pub struct ReportEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

#[derive(Debug)]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub event: Option<ReportEvent>,
    /// `Unschedulable` or `SchedulerError` when the PodScheduled condition changes (its
    /// message is the event's note).
    pub condition: Option<&'static str>,
    /// `Some(Some(node))` sets `status.nominatedNodeName`, `Some(None)` clears it.
    pub nomination: Option<Option<String>>,
}

impl PodReport {
    /// An event (and, with `condition`, the PodScheduled condition) about `pod`.
    pub fn about(
        pod: &multiarch_plugins::model::pod::PodInfo,
        warning: bool,
        reason: &'static str,
        action: &'static str,
        note: String,
        condition: Option<&'static str>,
    ) -> Self {
        PodReport {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            event: Some(ReportEvent {
                warning,
                reason,
                action,
                note,
            }),
            condition,
            nomination: None,
        }
    }

    /// Only `status.nominatedNodeName` (a nomination another pod took).
    pub fn nomination_of(
        pod: &multiarch_plugins::model::pod::PodInfo,
        node: Option<String>,
    ) -> Self {
        PodReport {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            event: None,
            condition: None,
            nomination: Some(node),
        }
    }

    /// The strategic-merge patch of `pods/status`, if the report changes the status.
    fn status_patch(&self) -> Option<serde_json::Value> {
        let mut status = serde_json::Map::new();
        if let Some(reason) = self.condition {
            let message = self
                .event
                .as_ref()
                .map(|e| e.note.clone())
                .unwrap_or_default();
            status.insert(
                "conditions".into(),
                json!([{
                    "type": "PodScheduled", "status": "False", "reason": reason,
                    "message": message, "lastProbeTime": null,
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                }]),
            );
        }
        if let Some(nomination) = &self.nomination {
            status.insert("nominatedNodeName".into(), json!(nomination));
        }
        (!status.is_empty()).then(|| json!({ "status": status }))
    }
}

/// What the writer's queue carries: reports, and marks that answer once everything
/// queued before them is written.
enum Queued {
    Report(PodReport),
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct PodReports {
    tx: mpsc::Sender<Queued>,
    metrics: SchedulerMetrics,
}

impl PodReports {
    /// Starts the writer under `tasks`; once `done` is cancelled it sends what is queued,
    /// then stops. `done` is the scheduling loop's end, not the role's shutdown: the loop
    /// still reports the bindings it finishes while shutting down.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        client: kube::Client,
        controller: &str,
        instance: &str,
        capacity: usize,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
        done: CancellationToken,
        tasks: &Tasks,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Queued>(capacity);
        let events = PodEvents::new(client.clone(), controller, instance);
        let shutdown = done;
        tasks.spawn("event and condition writer", async move {
            // On shutdown the queue is closed and what it holds is still written.
            let mut closing = false;
            loop {
                let report = if closing {
                    rx.recv().await
                } else {
                    tokio::select! {
                        () = shutdown.cancelled() => {
                            rx.close();
                            closing = true;
                            continue;
                        }
                        report = rx.recv() => report,
                    }
                };
                let report = match report {
                    None => return Ok::<(), std::convert::Infallible>(()),
                    Some(Queued::Flush(done)) => {
                        let _ = done.send(());
                        continue;
                    }
                    Some(Queued::Report(report)) => report,
                };
                let reference =
                    pod_reference(&report.namespace, &report.name, Some(report.uid.clone()));
                if let Some(event) = &report.event {
                    let severity = if event.warning {
                        Severity::Warning
                    } else {
                        Severity::Normal
                    };
                    limiter.acquire().await;
                    if let Err(e) = events
                        .publish(
                            &reference,
                            severity,
                            event.reason,
                            event.action,
                            event.note.clone(),
                        )
                        .await
                    {
                        debug!(pod = %report.name, error = %e, "cannot publish event");
                    }
                }
                if let Some(patch) = report.status_patch() {
                    limiter.acquire().await;
                    let api: Api<Pod> = Api::namespaced(client.clone(), &report.namespace);
                    if let Err(e) = api
                        .patch_status(
                            &report.name,
                            &PatchParams::default(),
                            &Patch::Strategic(&patch),
                        )
                        .await
                    {
                        debug!(pod = %report.name, error = %e, "cannot write the pod's scheduling status");
                    }
                }
            }
        });
        PodReports { tx, metrics }
    }

    pub fn send(&self, report: PodReport) {
        if self.tx.try_send(Queued::Report(report)).is_err() {
            self.metrics.events_dropped.inc();
        }
    }

    /// Waits (at most `deadline`) until every report queued so far is written; `false`
    /// when the deadline passed first or the writer is gone.
    pub async fn flush(&self, deadline: std::time::Duration) -> bool {
        let (done, written) = oneshot::channel();
        tokio::time::timeout(deadline, async {
            self.tx.send(Queued::Flush(done)).await.is_ok() && written.await.is_ok()
        })
        .await
        .unwrap_or(false)
    }
}
