//! Node positions by `kubernetes.io/hostname`, so the nodes that local volumes are pinned
//! to are found without a walk. Kept in step with the node list on every node change, at
//! the cost of that change.

use rustc_hash::FxHashMap;

/// Sorted node positions per hostname (several nodes may share one).
#[derive(Clone, Debug, Default)]
pub struct HostnameIndex {
    by_host: FxHashMap<String, Vec<usize>>,
}

impl HostnameIndex {
    pub fn insert(&mut self, position: usize, hostname: Option<&str>) {
        let Some(host) = hostname else { return };
        let bucket = self.by_host.entry(host.to_owned()).or_default();
        if let Err(at) = bucket.binary_search(&position) {
            bucket.insert(at, position);
        }
    }

    pub fn remove(&mut self, position: usize, hostname: Option<&str>) {
        let Some(host) = hostname else { return };
        if let Some(bucket) = self.by_host.get_mut(host) {
            if let Ok(at) = bucket.binary_search(&position) {
                bucket.remove(at);
            }
            if bucket.is_empty() {
                self.by_host.remove(host);
            }
        }
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, from: usize, to: usize, hostname: Option<&str>) {
        self.remove(from, hostname);
        self.insert(to, hostname);
    }

    /// The positions of the nodes with this hostname.
    pub fn nodes(&self, hostname: &str) -> &[usize] {
        self.by_host.get(hostname).map_or(&[], Vec::as_slice)
    }
}
