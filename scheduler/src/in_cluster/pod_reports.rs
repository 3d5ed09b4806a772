//! What users see in `kubectl describe pod`: `Scheduled`, `FailedScheduling` and
//! `Preempted` events (events.k8s.io/v1; a repeat folds into a series, a changed reason
//! is a new event), the `PodScheduled=False` condition and `status.nominatedNodeName`.
//! Written by a background task from a bounded queue, so a slow API server never slows
//! the scheduling loop (overflow is dropped and counted).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_runtime::{
    draining_queue::DrainingQueue,
    event_reason::EventReason,
    event_recorder::{EventRecorder, pod_reference},
    rate_limit::TokenBucket,
    supervisor::Tasks,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{metrics::SchedulerMetrics, pod_identity};

/// An event about a pod.
#[derive(Debug)]
pub struct ReportEvent {
    pub reason: EventReason,
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
        reason: EventReason,
        action: &'static str,
        note: String,
        condition: Option<&'static str>,
    ) -> Self {
        PodReport {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            event: Some(ReportEvent {
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
            namespace: pod.namespace.to_string(),
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
        // Only for the pod decided about: a stale `PodScheduled=False` never lands on a
        // pod re-created with the same name.
        (!status.is_empty())
            .then(|| pod_identity::for_pod_uid(json!({ "status": status }), &self.uid))
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
    fenced: CancellationToken,
}

impl PodReports {
    /// Starts the writer under `tasks`; once `done` is cancelled it sends what is queued,
    /// then stops. `done` is the scheduling loop's end, not the role's shutdown: the loop
    /// still reports the bindings it finishes while shutting down.
    pub fn start(
        client: kube::Client,
        events: EventRecorder,
        capacity: usize,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
        done: CancellationToken,
        tasks: &Tasks,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Queued>(capacity);
        let writer_metrics = metrics.clone();
        let shutdown = done;
        let fenced = CancellationToken::new();
        let writer_fenced = fenced.clone();
        tasks.spawn("event and condition writer", async move {
            let writer = Self::write_queued(rx, client, events, shutdown, limiter, writer_metrics);
            tokio::select! {
                biased;
                // The lease is lost: what is queued, or on the wire, is dropped.
                () = writer_fenced.cancelled() => Ok(()),
                () = writer => Ok::<(), std::convert::Infallible>(()),
            }
        });
        PodReports {
            tx,
            metrics,
            fenced,
        }
    }

    /// Writes what is queued in order; once `shutdown` is cancelled, what is left, then
    /// returns.
    async fn write_queued(
        rx: mpsc::Receiver<Queued>,
        client: kube::Client,
        events: EventRecorder,
        shutdown: CancellationToken,
        limiter: Arc<TokenBucket>,
        writer_metrics: SchedulerMetrics,
    ) {
        {
            // On shutdown the queue is closed and what it holds is still written.
            let mut queue = DrainingQueue::new(rx, shutdown);
            loop {
                let report = match queue.next().await {
                    None => return,
                    Some(Queued::Flush(done)) => {
                        let _ = done.send(());
                        continue;
                    }
                    Some(Queued::Report(report)) => report,
                };
                let reference =
                    pod_reference(&report.namespace, &report.name, Some(report.uid.clone()));
                if let Some(event) = &report.event {
                    limiter.acquire().await;
                    if let Err(e) = events
                        .publish(&reference, event.reason, event.action, event.note.clone())
                        .await
                    {
                        writer_metrics.reports_failed.inc();
                        warn!(pod = %format!("{}/{}", report.namespace, report.name), reason = event.reason.as_str(), error = %e, "cannot publish the pod's event");
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
                        if pod_identity::is_gone_or_replaced(&e) {
                            debug!(pod = %report.name, uid = %report.uid, "the pod is gone or replaced: its scheduling status is not written");
                        } else {
                            writer_metrics.reports_failed.inc();
                            warn!(pod = %format!("{}/{}", report.namespace, report.name), error = %e, "cannot write the pod's scheduling status");
                        }
                    }
                }
            }
        }
    }

    /// This replica may no longer lead: nothing queued is written any more.
    pub fn fence(&self) {
        self.fenced.cancel();
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
