//! What every pass of the gate controller shares.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use k8s_openapi::api::core::v1::ObjectReference;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{
    event_reason::EventReason, event_recorder::EventRecorder, placement_config::PlacementConfigs,
};
use tokio::sync::watch;
use tracing::debug;

use super::{metrics::GateMetrics, options::GateOptions};

/// What every pass shares.
pub struct GateContext {
    pub client: kube::Client,
    pub inspector: Arc<dyn ImageInspector>,
    pub options: GateOptions,
    pub metrics: GateMetrics,
    pub events: EventRecorder,
    /// Pods waiting out an inspection backoff: their own updates (labels written by the
    /// failed pass) must not trigger the next attempt early, as they did in MTO.
    pub backoff_until: Mutex<HashMap<String, Instant>>,
    /// Pods whose passes could not read the placement configuration, and how many times.
    pub unreadable_configuration: Mutex<HashMap<String, u32>>,
    /// The placement configuration, followed (its rules compiled once per change); a
    /// pass takes it once it has caught up with the pod's namespace.
    pub configs: watch::Receiver<Arc<PlacementConfigs>>,
}

impl GateContext {
    /// An event on the pod; one that cannot be published is logged (the pass goes on).
    pub async fn publish(&self, pod: &ObjectReference, reason: EventReason, note: String) {
        if let Err(e) = self
            .events
            .publish(pod, reason, "PlacingByArchitecture", note)
            .await
        {
            debug!(pod = ?pod.name, reason = reason.as_str(), error = %e, "cannot publish event");
        }
    }
}
