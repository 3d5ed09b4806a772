//! One allocation per distinct label set of the model's pods and nodes. The pods of a
//! Deployment, a ReplicaSet or a Job carry the same labels, and so do the nodes of a
//! pool once their hostnames are kept apart (`NodeInfo::pool_labels`); as separate maps
//! each cost a B-tree node (544 bytes for up to eleven labels) plus a heap string per key
//! and value, the largest single item of a pod's memory at 130,000 nodes (issue 53).
//! Shared, an object's labels are one pointer.
//!
//! The table holds only what some pod holds too: it is pruned whenever it has doubled
//! since the last pruning, so it never holds more than twice the label sets in use (plus
//! a constant), and the pruning's cost is amortised over the insertions that grew it.

use std::sync::Arc;

use multiarch_policy::selectors::Labels;
use rustc_hash::FxHashSet;

use super::spare_room;

/// Below this many sets the table is never pruned (pruning would cost more than it frees).
const MIN_PRUNE_LEN: usize = 1024;

#[derive(Clone, Debug)]
pub struct SharedLabels {
    sets: FxHashSet<Arc<Labels>>,
    /// Prune when the table reaches this many sets.
    prune_at: usize,
}

impl Default for SharedLabels {
    fn default() -> Self {
        SharedLabels {
            sets: FxHashSet::default(),
            prune_at: MIN_PRUNE_LEN,
        }
    }
}

impl SharedLabels {
    /// Replaces `labels` with the shared allocation of an equal set, or makes it the
    /// shared one. The empty set is left alone (it allocates nothing).
    pub fn share(&mut self, labels: &mut Arc<Labels>) {
        if labels.is_empty() {
            return;
        }
        match self.sets.get(&**labels) {
            Some(shared) if Arc::ptr_eq(shared, labels) => {}
            Some(shared) => *labels = shared.clone(),
            None => {
                if self.sets.len() >= self.prune_at {
                    self.prune();
                }
                self.sets.insert(labels.clone());
            }
        }
    }

    /// Forgets the sets nothing else holds any more, and gives back the table's room
    /// when it is mostly empty.
    fn prune(&mut self) {
        self.sets.retain(|set| Arc::strong_count(set) > 1);
        spare_room::shrink_set(&mut self.sets);
        self.prune_at = (2 * self.sets.len()).max(MIN_PRUNE_LEN);
    }

    pub fn len(&self) -> usize {
        self.sets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Arc<Labels> {
        Arc::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn equal_sets_share_one_allocation() {
        let mut table = SharedLabels::default();
        let mut a = set(&[("app", "web"), ("tier", "fe")]);
        let mut b = set(&[("tier", "fe"), ("app", "web")]);
        let mut c = set(&[("app", "db")]);
        for labels in [&mut a, &mut b, &mut c] {
            table.share(labels);
        }
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(table.len(), 2);
        let mut empty = Arc::new(Labels::new());
        table.share(&mut empty);
        assert_eq!(table.len(), 2, "the empty set is not kept");
    }

    /// Sets nothing holds are forgotten once the table has doubled: it stays within twice
    /// the sets in use, however many distinct sets went through it.
    #[test]
    fn sets_nothing_holds_are_pruned_as_the_table_grows() {
        let mut table = SharedLabels::default();
        let mut held = Vec::new();
        for i in 0..100_000 {
            let mut labels = set(&[("pod", &i.to_string())]);
            table.share(&mut labels);
            // One set in ten stays in use (a pod that keeps running).
            if i % 10 == 0 {
                held.push(labels);
            }
            assert!(
                table.len() <= (2 * held.len()).max(MIN_PRUNE_LEN) + 1,
                "{} sets for {} in use",
                table.len(),
                held.len()
            );
        }
        // What is still held is still shared.
        let mut again = set(&[("pod", "99990")]);
        table.share(&mut again);
        assert!(Arc::ptr_eq(&again, &held[9999]));
    }
}
