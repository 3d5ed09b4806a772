//! Cluster changes and queueing hints (kube-scheduler's `ClusterEvent` and
//! `QueueingHintFn`): every change the scheduler learns of is described once, and each
//! plugin that rejected a waiting pod says whether that change can make the pod fit.
//! Changes nothing reads (node heartbeats, status-only pod updates) never become events.

use crate::model::{
    node::NodeInfo,
    pod::PodInfo,
    storage::{ClaimInfo, PersistentVolumeInfo, StorageCapacityInfo, StorageClassInfo},
};

/// The kinds of change plugins register for, as `metrics` labels name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    NodeAdd,
    NodeUpdate,
    NodeDelete,
    AssignedPodAdd,
    AssignedPodUpdate,
    AssignedPodDelete,
    PersistentVolumeChange,
    PersistentVolumeClaimChange,
    StorageClassChange,
    CsiNodeChange,
    CsiDriverChange,
    StorageCapacityChange,
    VolumeAttachmentDelete,
    NamespaceChange,
    ConfigChange,
    ImagesResolved,
    DeviceClassChange,
}

impl EventKind {
    pub const ALL: [EventKind; 17] = [
        EventKind::NodeAdd,
        EventKind::NodeUpdate,
        EventKind::NodeDelete,
        EventKind::AssignedPodAdd,
        EventKind::AssignedPodUpdate,
        EventKind::AssignedPodDelete,
        EventKind::PersistentVolumeChange,
        EventKind::PersistentVolumeClaimChange,
        EventKind::StorageClassChange,
        EventKind::CsiNodeChange,
        EventKind::CsiDriverChange,
        EventKind::StorageCapacityChange,
        EventKind::VolumeAttachmentDelete,
        EventKind::NamespaceChange,
        EventKind::ConfigChange,
        EventKind::ImagesResolved,
        EventKind::DeviceClassChange,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::NodeAdd => "NodeAdd",
            EventKind::NodeUpdate => "NodeUpdate",
            EventKind::NodeDelete => "NodeDelete",
            EventKind::AssignedPodAdd => "AssignedPodAdd",
            EventKind::AssignedPodUpdate => "AssignedPodUpdate",
            EventKind::AssignedPodDelete => "AssignedPodDelete",
            EventKind::PersistentVolumeChange => "PersistentVolumeChange",
            EventKind::PersistentVolumeClaimChange => "PersistentVolumeClaimChange",
            EventKind::StorageClassChange => "StorageClassChange",
            EventKind::CsiNodeChange => "CSINodeChange",
            EventKind::CsiDriverChange => "CSIDriverChange",
            EventKind::StorageCapacityChange => "CSIStorageCapacityChange",
            EventKind::VolumeAttachmentDelete => "VolumeAttachmentDelete",
            EventKind::NamespaceChange => "NamespaceChange",
            EventKind::ConfigChange => "ConfigChange",
            EventKind::ImagesResolved => "ImagesResolved",
            EventKind::DeviceClassChange => "DeviceClassChange",
        }
    }

    /// A dense index, for per-kind tables.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What changed in a node's scheduling properties (heartbeats change none of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeChanges(u8);

impl NodeChanges {
    pub const LABELS: NodeChanges = NodeChanges(1);
    pub const TAINTS: NodeChanges = NodeChanges(2);
    pub const ALLOCATABLE: NodeChanges = NodeChanges(4);
    pub const UNSCHEDULABLE: NodeChanges = NodeChanges(8);
    pub const DECLARED_FEATURES: NodeChanges = NodeChanges(16);

    pub fn between(old: &NodeInfo, new: &NodeInfo) -> NodeChanges {
        let mut changes = NodeChanges::default();
        if !old.same_labels(new) {
            changes.0 |= Self::LABELS.0;
        }
        if old.taints != new.taints {
            changes.0 |= Self::TAINTS.0;
        }
        if old.allocatable != new.allocatable || old.allowed_pods != new.allowed_pods {
            changes.0 |= Self::ALLOCATABLE.0;
        }
        if old.unschedulable != new.unschedulable {
            changes.0 |= Self::UNSCHEDULABLE.0;
        }
        if old.declared_features != new.declared_features {
            changes.0 |= Self::DECLARED_FEATURES.0;
        }
        changes
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, other: NodeChanges) -> bool {
        self.0 & other.0 == other.0 && !other.is_empty()
    }
}

