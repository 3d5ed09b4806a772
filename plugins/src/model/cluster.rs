//! The scheduler's picture of the cluster: every node and every pod assigned to one (by
//! any scheduler), the pods this scheduler has assumed but not yet seen bound, namespaces'
//! labels and the storage objects.
//!
//! Mutated between scheduling cycles only; a cycle reads it through `&ClusterState`, so it
//! is its own snapshot and nothing is copied per cycle. Every mutation says what changed,
//! so the queue can ask the plugins whether the change helps a waiting pod.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashMap as HashMap};

use super::{
    affinity_terms::AffinityTerms,
    disruption_budget::DisruptionBudget,
    hostname_index::HostnameIndex,
    image_states::{ImageStates, NodeImages},
    local_volume_nodes::{LocalVolumeNodes, LocalVolumes},
    node::NodeInfo,
    placements::Placements,
    platform_index::PlatformIndex,
    pod::PodInfo,
    pod_indexes::PodIndexes,
    pod_labels::PodsByLabel,
    shared::{SharedImages, SharedLabels, SharedStrings},
    shared_names::SharedNames,
    storage::StorageCatalog,
};
use crate::events::NodeChanges;
use multiarch_policy::device_class_resources::DeviceClassResources;
use multiarch_policy::selectors::Labels;

/// What [`ClusterState::upsert_node`] changed.
#[derive(Clone, Debug)]
pub enum NodeUpsert {
    Added,
    /// `old` holds the node's own fields before the update (no pods).
    Updated {
        old: Box<NodeInfo>,
        changes: NodeChanges,
    },
    /// Nothing scheduling reads changed (a heartbeat).
    Unchanged,
}

/// What [`ClusterState::add_assigned_pod`] changed.
#[derive(Clone, Debug)]
pub enum AssignedPodUpsert {
    /// A new pod, or the binding of an assumed one confirmed.
    Added,
    /// Labels, requests, node or deletion changed.
    Updated { old: Arc<PodInfo> },
    /// Nothing scheduling reads changed (a status update).
    Unchanged,
}

#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    placements: Placements,
    /// Pods bound to nodes not (or no longer) known; kept so that their resources count
    /// as soon as the node appears.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    namespace_labels: HashMap<String, Labels>,
    storage: StorageCatalog,
    disruption_budgets: HashMap<String, DisruptionBudget>,
    pods_with_affinity: usize,
    pods_with_required_anti_affinity: usize,
    /// The pods on nodes per controller and zone, their affinity terms and the pods by
    /// label.
    pod_indexes: PodIndexes,
    platforms: PlatformIndex,
    hostnames: HostnameIndex,
    local_volume_nodes: LocalVolumeNodes,
    /// Zone names, one allocation per zone (see `NodeInfo::zone`).
    zones: SharedNames,
    /// The label sets of the pods and of the nodes (without their hostnames), one
    /// allocation per distinct set.
    label_sets: SharedLabels,
    /// The pods' image lists, one allocation per distinct list.
    image_lists: SharedImages,
    /// The pods' namespaces and scheduler names, one allocation per name.
    pod_strings: SharedStrings,
    /// The images the nodes report, each name once (see `NodeInfo::images`).
    images: ImageStates,
    /// The extended resource names the DeviceClasses map (`UnsupportedFeatures`).
    device_class_resources: DeviceClassResources,
}

impl ClusterState {
    pub fn new() -> Self {
        ClusterState::default()
    }

    pub fn device_class_resources(&self) -> &DeviceClassResources {
        &self.device_class_resources
    }

    /// The DeviceClasses' mapped names; whether they changed.
    pub fn set_device_class_resources(&mut self, resources: DeviceClassResources) -> bool {
        let changed = self.device_class_resources != resources;
        self.device_class_resources = resources;
        changed
    }

    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// The position of `node` in [`nodes`](Self::nodes) when it is that very entry, not
    /// a copy (preemption and nominated pods filter copies): from its address, so it
    /// reads nothing, for plugins that keep per-node data beside the node list.
    pub fn position_of(&self, node: &NodeInfo) -> Option<usize> {
        let offset = std::ptr::from_ref(node)
            .addr()
            .checked_sub(self.nodes.as_ptr().addr())?;
        let position = offset / std::mem::size_of::<NodeInfo>();
        self.nodes
            .get(position)
            .filter(|entry| std::ptr::eq(*entry, node))
            .map(|_| position)
    }

