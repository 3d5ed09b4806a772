//! Sorted node positions per key, kept in step with the cluster's node list by the
//! indexes built on it (platform bit, hostname): each node change touches one bucket.

use std::{borrow::Borrow, hash::Hash};

use rustc_hash::FxHashMap;

#[derive(Clone, Debug)]
pub struct Positions<K> {
    by_key: FxHashMap<K, Vec<usize>>,
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
        let bucket = self.by_key.entry(key).or_default();
        if let Err(at) = bucket.binary_search(&position) {
            bucket.insert(at, position);
        }
    }

    /// Removes the position; a bucket left empty goes too.
    pub fn remove<Q>(&mut self, key: &Q, position: usize)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(bucket) = self.by_key.get_mut(key) {
            if let Ok(at) = bucket.binary_search(&position) {
                bucket.remove(at);
            }
            if bucket.is_empty() {
                self.by_key.remove(key);
            }
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
        self.by_key.get(key).map_or(&[], Vec::as_slice)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &[usize])> {
        self.by_key.iter().map(|(k, v)| (k, v.as_slice()))
    }
}
