//! What users see in `kubectl describe pod`: `Scheduled` and `FailedScheduling` events
//! (events.k8s.io/v1, repeated ones folded into a series by kube's Recorder) and the
//! `PodScheduled=False` condition. Written by a background task from a bounded queue, so
//! a slow API server never slows the scheduling loop (overflow is dropped and counted).

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
use tokio::sync::mpsc;
use tracing::debug;

use super::metrics::SchedulerMetrics;

#[derive(Debug)]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    /// `Unschedulable` or `SchedulerError` when the PodScheduled condition changes.
    pub condition: Option<&'static str>,
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
            warning,
            reason,
            action,
            note,
            condition,
        }
    }
}

#[derive(Clone)]
pub struct PodReports {
    tx: mpsc::Sender<PodReport>,
    metrics: SchedulerMetrics,
}

impl PodReports {
    /// Starts the writer under `tasks`; it sends what is queued, then stops on shutdown.
    pub fn start(
        client: kube::Client,
        controller: &str,
        instance: &str,
        capacity: usize,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
        tasks: &Tasks,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<PodReport>(capacity);
        let events = PodEvents::new(client.clone(), controller, instance);
        let shutdown = tasks.shutdown().clone();
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
                let Some(report) = report else {
                    return Ok::<(), std::convert::Infallible>(());
                };
                let reference =
                    pod_reference(&report.namespace, &report.name, Some(report.uid.clone()));
                let severity = if report.warning {
                    Severity::Warning
                } else {
                    Severity::Normal
                };
                limiter.acquire().await;
                if let Err(e) = events
                    .publish(
                        &reference,
                        severity,
                        report.reason,
                        report.action,
                        report.note.clone(),
                    )
                    .await
                {
                    debug!(pod = %report.name, error = %e, "cannot publish event");
                }
                if let Some(reason) = report.condition {
                    limiter.acquire().await;
                    let api: Api<Pod> = Api::namespaced(client.clone(), &report.namespace);
                    let patch = json!({"status": {"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": reason,
                        "message": report.note, "lastProbeTime": null,
                        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                    }]}});
                    if let Err(e) = api
                        .patch_status(
                            &report.name,
                            &PatchParams::default(),
                            &Patch::Strategic(&patch),
                        )
                        .await
                    {
                        debug!(pod = %report.name, error = %e, "cannot write the PodScheduled condition");
                    }
                }
            }
        });
        PodReports { tx, metrics }
    }

    pub fn send(&self, report: PodReport) {
        if self.tx.try_send(report).is_err() {
            self.metrics.events_dropped.inc();
        }
    }
}
