//! What the cluster model keeps of the pods on nodes beside the nodes' own lists: each
//! controller's pods per zone (the default spread constraint), the pods' affinity terms
//! per domain and the pods by label (InterPodAffinity, PodTopologySpread). Kept in one
//! place, so that a pod placed or removed, or on a node relabelled or moved in the node
//! list, updates all of them alike.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{affinity_terms::AffinityTerms, node::NodeInfo, pod::PodInfo, pod_labels::PodsByLabel};

#[derive(Clone, Debug, Default)]
pub struct PodIndexes {
    /// Pods per controller per zone, so the default zone spread constraint costs no walk
    /// over every node.
    controller_zones: FxHashMap<String, FxHashMap<String, u32>>,
    affinity_terms: AffinityTerms,
    labels: PodsByLabel,
}

impl PodIndexes {
    /// Counts `pod` on `node`, at `position` in the node list (`placed`), or stops
    /// counting it there. Only the node's labels, zone and the position are read.
    pub fn count(&mut self, pod: &Arc<PodInfo>, position: usize, node: &NodeInfo, placed: bool) {
        self.count_zone(pod, node.zone.as_deref(), placed);
        self.affinity_terms.count(pod, node, placed);
        if placed {
            self.labels.add(pod, position, node.zone.as_deref());
        } else {
            self.labels.remove(pod, node.zone.as_deref());
        }
    }

    /// The pod's node is now at `position` in the node list.
    pub fn moved(&mut self, pod: &PodInfo, position: usize) {
        self.labels.moved(pod, position);
    }

    fn count_zone(&mut self, pod: &PodInfo, zone: Option<&str>, placed: bool) {
        let (Some(owner), Some(zone)) = (&pod.controller_uid, zone) else {
            return;
        };
        let zones = self.controller_zones.entry(owner.clone()).or_default();
        let count = zones.entry(zone.to_owned()).or_default();
        *count = if placed {
            count.saturating_add(1)
        } else {
            count.saturating_sub(1)
        };
        if *count == 0 {
            zones.remove(zone);
            if zones.is_empty() {
                self.controller_zones.remove(owner);
            }
        }
    }

    /// Pods of one controller per zone.
    pub fn controller_zone_counts(&self, controller_uid: &str) -> Option<&FxHashMap<String, u32>> {
        self.controller_zones.get(controller_uid)
    }

    /// The pod-affinity terms of the pods on nodes, counted per term and domain.
    pub fn affinity_terms(&self) -> &AffinityTerms {
        &self.affinity_terms
    }

    /// The pods on nodes by label, namespace and zone.
    pub fn labels(&self) -> &PodsByLabel {
        &self.labels
    }
}
