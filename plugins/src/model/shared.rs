//! One allocation per distinct value of what the model's pods and nodes repeat: label
//! sets, image lists and the pods' namespaces and scheduler names. The pods of a Deployment, a ReplicaSet or a Job carry the same
//! labels and images, and the nodes of a pool the same labels once their hostnames are
//! kept apart (`NodeInfo::pool_labels`). As separate values a label set costs a B-tree
//! node (544 bytes for up to eleven labels) plus a heap string per key and value, and an
//! image list its vector plus two strings per container: the largest items of a pod's
//! memory at 130,000 nodes (issue 53). Shared, each is one pointer.
//!
//! The table holds only what some object holds too: it is pruned whenever it has doubled
//! since the last pruning, so it never holds more than twice the values in use (plus a
//! constant), and the pruning's cost is amortised over the insertions that grew it.

use std::{hash::Hash, sync::Arc};

use multiarch_policy::{pod_images::ContainerImage, selectors::Labels};
use rustc_hash::FxHashSet;

use super::spare_room;

/// Below this many values the table is never pruned (pruning would cost more than it
/// frees).
const MIN_PRUNE_LEN: usize = 1024;

/// The pods' and nodes' label sets.
pub type SharedLabels = Shared<Labels>;
/// The pods' containers' images.
pub type SharedImages = Shared<[ContainerImage]>;
/// The pods' namespaces and scheduler names (a few names for every pod of the cluster:
/// each pod's own copies were two heap strings of every pod).
pub type SharedStrings = Shared<str>;

#[derive(Debug)]
pub struct Shared<T: ?Sized> {
    values: FxHashSet<Arc<T>>,
    /// Prune when the table reaches this many values.
    prune_at: usize,
}

// By hand: a derived `Clone` would ask `T: Clone` (the values are `Arc`s, never cloned).
impl<T: ?Sized> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared {
            values: self.values.clone(),
            prune_at: self.prune_at,
        }
    }
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            values: FxHashSet::default(),
            prune_at: MIN_PRUNE_LEN,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Shared<T> {
    /// Replaces `value` with the shared allocation of an equal one, or makes it the
    /// shared one.
    pub fn share(&mut self, value: &mut Arc<T>) {
        match self.values.get(&**value) {
            Some(shared) if Arc::ptr_eq(shared, value) => {}
            Some(shared) => *value = shared.clone(),
            None => {
                if self.values.len() >= self.prune_at {
                    self.prune();
                }
                self.values.insert(value.clone());
            }
        }
    }

    /// Forgets the values nothing else holds any more, and gives back the table's room
    /// when it is mostly empty.
    fn prune(&mut self) {
        self.values.retain(|value| Arc::strong_count(value) > 1);
        spare_room::shrink_set(&mut self.values);
        self.prune_at = (2 * self.values.len()).max(MIN_PRUNE_LEN);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
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
        let (mut empty, mut also_empty) = (Arc::new(Labels::new()), Arc::new(Labels::new()));
        table.share(&mut empty);
        table.share(&mut also_empty);
        assert!(
            Arc::ptr_eq(&empty, &also_empty),
            "the empty set is shared too"
        );
        assert_eq!(table.len(), 3);
    }

    /// Shares `a`, `b` (equal to `a`) and `other` in a new table: the equal two end in
    /// one allocation, `other` in its own.
    fn assert_equal_values_shared<T: ?Sized + Hash + Eq>(
        mut a: Arc<T>,
        mut b: Arc<T>,
        mut other: Arc<T>,
    ) {
        let mut table = Shared::default();
        for value in [&mut a, &mut b, &mut other] {
            table.share(value);
        }
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn equal_strings_share_one_allocation() {
        assert_equal_values_shared::<str>(
            "team-a".into(),
            String::from("team-a").into(),
            "team-b".into(),
        );
    }

    #[test]
    fn equal_image_lists_share_one_allocation() {
        let image = |container: &str, image: &str| ContainerImage {
            container: container.to_owned(),
            image: image.to_owned(),
            pull_always: false,
        };
        assert_equal_values_shared::<[ContainerImage]>(
            vec![image("app", "nginx:1"), image("log", "fluent:2")].into(),
            vec![image("app", "nginx:1"), image("log", "fluent:2")].into(),
            // The same images in another order are another list (containers start in
            // order).
            vec![image("log", "fluent:2"), image("app", "nginx:1")].into(),
        );
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
