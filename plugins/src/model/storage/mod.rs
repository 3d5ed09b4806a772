//! Storage objects as the volume plugins read them: PersistentVolumes, claims, classes,
//! CSI nodes and drivers, storage capacities; read once per object version. The rules
//! that match claims to volumes (`FindMatchingVolume`, `CheckNodeAffinity`) live here so
//! the plugins and the binder share them.

pub mod builders;
mod catalog;
mod from_api;
mod host_volumes;
pub mod migration;

pub use catalog::{Provision, StaticBinding, StorageCatalog, VolumeBindingPlan};
pub use host_volumes::{HostVolumes, SUMMARIZED_PER_HOST, VolumeDigest};

use std::sync::Arc;

use multiarch_policy::selectors::{LabelLookup, LabelSelector, Labels, NodeSelector};

use crate::model::node::HOSTNAME_LABEL;

/// `volume.kubernetes.io/selected-node`: the node a WaitForFirstConsumer claim is
/// provisioned for.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// Set by the PersistentVolume controller once a claim is bound.
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// Set on a volume the scheduler (not the user) bound to a claim.
pub const BOUND_BY_CONTROLLER_ANNOTATION: &str = "pv.kubernetes.io/bound-by-controller";
/// The legacy class annotation, which wins over `spec.storageClassName`.
pub const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner name of classes that only use pre-created volumes.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// `namespace/name`, how claims are keyed.
pub fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Access modes as a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessModes(u8);

impl AccessModes {
    pub const READ_WRITE_ONCE: AccessModes = AccessModes(1);
    pub const READ_ONLY_MANY: AccessModes = AccessModes(2);
    pub const READ_WRITE_MANY: AccessModes = AccessModes(4);
    pub const READ_WRITE_ONCE_POD: AccessModes = AccessModes(8);

    pub fn parse<'a>(modes: impl IntoIterator<Item = &'a String>) -> Self {
        let mut bits = 0;
        for mode in modes {
            bits |= match mode.as_str() {
                "ReadWriteOnce" => 1,
                "ReadOnlyMany" => 2,
                "ReadWriteMany" => 4,
                "ReadWriteOncePod" => 8,
                _ => 0,
            };
        }
        AccessModes(bits)
    }

    pub fn contains(self, other: AccessModes) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The claim a volume is bound (or pre-bound) to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// Empty for a volume a user pre-bound by name only.
    pub uid: String,
}

/// A volume as the CSI attach limits count it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiVolume {
    pub driver: String,
    pub handle: String,
}

/// Laid out in declaration order: what matching a claim reads on every candidate node
/// comes first, in one cache line (a cycle for a pod with a local-volume claim reads the
/// volumes of hundreds of nodes, most not in the CPU cache).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PersistentVolumeInfo {
    pub capacity: i64,
    pub attributes_class: String,
    pub access_modes: AccessModes,
    pub block: bool,
    /// `status.phase == Available`: only such volumes are bound by the scheduler.
    pub available: bool,
    pub deleting: bool,
    /// The node affinity requires nothing but a `kubernetes.io/hostname` among
    /// `pinned_hostnames`: a node found under one of them in the catalog's index fits it
    /// without its labels being read.
    pub hostname_only_affinity: bool,
    pub claim_ref: Option<ClaimRef>,

    pub name: String,
    pub resource_version: String,
    pub labels: Labels,
    /// `spec.storageClassName` (or the beta annotation); empty: no class.
    pub storage_class: String,
    /// The required node affinity; `None` also when `hostname_only_affinity`, whose
    /// `pinned_hostnames` say all it does (130,000 local volumes kept 35 MB of selectors
    /// that only repeated their hostnames).
    pub node_affinity: Option<NodeSelector>,
    /// A CSI volume, or an in-tree one with the CSI driver it migrates to.
    pub csi: Option<CsiVolume>,
    /// The in-tree plugin of a migratable in-tree volume (counted only on nodes that
    /// migrated it).
    pub in_tree_plugin: Option<&'static str>,
    /// Local volume: the node names its node affinity pins it to (kube-scheduler narrows
    /// the candidate nodes to these).
    /// Shared with `pinned_hostnames` when the two are equal (a local volume's usual case).
    pub local_node_names: Option<Arc<[String]>>,
    /// The `kubernetes.io/hostname` values outside which the node affinity cannot match
    /// (every term requires one of them): an index, so matching a claim on a node looks
    /// at that node's volumes only.
    /// Sorted, without duplicates.
    pub pinned_hostnames: Option<Arc<[String]>>,
}

