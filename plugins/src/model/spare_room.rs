//! Giving back what a drained backlog grew a table to (the scheduling queue's tables, the
//! model's shared label sets). A table keeps its allocation when entries leave: after
//! 260,000 pods were placed, the queue held about 60 MB for none (issue 53). A table
//! three quarters unused is shrunk to twice what it holds; the shrink's cost (a pass over
//! what is left) is paid for by the removals since the last one, and growing back needs
//! the entries to double, so it never thrashes.

use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hash};

/// Below this many slots a table keeps its allocation (a steady queue of a few hundred
/// pods never reallocates).
const MIN_KEPT_CAPACITY: usize = 1024;

fn mostly_unused(capacity: usize, len: usize) -> bool {
    capacity > MIN_KEPT_CAPACITY && capacity > 4 * len
}

pub fn shrink_map<K: Hash + Eq, V, S: BuildHasher>(map: &mut std::collections::HashMap<K, V, S>) {
    if mostly_unused(map.capacity(), map.len()) {
        map.shrink_to(2 * map.len());
    }
}

pub fn shrink_set<K: Hash + Eq, S: BuildHasher>(set: &mut std::collections::HashSet<K, S>) {
    if mostly_unused(set.capacity(), set.len()) {
        set.shrink_to(2 * set.len());
    }
}

pub fn shrink_heap<T: Ord>(heap: &mut BinaryHeap<T>) {
    if mostly_unused(heap.capacity(), heap.len()) {
        heap.shrink_to(2 * heap.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_table_gives_back_its_allocation_a_small_one_keeps_it() {
        let mut map: std::collections::HashMap<u32, u32> = (0..100_000).map(|i| (i, i)).collect();
        for i in 0..99_990 {
            map.remove(&i);
            shrink_map(&mut map);
        }
        assert!(map.capacity() <= MIN_KEPT_CAPACITY, "{}", map.capacity());
        assert_eq!(map.len(), 10);

        let mut small: std::collections::HashSet<u32> = (0..500).collect();
        let kept = small.capacity();
        small.clear();
        shrink_set(&mut small);
        assert_eq!(small.capacity(), kept);

        let mut heap: BinaryHeap<u32> = (0..100_000).collect();
        while heap.len() > 10 {
            heap.pop();
            shrink_heap(&mut heap);
        }
        assert!(heap.capacity() <= MIN_KEPT_CAPACITY, "{}", heap.capacity());
    }

    /// Removals and insertions around one size do not shrink and grow the table in turn:
    /// after a shrink, the table has room for twice its entries.
    #[test]
    fn a_table_hovering_at_one_size_is_not_reallocated_again_and_again() {
        let mut map: std::collections::HashMap<u32, u32> = (0..100_000).map(|i| (i, i)).collect();
        for i in 0..80_000 {
            map.remove(&i);
            shrink_map(&mut map);
        }
        let settled = map.capacity();
        for round in 0..1_000u32 {
            let key = 1_000_000 + round;
            map.insert(key, 0);
            shrink_map(&mut map);
            map.remove(&key);
            shrink_map(&mut map);
            // Removed slots stay tombstones until the table is rebuilt, so `capacity`
            // may drift down by the removals; a shrink would halve it.
            let capacity = map.capacity();
            assert!(
                capacity <= settled && capacity + 1_000 >= settled,
                "round {round}: capacity {capacity}, settled at {settled}"
            );
        }
    }
}
