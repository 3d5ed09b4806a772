//! `VolumeBinding`: a pod's claims decide where it can run. Bound claims: the volume's
//! node affinity filters nodes (a local volume narrows the candidates to its node).
//! Unbound `WaitForFirstConsumer` claims: a node fits when a matching available volume
//! is there or the class can provision there (allowed topologies, storage capacity);
//! the chosen node's plan (volumes to bind, claims to provision) is written before the
//! binding. Unbound `Immediate` claims wait for the PersistentVolume controller.
//! Scoring by storage utilization is `capacity_scoring`'s, when configured.

use std::sync::Arc;

use crate::{
    events::{ClusterChange, EventKind, NodeChanges, QueueingHint, StorageChange},
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Reason, Reasons,
        Status,
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

/// The plugin; it scores only with `storageCapacityScoring` configured.
#[derive(Default)]
pub struct VolumeBinding {
    capacity_scoring: Option<UtilizationScore>,
}

impl VolumeBinding {
    /// The plugin that also scores storage utilization by `scoring` (kube-scheduler's
    /// `StorageCapacityScoring` gate and `VolumeBindingArgs.shape`).
    pub fn with_capacity_scoring(scoring: Option<UtilizationScore>) -> Self {
        VolumeBinding {
            capacity_scoring: scoring,
        }
    }
}

mod capacity_scoring;
mod claims;
pub use capacity_scoring::UtilizationScore;
use claims::{ClaimSet, ClaimsState, DelayedClaim};

/// `persistentvolumeclaim "NAME" not found`, the API's NotFound message kube-scheduler
/// passes on.
pub fn claim_not_found(name: &str) -> String {
    format!("persistentvolumeclaim \"{name}\" not found")
}

/// The claim of a pod volume, or why the pod cannot be scheduled with it
/// (`podHasPVCs` and `isVolumeBound`).
pub fn pod_claim<'a>(
    pod: &PodInfo,
    storage: &'a StorageCatalog,
    claim: &crate::model::pod::volumes::PodClaim,
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
                pod.mounts_claim(&claim.namespace, &claim.name)
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
                claims
                    .bound
                    .push((found.clone(), storage.volume_arc(&found.volume_name)));
                continue;
            }
            match delayed_binding(storage, found) {
                Err(e) => return Status::error(e),
                Ok(true) if found.volume_name.is_empty() => {
                    claims
                        .delayed
                        .push(DelayedClaim::new(storage, found.clone()));
                }
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
        claims.delayed.sort_by_key(|c| c.claim.request.unwrap_or(0));
        // One claim to match: whether a node has a volume for it is all Filter asks (with
        // more, which volume each takes matters, and the volumes are read).
        if let [only] = claims.delayed.as_mut_slice()
            && only.claim.can_match_summaries()
            && !only.none_pinned
        {
            only.local = Some(ctx.cluster.local_volumes(&only.claim.storage_class));
        }
        state.write(claims);
        Status::success()
    }

    /// A claim only local volumes can serve: the nodes its class has an unclaimed volume
    /// pinned to (any other node would find none and could not provision). A shortcut
    /// only: the filter still checks each of them.
    fn candidate_nodes(&self, ctx: &CycleContext<'_>, state: &CycleState) -> Option<Arc<[usize]>> {
        let claims = state.read::<ClaimsState>()?;
        let delayed = claims.delayed.iter().find(|c| c.pinned_only())?;
        Some(match &delayed.local {
            Some(local) => local.nodes.clone(),
            None => ctx
                .cluster
                .nodes_with_local_volumes(&delayed.claim.storage_class),
        })
    }

    /// `GetEligibleNodes`: the nodes the local volumes of bound claims are pinned to.
    fn eligible_nodes(&self, _: &CycleContext<'_>, state: &CycleState) -> Option<Vec<String>> {
        let claims = state.read::<ClaimsState>()?;
        let mut eligible: Option<Vec<String>> = None;
        for (_, volume) in &claims.bound {
            // A missing volume: no narrowing at all (the filter explains it).
            let volume = volume.as_ref()?;
            if let Some(names) = &volume.local_node_names {
                eligible = Some(match eligible {
                    None => names.to_vec(),
                    Some(have) => have.into_iter().filter(|n| names.contains(n)).collect(),
                });
            }
        }
        eligible
    }
}

/// Why a node does not suit the pod's claims, as bits (no allocation per node).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Conflicts(u8);

impl Conflicts {
    const NODE: u8 = 1;
    const BIND: u8 = 2;
    const SPACE: u8 = 4;
    const MISSING_VOLUME: u8 = 8;

    fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }

    /// kube-scheduler's reasons, in its order.
    fn reasons(self) -> Reasons {
        [
            (Self::NODE, NODE_CONFLICT),
            (Self::BIND, BIND_CONFLICT),
            (Self::SPACE, NOT_ENOUGH_SPACE),
            (Self::MISSING_VOLUME, PV_NOT_EXIST),
        ]
        .into_iter()
        .filter(|(bit, _)| self.0 & bit != 0)
        .map(|(_, reason)| Reason::Static(reason))
        .collect()
    }
}

fn claim_ref(claim: &ClaimInfo) -> ClaimRef {
    ClaimRef {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: claim.uid.clone(),
    }
}

