//! Node positions by platform bit, so a cycle for a pod whose images run on few
//! architectures visits only the nodes that can pass `ImageArchitecture` instead of
//! walking the whole cluster to find them. Kept in step with the node list on every node
//! change, at the cost of that change (one bucket), never of the cluster.

use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;

use super::positions::Positions;

/// Platform masks whose lists are kept (each up to one position per node).
const MAX_CACHED_LISTS: usize = 32;

/// Node positions per platform bit (a node with a CPU variant under its architecture's,
/// checked precisely by the filter); nodes without a bit (an unknown OS or architecture)
/// are under `None` and are candidates for every pod.
#[derive(Debug, Default)]
pub struct PlatformIndex {
    by_bit: Positions<Option<u8>>,
    /// The lists cycles asked for, by platform mask (pods share a few masks), until the
    /// next node change. Cycles read the cluster through `&`, hence the lock; a cycle
    /// takes it once.
    lists: Mutex<FxHashMap<u64, Arc<[usize]>>>,
}

impl Clone for PlatformIndex {
    fn clone(&self) -> Self {
        PlatformIndex {
            by_bit: self.by_bit.clone(),
            lists: Mutex::default(),
        }
    }
}

/// Whether nodes of `bit` can run some platform of `bits`.
fn wanted(bit: Option<u8>, bits: u64) -> bool {
    bit.is_none_or(|bit| bits & (1 << bit) != 0)
}

impl PlatformIndex {
    /// The lists cached so far describe the nodes before this change.
    fn changed(&mut self) -> &mut Positions<Option<u8>> {
        self.lists
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        &mut self.by_bit
    }

    pub fn insert(&mut self, position: usize, bit: Option<u8>) {
        self.changed().insert(bit, position);
    }

    pub fn remove(&mut self, position: usize, bit: Option<u8>) {
        self.changed().remove(&bit, position);
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, from: usize, to: usize, bit: Option<u8>) {
        self.changed().moved(bit, from, to);
    }

    /// How many nodes can run some platform of `bits` (nodes without a bit included).
    pub fn count(&self, bits: u64) -> usize {
        self.by_bit
            .iter()
            .filter(|(bit, _)| wanted(**bit, bits))
            .map(|(_, nodes)| nodes.len())
            .sum()
    }

    /// The positions of those nodes, in list order.
    pub fn candidates(&self, bits: u64) -> Arc<[usize]> {
        let mut lists = self.lists.lock().unwrap_or_else(PoisonError::into_inner);
        if lists.len() >= MAX_CACHED_LISTS && !lists.contains_key(&bits) {
            // Bounded: a cluster whose pods name unusually many platform sets starts over.
            lists.clear();
        }
        lists
            .entry(bits)
            .or_insert_with(|| {
                let mut out = Vec::with_capacity(self.count(bits));
                for (bit, nodes) in self.by_bit.iter() {
                    if wanted(*bit, bits) {
                        out.extend_from_slice(nodes);
                    }
                }
                out.sort_unstable();
                out.into()
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_nodes_of_the_wanted_bits_and_those_without_a_bit() {
        let mut index = PlatformIndex::default();
        for (position, bit) in [
            (0, Some(1)),
            (1, Some(2)),
            (2, None),
            (3, Some(1)),
            (4, Some(5)),
        ] {
            index.insert(position, bit);
        }
        assert_eq!(*index.candidates(1 << 1), [0, 2, 3]);
        assert_eq!(*index.candidates((1 << 1) | (1 << 5)), [0, 2, 3, 4]);
        assert_eq!(*index.candidates(1 << 9), [2]);
        assert_eq!(index.count((1 << 1) | (1 << 2)), 4);
    }

    #[test]
    fn the_cached_lists_are_bounded() {
        let mut index = PlatformIndex::default();
        index.insert(0, Some(1));
        for mask in 0..(MAX_CACHED_LISTS as u64 * 3) {
            let _ = index.candidates(mask << 2);
            let cached = index.lists.lock().unwrap().len();
            assert!(cached <= MAX_CACHED_LISTS, "{cached}");
        }
        // Still right after the lists were dropped.
        assert_eq!(*index.candidates(1 << 1), [0]);
    }

    #[test]
    fn a_swap_remove_is_followed() {
        let mut index = PlatformIndex::default();
        for (position, bit) in [(0, Some(1)), (1, Some(2)), (2, Some(1))] {
            index.insert(position, bit);
        }
        assert_eq!(*index.candidates(1 << 1), [0, 2]);
        // Node 0 goes; node 2 takes its place (the cached list is dropped).
        index.remove(0, Some(1));
        index.moved(2, 0, Some(1));
        assert_eq!(*index.candidates(1 << 1), [0]);
        assert_eq!(*index.candidates(1 << 2), [1]);
        assert_eq!(index.count(u64::MAX), 2);
    }
}
