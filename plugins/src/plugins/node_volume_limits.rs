//! `NodeVolumeLimits`: a node attaches at most its CSINode's `allocatable.count` volumes
//! per CSI driver (in-tree volumes count for the driver they migrated to). Volumes in use
//! by the node's pods and volumes still attached count; a volume shared by pods counts
//! once.

use std::collections::HashMap;

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, StorageChange},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{
        cluster::ClusterState,
        node::NodeInfo,
        pod::PodInfo,
        storage::{ClaimInfo, CsiNodeInfo, StorageCatalog, migration},
    },
    plugins::volume_binding::claim_not_found,
};

pub const NAME: &str = "NodeVolumeLimits";
pub const REASON: &str = "node(s) exceed max volume count";

pub struct NodeVolumeLimits;

/// Unique volume name (`driver/handle`) → driver.
type Volumes = HashMap<String, String>;

fn counts_for_limits(pod: &PodInfo) -> bool {
    pod.volumes
        .iter()
        .any(|v| v.claim.is_some() || v.migrated.is_some())
}

/// A volume that counts against a driver's limit, and the in-tree plugin that must be
/// migrated on the node for it to count there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attachable {
    driver: String,
    /// `driver/handle`: a volume used by several pods counts once.
    unique: String,
    migrated_from: Option<&'static str>,
}

impl Attachable {
    fn counts_on(&self, csi_node: Option<&CsiNodeInfo>) -> bool {
        self.migrated_from
            .is_none_or(|plugin| csi_node.is_some_and(|n| n.migrated(plugin)))
    }
}

/// `getCSIDriverInfo`: the driver and handle of a claim's volume, or of the volume its
/// class would provision (a placeholder handle per claim).
fn claim_volume(storage: &StorageCatalog, claim: &ClaimInfo) -> Option<Attachable> {
    if !claim.volume_name.is_empty()
        && let Some(volume) = storage.volume(&claim.volume_name)
    {
        let csi = volume.csi.as_ref()?;
        return Some(Attachable {
            driver: csi.driver.clone(),
            unique: format!("{}/{}", csi.driver, csi.handle),
            migrated_from: volume.in_tree_plugin,
        });
    }
    let class = storage.class(&claim.storage_class)?;
    let (driver, migrated_from) = match migration::driver_of_provisioner(&class.provisioner) {
        Some((plugin, driver)) => (driver.to_owned(), Some(plugin)),
        None => (class.provisioner.clone(), None),
    };
    Some(Attachable {
        unique: format!("{driver}/{}-{}", claim.namespace, claim.name),
        driver,
        migrated_from,
    })
}

/// `filterAttachableVolumes`, without the node: the pod's volumes that may count. For
/// the incoming pod a missing claim is an error; for running pods it is skipped.
fn attachable(
    storage: &StorageCatalog,
    pod: &PodInfo,
    incoming: bool,
) -> Result<Vec<Attachable>, Status> {
    let mut out = Vec::new();
    for volume in &pod.volumes {
        if let Some(claim) = &volume.claim {
            let Some(found) = storage.claim(&pod.namespace, &claim.name) else {
                if incoming {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {}/{}: {}",
                        pod.namespace,
                        claim.name,
                        claim_not_found(&claim.name)
                    )));
                }
                continue;
            };
            if claim.ephemeral && found.owner_pod_uid.as_deref() != Some(pod.uid.as_str()) {
                return Err(Status::error(format!(
                    "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
                    found.namespace, found.name, pod.namespace, pod.name
                )));
            }
            out.extend(claim_volume(storage, found));
        } else if let Some(migrated) = &volume.migrated {
            let csi = &migrated.csi;
            out.push(Attachable {
                driver: csi.driver.clone(),
                unique: format!("{}/{}", csi.driver, csi.handle),
                migrated_from: Some(migrated.plugin),
            });
        }
    }
    Ok(out)
}

/// The incoming pod's volumes, resolved once per cycle (or why it cannot be placed,
/// reported by every node as kube-scheduler's Filter does).
#[derive(Clone)]
struct LimitsState(Result<Vec<Attachable>, Status>);

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::CsiNodeChange,
            EventKind::AssignedPodDelete,
            EventKind::PersistentVolumeClaimChange,
            EventKind::VolumeAttachmentDelete,
        ]
    }

    /// A CSINode (new limits), a deleted pod that had volumes, a detached volume, or the
    /// pod's missing claim appearing.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        let queue = match change {
            ClusterChange::Storage(
                StorageChange::CsiNode(_) | StorageChange::AttachmentDeleted(_),
            ) => true,
            ClusterChange::AssignedPodDeleted(deleted) => counts_for_limits(deleted),
            ClusterChange::Storage(StorageChange::Claim(claim)) => {
                pod.mounts_claim(&claim.namespace, &claim.name)
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        if !counts_for_limits(ctx.pod) {
            return Status::skip();
        }
        let storage = ctx.cluster.storage();
        let volumes = attachable(storage, ctx.pod, true);
        // No node limits a driver of the pod's volumes: Filter would pass every node.
        if volumes
            .as_ref()
            .is_ok_and(|v| !v.iter().any(|v| storage.driver_has_limits(&v.driver)))
        {
            return Status::skip();
        }
        state.write(LimitsState(volumes));
        Status::success()
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let incoming = match state.read::<LimitsState>() {
            None => return Status::error("NodeVolumeLimits: PreFilter did not run"),
            Some(LimitsState(Err(status))) => return status.clone(),
            Some(LimitsState(Ok(volumes))) => volumes,
        };
        let storage = ctx.cluster.storage();
        let Some(csi_node) = storage.csi_node(&node.name) else {
            return Status::success();
        };
        if csi_node.limits.is_empty() {
            return Status::success();
        }
        let mut new: Volumes = incoming
            .iter()
            .filter(|v| v.counts_on(Some(csi_node)))
            .map(|v| (v.unique.clone(), v.driver.clone()))
            .collect();
        if new.is_empty() {
            return Status::success();
        }
        let mut attached = Volumes::new();
        for existing in &node.pods {
            match attachable(storage, existing, false) {
                Ok(volumes) => attached.extend(
                    volumes
                        .into_iter()
                        .filter(|v| v.counts_on(Some(csi_node)))
                        .map(|v| (v.unique, v.driver)),
                ),
                Err(status) => return status,
            }
        }
        for attachment in storage.attachments_on(&node.name) {
            let handle = attachment
                .volume
                .as_deref()
                .and_then(|v| storage.volume(v))
                .and_then(|v| v.csi.as_ref())
                .filter(|_| !attachment.attacher.is_empty())
                .map(|csi| csi.handle.clone());
            if let Some(handle) = handle {
                attached
                    .entry(format!("{}/{handle}", attachment.attacher))
                    .or_insert_with(|| attachment.attacher.clone());
            }
        }
        let mut attached_per_driver: HashMap<&str, i64> = HashMap::new();
        for (unique, driver) in &attached {
            new.remove(unique);
            *attached_per_driver.entry(driver).or_default() += 1;
        }
        let mut new_per_driver: HashMap<&str, i64> = HashMap::new();
        for driver in new.values() {
            *new_per_driver.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_per_driver {
            if let Some(limit) = csi_node.limit(driver)
                && attached_per_driver.get(driver).copied().unwrap_or(0) + count > limit
            {
                return Status::unschedulable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
