//! Everything the scheduling loop learns about, through one channel: watch events,
//! binding and eviction results, resolved images, leadership.

use std::sync::Arc;

use multiarch_plugins::model::{
    disruption_budget::DisruptionBudget, node::NodeInfo, pod::PodInfo, selectors::Labels,
};
use multiarch_runtime::placement_config::PlacementConfigs;

use crate::engine::storage_objects::{StorageKey, StorageObject};

/// What the loop must have listed before it is ready (kube-scheduler waits for every
/// informer it reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Nodes,
    Pods,
    /// The ClusterPodPlacementConfig and the PodPlacementConfigs.
    Configs,
    Namespaces,
    DisruptionBudgets,
    PersistentVolumes,
    PersistentVolumeClaims,
    StorageClasses,
    CsiNodes,
    CsiDrivers,
    StorageCapacities,
    VolumeAttachments,
}

impl Kind {
    /// Every kind the loop waits for before it schedules.
    pub const ALL: [Kind; 12] = [
        Kind::Nodes,
        Kind::Pods,
        Kind::Configs,
        Kind::Namespaces,
        Kind::DisruptionBudgets,
        Kind::PersistentVolumes,
        Kind::PersistentVolumeClaims,
        Kind::StorageClasses,
        Kind::CsiNodes,
        Kind::CsiDrivers,
        Kind::StorageCapacities,
        Kind::VolumeAttachments,
    ];

    /// The object a key (as the watch reports it) of this kind names, when deleted.
    pub fn storage_key(self, key: &str) -> Option<StorageKey> {
        let key = key.to_owned();
        Some(match self {
            Kind::PersistentVolumes => StorageKey::Volume(key),
            Kind::PersistentVolumeClaims => {
                let (namespace, name) = key.split_once('/')?;
                StorageKey::Claim(namespace.to_owned(), name.to_owned())
            }
            Kind::StorageClasses => StorageKey::Class(key),
            Kind::CsiNodes => StorageKey::CsiNode(key),
            Kind::CsiDrivers => StorageKey::CsiDriver(key),
            Kind::StorageCapacities => StorageKey::Capacity(key),
            Kind::VolumeAttachments => StorageKey::Attachment(key),
            _ => return None,
        })
    }
}

/// The watch and the key a storage object is known by.
pub fn storage_watch_key(object: &StorageObject) -> (Kind, String) {
    match object {
        StorageObject::Volume(v) => (Kind::PersistentVolumes, v.name.clone()),
        StorageObject::Claim(c) => (Kind::PersistentVolumeClaims, c.key()),
        StorageObject::Class(c) => (Kind::StorageClasses, c.name.clone()),
        StorageObject::CsiNode(n) => (Kind::CsiNodes, n.name.clone()),
        StorageObject::CsiDriver(d) => (Kind::CsiDrivers, d.name.clone()),
        StorageObject::Capacity(c) => (Kind::StorageCapacities, c.key.clone()),
        StorageObject::Attachment(a) => (Kind::VolumeAttachments, a.name.clone()),
    }
}

/// The same for a deleted one.
pub fn deleted_watch_key(key: &StorageKey) -> (Kind, String) {
    match key {
        StorageKey::Volume(name) => (Kind::PersistentVolumes, name.clone()),
        StorageKey::Claim(namespace, name) => {
            (Kind::PersistentVolumeClaims, format!("{namespace}/{name}"))
        }
        StorageKey::Class(name) => (Kind::StorageClasses, name.clone()),
        StorageKey::CsiNode(name) => (Kind::CsiNodes, name.clone()),
        StorageKey::CsiDriver(name) => (Kind::CsiDrivers, name.clone()),
        StorageKey::Capacity(key) => (Kind::StorageCapacities, key.clone()),
        StorageKey::Attachment(name) => (Kind::VolumeAttachments, name.clone()),
    }
}

#[derive(Debug)]
pub enum BindOutcome {
    Bound,
    /// 404 or 409: the pod is gone, replaced, gated or bound by someone else.
    Gone(String),
    /// Any other failure: retry with backoff.
    Failed(String),
}

/// One message to the scheduling loop (its inbox is one bounded channel).
#[derive(Debug)]
pub enum LoopMessage {
    /// A relist started (initial list or after `410 Gone`).
    RelistStarted(Kind),
    /// A relist finished; objects of `kind` not in `keep` were deleted meanwhile.
    RelistDone(Kind, Vec<String>),
    NodeUpsert(Box<NodeInfo>),
    NodeDelete(String),
    PodUpsert(Box<PodInfo>),
    /// A pod whose resource requests cannot be read (only its identity, scheduler and node
    /// are set), and why.
    PodUnreadable(Box<PodInfo>, String),
    PodDelete(String),
    Namespace(String, Labels),
    NamespaceDelete(String),
    DisruptionBudget(DisruptionBudget),
    /// `namespace/name`.
    DisruptionBudgetDelete(String),
    Storage(Box<StorageObject>),
    StorageDelete(StorageKey),
    /// The placement configuration changed (or was listed).
    PlacementConfigs(Arc<PlacementConfigs>),
    ImagesResolved(Vec<String>),
    Bind {
        uid: String,
        outcome: BindOutcome,
    },
    /// The evictions for a preemptor were sent (`ok`) or failed.
    Preempted {
        uid: String,
        ok: bool,
    },
}
