//! The writes several actions share: deleting an operand, and writing the status.

use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigStatus, names::SINGLETON_NAME,
};
use serde_json::{Value, json};
use tracing::info;

use crate::{
    act::ActError,
    apply::{ApplyError, ObjectKey},
    context::OperatorContext,
};

/// Deletes the operand `key` if it is the operator's; `true` when it did.
pub(crate) async fn delete(ctx: &OperatorContext, key: &ObjectKey) -> Result<bool, ApplyError> {
    let deleted = ctx.applier.delete_ours(key).await?;
    if deleted {
        info!(object = %key, "deleted");
        ctx.metrics.wrote("deleted");
    }
    Ok(deleted)
}

/// Writes the status when it changed (a merge patch of the whole status).
pub async fn write_status(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    status: ClusterPodPlacementConfigStatus,
) -> Result<(), ActError> {
    if cppc.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut value = serde_json::to_value(&status).unwrap_or(Value::Null);
    // Absent fields are cleared, not left as they were.
    for field in [
        "conditions",
        "observedGeneration",
        "routing",
        "architectures",
    ] {
        if value.get(field).is_none() {
            value[field] = Value::Null;
        }
    }
    Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .patch_status(
            SINGLETON_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": value})),
        )
        .await
        .map_err(ActError::api("write the status"))?;
    Ok(())
}
