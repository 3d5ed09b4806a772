//! One shared allocation per zone name for the nodes of the cluster model, so a cycle
//! that counts pods per zone reads a zone's name once and tells the nodes of that zone
//! apart by address after (see `PodTopologySpread`'s scoring).

use std::sync::Arc;

use rustc_hash::FxHashSet;

#[derive(Clone, Debug, Default)]
pub struct ZoneNames {
    names: FxHashSet<Arc<str>>,
}

impl ZoneNames {
    /// Replaces `zone` with the shared allocation of its name.
    pub fn intern(&mut self, zone: &mut Option<Arc<str>>) {
        let Some(name) = zone else {
            return;
        };
        match self.names.get(&**name) {
            Some(shared) => *name = shared.clone(),
            None => {
                self.names.insert(name.clone());
            }
        }
    }

    /// Forgets the names no node holds any more (bounded by the zones in use).
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
    fn equal_names_share_one_allocation_until_no_node_holds_it() {
        let mut names = ZoneNames::default();
        let mut a: Option<Arc<str>> = Some("zone-a".into());
        let mut b: Option<Arc<str>> = Some("zone-a".into());
        let mut c: Option<Arc<str>> = Some("zone-c".into());
        let mut none = None;
        for zone in [&mut a, &mut b, &mut c, &mut none] {
            names.intern(zone);
        }
        assert!(Arc::ptr_eq(a.as_ref().unwrap(), b.as_ref().unwrap()));
        assert!(none.is_none());
        assert_eq!(names.len(), 2);
        drop(c);
        names.prune();
        assert_eq!(names.len(), 1, "zone-c is held by no node");
        drop((a, b));
        names.prune();
        assert!(names.is_empty());
    }
}
