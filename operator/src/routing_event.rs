//! Events on the ClusterPodPlacementConfig: where new pods go now that routing changed.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use multiarch_crd::{ClusterPodPlacementConfig, PlacementMode};
use multiarch_runtime::event_reason::EventReason;
use tracing::{info, warn};

use crate::context::OperatorContext;

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
    before: Option<PlacementMode>,
    after: Option<PlacementMode>,
    mode: PlacementMode,
) {
    let (reason, note) = match after {
        Some(PlacementMode::Scheduler) => (
            EventReason::RoutingToScheduler,
            format!(
                "New pods in the selected namespaces now go to {}",
                cppc.spec.placement_or_default().scheduler_name
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
                match mode {
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
