//! The ClusterPodPlacementConfig's finalizers, MTO's two: `pod-placement` (the operands
//! are removed in order before the object goes) and `no-pod-placement-config` (present
//! exactly while a PodPlacementConfig exists; tooling and MTO's e2e read it). Written in
//! one place, with the resourceVersion read as a precondition.

use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use multiarch_crd::{ClusterPodPlacementConfig, names::SINGLETON_NAME};
use serde_json::json;

use crate::{
    context::OperatorContext,
    observe,
    step::{ReconcileError, StepFailures, api_error},
};

/// MTO's finalizer: the operands are removed in order before the object goes.
pub const FINALIZER: &str = "finalizers.multiarch.openshift.io/pod-placement";
/// MTO's finalizer kept while any PodPlacementConfig exists.
pub const NO_POD_PLACEMENT_CONFIG: &str =
    "finalizers.multiarch.openshift.io/no-pod-placement-config";

/// MTO's finalizers on an installed ClusterPodPlacementConfig: pod-placement always,
/// no-pod-placement-config while any PodPlacementConfig exists (left as it is when they
/// cannot be listed: recorded in `failures`). `true` when it wrote.
pub async fn keep_installed(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    failures: &mut StepFailures,
) -> Result<bool, ReconcileError> {
    let configs = observe::pod_placement_configs(&ctx.client).await;
    let mut wanted = vec![(FINALIZER, true)];
    if let Some(configs) = failures.keep(ctx, "list the PodPlacementConfigs", configs) {
        wanted.push((NO_POD_PLACEMENT_CONFIG, !configs.is_empty()));
    }
    set(ctx, cppc, &wanted).await
}

pub fn has(cppc: &ClusterPodPlacementConfig, finalizer: &str) -> bool {
    cppc.finalizers().iter().any(|f| f == finalizer)
}

/// Adds (`true`) or removes (`false`) each finalizer; one write, none when nothing
/// changes. `true` when it wrote.
pub async fn set(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    wanted: &[(&str, bool)],
) -> Result<bool, ReconcileError> {
    let mut finalizers = cppc.finalizers().to_vec();
    for (finalizer, present) in wanted {
        let there = finalizers.iter().any(|f| f == finalizer);
        if *present && !there {
            finalizers.push((*finalizer).to_owned());
        } else if !*present && there {
            finalizers.retain(|f| f != finalizer);
        }
    }
    if finalizers == cppc.finalizers() {
        return Ok(false);
    }
    Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .patch(
            SINGLETON_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": cppc.resource_version()}})),
        )
        .await
        .map_err(api_error("write the finalizers"))?;
    Ok(true)
}