impl PersistentVolumeInfo {
    /// `IsVolumeBoundToClaim`.
    pub fn is_bound_to(&self, claim: &ClaimInfo) -> bool {
        self.claim_ref.as_ref().is_some_and(|r| {
            r.name == claim.name
                && r.namespace == claim.namespace
                && (r.uid.is_empty() || r.uid == claim.uid)
        })
    }

    /// `CheckNodeAffinity`: the volume's required node affinity against the node's labels
    /// (as kube, without the node's name: `matchFields` never match).
    pub fn fits_node(&self, node_labels: &(impl LabelLookup + ?Sized)) -> bool {
        if self.hostname_only_affinity {
            // Every term is `kubernetes.io/hostname In [...]`: a node matches some term
            // exactly when its hostname is among the pinned ones.
            return node_labels
                .label_value(HOSTNAME_LABEL)
                .zip(self.pinned_hostnames.as_deref())
                .is_some_and(|(hostname, pinned)| {
                    pinned
                        .binary_search_by(|p| p.as_str().cmp(hostname))
                        .is_ok()
                });
        }
        self.node_affinity
            .as_ref()
            .is_none_or(|selector| selector.matches(node_labels, ""))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// `GetPersistentVolumeClaimClass`: the beta annotation, else `spec.storageClassName`,
    /// else empty.
    pub storage_class: String,
    pub volume_name: String,
    pub access_modes: AccessModes,
    pub block: bool,
    pub attributes_class: String,
    /// `resources.requests.storage` in bytes.
    pub request: Option<i64>,
    pub selector: Option<LabelSelector>,
    pub selected_node: Option<String>,
    pub bind_completed: bool,
    pub lost: bool,
    pub deleting: bool,
    /// UID of the pod that controls the claim (generic ephemeral volumes).
    pub owner_pod_uid: Option<String>,
}

impl ClaimInfo {
    pub fn key(&self) -> String {
        claim_key(&self.namespace, &self.name)
    }

    /// Bound and the PersistentVolume controller finished binding it.
    pub fn fully_bound(&self) -> bool {
        !self.volume_name.is_empty() && self.bind_completed
    }

    /// The checks of `FindMatchingVolume` that do not depend on the node: whether the
    /// volume can serve this claim on a node its affinity allows.
    pub fn may_use(&self, volume: &PersistentVolumeInfo) -> bool {
        if volume.claim_ref.is_some() && !volume.is_bound_to(self) {
            return false;
        }
        if volume.capacity < self.request.unwrap_or(0)
            || volume.block != self.block
            || volume.attributes_class != self.attributes_class
            || volume.deleting
        {
            return false;
        }
        volume.is_bound_to(self)
            || (volume.available
                && self
                    .selector
                    .as_ref()
                    .is_none_or(|s| s.matches(&volume.labels))
                && volume.storage_class == self.storage_class
                && volume.access_modes.contains(self.access_modes))
    }

    /// [`may_use`](Self::may_use) for a volume without a claim reference, of the claim's
    /// class (as the catalog's per-host index holds them): the same answer without
    /// reading the class name, once per candidate node.
    pub fn may_use_unclaimed(&self, volume: &PersistentVolumeInfo) -> bool {
        debug_assert!(volume.claim_ref.is_none() && volume.storage_class == self.storage_class);
        volume.capacity >= self.request.unwrap_or(0)
            && volume.block == self.block
            && volume.attributes_class == self.attributes_class
            && !volume.deleting
            && volume.available
            && self
                .selector
                .as_ref()
                .is_none_or(|s| s.matches(&volume.labels))
            && volume.access_modes.contains(self.access_modes)
    }

