//! What users see in `kubectl describe pod`: `Scheduled` and `FailedScheduling` events
//! (events.k8s.io/v1, repeated ones folded into a series by kube's Recorder) and the
//! `PodScheduled=False` condition. Written by a background task from a bounded queue, so
//! a slow API server never slows the scheduling loop (overflow is dropped and counted).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::debug;

use std::sync::Arc;

use super::{metrics::SchedulerMetrics, ratelimit::TokenBucket};

#[derive(Debug)]
pub struct Report {
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

impl Report {
    /// An event (and, with `condition`, the PodScheduled condition) about `pod`.
    pub fn about(
        pod: &multiarch_plugins::model::pod::PodInfo,
        warning: bool,
        reason: &'static str,
        action: &'static str,
        note: String,
        condition: Option<&'static str>,
    ) -> Self {
        Report {
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
pub struct Reports {
    tx: mpsc::Sender<Report>,
    metrics: SchedulerMetrics,
}

impl Reports {
    pub fn start(
        client: kube::Client,
        controller: &str,
        instance: &str,
        capacity: usize,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Report>(capacity);
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: controller.into(),
                instance: Some(instance.into()),
            },
        );
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                let reference = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(report.name.clone()),
                    namespace: Some(report.namespace.clone()),
                    uid: Some(report.uid.clone()),
                    ..ObjectReference::default()
                };
                let event = Event {
                    type_: if report.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: report.reason.into(),
                    note: Some(report.note.clone()),
                    action: report.action.into(),
                    secondary: None,
                };
                limiter.acquire().await;
                if let Err(e) = recorder.publish(&event, &reference).await {
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
        Reports { tx, metrics }
    }

    pub fn send(&self, report: Report) {
        if self.tx.try_send(report).is_err() {
            self.metrics.events_dropped.inc();
        }
    }
}
