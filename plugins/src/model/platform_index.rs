//! Node positions by platform bit, so a cycle for a pod whose images run on few
//! architectures visits only the nodes that can pass `ImageArchitecture` instead of
//! walking the whole cluster to find them. Kept in step with the node list on every node
//! change, at the cost of that change (one bucket), never of the cluster.

use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;

/// Platform masks whose lists are kept (each up to one position per node).
const MAX_CACHED_LISTS: usize = 32;

/// Sorted node positions per platform bit; nodes without a bit (a CPU variant, an
/// unknown OS) are in `unbitted` and are candidates for every pod.
#[derive(Debug, Default)]
pub struct PlatformIndex {
    by_bit: FxHashMap<u8, Vec<usize>>,
    unbitted: Vec<usize>,
    /// The lists cycles asked for, by platform mask (pods share a few masks), until the
    /// next node change. Cycles read the cluster through `&`, hence the lock; a cycle
    /// takes it once.
    lists: Mutex<FxHashMap<u64, Arc<[usize]>>>,
}

impl Clone for PlatformIndex {
    fn clone(&self) -> Self {
        PlatformIndex {
            by_bit: self.by_bit.clone(),
            unbitted: self.unbitted.clone(),
            lists: Mutex::default(),
        }
    }
}

fn bucket_insert(bucket: &mut Vec<usize>, position: usize) {
    if let Err(at) = bucket.binary_search(&position) {
        bucket.insert(at, position);
    }
}

fn bucket_remove(bucket: &mut Vec<usize>, position: usize) {
    if let Ok(at) = bucket.binary_search(&position) {
        bucket.remove(at);
    }
}

impl PlatformIndex {
    fn bucket(&mut self, bit: Option<u8>) -> &mut Vec<usize> {
        self.lists
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        match bit {
            Some(bit) => self.by_bit.entry(bit).or_default(),
            None => &mut self.unbitted,
        }
    }

    pub fn insert(&mut self, position: usize, bit: Option<u8>) {
        bucket_insert(self.bucket(bit), position);
    }

    pub fn remove(&mut self, position: usize, bit: Option<u8>) {
        bucket_remove(self.bucket(bit), position);
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, from: usize, to: usize, bit: Option<u8>) {
        let bucket = self.bucket(bit);
        bucket_remove(bucket, from);
        bucket_insert(bucket, to);
    }

    /// How many nodes can run some platform of `bits` (nodes without a bit included).
    pub fn count(&self, bits: u64) -> usize {
        self.unbitted.len()
            + self
                .by_bit
                .iter()
                .filter(|(bit, _)| bits & (1 << **bit) != 0)
                .map(|(_, nodes)| nodes.len())
                .sum::<usize>()
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
                out.extend_from_slice(&self.unbitted);
                for (bit, nodes) in &self.by_bit {
                    if bits & (1 << *bit) != 0 {
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
