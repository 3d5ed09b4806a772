//! `VolumeBinding`: a pod's claims decide where it can run. Bound claims: the volume's
//! node affinity filters nodes (a local volume narrows the candidates to its node).
//! Unbound `WaitForFirstConsumer` claims: a node fits when a matching available volume
//! is there or the class can provision there (allowed topologies, storage capacity);
//! the chosen node's plan (volumes to bind, claims to provision) is written before the
//! binding. Unbound `Immediate` claims wait for the PersistentVolume controller.

use crate::{
    events::{ClusterChange, EventKind, NodeChanges, QueueingHint, StorageChange},
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Reason, Status,
    },
    model::{
        cluster::ClusterState,
        node::NodeInfo,
        pod::PodInfo,
        storage::{
            ClaimInfo, ClaimRef, NO_PROVISIONER, Provision, StaticBinding, StorageCatalog,
            VolumeBindingPlan,
        },
    },
};

pub const NAME: &str = "VolumeBinding";
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
pub const NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
pub const PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

pub struct VolumeBinding;

/// `persistentvolumeclaim "NAME" not found`, the API's NotFound message kube-scheduler
/// passes on.
pub fn claim_not_found(name: &str) -> String {
    format!("persistentvolumeclaim \"{name}\" not found")
}

/// The pod's claims, looked up once per cycle.
#[derive(Clone, Default)]
struct ClaimsState {
    /// Fully bound claims.
    bound: Vec<ClaimInfo>,
    /// Unbound claims of WaitForFirstConsumer classes.
    delayed: Vec<ClaimInfo>,
}

/// The claim of a pod volume, or why the pod cannot be scheduled with it
/// (`podHasPVCs` and `isVolumeBound`).
pub fn pod_claim<'a>(
    pod: &PodInfo,
    storage: &'a StorageCatalog,
    claim: &crate::model::pod::PodClaim,
) -> Result<&'a ClaimInfo, String> {
    let Some(found) = storage.claim(&pod.namespace, &claim.name) else {
        return Err(if claim.ephemeral {
            format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{}\"",
                claim.name
            )
        } else {
            claim_not_found(&claim.name)
        });
    };
    if found.lost {
        return Err(format!(
            "persistentvolumeclaim \"{}\" bound to non-existent persistentvolume \"{}\"",
            found.name, found.volume_name
        ));
    }
    if found.deleting {
        return Err(format!(
            "persistentvolumeclaim \"{}\" is being deleted",
            found.name
        ));
    }
    if claim.ephemeral && found.owner_pod_uid.as_deref() != Some(pod.uid.as_str()) {
        return Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            found.namespace, found.name, pod.namespace, pod.name
        ));
    }
    Ok(found)
}

