//! `VolumeRestrictions`: a ReadWriteOncePod claim is used by one pod at a time, and an
//! inline disk (GCE PD, EBS, iSCSI, RBD) is mounted read-write by one pod per node.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, StorageChange},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{
        cluster::ClusterState,
        node::NodeInfo,
        pod::PodInfo,
        storage::{AccessModes, claim_key},
    },
    plugins::volume_binding::claim_not_found,
};

pub const NAME: &str = "VolumeRestrictions";
pub const DISK_CONFLICT: &str = "node(s) had no available disk";
pub const READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

pub struct VolumeRestrictions;

#[derive(Clone, Default)]
struct RestrictionsState {
    /// The pod's ReadWriteOncePod claims (`namespace/name`).
    read_write_once_pod: Vec<String>,
    /// How many of them another pod uses.
    conflicting: i64,
}

impl RestrictionsState {
    fn update_with_pod(&mut self, other: &PodInfo, delta: i64) {
        for claim in other.claim_names() {
            if self
                .read_write_once_pod
                .contains(&claim_key(&other.namespace, claim))
            {
                self.conflicting += delta;
            }
        }
    }
}

/// Whether `existing` mounts a disk the pod mounts too, read-write on either side.
fn disks_conflict(pod: &PodInfo, existing: &PodInfo) -> bool {
    pod.volumes
        .iter()
        .filter_map(|v| v.disk.as_ref())
        .any(|disk| {
            existing
                .volumes
                .iter()
                .filter_map(|v| v.disk.as_ref())
                .any(|other| disk.conflicts_with(other))
        })
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::AssignedPodDelete,
            EventKind::PersistentVolumeClaimChange,
        ]
    }

    /// A deleted pod that held one of the pod's disks or ReadWriteOncePod claims, a new
    /// node, or the pod's missing claim appearing.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        cluster: &ClusterState,
    ) -> QueueingHint {
        let queue = match change {
            ClusterChange::NodeAdded(_) => true,
            ClusterChange::AssignedPodDeleted(deleted) => {
                disks_conflict(pod, deleted)
                    || (deleted.namespace == pod.namespace
                        && deleted.claim_names().any(|c| {
                            pod.claim_names().any(|mine| mine == c)
                                && cluster
                                    .storage()
                                    .claim(&pod.namespace, c)
                                    .is_some_and(|claim| {
                                        claim
                                            .access_modes
                                            .contains(AccessModes::READ_WRITE_ONCE_POD)
                                    })
                        }))
            }
            ClusterChange::Storage(StorageChange::Claim(claim)) => {
                pod.mounts_claim(&claim.namespace, &claim.name)
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        let pod = ctx.pod;
        let storage = ctx.cluster.storage();
        let needs_disk_check = pod.volumes.iter().any(|v| v.disk.is_some());
        let mut s = RestrictionsState::default();
        // Only persistent claims: ephemeral ones are looked up by VolumeBinding.
        for claim in pod
            .volumes
            .iter()
            .filter_map(|v| v.claim.as_ref())
            .filter(|c| !c.ephemeral)
        {
            let Some(found) = storage.claim(&pod.namespace, &claim.name) else {
                return Status::unresolvable(claim_not_found(&claim.name));
            };
            if found
                .access_modes
                .contains(AccessModes::READ_WRITE_ONCE_POD)
            {
                let key = found.key();
                if storage.claim_users(&key) > 0 {
                    s.conflicting += 1;
                }
                s.read_write_once_pod.push(key);
            }
        }
        if !needs_disk_check && s.conflicting == 0 {
            return Status::skip();
        }
        state.write(s);
        Status::success()
    }

    fn add_pod(&self, _: &CycleContext<'_>, state: &mut CycleState, pod: &PodInfo, _: &NodeInfo) {
        if let Some(s) = state.read_mut::<RestrictionsState>() {
            s.update_with_pod(pod, 1);
        }
    }

    fn remove_pod(
        &self,
        _: &CycleContext<'_>,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &NodeInfo,
    ) {
        if let Some(s) = state.read_mut::<RestrictionsState>() {
            s.update_with_pod(pod, -1);
        }
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        if ctx.pod.volumes.iter().any(|v| v.disk.is_some())
            && node
                .pods
                .iter()
                .any(|existing| disks_conflict(ctx.pod, existing))
        {
            return Status::unschedulable(DISK_CONFLICT);
        }
        match state.read::<RestrictionsState>() {
            Some(s) if s.conflicting > 0 => Status::unschedulable(READ_WRITE_ONCE_POD_CONFLICT),
            Some(_) => Status::success(),
            None => Status::error("VolumeRestrictions: PreFilter did not run"),
        }
    }
}

#[cfg(test)]
mod tests;