    /// `FindMatchingVolume` on one node, among volumes that passed [`may_use`]: a volume
    /// pre-bound to the claim wins (or none, if its node affinity excludes the node);
    /// otherwise the smallest one the node's labels allow. Each volume comes with whether
    /// its node affinity is already known to fit the node (else it is checked).
    /// `excluded` are volumes already chosen for other claims of the pod.
    ///
    /// [`may_use`]: ClaimInfo::may_use
    pub fn matching_volume<'a>(
        &self,
        usable: impl Iterator<Item = (&'a PersistentVolumeInfo, bool)>,
        node_labels: &(impl LabelLookup + ?Sized),
        excluded: &[&str],
    ) -> Option<&'a PersistentVolumeInfo> {
        let mut smallest: Option<&PersistentVolumeInfo> = None;
        for (volume, known_to_fit) in usable {
            if !excluded.is_empty() && excluded.contains(&volume.name.as_str()) {
                continue;
            }
            let affinity_fits = known_to_fit || volume.fits_node(node_labels);
            if volume.is_bound_to(self) {
                return affinity_fits.then_some(volume);
            }
            if affinity_fits && smallest.is_none_or(|s| s.capacity > volume.capacity) {
                smallest = Some(volume);
            }
        }
        smallest
    }
}

/// One `TopologySelectorTerm` of a StorageClass: every expression must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyTerm {
    pub expressions: Vec<(String, Vec<String>)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageClassInfo {
    pub name: String,
    pub provisioner: String,
    /// `None`: `volumeBindingMode` unset (the API server defaults it, so only objects
    /// written without defaulting have it).
    pub wait_for_first_consumer: Option<bool>,
    pub allowed_topologies: Vec<TopologyTerm>,
}

impl StorageClassInfo {
    /// `MatchTopologySelectorTerms`: no term allows every node.
    pub fn allows(&self, node_labels: &(impl LabelLookup + ?Sized)) -> bool {
        self.allows_with(|key| node_labels.label_value(key))
    }

    /// [`allows`](Self::allows), with the node's labels read through `label`.
    pub fn allows_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.allowed_topologies.is_empty()
            || self.allowed_topologies.iter().any(|term| {
                term.expressions
                    .iter()
                    .all(|(key, values)| label(key).is_some_and(|v| values.iter().any(|w| w == v)))
            })
    }
}

/// A CSINode: per driver, the attach limit (`allocatable.count`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsiNodeInfo {
    pub name: String,
    pub limits: Vec<(String, i64)>,
    /// In-tree plugins migrated to CSI on this node
    /// (`storage.alpha.kubernetes.io/migrated-plugins`).
    pub migrated_plugins: Vec<String>,
}

impl CsiNodeInfo {
    pub fn limit(&self, driver: &str) -> Option<i64> {
        self.limits
            .iter()
            .find(|(d, _)| d == driver)
            .map(|(_, n)| *n)
    }

    pub fn migrated(&self, plugin: &str) -> bool {
        self.migrated_plugins.iter().any(|p| p == plugin)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsiDriverInfo {
    pub name: String,
    /// `spec.storageCapacity`: provisioning is checked against CSIStorageCapacity objects.
    pub storage_capacity: bool,
}

/// A volume attached to a node (it counts against the node's attach limit until it is
/// detached, even after its pod is gone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeAttachmentInfo {
    pub name: String,
    pub node: String,
    /// The CSI driver (`spec.attacher`).
    pub attacher: String,
    pub volume: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageCapacityInfo {
    /// `namespace/name`.
    pub key: String,
    pub storage_class: String,
    /// `None`: the capacity is reachable from no node.
    pub node_topology: Option<LabelSelector>,
    pub capacity: Option<i64>,
    pub maximum_volume_size: Option<i64>,
}

impl StorageCapacityInfo {
    /// `capacitySufficient`: `maximumVolumeSize` when set, else `capacity`.
    pub fn fits(&self, size: i64) -> bool {
        self.maximum_volume_size
            .or(self.capacity)
            .is_some_and(|limit| limit >= size)
    }

    pub fn reachable_from(&self, node_labels: &(impl LabelLookup + ?Sized)) -> bool {
        self.node_topology
            .as_ref()
            .is_some_and(|s| s.matches(node_labels))
    }
}

#[cfg(test)]
mod tests;
