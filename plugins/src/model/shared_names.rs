//! One shared allocation per name for the nodes of the cluster model (zones, and
//! hostnames with the volumes pinned to them), so a cycle can tell nodes apart, or match
//! a node with its volumes, by the address of a name instead of reading it (see
//! `PodTopologySpread`'s scoring and `Hostname`).

use std::sync::Arc;

use rustc_hash::FxHashSet;

#[derive(Clone, Debug, Default)]
pub struct SharedNames {
    names: FxHashSet<Arc<str>>,
}

impl SharedNames {
    /// The shared allocation of `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Arc<str>> {
        self.names.get(name)
    }

    /// Replaces `name` with the shared allocation of its text, or makes it the shared one.
    pub fn share(&mut self, name: &mut Arc<str>) {
        match self.names.get(&**name) {
            Some(shared) if Arc::ptr_eq(shared, name) => {}
            Some(shared) => *name = shared.clone(),
            None => {
                self.names.insert(name.clone());
            }
        }
    }

    /// Forgets the names nothing else holds any more.
    pub fn prune(&mut self) {
        self.names.retain(|name| Arc::strong_count(name) > 1);
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_one_allocation_until_nothing_holds_it() {
        let mut names = SharedNames::default();
        let mut a: Arc<str> = "zone-a".into();
        let mut b: Arc<str> = "zone-a".into();
        let mut c: Arc<str> = "zone-c".into();
        for name in [&mut a, &mut b, &mut c] {
            names.share(name);
        }
        assert!(Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(names.get("zone-a").unwrap(), &a));
        assert!(names.get("zone-b").is_none());
        assert_eq!(names.len(), 2);
        drop(c);
        names.prune();
        assert_eq!(names.len(), 1, "zone-c is held by nothing else");
        drop((a, b));
        names.prune();
        assert!(names.is_empty());
    }
}
