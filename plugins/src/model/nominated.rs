//! Pods a preemption made room for (kube-scheduler's nominator): while their victims
//! leave, the room is theirs, so pods of lower or equal priority filter nodes as if the
//! nominated pods were already there.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::pod::PodInfo;

#[derive(Clone, Debug, Default)]
pub struct NominatedPods {
    by_node: FxHashMap<String, Vec<Arc<PodInfo>>>,
    node_of: FxHashMap<String, String>,
}

impl NominatedPods {
    /// Nominates `pod` to `node` (replacing an earlier nomination).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.remove(&pod.uid);
        self.node_of.insert(pod.uid.clone(), node.to_owned());
        self.by_node.entry(node.to_owned()).or_default().push(pod);
    }

    /// Replaces the pod's version, keeping its nomination.
    pub fn update(&mut self, pod: &Arc<PodInfo>) {
        if let Some(node) = self.node_of.get(&pod.uid)
            && let Some(list) = self.by_node.get_mut(node)
            && let Some(slot) = list.iter_mut().find(|p| p.uid == pod.uid)
        {
            *slot = pod.clone();
        }
    }

    /// Ends the pod's nomination; returns the node it was nominated to.
    pub fn remove(&mut self, uid: &str) -> Option<String> {
        let node = self.node_of.remove(uid)?;
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| p.uid != uid);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
        Some(node)
    }

    pub fn on_node(&self, node: &str) -> &[Arc<PodInfo>] {
        self.by_node.get(node).map_or(&[], Vec::as_slice)
    }

    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.node_of.get(uid).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.node_of.is_empty()
    }

    pub fn len(&self) -> usize {
        self.node_of.len()
    }

    /// Pods nominated to `node` that count for `pod`: not itself, priority at least its.
    pub fn counted_for<'a>(
        &'a self,
        pod: &'a PodInfo,
        node: &str,
    ) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        self.on_node(node)
            .iter()
            .filter(move |p| p.uid != pod.uid && p.priority >= pod.priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pod::PodBuilder;

    #[test]
    fn nominations_move_and_count_only_for_lower_or_equal_priority() {
        let mut nominated = NominatedPods::default();
        let high = Arc::new(PodBuilder::new("ns", "high").priority(100).info());
        nominated.nominate(high.clone(), "n1");
        nominated.nominate(high.clone(), "n2");
        assert!(nominated.on_node("n1").is_empty());
        assert_eq!(nominated.node_of(&high.uid), Some("n2"));
        let low = PodBuilder::new("ns", "low").priority(1).info();
        let higher = PodBuilder::new("ns", "higher").priority(1000).info();
        assert_eq!(nominated.counted_for(&low, "n2").count(), 1);
        assert_eq!(nominated.counted_for(&higher, "n2").count(), 0);
        assert_eq!(nominated.counted_for(&high, "n2").count(), 0);
        assert_eq!(nominated.remove(&high.uid).as_deref(), Some("n2"));
        assert!(nominated.is_empty());
    }
}
