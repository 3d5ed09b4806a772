//! Amounts per topology domain, by key then value, so a node is looked up by reading its
//! value for each key (its zone and hostname without touching its label map) instead of
//! building a (key, value) pair per node.

use rustc_hash::FxHashMap;

use crate::model::node::NodeInfo;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts(FxHashMap<String, FxHashMap<String, i64>>);

impl Counts {
    /// Adds `amount` to the domain, keeping it when that makes zero (a score).
    pub(super) fn add(&mut self, key: &str, value: &str, amount: i64) {
        if let Some(values) = self.0.get_mut(key) {
            match values.get_mut(value) {
                Some(count) => *count += amount,
                None => {
                    values.insert(value.to_owned(), amount);
                }
            }
            return;
        }
        self.0.insert(
            key.to_owned(),
            std::iter::once((value.to_owned(), amount)).collect(),
        );
    }

    /// Adds `delta` pods to the domain; a domain left with none goes (a pod count).
    pub(super) fn update(&mut self, key: &str, value: &str, delta: i64) {
        self.add(key, value, delta);
        if let Some(values) = self.0.get_mut(key)
            && values.get(value) == Some(&0)
        {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    pub(super) fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|values| values.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a domain of the node has a positive count.
    pub(super) fn any_positive_on(&self, node: &NodeInfo) -> bool {
        self.0.iter().any(|(key, values)| {
            node.label(key)
                .and_then(|value| values.get(value))
                .is_some_and(|count| *count > 0)
        })
    }

    /// The amounts of the node's domains, summed.
    pub(super) fn sum_on(&self, node: &NodeInfo) -> i64 {
        self.0
            .iter()
            .filter_map(|(key, values)| values.get(node.label(key)?))
            .sum()
    }
}