/// `IsDelayBindingMode`: the class exists and waits for the first consumer. A class
/// without a binding mode is an error.
fn delayed_binding(storage: &StorageCatalog, claim: &ClaimInfo) -> Result<bool, String> {
    if claim.storage_class.is_empty() {
        return Ok(false);
    }
    match storage.class(&claim.storage_class) {
        None => Ok(false),
        Some(class) => class.wait_for_first_consumer.ok_or_else(|| {
            format!(
                "VolumeBindingMode not set for StorageClass \"{}\"",
                claim.storage_class
            )
        }),
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::NodeUpdate,
            EventKind::PersistentVolumeChange,
            EventKind::PersistentVolumeClaimChange,
            EventKind::StorageClassChange,
            EventKind::CsiNodeChange,
            EventKind::CsiDriverChange,
            EventKind::StorageCapacityChange,
        ]
    }

    /// A claim of the pod changed, a volume or class its claims may use changed, node
    /// labels (volume node affinity, allowed topologies) changed, or storage capacity
    /// changed.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        cluster: &ClusterState,
    ) -> QueueingHint {
        let storage = cluster.storage();
        let claims: Vec<Option<&ClaimInfo>> = pod
            .claim_names()
            .map(|name| storage.claim(&pod.namespace, name))
            .collect();
        let queue = match change {
            ClusterChange::NodeAdded(_) => true,
            ClusterChange::NodeUpdated { changes, .. } => changes.contains(NodeChanges::LABELS),
            ClusterChange::Storage(StorageChange::Claim(claim)) => {
                claim.namespace == pod.namespace && pod.claim_names().any(|n| n == claim.name)
            }
            ClusterChange::Storage(StorageChange::PersistentVolume(volume)) => {
                claims.iter().any(|c| {
                    c.is_none_or(|c| {
                        c.volume_name == volume.name
                            || (c.volume_name.is_empty() && c.storage_class == volume.storage_class)
                    })
                })
            }
            ClusterChange::Storage(StorageChange::StorageClass(class)) => claims
                .iter()
                .any(|c| c.is_none_or(|c| c.storage_class == class.name)),
            ClusterChange::Storage(StorageChange::Capacity(capacity)) => claims.iter().any(|c| {
                c.is_none_or(|c| {
                    c.volume_name.is_empty() && c.storage_class == capacity.storage_class
                })
            }),
            ClusterChange::Storage(StorageChange::CsiNode(_) | StorageChange::CsiDriver(_)) => {
                !claims.is_empty()
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        let pod = ctx.pod;
        let storage = ctx.cluster.storage();
        let mut claims = ClaimsState::default();
        let mut immediate = false;
        let mut any = false;
        for volume in &pod.volumes {
            let Some(claim) = &volume.claim else {
                continue;
            };
            any = true;
            let found = match pod_claim(pod, storage, claim) {
                Ok(found) => found,
                Err(reason) => return Status::unresolvable(reason),
            };
            if found.fully_bound() {
                claims.bound.push(found.clone());
                continue;
            }
            match delayed_binding(storage, found) {
                Err(e) => return Status::error(e),
                Ok(true) if found.volume_name.is_empty() => claims.delayed.push(found.clone()),
                // Immediate, or pre-bound to a volume: the PersistentVolume controller binds.
                Ok(_) => immediate = true,
            }
        }
        if !any {
            return Status::skip();
        }
        if immediate {
            return Status::unresolvable(UNBOUND_IMMEDIATE);
        }
        state.write(claims);
        Status::success()
    }

    /// `GetEligibleNodes`: the nodes the local volumes of bound claims are pinned to.
    fn eligible_nodes(&self, ctx: &CycleContext<'_>, state: &CycleState) -> Option<Vec<String>> {
        let claims = state.read::<ClaimsState>()?;
        let storage = ctx.cluster.storage();
        let mut eligible: Option<Vec<String>> = None;
        for claim in &claims.bound {
            // A missing volume: no narrowing at all (the filter explains it).
            let volume = storage.volume(&claim.volume_name)?;
            if let Some(names) = &volume.local_node_names {
                eligible = Some(match eligible {
                    None => names.clone(),
                    Some(have) => have.into_iter().filter(|n| names.contains(n)).collect(),
                });
            }
        }
        eligible
    }
}

/// What one node offers the pod's claims.
struct NodeVolumes {
    reasons: Vec<Reason>,
    plan: VolumeBindingPlan,
}

/// `FindPodVolumes` for one node.
fn find_pod_volumes(
    storage: &StorageCatalog,
    claims: &ClaimsState,
    node: &NodeInfo,
) -> Result<NodeVolumes, String> {
    let mut bound_satisfied = true;
    let mut bound_found = true;
    let mut unbound_satisfied = true;
    let mut sufficient_storage = true;
    let mut plan = VolumeBindingPlan::default();
    let reasons =
        |bound_satisfied: bool, unbound_satisfied: bool, sufficient: bool, found: bool| {
            let mut reasons = Vec::new();
            if !bound_satisfied {
                reasons.push(Reason::Static(NODE_CONFLICT));
            }
            if !unbound_satisfied {
                reasons.push(Reason::Static(BIND_CONFLICT));
            }
            if !sufficient {
                reasons.push(Reason::Static(NOT_ENOUGH_SPACE));
            }
            if !found {
                reasons.push(Reason::Static(PV_NOT_EXIST));
            }
            reasons
        };
    for claim in &claims.bound {
        match storage.volume(&claim.volume_name) {
            None => {
                bound_found = false;
                break;
            }
            Some(volume) if !volume.fits_node(&node.labels) => {
                bound_satisfied = false;
                break;
            }
            Some(_) => {}
        }
    }
    if !claims.delayed.is_empty() {
        let mut to_match: Vec<&ClaimInfo> = Vec::new();
        let mut to_provision: Vec<&ClaimInfo> = Vec::new();
        for claim in &claims.delayed {
            match &claim.selected_node {
                Some(selected) if *selected != node.name => {
                    return Ok(NodeVolumes {
                        reasons: reasons(bound_satisfied, false, true, bound_found),
                        plan: VolumeBindingPlan::default(),
                    });
                }
                Some(_) => to_provision.push(claim),
                None => to_match.push(claim),
            }
        }
        // Smallest requests first, so they get the smallest volumes.
        to_match.sort_by_key(|c| c.request.unwrap_or(0));
        let mut chosen: Vec<&str> = Vec::new();
        for claim in to_match {
            match claim.matching_volume(
                storage.volumes_of_class(&claim.storage_class),
                &node.labels,
                &chosen,
            ) {
                Some(volume) => {
                    chosen.push(&volume.name);
                    plan.bindings.push(StaticBinding {
                        volume: volume.name.clone(),
                        volume_resource_version: volume.resource_version.clone(),
                        claim: ClaimRef {
                            namespace: claim.namespace.clone(),
                            name: claim.name.clone(),
                            uid: claim.uid.clone(),
                        },
                        claim_resource_version: claim.resource_version.clone(),
                        bound_by_scheduler: !volume.is_bound_to(claim),
                    });
                }
                None => {
                    unbound_satisfied = false;
                    to_provision.push(claim);
                }
            }
        }
        if !to_provision.is_empty() {
            let (satisfied, sufficient) = check_provisioning(storage, &to_provision, node)?;
            unbound_satisfied = satisfied;
            sufficient_storage = sufficient;
            if satisfied && sufficient {
                plan.provisions = to_provision
                    .iter()
                    .map(|c| Provision {
                        claim: ClaimRef {
                            namespace: c.namespace.clone(),
                            name: c.name.clone(),
                            uid: c.uid.clone(),
                        },
                        claim_resource_version: c.resource_version.clone(),
                    })
                    .collect();
            }
        }
    }
    Ok(NodeVolumes {
        reasons: reasons(
            bound_satisfied,
            unbound_satisfied,
            sufficient_storage,
            bound_found,
        ),
        plan,
    })
}

/// `checkVolumeProvisions`: (provisioning possible, enough capacity).
fn check_provisioning(
    storage: &StorageCatalog,
    claims: &[&ClaimInfo],
    node: &NodeInfo,
) -> Result<(bool, bool), String> {
    for claim in claims {
        if claim.storage_class.is_empty() {
            return Err(format!("no class for claim \"{}\"", claim.key()));
        }
        let Some(class) = storage.class(&claim.storage_class) else {
            return Err(format!(
                "failed to find storage class \"{}\"",
                claim.storage_class
            ));
        };
        if class.provisioner.is_empty() || class.provisioner == NO_PROVISIONER {
            return Ok((false, true));
        }
        if !class.allows(&node.labels) {
            return Ok((false, true));
        }
        if !enough_capacity(storage, claim, &class.provisioner, node) {
            return Ok((true, false));
        }
    }
    Ok((true, true))
}

/// `hasEnoughCapacity`: only drivers that publish storage capacity are checked.
fn enough_capacity(
    storage: &StorageCatalog,
    claim: &ClaimInfo,
    provisioner: &str,
    node: &NodeInfo,
) -> bool {
    let Some(size) = claim.request else {
        return true;
    };
    if !storage
        .csi_driver(provisioner)
        .is_some_and(|d| d.storage_capacity)
    {
        return true;
    }
    storage.capacities().any(|c| {
        c.storage_class == claim.storage_class && c.fits(size) && c.reachable_from(&node.labels)
    })
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(claims) = state.read::<ClaimsState>() else {
            return Status::error("VolumeBinding: PreFilter did not run");
        };
        match find_pod_volumes(ctx.cluster.storage(), claims, node) {
            Err(e) => Status::error(e),
            Ok(found) if found.reasons.is_empty() => Status::success(),
            Ok(found) => Status {
                code: Code::UnschedulableAndUnresolvable,
                reasons: found.reasons,
                plugin: NAME,
                retry_with_backoff: false,
            },
        }
    }
}

/// The volumes to bind and claims to provision for the pod on the chosen node (empty when
/// the pod has no unbound WaitForFirstConsumer claims). Called after Filter passed there.
pub fn binding_plan(
    ctx: &CycleContext<'_>,
    state: &CycleState,
    node: &NodeInfo,
) -> VolumeBindingPlan {
    let Some(claims) = state.read::<ClaimsState>() else {
        return VolumeBindingPlan::default();
    };
    if claims.delayed.is_empty() {
        return VolumeBindingPlan::default();
    }
    find_pod_volumes(ctx.cluster.storage(), claims, node)
        .map(|found| found.plan)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
