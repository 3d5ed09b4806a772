//! VolumeBinding's PreBind: writes the volume decisions of a pod (a volume's `claimRef`,
//! a claim's `volume.kubernetes.io/selected-node`) with the versions they were made on
//! as preconditions, then waits, with a deadline, until the PersistentVolume controller
//! (or the provisioner) has bound every claim, as kube-scheduler does before it binds
//! the pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_plugins::model::storage::{
    BIND_COMPLETED_ANNOTATION, BOUND_BY_CONTROLLER_ANNOTATION, ClaimRef, SELECTED_NODE_ANNOTATION,
    VolumeBindingPlan,
};
use multiarch_runtime::rate_limit::TokenBucket;
use serde_json::json;

/// How often the claims are read while waiting for them to be bound.
const POLL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum VolumeBindingError {
    #[error("updating {what}: {source}")]
    Write { what: String, source: kube::Error },
    #[error("reading {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error("ClaimRef got reset for pv \"{0}\"")]
    ClaimRefReset(String),
    #[error("provisioning failed for PVC \"{0}\"")]
    ProvisioningFailed(String),
    #[error("timed out waiting for the condition after {0:?}")]
    Timeout(Duration),
}

/// Writes the plan for `node`, then waits up to `timeout` for the claims to be bound.
pub async fn bind_volumes(
    client: &kube::Client,
    plan: &VolumeBindingPlan,
    node: &str,
    timeout: Duration,
    limiter: &TokenBucket,
) -> Result<(), VolumeBindingError> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for binding in &plan.bindings {
        let mut metadata = json!({"resourceVersion": binding.volume_resource_version});
        if binding.bound_by_scheduler {
            metadata["annotations"] = json!({BOUND_BY_CONTROLLER_ANNOTATION: "yes"});
        }
        let patch = json!({
            "metadata": metadata,
            "spec": {"claimRef": claim_reference(&binding.claim, &binding.claim_resource_version)},
        });
        limiter.acquire().await;
        volumes
            .patch(
                &binding.volume,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| VolumeBindingError::Write {
                what: format!("PersistentVolume {}", binding.volume),
                source,
            })?;
    }
    for provision in &plan.provisions {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(client.clone(), &provision.claim.namespace);
        let patch = json!({"metadata": {
            "resourceVersion": provision.claim_resource_version,
            "annotations": {SELECTED_NODE_ANNOTATION: node},
        }});
        limiter.acquire().await;
        claims
            .patch(
                &provision.claim.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| VolumeBindingError::Write {
                what: format!(
                    "PersistentVolumeClaim {}/{}",
                    provision.claim.namespace, provision.claim.name
                ),
                source,
            })?;
    }
    match tokio::time::timeout(timeout, wait_until_bound(client, plan, node, limiter)).await {
        Ok(result) => result,
        Err(_) => Err(VolumeBindingError::Timeout(timeout)),
    }
}

/// The claim reference a PersistentVolume controller writes (`reference.GetReference`).
fn claim_reference(claim: &ClaimRef, resource_version: &str) -> serde_json::Value {
    json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": claim.namespace, "name": claim.name, "uid": claim.uid,
        "resourceVersion": resource_version,
    })
}

async fn read_claim(
    client: &kube::Client,
    claim: &ClaimRef,
    limiter: &TokenBucket,
) -> Result<PersistentVolumeClaim, VolumeBindingError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &claim.namespace);
    limiter.acquire().await;
    claims
        .get(&claim.name)
        .await
        .map_err(|source| VolumeBindingError::Read {
            what: format!("PersistentVolumeClaim {}/{}", claim.namespace, claim.name),
            source,
        })
}

fn fully_bound(claim: &PersistentVolumeClaim) -> bool {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED_ANNOTATION))
}

/// `checkBindings`, polled: done when every claim is bound; an error when a volume lost
/// its claim reference or a provisioner gave up (it removes `selected-node`).
async fn wait_until_bound(
    client: &kube::Client,
    plan: &VolumeBindingPlan,
    node: &str,
    limiter: &TokenBucket,
) -> Result<(), VolumeBindingError> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    loop {
        let mut all_bound = true;
        for binding in &plan.bindings {
            limiter.acquire().await;
            let volume =
                volumes
                    .get(&binding.volume)
                    .await
                    .map_err(|source| VolumeBindingError::Read {
                        what: format!("PersistentVolume {}", binding.volume),
                        source,
                    })?;
            let reset = volume
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_none_or(|r| r.uid.as_deref().unwrap_or_default().is_empty());
            if reset {
                return Err(VolumeBindingError::ClaimRefReset(binding.volume.clone()));
            }
            all_bound &= fully_bound(&read_claim(client, &binding.claim, limiter).await?);
        }
        for provision in &plan.provisions {
            let claim = read_claim(client, &provision.claim, limiter).await?;
            let selected = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE_ANNOTATION));
            if selected.map(String::as_str) != Some(node) {
                return Err(VolumeBindingError::ProvisioningFailed(
                    provision.claim.name.clone(),
                ));
            }
            all_bound &= fully_bound(&claim);
        }
        if all_bound {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}
