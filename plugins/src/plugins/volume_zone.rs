//! `VolumeZone`: a pod whose bound volumes carry zone or region labels runs only on nodes
//! of those zones and regions.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, StorageChange},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
    plugins::volume_binding::claim_not_found,
};

pub const NAME: &str = "VolumeZone";
pub const REASON: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
/// In kube-scheduler's order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

pub struct VolumeZone;

/// One volume's allowed values for one topology label.
#[derive(Clone, Debug, PartialEq, Eq)]
struct VolumeTopology {
    key: &'static str,
    values: Vec<String>,
}

#[derive(Clone, Default)]
struct ZoneState {
    topologies: Vec<VolumeTopology>,
}

/// The GA label a node may carry for a beta one a volume names.
fn ga_label(key: &str) -> &str {
    match key {
        BETA_ZONE => ZONE,
        BETA_REGION => REGION,
        other => other,
    }
}

/// The topologies of the pod's bound volumes (`getPVbyPod`), or why it cannot fit.
fn volume_topologies(pod: &PodInfo, cluster: &ClusterState) -> Result<Vec<VolumeTopology>, Status> {
    let storage = cluster.storage();
    let mut topologies = Vec::new();
    // Persistent claims only, as kube-scheduler.
    for claim in pod
        .volumes
        .iter()
        .filter_map(|v| v.claim.as_ref())
        .filter(|c| !c.ephemeral)
    {
        if claim.name.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(found) = storage.claim(&pod.namespace, &claim.name) else {
            return Err(Status::unresolvable(claim_not_found(&claim.name)));
        };
        if found.volume_name.is_empty() {
            if found.storage_class.is_empty() {
                return Err(Status::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(class) = storage.class(&found.storage_class) else {
                return Err(Status::unresolvable(format!(
                    "storageclass.storage.k8s.io \"{}\" not found",
                    found.storage_class
                )));
            };
            match class.wait_for_first_consumer {
                None => {
                    return Err(Status::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass \"{}\"",
                        found.storage_class
                    )));
                }
                Some(true) => continue,
                Some(false) => return Err(Status::unresolvable("PersistentVolume had no name")),
            }
        }
        let Some(volume) = storage.volume(&found.volume_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolume \"{}\" not found",
                found.volume_name
            )));
        };
        for key in TOPOLOGY_LABELS {
            if let Some(value) = volume.labels.get(key) {
                topologies.push(VolumeTopology {
                    key,
                    // A multi-zone volume lists its zones separated by "__".
                    values: value
                        .split("__")
                        .filter(|z| !z.is_empty())
                        .map(str::to_owned)
                        .collect(),
                });
            }
        }
    }
    Ok(topologies)
}

impl Plugin for VolumeZone {
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
        ]
    }

    /// A node with new topology labels, one of the pod's claims, a volume with topology
    /// labels, or a WaitForFirstConsumer class.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        let queue = match change {
            ClusterChange::NodeAdded(_) => true,
            ClusterChange::NodeUpdated { old, new, .. } => TOPOLOGY_LABELS
                .iter()
                .any(|key| old.label(key) != new.label(key)),
            ClusterChange::Storage(StorageChange::Claim(claim)) => {
                pod.mounts_claim(&claim.namespace, &claim.name)
            }
            ClusterChange::Storage(StorageChange::PersistentVolume(volume)) => TOPOLOGY_LABELS
                .iter()
                .any(|key| volume.labels.contains_key(*key)),
            ClusterChange::Storage(StorageChange::StorageClass(class)) => {
                class.wait_for_first_consumer == Some(true)
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        match volume_topologies(ctx.pod, ctx.cluster) {
            Err(status) => status,
            Ok(topologies) if topologies.is_empty() => Status::skip(),
            Ok(topologies) => {
                state.write(ZoneState { topologies });
                Status::success()
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, _: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<ZoneState>() else {
            return Status::error("VolumeZone: PreFilter did not run");
        };
        // A node without topology labels (a single-zone cluster) takes any volume.
        if !TOPOLOGY_LABELS.iter().any(|k| node.label(k).is_some()) {
            return Status::success();
        }
        for topology in &s.topologies {
            let value = node
                .label(topology.key)
                .or_else(|| node.label(ga_label(topology.key)));
            if value.is_none_or(|v| !topology.values.iter().any(|w| w == v)) {
                return Status::unresolvable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
