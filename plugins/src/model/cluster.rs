//! The scheduler's picture of the cluster: every node and every pod assigned to one (by
//! any scheduler), plus the pods this scheduler has assumed but not yet seen bound.
//!
//! Mutated between scheduling cycles only; a cycle reads it through `&ClusterState`, so it
//! is its own snapshot and nothing is copied per cycle.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashMap as HashMap};

use super::{node::NodeInfo, pod::PodInfo, selectors::Labels};

#[derive(Clone, Debug)]
struct PodLocation {
    node: String,
    assumed: bool,
}

/// What changed, for the queue's requeue decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterEvent {
    NodeAdded,
    NodeChanged,
    AssignedPodAdded,
    AssignedPodDeleted,
    ConfigChanged,
    ImagePlatformsResolved,
}

#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    placements: HashMap<String, PodLocation>,
    /// Pods bound to nodes not (or no longer) known; kept so that their resources count
    /// as soon as the node appears.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    namespace_labels: HashMap<String, Labels>,
    pods_with_affinity: usize,
    pods_with_required_anti_affinity: usize,
    /// Pods per controller per zone, so the default zone spread constraint costs no walk
    /// over every node.
    controller_zones: FxHashMap<String, FxHashMap<String, u32>>,
}

impl ClusterState {
    pub fn new() -> Self {
        ClusterState::default()
    }

    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespace_labels.get(namespace)
    }

    pub fn set_namespace_labels(&mut self, namespace: &str, labels: Labels) {
        self.namespace_labels.insert(namespace.to_owned(), labels);
    }

    /// Pods (bound or assumed) with any pod affinity or anti-affinity term.
    pub fn pods_with_affinity(&self) -> usize {
        self.pods_with_affinity
    }

    /// Pods (bound or assumed) with a required anti-affinity term.
    pub fn pods_with_required_anti_affinity(&self) -> usize {
        self.pods_with_required_anti_affinity
    }

    /// Pods of one controller per zone.
    pub fn controller_zone_counts(&self, controller_uid: &str) -> Option<&FxHashMap<String, u32>> {
        self.controller_zones.get(controller_uid)
    }

    pub fn pod_count(&self) -> usize {
        self.placements.len()
    }

    pub fn assumed_count(&self) -> usize {
        self.placements.values().filter(|p| p.assumed).count()
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.placements.get(uid).is_some_and(|p| p.assumed)
    }

    /// The node a pod is placed on (bound or assumed).
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.placements.get(uid).map(|p| p.node.as_str())
    }

    /// Adds a node or updates its own fields (its pods stay).
    pub fn upsert_node(&mut self, fresh: NodeInfo) -> ClusterEvent {
        if let Some(&i) = self.index.get(&fresh.name) {
            let zone_moved = self.nodes[i].zone != fresh.zone;
            if zone_moved {
                let pods = self.nodes[i].pods.clone();
                let old_zone = self.nodes[i].zone.clone();
                let new_zone = fresh.zone.clone();
                for pod in &pods {
                    self.count_zone(pod, old_zone.as_deref(), -1);
                    self.count_zone(pod, new_zone.as_deref(), 1);
                }
            }
            self.nodes[i].update_from(fresh);
            return ClusterEvent::NodeChanged;
        }
        let name = fresh.name.clone();
        let mut node = fresh;
        let zone = node.zone.clone();
        for pod in self.orphans.remove(&name).unwrap_or_default() {
            self.count_zone(&pod, zone.as_deref(), 1);
            node.add_pod(pod);
        }
        self.index.insert(name, self.nodes.len());
        self.nodes.push(node);
        ClusterEvent::NodeAdded
    }

    /// Removes a node; its pods stay known until they are deleted themselves.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.index.remove(name) else {
            return false;
        };
        let node = self.nodes.swap_remove(i);
        let zone = node.zone.clone();
        for pod in &node.pods {
            self.count_zone(pod, zone.as_deref(), -1);
        }
        if i < self.nodes.len() {
            self.index.insert(self.nodes[i].name.clone(), i);
        }
        if !node.pods.is_empty() {
            self.orphans.insert(node.name, node.pods);
        }
        true
    }

    /// Records a pod the API says is assigned to `pod.node_name`. Confirms an assumed pod;
    /// if it landed elsewhere than assumed, moves it.
    pub fn add_assigned_pod(&mut self, pod: Arc<PodInfo>) -> ClusterEvent {
        let Some(node) = pod.node_name.clone() else {
            return ClusterEvent::AssignedPodAdded;
        };
        self.detach(&pod.uid);
        self.attach(pod, &node, false);
        ClusterEvent::AssignedPodAdded
    }

    /// Forgets a deleted (or terminated) pod.
    pub fn remove_pod(&mut self, uid: &str) -> Option<ClusterEvent> {
        self.detach(uid).map(|_| ClusterEvent::AssignedPodDeleted)
    }

    /// Counts the pod on `node` before the binding is confirmed, so the next cycle sees the
    /// resources as used. Never expires: confirmed by the watch or undone by [`forget`].
    ///
    /// [`forget`]: ClusterState::forget
    pub fn assume(&mut self, pod: &PodInfo, node: &str) {
        let mut placed = pod.clone();
        placed.node_name = Some(node.to_owned());
        self.detach(&pod.uid);
        self.attach(Arc::new(placed), node, true);
    }

    /// Undoes an assumption after a failed binding. Does nothing to a confirmed pod.
    pub fn forget(&mut self, uid: &str) -> bool {
        if self.is_assumed(uid) {
            self.detach(uid);
            true
        } else {
            false
        }
    }

    fn attach(&mut self, pod: Arc<PodInfo>, node: &str, assumed: bool) {
        self.placements.insert(
            pod.uid.clone(),
            PodLocation {
                node: node.to_owned(),
                assumed,
            },
        );
        self.count_affinity(&pod, 1);
        match self.index.get(node) {
            Some(&i) => {
                let zone = self.nodes[i].zone.clone();
                self.count_zone(&pod, zone.as_deref(), 1);
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

    fn count_zone(&mut self, pod: &PodInfo, zone: Option<&str>, delta: i32) {
        let (Some(owner), Some(zone)) = (&pod.controller_uid, zone) else {
            return;
        };
        let zones = self.controller_zones.entry(owner.clone()).or_default();
        let count = zones.entry(zone.to_owned()).or_default();
        *count = count.saturating_add_signed(delta);
        if *count == 0 {
            zones.remove(zone);
            if zones.is_empty() {
                self.controller_zones.remove(owner);
            }
        }
    }

    fn detach(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let placement = self.placements.remove(uid)?;
        let pod = match self.index.get(&placement.node) {
            Some(&i) => {
                let zone = self.nodes[i].zone.clone();
                let pod = self.nodes[i].remove_pod(uid)?;
                self.count_zone(&pod, zone.as_deref(), -1);
                Some(pod)
            }
            None => {
                let list = self.orphans.get_mut(&placement.node)?;
                let at = list.iter().position(|p| p.uid == uid)?;
                let pod = list.swap_remove(at);
                if list.is_empty() {
                    self.orphans.remove(&placement.node);
                }
                Some(pod)
            }
        }?;
        self.count_affinity(&pod, -1);
        Some(pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        node::{NodeBuilder, ZONE_LABEL},
        pod::PodBuilder,
    };

    fn pod(name: &str, node: Option<&str>) -> Arc<PodInfo> {
        let mut b = PodBuilder::new("ns", name).container("c", "i", "1", "1Gi");
        if let Some(node) = node {
            b = b.node(node);
        }
        Arc::new(b.info())
    }

    #[test]
    fn assume_then_confirm_counts_once() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
        let p = pod("p", None);
        cluster.assume(&p, "n1");
        assert!(cluster.is_assumed(&p.uid));
        assert_eq!(cluster.node("n1").unwrap().requested.milli_cpu, 1000);
        cluster.add_assigned_pod(pod("p", Some("n1")));
        assert!(!cluster.is_assumed(&p.uid));
        assert_eq!(cluster.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(cluster.node("n1").unwrap().pods.len(), 1);
    }

    #[test]
    fn forget_frees_an_assumed_pod_only() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
        let p = pod("p", None);
        cluster.assume(&p, "n1");
        assert!(cluster.forget(&p.uid));
        assert!(cluster.node("n1").unwrap().requested.is_zero());
        cluster.add_assigned_pod(pod("q", Some("n1")));
        assert!(!cluster.forget("uid-ns-q"));
        assert_eq!(cluster.node("n1").unwrap().pods.len(), 1);
    }

    #[test]
    fn a_pod_bound_elsewhere_than_assumed_moves() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
        cluster.upsert_node(NodeBuilder::new("n2", "amd64").info());
        let p = pod("p", None);
        cluster.assume(&p, "n1");
        cluster.add_assigned_pod(pod("p", Some("n2")));
        assert!(cluster.node("n1").unwrap().pods.is_empty());
        assert_eq!(cluster.node("n2").unwrap().pods.len(), 1);
    }

    #[test]
    fn pods_of_unknown_nodes_count_when_the_node_appears() {
        let mut cluster = ClusterState::new();
        cluster.add_assigned_pod(pod("p", Some("late")));
        assert_eq!(
            cluster.upsert_node(NodeBuilder::new("late", "arm64").info()),
            ClusterEvent::NodeAdded
        );
        assert_eq!(cluster.node("late").unwrap().pods.len(), 1);
        assert!(cluster.remove_node("late"));
        assert!(cluster.node("late").is_none());
        assert_eq!(
            cluster.remove_pod("uid-ns-p"),
            Some(ClusterEvent::AssignedPodDeleted)
        );
        assert_eq!(cluster.pod_count(), 0);
    }

    #[test]
    fn zone_counts_follow_pods_and_node_labels() {
        let mut cluster = ClusterState::new();
        cluster.upsert_node(
            NodeBuilder::new("n1", "amd64")
                .label(ZONE_LABEL, "a")
                .info(),
        );
        let owned = |name: &str| {
            Arc::new(
                PodBuilder::new("ns", name)
                    .owner("ReplicaSet", "rs")
                    .node("n1")
                    .info(),
            )
        };
        cluster.add_assigned_pod(owned("p1"));
        cluster.add_assigned_pod(owned("p2"));
        assert_eq!(
            cluster.controller_zone_counts("rs").unwrap().get("a"),
            Some(&2)
        );
        cluster.upsert_node(
            NodeBuilder::new("n1", "amd64")
                .label(ZONE_LABEL, "b")
                .info(),
        );
        let zones = cluster.controller_zone_counts("rs").unwrap();
        assert_eq!((zones.get("a"), zones.get("b")), (None, Some(&2)));
        cluster.remove_pod("uid-ns-p1");
        cluster.remove_node("n1");
        assert!(cluster.controller_zone_counts("rs").is_none());
        cluster.upsert_node(
            NodeBuilder::new("n1", "amd64")
                .label(ZONE_LABEL, "c")
                .info(),
        );
        assert_eq!(
            cluster.controller_zone_counts("rs").unwrap().get("c"),
            Some(&1)
        );
    }

    #[test]
    fn node_updates_keep_pods_and_indexes_survive_removal() {
        let mut cluster = ClusterState::new();
        for n in ["a", "b", "c"] {
            cluster.upsert_node(NodeBuilder::new(n, "amd64").info());
        }
        cluster.add_assigned_pod(pod("p", Some("c")));
        cluster.remove_node("a");
        let updated = NodeBuilder::new("c", "amd64").label("zone", "z1").info();
        assert_eq!(cluster.upsert_node(updated), ClusterEvent::NodeChanged);
        let c = cluster.node("c").unwrap();
        assert_eq!(c.pods.len(), 1);
        assert_eq!(c.labels.get("zone").map(String::as_str), Some("z1"));
        assert!(cluster.node("b").is_some());
    }
}
