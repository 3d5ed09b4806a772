//! The events the operator publishes: on the ClusterPodPlacementConfig, where new pods
//! go now that routing changed; on a released pod, why the operator ungated, deleted or
//! recreated it. A refused event is logged, never a reason to stop.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use multiarch_crd::{ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, PlacementMode};
use multiarch_runtime::{
    event_reason::EventReason,
    event_recorder::{EventRecorder, pod_reference},
};
use tracing::{info, warn};

use crate::{context::OperatorContext, pod_ref::PodRef};

/// The ClusterPodPlacementConfig, as events name it.
pub fn reference(cppc: &ClusterPodPlacementConfig) -> ObjectReference {
    ObjectReference {
        api_version: Some("multiarch.openshift.io/v1beta1".into()),
        kind: Some("ClusterPodPlacementConfig".into()),
        name: Some(cppc.name_any()),
        uid: cppc.uid(),
        ..ObjectReference::default()
    }
}

/// Tells, in an event, where new pods go now.
pub async fn announce(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    spec: &ClusterPodPlacementConfigSpec,
    before: Option<PlacementMode>,
    after: Option<PlacementMode>,
) {
    let placement = spec.placement_or_default();
    let (reason, note) = match after {
        Some(PlacementMode::Scheduler) => (
            EventReason::RoutingToScheduler,
            format!(
                "New pods in the selected namespaces now go to {}",
                placement.scheduler_name
            ),
        ),
        Some(PlacementMode::SchedulingGate) => (
            EventReason::RoutingToGate,
            "New pods in the selected namespaces are now gated and given an architecture affinity (gate mode)".to_owned(),
        ),
        None => (
            EventReason::RoutingOff,
            format!(
                "The webhook configuration was removed: the components of {} are not available, so new pods are admitted unchanged (see the Degraded condition)",
                match placement.mode {
                    PlacementMode::Scheduler => "scheduler mode",
                    PlacementMode::SchedulingGate => "gate mode",
                }
            ),
        ),
    };
    info!(?before, ?after, "routing changed");
    if let Err(e) = ctx
        .events
        .publish(&reference(cppc), reason, "Route", note)
        .await
    {
        warn!(error = %e, "cannot publish the routing event");
    }
}

/// Tells `pod` why the operator released it.
pub(crate) async fn on_pod(
    events: &EventRecorder,
    pod: &PodRef,
    reason: EventReason,
    note: String,
) {
    let reference = pod_reference(&pod.namespace, &pod.name, Some(pod.uid.clone()));
    if let Err(e) = events.publish(&reference, reason, "Release", note).await {
        warn!(pod = %pod, error = %e, "cannot publish the event");
    }
}

/// Tells, on the ClusterPodPlacementConfig, that a journaled pod could not be created.
pub(crate) async fn pod_not_recreated(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    entry: &str,
    error: &str,
) {
    let note = format!(
        "Cannot create again the pod journaled in ConfigMap {}/{entry} (the pod was deleted to be recreated for the default scheduler): {error}. The copy is kept and retried; create it yourself from the ConfigMap's pod.json, then delete the ConfigMap",
        ctx.settings.namespace
    );
    let reason = EventReason::PodNotRecreated;
    if let Err(e) = ctx
        .events
        .publish(&reference(cppc), reason, "Release", note)
        .await
    {
        warn!(error = %e, "cannot publish the event");
    }
}
