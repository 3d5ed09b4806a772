//! Pods per controller on one node, for the default spread constraints. Scoring reads
//! it once per candidate node, and a cycle visits hundreds of nodes that are not in the
//! CPU cache: a hash map costs several dependent memory reads per node (control bytes,
//! bucket, key string). Here one bit per controller hash, kept in the node itself, rules
//! out most nodes without the pod's controller with no read at all; otherwise a short
//! list of (hash, count, UID) is scanned, and a UID is read only on a hash match.

use std::hash::BuildHasher;

use rustc_hash::FxBuildHasher;

/// The hash [`ControllerCounts`] files a controller UID under (deterministic).
pub fn controller_hash(uid: &str) -> u64 {
    FxBuildHasher.hash_one(uid)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Entry {
    hash: u64,
    count: u32,
    uid: Box<str>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerCounts {
    /// Bit `hash % 64` of every controller listed.
    present: u64,
    entries: Vec<Entry>,
}

fn bit(hash: u64) -> u64 {
    1 << (hash % 64)
}

impl ControllerCounts {
    pub fn add(&mut self, uid: &str) {
        let hash = controller_hash(uid);
        match self.position(hash, uid) {
            Some(i) => self.entries[i].count += 1,
            None => {
                self.present |= bit(hash);
                self.entries.push(Entry {
                    hash,
                    count: 1,
                    uid: uid.into(),
                });
            }
        }
    }

    /// One pod of the controller left; its entry goes with the last one.
    pub fn remove(&mut self, uid: &str) {
        if let Some(i) = self.position(controller_hash(uid), uid) {
            self.entries[i].count -= 1;
            if self.entries[i].count == 0 {
                self.entries.swap_remove(i);
                self.present = self.entries.iter().fold(0, |bits, e| bits | bit(e.hash));
            }
        }
    }

    /// Pods of the controller whose UID is `uid` and [`controller_hash`] is `hash`.
    pub fn get_hashed(&self, hash: u64, uid: &str) -> u32 {
        if self.present & bit(hash) == 0 {
            return 0;
        }
        self.position(hash, uid)
            .map_or(0, |i| self.entries[i].count)
    }

    pub fn get(&self, uid: &str) -> u32 {
        self.get_hashed(controller_hash(uid), uid)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, hash: u64, uid: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.hash == hash && *e.uid == *uid)
    }
}

#[cfg(test)]
mod tests {
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
    fn an_equal_hash_is_not_taken_for_an_equal_uid() {
        // Entries are matched on the UID too: a (forged) hash collision counts nothing.
        let mut counts = ControllerCounts::default();
        counts.add("rs-a");
        assert_eq!(counts.get_hashed(controller_hash("rs-a"), "rs-b"), 0);
        assert_eq!(counts.get_hashed(controller_hash("rs-a"), "rs-a"), 1);
    }
}
