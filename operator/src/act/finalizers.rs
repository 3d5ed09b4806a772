//! Writing the ClusterPodPlacementConfig's finalizers (MTO's two, `decide` says which):
//! one merge patch with the resourceVersion read as a precondition, none when nothing
//! changes.

use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use multiarch_crd::{ClusterPodPlacementConfig, names::SINGLETON_NAME};
use serde_json::json;

use crate::{act::ActError, context::OperatorContext};

/// Adds (`true`) or removes (`false`) each finalizer; `true` when it wrote.
pub async fn set(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    wanted: &[(&str, bool)],
) -> Result<bool, ActError> {
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
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": cppc.resource_version()}});
    Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .patch(
            SINGLETON_NAME,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(ActError::api("write the finalizers"))?;
    Ok(true)
}
