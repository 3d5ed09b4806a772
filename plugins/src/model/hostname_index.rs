//! Node positions by `kubernetes.io/hostname`, so the nodes that local volumes are pinned
//! to are found without a walk. Kept in step with the node list on every node change, at
//! the cost of that change; the positions changed are logged, so lists built from the
//! index follow at the cost of the changes too.

use std::{collections::VecDeque, sync::Arc};

use super::{hostname::Hostname, positions::Positions};

/// Positions changed that [`HostnameIndex::changes_since`] keeps.
const MAX_LOGGED: usize = 4096;

/// Node positions per hostname (several nodes may share one; nodes without the label are
/// not indexed).
#[derive(Clone, Debug, Default)]
pub struct HostnameIndex {
    /// Keyed by the nodes' own allocations of their hostnames.
    by_host: Positions<Arc<str>>,
    /// Counts the changes, so lists built from the index know when they are stale.
    generation: u64,
    /// The positions whose hostname changed, the last `generation` one last.
    log: VecDeque<usize>,
}

impl HostnameIndex {
    pub fn insert(&mut self, position: usize, hostname: Option<&Hostname>) {
        if let Some(host) = hostname {
            self.by_host.insert(host.shared_name().clone(), position);
            self.changed(position);
        }
    }

    pub fn remove(&mut self, position: usize, hostname: Option<&Hostname>) {
        if let Some(host) = hostname {
            self.by_host.remove(host.as_str(), position);
            self.changed(position);
        }
    }

    /// The node at `from` now sits at `to` (the list's `swap_remove`).
    pub fn moved(&mut self, from: usize, to: usize, hostname: Option<&Hostname>) {
        if let Some(host) = hostname {
            self.by_host.moved(host.shared_name().clone(), from, to);
            self.changed(from);
            self.changed(to);
        }
    }

    fn changed(&mut self, position: usize) {
        if self.log.len() >= MAX_LOGGED {
            self.log.pop_front();
        }
        self.log.push_back(position);
        self.generation += 1;
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The positions whose hostname changed after generation `generation`, oldest first
    /// (repeats included); `None` when some are no longer kept.
    pub fn changes_since(&self, generation: u64) -> Option<impl Iterator<Item = usize> + '_> {
        let behind = usize::try_from(self.generation.checked_sub(generation)?).ok()?;
        let skip = self.log.len().checked_sub(behind)?;
        Some(self.log.iter().skip(skip).copied())
    }

    /// The positions of the nodes with this hostname.
    pub fn nodes(&self, hostname: &str) -> &[usize] {
        self.by_host.get(hostname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_listed_until_the_log_no_longer_holds_them() {
        let mut index = HostnameIndex::default();
        let (h0, h1, h2) = (
            Hostname::new("h0"),
            Hostname::new("h1"),
            Hostname::new("h2"),
        );
        index.insert(0, Some(&h0));
        index.insert(1, None);
        index.insert(1, Some(&h1));
        let seen = index.generation();
        index.moved(1, 0, Some(&h1));
        index.remove(7, None);
        assert_eq!(
            index.changes_since(seen).unwrap().collect::<Vec<_>>(),
            [1, 0]
        );
        assert_eq!(index.changes_since(index.generation()).unwrap().count(), 0);
        assert_eq!(index.nodes("h1"), [0]);
        for position in 0..MAX_LOGGED {
            index.insert(position, Some(&h2));
        }
        assert!(index.changes_since(seen).is_none(), "fell behind the log");
        assert_eq!(
            index
                .changes_since(index.generation() - 1)
                .unwrap()
                .collect::<Vec<_>>(),
            [MAX_LOGGED - 1]
        );
        assert!(index.changes_since(index.generation() + 1).is_none());
    }
}
