//! What the rest of a cluster does in `simulate`, in memory and at once: the
//! PersistentVolume controller and provisioners bind the claims the scheduler decided
//! on, and victims of preemption are gone as soon as they are evicted.

use std::time::Instant;

use multiarch_plugins::model::{
    pod::PodInfo,
    storage::{ClaimInfo, ClaimRef, PersistentVolumeInfo, VolumeBindingPlan},
};

use crate::engine::outcome::Preemption;
use crate::engine::scheduler::SchedulerCore;
use crate::engine::storage_objects::StorageObject;

/// Next resource version for objects the simulated controllers write.
fn bump(version: &str) -> String {
    (version.parse::<u64>().unwrap_or(0) + 1).to_string()
}

fn bind_claim(core: &mut SchedulerCore, claim: &ClaimRef, volume: &str, now: Instant) {
    let Some(current) = core.cluster.storage().claim(&claim.namespace, &claim.name) else {
        return;
    };
    let bound = ClaimInfo {
        volume_name: volume.to_owned(),
        bind_completed: true,
        resource_version: bump(&current.resource_version),
        ..current.clone()
    };
    core.apply_storage(StorageObject::Claim(bound), now);
}

/// Writes the plan as the PersistentVolume controller and a provisioner would: chosen
/// volumes bound to their claims, a local volume created on `node` for each provision.
pub fn bind_volumes(core: &mut SchedulerCore, plan: &VolumeBindingPlan, node: &str, now: Instant) {
    for binding in &plan.bindings {
        if let Some(volume) = core.cluster.storage().volume(&binding.volume) {
            let bound = PersistentVolumeInfo {
                claim_ref: Some(binding.claim.clone()),
                available: false,
                resource_version: bump(&volume.resource_version),
                ..volume.clone()
            };
            core.apply_storage(StorageObject::Volume(bound), now);
        }
        bind_claim(core, &binding.claim, &binding.volume, now);
    }
    for provision in &plan.provisions {
        let Some(claim) = core
            .cluster
            .storage()
            .claim(&provision.claim.namespace, &provision.claim.name)
            .cloned()
        else {
            continue;
        };
        let name = format!("pvc-{}", claim.uid);
        let hostname = core
            .cluster
            .node(node)
            .and_then(|n| n.hostname.as_deref())
            .unwrap_or(node)
            .to_owned();
        let provisioned = multiarch_plugins::model::storage::builders::VolumeBuilder::new(
            &name,
            &claim.storage_class,
            &claim.request.unwrap_or(0).to_string(),
        )
        .local_on(&hostname)
        .claim_ref(&claim.namespace, &claim.name, &claim.uid)
        .phase("Bound")
        .info();
        core.apply_storage(StorageObject::Volume(provisioned), now);
        bind_claim(core, &provision.claim, &name, now);
    }
}

/// Deletes the victims at once (their grace period is over in the blink of an eye) and
/// tells the core the evictions are done. Returns the victims.
pub fn evict(
    core: &mut SchedulerCore,
    preemptor: &PodInfo,
    preemption: &Preemption,
    now: Instant,
) -> usize {
    for victim in &preemption.victims {
        core.delete_pod(&victim.uid, now);
    }
    core.preemption_done(&preemptor.uid, true, now);
    preemption.victims.len()
}