/// `FindPodVolumes` for one node: what conflicts, and (when `plan` is given, for the
/// chosen node) the volumes to bind and claims to provision. `position` is the node's
/// in the cluster's list, when known (the volume summaries are kept by position).
fn find_pod_volumes(
    storage: &StorageCatalog,
    claims: &ClaimsState,
    node: &NodeInfo,
    position: Option<usize>,
    mut plan: Option<&mut VolumeBindingPlan>,
) -> Result<Conflicts, String> {
    let mut conflicts = Conflicts::default();
    for (_, volume) in &claims.bound {
        match volume {
            None => {
                conflicts.set(Conflicts::MISSING_VOLUME, true);
                break;
            }
            Some(volume) if !volume.fits_node(node) => {
                conflicts.set(Conflicts::NODE, true);
                break;
            }
            Some(_) => {}
        }
    }
    if claims.delayed.is_empty() {
        return Ok(conflicts);
    }
    // A claim already provisioned for another node rules this one out.
    if claims.delayed.iter().any(|c| {
        c.claim
            .selected_node
            .as_ref()
            .is_some_and(|n| *n != node.name)
    }) {
        conflicts.set(Conflicts::BIND, true);
        return Ok(conflicts);
    }
    // Smallest requests first (sorted in PreFilter), so they get the smallest volumes.
    let mut chosen: Vec<&str> = Vec::new();
    let mut unmatched = ClaimSet::default();
    for (i, delayed) in claims.delayed.iter().enumerate() {
        let claim = &delayed.claim;
        if claim.selected_node.is_some() {
            continue;
        }
        // Filter only asks whether the claim finds a volume; the plan needs which.
        let known = if plan.is_none() {
            delayed.served_without_reading(position)
        } else {
            None
        };
        let matched = known.unwrap_or_else(|| {
            let Some(volume) = claim.matching_volume(
                delayed.usable_on(storage, node.hostname.as_ref()),
                node,
                &chosen,
            ) else {
                return false;
            };
            chosen.push(&volume.name);
            if let Some(plan) = plan.as_deref_mut() {
                plan.bindings.push(StaticBinding {
                    volume: volume.name.clone(),
                    volume_resource_version: volume.resource_version.clone(),
                    claim: claim_ref(claim),
                    claim_resource_version: claim.resource_version.clone(),
                    bound_by_scheduler: !volume.is_bound_to(claim),
                });
            }
            true
        });
        if !matched {
            conflicts.set(Conflicts::BIND, true);
            unmatched.insert(i);
        }
    }
    // Listed twice rather than collected: Filter runs this per node.
    let to_provision = || {
        claims
            .delayed
            .iter()
            .enumerate()
            .filter(|(i, c)| c.claim.selected_node.is_some() || unmatched.contains(*i))
            .map(|(_, c)| c)
    };
    if to_provision().next().is_some() {
        let (satisfied, sufficient) = check_provisioning(storage, to_provision(), node)?;
        conflicts.set(Conflicts::BIND, !satisfied);
        conflicts.set(Conflicts::SPACE, !sufficient);
        if let Some(plan) = plan
            && satisfied
            && sufficient
        {
            plan.provisions = to_provision()
                .map(|c| Provision {
                    claim: claim_ref(&c.claim),
                    claim_resource_version: c.claim.resource_version.clone(),
                })
                .collect();
        }
    }
    Ok(conflicts)
}

/// `checkVolumeProvisions`: (provisioning possible, enough capacity).
fn check_provisioning<'a>(
    storage: &StorageCatalog,
    claims: impl IntoIterator<Item = &'a DelayedClaim>,
    node: &NodeInfo,
) -> Result<(bool, bool), String> {
    for delayed in claims {
        let claim = &delayed.claim;
        if claim.storage_class.is_empty() {
            return Err(format!("no class for claim \"{}\"", claim.key()));
        }
        let Some(class) = &delayed.class else {
            return Err(format!(
                "failed to find storage class \"{}\"",
                claim.storage_class
            ));
        };
        if class.provisioner.is_empty() || class.provisioner == NO_PROVISIONER {
            return Ok((false, true));
        }
        if !class.allows_with(|key| node.label(key)) {
            return Ok((false, true));
        }
        if delayed.capacity_tracked && !enough_capacity(storage, claim, node) {
            return Ok((true, false));
        }
    }
    Ok((true, true))
}

/// `hasEnoughCapacity`, for a driver that publishes storage capacity.
fn enough_capacity(storage: &StorageCatalog, claim: &ClaimInfo, node: &NodeInfo) -> bool {
    let Some(size) = claim.request else {
        return true;
    };
    storage
        .capacities()
        .any(|c| c.storage_class == claim.storage_class && c.fits(size) && c.reachable_from(node))
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(claims) = state.read::<ClaimsState>() else {
            return Status::error("VolumeBinding: PreFilter did not run");
        };
        let position = claims
            .delayed
            .iter()
            .any(|c| c.local.is_some())
            .then(|| ctx.cluster.position_of(node))
            .flatten();
        match find_pod_volumes(ctx.cluster.storage(), claims, node, position, None) {
            Err(e) => Status::error(e),
            Ok(conflicts) if conflicts == Conflicts::default() => Status::success(),
            Ok(conflicts) => Status {
                code: Code::UnschedulableAndUnresolvable,
                reasons: conflicts.reasons(),
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
    let mut plan = VolumeBindingPlan::default();
    match find_pod_volumes(ctx.cluster.storage(), claims, node, None, Some(&mut plan)) {
        Ok(conflicts) if conflicts == Conflicts::default() => plan,
        // Filter passed on this node a moment ago: nothing changed since.
        _ => VolumeBindingPlan::default(),
    }
}

#[cfg(test)]
mod tests;
