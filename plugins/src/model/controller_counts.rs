//! Pods per controller on one node, for the default spread constraints. Scoring reads
//! it once per candidate node, and a cycle visits hundreds of nodes that are not in the
//! CPU cache: every read outside the node's own scoring line is a miss. So controllers
//! are filed by a 64-bit hash alone, one bit per hash in the node rules out most nodes
//! without the pod's controller, and the first controller's count sits in the node
//! itself; only a node holding pods of several controllers has a list elsewhere.
//!
//! The hash is keyed per process (SipHash with random keys, as `std`'s hash maps): a
//! tenant who writes the owner reference of its pods cannot choose a UID that collides
//! with another controller's, and chance collisions are 2^-64 per pair.

use std::{
    hash::{BuildHasher, RandomState},
    sync::OnceLock,
};

use thin_vec::ThinVec;

/// The hash [`ControllerCounts`] files a controller UID under (the same for the whole
/// process, different between processes).
pub fn controller_hash(uid: &str) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(uid)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    hash: u64,
    /// 0: no controller (only in `first`).
    count: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerCounts {
    /// Bit `hash % 64` of every controller listed.
    present: u64,
    first: Entry,
    /// The other controllers (thin: empty, it points at one shared header).
    more: ThinVec<Entry>,
}

fn bit(hash: u64) -> u64 {
    1 << (hash % 64)
}

impl ControllerCounts {
    pub fn add(&mut self, uid: &str) {
        let hash = controller_hash(uid);
        if let Some(entry) = self.entry_mut(hash) {
            entry.count += 1;
            return;
        }
        self.present |= bit(hash);
        let entry = Entry { hash, count: 1 };
        if self.first.count == 0 {
            self.first = entry;
        } else {
            self.more.push(entry);
        }
    }

    /// One pod of the controller left; its entry goes with the last one.
    pub fn remove(&mut self, uid: &str) {
        let hash = controller_hash(uid);
        let Some(entry) = self.entry_mut(hash) else {
            return;
        };
        entry.count -= 1;
        if entry.count > 0 {
            return;
        }
        if self.first.count == 0 {
            // The first went: the last of the others takes its place.
            self.first = self.more.pop().unwrap_or_default();
        }
        self.more.retain(|e| e.count > 0);
        if self.more.is_empty() {
            // Back to the shared header.
            self.more = ThinVec::new();
        }
        self.present = self.entries().fold(0, |bits, e| bits | bit(e.hash));
    }

    /// Pods of the controller whose [`controller_hash`] is `hash`.
    pub fn get_hashed(&self, hash: u64) -> u32 {
        if self.present & bit(hash) == 0 {
            return 0;
        }
        if self.first.hash == hash && self.first.count > 0 {
            return self.first.count;
        }
        self.more
            .iter()
            .find(|e| e.hash == hash)
            .map_or(0, |e| e.count)
    }

    pub fn get(&self, uid: &str) -> u32 {
        self.get_hashed(controller_hash(uid))
    }

    pub fn is_empty(&self) -> bool {
        self.first.count == 0
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        std::iter::once(&self.first)
            .filter(|e| e.count > 0)
            .chain(&self.more)
    }

    fn entry_mut(&mut self, hash: u64) -> Option<&mut Entry> {
        if self.first.count > 0 && self.first.hash == hash {
            return Some(&mut self.first);
        }
        self.more.iter_mut().find(|e| e.hash == hash)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn counts_follow_adds_and_removes() {
        let mut counts = ControllerCounts::default();
        counts.add("rs-a");
        counts.add("rs-b");
        counts.add("rs-a");
        assert_eq!(counts.get("rs-a"), 2);
        assert_eq!(counts.get("rs-b"), 1);
        assert_eq!(counts.get("rs-c"), 0);
        counts.remove("rs-a");
        counts.remove("rs-b");
        counts.remove("rs-c");
        assert_eq!(counts.get("rs-a"), 1);
        assert_eq!(counts.get("rs-b"), 0);
        counts.remove("rs-a");
        assert!(counts.is_empty());
        assert_eq!(counts.present, 0, "no bit left for a controller that left");
        assert!(
            !counts.more.has_capacity(),
            "no list kept for controllers that left"
        );
    }

    #[test]
    fn a_shared_presence_bit_stays_while_a_controller_holds_it() {
        // Find two UIDs with the same bit and different hashes.
        let first = "rs-0".to_owned();
        let second = (1..)
            .map(|i| format!("rs-{i}"))
            .find(|uid| bit(controller_hash(uid)) == bit(controller_hash(&first)))
            .unwrap();
        let mut counts = ControllerCounts::default();
        counts.add(&first);
        counts.add(&second);
        counts.remove(&first);
        assert_eq!(counts.get(&second), 1);
        assert_eq!(counts.get(&first), 0);
    }

    #[test]
    fn the_hash_is_keyed() {
        // Not the unkeyed FxHash the scheduler once used, which anyone can invert.
        let unkeyed = rustc_hash::FxBuildHasher.hash_one("rs-a");
        assert_ne!(controller_hash("rs-a"), unkeyed);
        assert_eq!(controller_hash("rs-a"), controller_hash("rs-a"));
        assert_ne!(controller_hash("rs-a"), controller_hash("rs-b"));
    }

    proptest! {
        /// Any sequence of adds and removes counts what a map of UIDs counts.
        #[test]
        fn counts_match_a_map(ops in proptest::collection::vec((0..6u8, any::<bool>()), 0..60)) {
            let mut counts = ControllerCounts::default();
            let mut want: HashMap<String, u32> = HashMap::new();
            for (controller, add) in ops {
                let uid = format!("rs-{controller}");
                if add {
                    counts.add(&uid);
                    *want.entry(uid).or_default() += 1;
                } else if want.get(&uid).is_some_and(|n| *n > 0) {
                    counts.remove(&uid);
                    *want.get_mut(&uid).unwrap() -= 1;
                }
                for c in 0..6u8 {
                    let uid = format!("rs-{c}");
                    prop_assert_eq!(counts.get(&uid), want.get(&uid).copied().unwrap_or(0));
                }
                prop_assert_eq!(counts.is_empty(), want.values().all(|n| *n == 0));
            }
        }
    }
}
