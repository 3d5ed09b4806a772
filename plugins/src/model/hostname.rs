//! `kubernetes.io/hostname` values as the local-volume index and the nodes share them.
//!
//! A cycle for a pod with a local-volume claim looks up each candidate node's hostname in
//! the storage catalog's per-host index. Hashing the node's hostname and comparing it with
//! the index's key read two strings per node, most not in the CPU cache (profiles showed
//! them as most of the lookup). A [`Hostname`] carries its hash, and the cluster model gives
//! a node and the volumes pinned to it one allocation of the name (see [`HostnameNames`]),
//! so the lookup compares addresses and reads no string. Names not shared (built outside
//! the cluster model) are compared by content: slower, never wrong.

use std::{
    hash::{BuildHasher, Hash, Hasher},
    sync::Arc,
};

use rustc_hash::FxBuildHasher;

use super::shared_names::SharedNames;

#[derive(Clone, Debug)]
pub struct Hostname {
    hash: u64,
    name: Arc<str>,
}

impl Hostname {
    pub fn new(name: &str) -> Self {
        Self::from_shared(name.into())
    }

    fn from_shared(name: Arc<str>) -> Self {
        Hostname {
            hash: FxBuildHasher.hash_one(&*name),
            name,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name's allocation, for an index that keys by it without a copy.
    pub fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// Whether both hold the same allocation of the name.
    pub fn shares_name_with(&self, other: &Hostname) -> bool {
        Arc::ptr_eq(&self.name, &other.name)
    }
}

impl std::ops::Deref for Hostname {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl PartialEq for Hostname {
    fn eq(&self, other: &Self) -> bool {
        self.shares_name_with(other) || (self.hash == other.hash && self.name == other.name)
    }
}

impl Eq for Hostname {}

impl Hash for Hostname {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// One allocation per hostname for the nodes and the volume index of a cluster model.
/// Bounded: names that neither a node nor the index holds any more are dropped once the
/// set has doubled since the last pruning.
#[derive(Clone, Debug, Default)]
pub struct HostnameNames {
    names: SharedNames,
    kept_after_prune: usize,
}

impl HostnameNames {
    /// The shared allocation of `name`, made the shared one if there is none yet.
    pub fn intern(&mut self, name: &str) -> Hostname {
        if let Some(shared) = self.names.get(name) {
            return Hostname::from_shared(shared.clone());
        }
        self.prune_if_grown();
        let mut shared: Arc<str> = name.into();
        self.names.share(&mut shared);
        Hostname::from_shared(shared)
    }

    /// Replaces `host` with the shared allocation of its name.
    pub fn intern_in_place(&mut self, host: &mut Option<Hostname>) {
        if let Some(host) = host {
            if self.names.get(host.as_str()).is_none() {
                self.prune_if_grown();
            }
            self.names.share(&mut host.name);
        }
    }

    /// The shared allocation of `name` if there is one (no insertion: for lookups).
    pub fn find(&self, name: &str) -> Option<Hostname> {
        self.names
            .get(name)
            .map(|shared| Hostname::from_shared(shared.clone()))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn prune_if_grown(&mut self) {
        if self.names.len() >= 2 * self.kept_after_prune + 64 {
            self.names.prune();
            self.kept_after_prune = self.names.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn equal_names_are_equal_keys_shared_or_not() {
        let mut names = HostnameNames::default();
        let shared = names.intern("node-1");
        let again = names.intern("node-1");
        let unshared = Hostname::new("node-1");
        let other = names.intern("node-2");
        assert!(shared.shares_name_with(&again));
        assert!(!shared.shares_name_with(&unshared));
        assert_eq!(shared, unshared);
        assert_ne!(shared, other);
        let index: HashMap<Hostname, u32> = [(shared.clone(), 1), (other.clone(), 2)].into();
        assert_eq!(index.get(&unshared), Some(&1));
        assert_eq!(index.get(&Hostname::new("node-2")), Some(&2));
        assert_eq!(index.get(&Hostname::new("node-3")), None);
    }

    #[test]
    fn interning_in_place_shares_the_allocation_of_the_first_holder() {
        let mut names = HostnameNames::default();
        let mut node = Some(Hostname::new("node-1"));
        names.intern_in_place(&mut node);
        let volume = names.intern("node-1");
        assert!(volume.shares_name_with(node.as_ref().unwrap()));
        let mut later = Some(Hostname::new("node-1"));
        names.intern_in_place(&mut later);
        assert!(later.unwrap().shares_name_with(&volume));
        let mut none = None;
        names.intern_in_place(&mut none);
        assert!(none.is_none());
        assert_eq!(names.find("node-1"), Some(volume));
        assert!(names.find("node-9").is_none());
    }

    #[test]
    fn names_nobody_holds_are_pruned_as_the_set_grows() {
        let mut names = HostnameNames::default();
        let kept: Vec<Hostname> = (0..10)
            .map(|i| names.intern(&format!("kept-{i}")))
            .collect();
        for i in 0..1000 {
            drop(names.intern(&format!("gone-{i}")));
        }
        assert!(names.len() < 200, "{} names kept", names.len());
        for host in &kept {
            assert!(names.find(host.as_str()).unwrap().shares_name_with(host));
        }
    }
}
