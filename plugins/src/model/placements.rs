//! Every placed pod (bound or assumed) by UID, for the cluster model.
//!
//! The table holds the pod itself, keyed by the UID inside it: the UID and the node name
//! are read from the pod (`PodInfo::node_name`, which a placed pod always has), not
//! copied. At 260,000 pods (issue 53) copies of both cost two heap strings a pod and a
//! 40-byte slot; this table's slot is 16 bytes and allocates nothing of its own. It also
//! finds a pod by UID at once, without searching its node's pods.

use std::{
    borrow::Borrow,
    hash::{Hash, Hasher},
    sync::Arc,
};

use rustc_hash::FxHashMap;

use super::pod::PodInfo;

/// A placed pod as the table's key: hashed and compared by its UID alone, so the table is
/// looked up with a `&str`.
#[derive(Clone, Debug)]
struct ByUid(Arc<PodInfo>);

impl Borrow<str> for ByUid {
    fn borrow(&self) -> &str {
        &self.0.uid
    }
}

// `Borrow<str>` requires hashing as the `str` does.
impl Hash for ByUid {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.uid.as_str().hash(state);
    }
}

impl PartialEq for ByUid {
    fn eq(&self, other: &Self) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for ByUid {}

#[derive(Clone, Debug, Default)]
pub struct Placements {
    /// Whether each pod is assumed (placed by this scheduler, its binding not yet seen).
    pods: FxHashMap<ByUid, bool>,
}

impl Placements {
    /// Records `pod`, which must have a node name, replacing any pod of its UID.
    pub fn insert(&mut self, pod: Arc<PodInfo>, assumed: bool) {
        debug_assert!(pod.node_name.is_some(), "a placed pod has a node");
        let key = ByUid(pod);
        // `insert` keeps the old key when there is one: remove it first, so the table
        // holds the new pod (and its node name).
        self.pods.remove(key.0.uid.as_str());
        self.pods.insert(key, assumed);
    }

    /// Forgets the pod with this UID; returns it when it was placed.
    pub fn remove(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        self.pods.remove_entry(uid).map(|(key, _)| key.0)
    }

    pub fn get(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pods.get_key_value(uid).map(|(key, _)| &key.0)
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).copied().unwrap_or(false)
    }

    /// The node the pod with this UID is placed on.
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.get(uid).and_then(|pod| pod.node_name.as_deref())
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn assumed_count(&self) -> usize {
        self.pods.values().filter(|&&assumed| assumed).count()
    }

    /// Every placed pod's UID and node, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pods
            .keys()
            .map(|key| (key.0.uid.as_str(), key.0.node_name.as_deref().unwrap_or("")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pod::PodBuilder;

    fn placed(name: &str, node: &str) -> Arc<PodInfo> {
        let mut pod = PodBuilder::new("ns", name).info();
        pod.node_name = Some(node.to_owned());
        Arc::new(pod)
    }

    #[test]
    fn a_pod_is_found_by_its_uid_with_its_node() {
        let mut table = Placements::default();
        let a = placed("a", "n1");
        table.insert(a.clone(), true);
        table.insert(placed("b", "n2"), false);
        assert!(Arc::ptr_eq(table.get(&a.uid).expect("a is placed"), &a));
        assert_eq!(table.node_of(&a.uid), Some("n1"));
        assert!(table.is_assumed(&a.uid));
        assert!(!table.is_assumed("uid-ns-b"));
        assert_eq!(table.assumed_count(), 1);
        assert_eq!(table.len(), 2);
        assert!(table.get("uid-ns-c").is_none());
        assert_eq!(table.node_of("uid-ns-c"), None);
    }

    #[test]
    fn a_pod_placed_again_replaces_its_old_version_and_node() {
        let mut table = Placements::default();
        table.insert(placed("a", "n1"), true);
        let moved = placed("a", "n2");
        table.insert(moved.clone(), false);
        assert_eq!(table.len(), 1);
        assert!(Arc::ptr_eq(table.get(&moved.uid).expect("placed"), &moved));
        assert_eq!(table.node_of(&moved.uid), Some("n2"));
        assert!(!table.is_assumed(&moved.uid));
        let mut all: Vec<_> = table.iter().collect();
        all.sort_unstable();
        assert_eq!(all, vec![("uid-ns-a", "n2")]);
    }

    #[test]
    fn a_removed_pod_is_returned_once() {
        let mut table = Placements::default();
        let a = placed("a", "n1");
        table.insert(a.clone(), true);
        let removed = table.remove(&a.uid).expect("a was placed");
        assert!(Arc::ptr_eq(&removed, &a));
        assert!(table.remove(&a.uid).is_none());
        assert!(table.is_empty());
        assert_eq!(table.assumed_count(), 0);
    }
}
