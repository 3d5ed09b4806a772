//! Node positions by `kubernetes.io/hostname`, so the nodes that local volumes are pinned
//! to are found without a walk. Kept in step with the node list on every node change, at
//! the cost of that change.

use super::positions::Positions;

/// Node positions per hostname (several nodes may share one; nodes without the label are
/// not indexed).
#[derive(Clone, Debug, Default)]
pub struct HostnameIndex {
    by_host: Positions<String>,
    /// Counts the changes, so lists built from the index know when they are stale.
    generation: u64,
}

impl HostnameIndex {
    pub fn insert(&mut self, position: usize, hostname: Option<&str>) {
        if let Some(host) = hostname {
            self.by_host.insert(host.to_owned(), position);
            self.generation += 1;
        }
    }

    pub fn remove(&mut self, position: usize, hostname: Option<&str>) {
        if let Some(host) = hostname {
            self.by_host.remove(host, position);
            self.generation += 1;
        }
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, from: usize, to: usize, hostname: Option<&str>) {
        if let Some(host) = hostname {
            self.by_host.moved(host.to_owned(), from, to);
            self.generation += 1;
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The positions of the nodes with this hostname.
    pub fn nodes(&self, hostname: &str) -> &[usize] {
        self.by_host.get(hostname)
    }
}
