//! Sorted node positions per key, kept in step with the cluster's node list by the
//! indexes built on it (platform bit, hostname): each node change touches one bucket.

use std::{borrow::Borrow, hash::Hash};

use rustc_hash::FxHashMap;

#[derive(Clone, Debug)]
pub struct Positions<K> {
    by_key: FxHashMap<K, Bucket>,
}

/// One key's positions: one inline, as nearly every hostname's is (a vector of one was a
/// heap allocation per node: 6 MB at 130,000 nodes, issue 53), several sorted in a
/// vector. A `Many` always holds two or more.
#[derive(Clone, Debug)]
enum Bucket {
    One(usize),
    Many(Vec<usize>),
}

impl Bucket {
    fn as_slice(&self) -> &[usize] {
        match self {
            Bucket::One(position) => std::slice::from_ref(position),
            Bucket::Many(positions) => positions,
        }
    }

    fn insert(&mut self, position: usize) {
        match self {
            Bucket::One(only) if *only == position => {}
            Bucket::One(only) => {
                let (low, high) = ((*only).min(position), (*only).max(position));
                *self = Bucket::Many(vec![low, high]);
            }
            Bucket::Many(positions) => {
                if let Err(at) = positions.binary_search(&position) {
                    positions.insert(at, position);
                }
            }
        }
    }

    /// Removes the position; whether the bucket is empty now.
    fn remove(&mut self, position: usize) -> bool {
        match self {
            Bucket::One(only) => *only == position,
            Bucket::Many(positions) => {
                if let Ok(at) = positions.binary_search(&position) {
                    positions.remove(at);
                }
                match positions[..] {
                    [] => true,
                    [last] => {
                        *self = Bucket::One(last);
                        false
                    }
                    _ => false,
                }
            }
        }
    }
}

impl<K> Default for Positions<K> {
    fn default() -> Self {
        Positions {
            by_key: FxHashMap::default(),
        }
    }
}

impl<K: Hash + Eq> Positions<K> {
    pub fn insert(&mut self, key: K, position: usize) {
        self.by_key
            .entry(key)
            .and_modify(|bucket| bucket.insert(position))
            .or_insert(Bucket::One(position));
    }

    /// Removes the position; a bucket left empty goes too.
    pub fn remove<Q>(&mut self, key: &Q, position: usize)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(bucket) = self.by_key.get_mut(key)
            && bucket.remove(position)
        {
            self.by_key.remove(key);
        }
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, key: K, from: usize, to: usize) {
        self.remove(&key, from);
        self.insert(key, to);
    }

    pub fn get<Q>(&self, key: &Q) -> &[usize]
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.by_key.get(key).map_or(&[], Bucket::as_slice)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &[usize])> {
        self.by_key.iter().map(|(k, v)| (k, v.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_positions_sorted_through_growing_and_shrinking() {
        let mut positions = Positions::default();
        positions.insert("h", 7);
        positions.insert("h", 7);
        assert_eq!(positions.get("h"), [7]);
        positions.insert("h", 3);
        positions.insert("h", 9);
        assert_eq!(positions.get("h"), [3, 7, 9]);
        positions.remove("h", 7);
        positions.remove("h", 8);
        assert_eq!(positions.get("h"), [3, 9]);
        positions.remove("h", 9);
        assert_eq!(positions.get("h"), [3]);
        positions.remove("h", 4);
        assert_eq!(
            positions.get("h"),
            [3],
            "a position not held leaves the bucket alone"
        );
        positions.moved("h", 3, 1);
        assert_eq!(positions.get("h"), [1]);
        positions.remove("h", 1);
        assert_eq!(positions.get("h"), [] as [usize; 0]);
        assert_eq!(positions.iter().count(), 0, "an empty bucket goes");
    }

    #[test]
    fn a_bucket_of_one_position_is_held_inline() {
        assert_eq!(
            std::mem::size_of::<Bucket>(),
            std::mem::size_of::<Vec<usize>>()
        );
    }
}