    /// The images the nodes report (`ImageLocality`).
    pub fn image_states(&self) -> &ImageStates {
        &self.images
    }

    /// Node positions by platform bit (see [`PlatformIndex`]).
    pub fn platform_index(&self) -> &PlatformIndex {
        &self.platforms
    }

    /// Node positions by hostname label (see [`HostnameIndex`]).
    pub fn hostname_index(&self) -> &HostnameIndex {
        &self.hostnames
    }

    /// Positions of the nodes with an unclaimed local volume of `class` (see
    /// [`LocalVolumeNodes`]).
    pub fn nodes_with_local_volumes(&self, class: &str) -> Arc<[usize]> {
        self.local_volumes(class).nodes
    }

    /// The nodes with an unclaimed local volume of `class`, and a summary of those
    /// volumes per node (see [`LocalVolumes`]).
    pub fn local_volumes(&self, class: &str) -> LocalVolumes {
        self.local_volume_nodes
            .of_class(class, &self.storage, &self.hostnames, &self.nodes)
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespace_labels.get(namespace)
    }

    /// Records a namespace's labels; `true` when they are new or changed.
    pub fn set_namespace_labels(&mut self, namespace: &str, labels: Labels) -> bool {
        if self.namespace_labels.get(namespace) == Some(&labels) {
            return false;
        }
        self.namespace_labels.insert(namespace.to_owned(), labels);
        true
    }

    pub fn remove_namespace(&mut self, namespace: &str) -> bool {
        self.namespace_labels.remove(namespace).is_some()
    }

    pub fn namespace_count(&self) -> usize {
        self.namespace_labels.len()
    }

    pub fn storage(&self) -> &StorageCatalog {
        &self.storage
    }

    pub fn storage_mut(&mut self) -> &mut StorageCatalog {
        &mut self.storage
    }

    pub fn upsert_disruption_budget(&mut self, budget: DisruptionBudget) {
        self.disruption_budgets.insert(budget.key(), budget);
    }

    pub fn delete_disruption_budget(&mut self, key: &str) {
        self.disruption_budgets.remove(key);
    }

    /// Budgets of one namespace (preemption's victims come from many; callers filter).
    pub fn disruption_budgets(&self) -> impl Iterator<Item = &DisruptionBudget> {
        self.disruption_budgets.values()
    }

    /// The pod (bound or assumed) with this UID.
    pub fn pod(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.placements.get(uid)
    }

    /// Pods (bound or assumed) with any pod affinity or anti-affinity term.
    pub fn pods_with_affinity(&self) -> usize {
        self.pods_with_affinity
    }

    /// Pods (bound or assumed) with a required anti-affinity term.
    pub fn pods_with_required_anti_affinity(&self) -> usize {
        self.pods_with_required_anti_affinity
    }

    /// The pod-affinity terms of the pods on nodes, counted per term and domain.
    pub fn affinity_terms(&self) -> &AffinityTerms {
        self.pod_indexes.affinity_terms()
    }

    /// The pods on nodes by label, namespace and zone.
    pub fn pod_label_index(&self) -> &PodsByLabel {
        self.pod_indexes.labels()
    }

    /// Pods of one controller per zone.
    pub fn controller_zone_counts(&self, controller_uid: &str) -> Option<&FxHashMap<String, u32>> {
        self.pod_indexes.controller_zone_counts(controller_uid)
    }

    pub fn pod_count(&self) -> usize {
        self.placements.len()
    }

    pub fn assumed_count(&self) -> usize {
        self.placements.assumed_count()
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.placements.is_assumed(uid)
    }