/// One change to storage objects (added or updated; deletions of storage objects never
/// make a pod fit, as in kube-scheduler).
#[derive(Clone, Copy, Debug)]
pub enum StorageChange<'a> {
    PersistentVolume(&'a PersistentVolumeInfo),
    Claim(&'a ClaimInfo),
    StorageClass(&'a StorageClassInfo),
    CsiNode(&'a str),
    CsiDriver(&'a str),
    Capacity(&'a StorageCapacityInfo),
    /// A volume was detached from a node.
    AttachmentDeleted(&'a str),
}

/// One change, with the objects plugins need to judge it.
#[derive(Clone, Copy, Debug)]
pub enum ClusterChange<'a> {
    NodeAdded(&'a NodeInfo),
    /// `old` holds the node's own fields only (no pods).
    NodeUpdated {
        old: &'a NodeInfo,
        new: &'a NodeInfo,
        changes: NodeChanges,
    },
    NodeDeleted(&'a NodeInfo),
    AssignedPodAdded(&'a PodInfo),
    /// Labels or requests changed, or deletion started.
    AssignedPodUpdated {
        old: &'a PodInfo,
        new: &'a PodInfo,
    },
    AssignedPodDeleted(&'a PodInfo),
    Storage(StorageChange<'a>),
    /// A namespace was added or its labels changed.
    NamespaceChanged(&'a str),
    ConfigChanged,
    /// Platforms of these images are now known (or their inspection failed for good).
    ImagesResolved(&'a [String]),
    /// The extended resource names the DeviceClasses map changed.
    DeviceClassesChanged,
}

impl ClusterChange<'_> {
    pub fn kind(&self) -> EventKind {
        match self {
            ClusterChange::NodeAdded(_) => EventKind::NodeAdd,
            ClusterChange::NodeUpdated { .. } => EventKind::NodeUpdate,
            ClusterChange::NodeDeleted(_) => EventKind::NodeDelete,
            ClusterChange::AssignedPodAdded(_) => EventKind::AssignedPodAdd,
            ClusterChange::AssignedPodUpdated { .. } => EventKind::AssignedPodUpdate,
            ClusterChange::AssignedPodDeleted(_) => EventKind::AssignedPodDelete,
            ClusterChange::Storage(s) => match s {
                StorageChange::PersistentVolume(_) => EventKind::PersistentVolumeChange,
                StorageChange::Claim(_) => EventKind::PersistentVolumeClaimChange,
                StorageChange::StorageClass(_) => EventKind::StorageClassChange,
                StorageChange::CsiNode(_) => EventKind::CsiNodeChange,
                StorageChange::CsiDriver(_) => EventKind::CsiDriverChange,
                StorageChange::Capacity(_) => EventKind::StorageCapacityChange,
                StorageChange::AttachmentDeleted(_) => EventKind::VolumeAttachmentDelete,
            },
            ClusterChange::NamespaceChanged(_) => EventKind::NamespaceChange,
            ClusterChange::ConfigChanged => EventKind::ConfigChange,
            ClusterChange::ImagesResolved(_) => EventKind::ImagesResolved,
            ClusterChange::DeviceClassesChanged => EventKind::DeviceClassChange,
        }
    }

    /// The node after an add or update.
    pub fn node(&self) -> Option<&NodeInfo> {
        match self {
            ClusterChange::NodeAdded(n) | ClusterChange::NodeUpdated { new: n, .. } => Some(n),
            _ => None,
        }
    }

    /// For a node update, the node before it.
    pub fn old_node(&self) -> Option<&NodeInfo> {
        match self {
            ClusterChange::NodeUpdated { old, .. } => Some(old),
            _ => None,
        }
    }
}

/// A plugin's answer for one waiting pod and one change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueingHint {
    /// The change may make the pod fit: retry it.
    Queue,
    /// The change cannot help this pod.
    QueueSkip,
}

impl QueueingHint {
    pub fn from_bool(queue: bool) -> Self {
        if queue {
            QueueingHint::Queue
        } else {
            QueueingHint::QueueSkip
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueueingHint::Queue => "Queue",
            QueueingHint::QueueSkip => "QueueSkip",
        }
    }
}

/// The hint of a node add or update for a filter whose verdict depends on the node alone:
/// retry only when the node passes now and (for an update) did not before.
pub fn node_now_passes(
    change: &ClusterChange<'_>,
    passes: impl Fn(&NodeInfo) -> bool,
) -> QueueingHint {
    let Some(new) = change.node() else {
        return QueueingHint::QueueSkip;
    };
    if !passes(new) {
        return QueueingHint::QueueSkip;
    }
    QueueingHint::from_bool(change.old_node().is_none_or(|old| !passes(old)))
}
