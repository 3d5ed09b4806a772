//! Everything the scheduling loop learns about, through one channel: watch events,
//! binding and eviction results, resolved images, leadership.

use std::sync::Arc;

use multiarch_plugins::model::{disruption_budget::DisruptionBudget, node::NodeInfo, pod::PodInfo};
use multiarch_policy::selectors::Labels;
use multiarch_runtime::{device_classes::DeviceClasses, placement_config::PlacementConfigs};

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
    /// The extended resource names DeviceClasses map (or the API is not served).
    DeviceClasses,
}

impl Kind {
    /// Every kind the loop waits for before it schedules.
    pub const ALL: [Kind; 13] = [
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
        Kind::DeviceClasses,
    ];
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
    /// A list of `kind` finished (initial, or a relist after `410 Gone`); what it no
    /// longer showed came before it as deletes.
    Listed(Kind),
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
    /// The DeviceClasses' mapped extended resource names changed (or were listed).
    DeviceClasses(Arc<DeviceClasses>),
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