    /// The node a pod is placed on (bound or assumed).
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.placements.node_of(uid)
    }

    /// Every placed pod's UID and node (bound or assumed), in no particular order.
    pub fn placements(&self) -> impl Iterator<Item = (&str, &str)> {
        self.placements.iter()
    }

    /// Makes room for `additional` more nodes at once (a start-up list of known length),
    /// instead of doubling the node table as they arrive: at 130,000 nodes a doubling
    /// holds 25 MB of old table beside the new one.
    pub fn reserve_nodes(&mut self, additional: usize) {
        self.nodes.reserve_exact(additional);
        self.index.reserve(additional);
    }

    /// Adds a node or updates its own fields (its pods stay).
    pub fn upsert_node(&mut self, mut fresh: NodeInfo) -> NodeUpsert {
        if let Some(zone) = &mut fresh.zone {
            self.zones.share(zone);
        }
        self.label_sets.share(&mut fresh.pool_labels);
        self.storage.intern_hostname(&mut fresh.hostname);
        // The report becomes ids in the cluster's image table (the old report's counts
        // give way to the new one's).
        let known = self.index.get(&fresh.name).map(|&i| &self.nodes[i].images);
        fresh.images = match (&fresh.images, known) {
            (NodeImages::Reported(reported), Some(NodeImages::Known(old))) => {
                NodeImages::Known(self.images.update_node(old, reported))
            }
            (NodeImages::Reported(reported), _) => {
                NodeImages::Known(self.images.add_node(reported))
            }
            // The node's own fields again (ids this table counts already).
            (NodeImages::Known(ids), Some(NodeImages::Known(old))) if ids == old => {
                NodeImages::Known(ids.clone())
            }
            // No report, or ids from elsewhere, which this table never counted.
            (NodeImages::Known(_), known) => {
                if let Some(old) = known {
                    let old = old.ids().to_vec();
                    self.images.remove_node(&old);
                }
                NodeImages::default()
            }
        };
        if let Some(&i) = self.index.get(&fresh.name) {
            if self.nodes[i].platform_bit != fresh.platform_bit {
                self.platforms.remove(i, self.nodes[i].platform_bit);
                self.platforms.insert(i, fresh.platform_bit);
            }
            if self.nodes[i].hostname != fresh.hostname {
                self.hostnames.remove(i, self.nodes[i].hostname.as_ref());
                self.hostnames.insert(i, fresh.hostname.as_ref());
            }
            if !self.nodes[i].same_labels(&fresh) || self.nodes[i].zone != fresh.zone {
                // The pods count in the node's domains: move them.
                for pod in &self.nodes[i].pods {
                    self.pod_indexes.count(pod, i, &self.nodes[i], false);
                    self.pod_indexes.count(pod, i, &fresh, true);
                }
            }
            let changes = NodeChanges::between(&self.nodes[i], &fresh);
            if changes.is_empty() {
                // Fields nothing filters on (readiness) still follow the API.
                self.nodes[i].update_from(fresh);
                return NodeUpsert::Unchanged;
            }
            let zone_moved = self.nodes[i].zone != fresh.zone;
            let old = self.nodes[i].own_fields();
            self.nodes[i].update_from(fresh);
            if zone_moved {
                self.zones.prune();
            }
            return NodeUpsert::Updated {
                old: Box::new(old),
                changes,
            };
        }
        let name = fresh.name.clone();
        let mut node = fresh;
        for pod in self.orphans.remove(&name).unwrap_or_default() {
            self.pod_indexes.count(&pod, self.nodes.len(), &node, true);
            node.add_pod(pod);
        }
        self.index.insert(name, self.nodes.len());
        self.platforms.insert(self.nodes.len(), node.platform_bit);
        self.hostnames
            .insert(self.nodes.len(), node.hostname.as_ref());
        self.nodes.push(node);
        NodeUpsert::Added
    }

    /// Removes a node; its pods stay known until they are deleted themselves. Returns the
    /// node's own fields.
    pub fn remove_node(&mut self, name: &str) -> Option<NodeInfo> {
        let i = self.index.remove(name)?;
        let last = self.nodes.len() - 1;
        let node = self.nodes.swap_remove(i);
        for pod in &node.pods {
            self.pod_indexes.count(pod, i, &node, false);
        }
        if let Some(moved) = self.nodes.get(i) {
            for pod in &moved.pods {
                self.pod_indexes.moved(pod, i);
            }
        }
        self.platforms.remove(i, node.platform_bit);
        self.hostnames.remove(i, node.hostname.as_ref());
        self.images.remove_node(node.images.ids());
        if i < last {
            self.platforms.moved(last, i, self.nodes[i].platform_bit);
            self.hostnames
                .moved(last, i, self.nodes[i].hostname.as_ref());
        }
        if i < self.nodes.len() {
            self.index.insert(self.nodes[i].name.clone(), i);
        }
        let own = node.own_fields();
        if !node.pods.is_empty() {
            self.orphans.insert(node.name, node.pods);
        }
        // The name this node held goes once `own` is dropped too: pruned on the next
        // removal or zone change (bounded by the zones in use plus one).
        self.zones.prune();
        Some(own)
    }

    /// Gives the pod the model's allocations of its label set, its image list (the pods
    /// of a workload share them), its namespace and its scheduler name, before it is
    /// queued or placed.
    pub fn share_repeated_values(&mut self, pod: &mut PodInfo) {
        self.label_sets.share(&mut pod.labels);
        self.image_lists.share(&mut pod.images);
        self.pod_strings.share(&mut pod.namespace);
        self.pod_strings.share(&mut pod.scheduler_name);
    }

    /// Records a pod the API says is assigned to `pod.node_name`. Confirms an assumed pod;
    /// if it landed elsewhere than assumed, moves it.
    pub fn add_assigned_pod(&mut self, pod: Arc<PodInfo>) -> AssignedPodUpsert {
        if pod.node_name.is_none() {
            return AssignedPodUpsert::Unchanged;
        }
        let was_assumed = self.is_assumed(&pod.uid);
        let old = self.detach(&pod.uid);
        self.attach(pod.clone(), false);
        match old {
            None => AssignedPodUpsert::Added,
            Some(_) if was_assumed => AssignedPodUpsert::Added,
            Some(old) => {
                let changed = old.labels != pod.labels
                    || old.requests != pod.requests
                    || old.node_name != pod.node_name
                    || old.deleting != pod.deleting;
                if changed {
                    AssignedPodUpsert::Updated { old }
                } else {
                    AssignedPodUpsert::Unchanged
                }
            }
        }
    }

    /// Forgets a deleted (or terminated) pod; returns it when it was known.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        self.detach(uid)
    }

    /// Counts the pod on `node` before the binding is confirmed, so the next cycle sees the
    /// resources as used. Never expires: confirmed by the watch or undone by [`forget`].
    ///
    /// [`forget`]: ClusterState::forget
    ///
    /// Returns the placed pod (`node_name` set), shared with the model: the caller keeps
    /// it for the binding instead of a second copy of every decided pod (10,000 pods
    /// waiting for their bindings held ~9 MB twice). Copies only when `pod` is shared.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) -> Arc<PodInfo> {
        let mut placed = Arc::unwrap_or_clone(pod);
        placed.node_name = Some(node.to_owned());
        let placed = Arc::new(placed);
        self.detach(&placed.uid);
        self.attach(placed.clone(), true);
        placed
    }

    /// Undoes an assumption after a failed binding. Does nothing to a confirmed pod.
    pub fn forget(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        if self.is_assumed(uid) {
            self.detach(uid)
        } else {
            None
        }
    }

    /// Places `pod` on its `node_name`, which a placed pod has.
    fn attach(&mut self, pod: Arc<PodInfo>, assumed: bool) {
        self.placements.insert(pod.clone(), assumed);
        self.count_affinity(&pod, 1);
        self.storage.count_claims(&pod, 1);
        let node = pod.node_name.as_deref().unwrap_or_default();
        match self.index.get(node).copied() {
            Some(i) => {
                self.pod_indexes.count(&pod, i, &self.nodes[i], true);
                self.nodes[i].add_pod(pod);
            }
            None => self.orphans.entry(node.to_owned()).or_default().push(pod),
        }
    }

    fn count_affinity(&mut self, pod: &PodInfo, delta: isize) {
        if pod.has_pod_affinity() {
            self.pods_with_affinity = self.pods_with_affinity.saturating_add_signed(delta);
        }
        if !pod.anti_affinity.required.is_empty() {
            self.pods_with_required_anti_affinity = self
                .pods_with_required_anti_affinity
                .saturating_add_signed(delta);
        }
    }

    fn detach(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let placed = self.placements.remove(uid)?;
        let node = placed.node_name.as_deref().unwrap_or_default();
        let pod = match self.index.get(node) {
            Some(&i) => {
                let pod = self.nodes[i].remove_pod(uid)?;
                self.pod_indexes.count(&pod, i, &self.nodes[i], false);
                Some(pod)
            }
            None => {
                let list = self.orphans.get_mut(node)?;
                let at = list.iter().position(|p| p.uid == uid)?;
                let pod = list.swap_remove(at);
                if list.is_empty() {
                    self.orphans.remove(node);
                }
                Some(pod)
            }
        }?;
        self.count_affinity(&pod, -1);
        self.storage.count_claims(&pod, -1);
        Some(pod)
    }
}

#[cfg(test)]
mod tests;
