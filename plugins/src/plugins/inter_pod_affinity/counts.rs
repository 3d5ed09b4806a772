//! Amounts per topology domain, by key then value, so a node is looked up by reading its
//! value for each key (its zone and hostname without touching its label map) instead of
//! building a (key, value) pair per node. Hostname domains are kept by the node's
//! [`Hostname`], which carries its hash and shares its allocation with the cluster model's
//! node: finding a node's domain reads no string, and counting a pod on it copies none.

use std::{collections::hash_map::Entry, hash::Hash};

use rustc_hash::FxHashMap;

use crate::model::{
    hostname::Hostname,
    node::{HOSTNAME_LABEL, NodeInfo},
};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Keys other than the hostname: value → amount.
    by_key: FxHashMap<String, FxHashMap<String, i64>>,
    /// `kubernetes.io/hostname` domains.
    hosts: FxHashMap<Hostname, i64>,
}

/// Adds `amount` to a domain's entry; with `drop_zero`, an entry left at zero goes.
fn add_to<K: Hash + Eq>(map: &mut FxHashMap<K, i64>, domain: K, amount: i64, drop_zero: bool) {
    match map.entry(domain) {
        Entry::Occupied(mut entry) => {
            *entry.get_mut() += amount;
            if drop_zero && *entry.get() == 0 {
                entry.remove();
            }
        }
        Entry::Vacant(entry) => {
            if !(drop_zero && amount == 0) {
                entry.insert(amount);
            }
        }
    }
}

impl Counts {
    /// Adds `amount` to the domain named `value`, keeping it when that makes zero (a
    /// score).
    pub(super) fn add(&mut self, key: &str, value: &str, amount: i64) {
        self.add_named(key, value, amount, false);
    }

    /// Adds `delta` pods to the domain named `value`; a domain left with none goes (a pod
    /// count).
    pub(super) fn update(&mut self, key: &str, value: &str, delta: i64) {
        self.add_named(key, value, delta, true);
    }

    /// [`add`](Self::add) to the node's domain of `key` (none without the label).
    pub(super) fn add_on(&mut self, key: &str, node: &NodeInfo, amount: i64) {
        self.add_on_node(key, node, amount, false);
    }

    /// [`update`](Self::update) on the node's domain of `key` (none without the label).
    pub(super) fn update_on(&mut self, key: &str, node: &NodeInfo, delta: i64) {
        self.add_on_node(key, node, delta, true);
    }

    fn add_named(&mut self, key: &str, value: &str, amount: i64, drop_zero: bool) {
        if key == HOSTNAME_LABEL {
            add_to(&mut self.hosts, Hostname::new(value), amount, drop_zero);
            return;
        }
        let values = match self.by_key.get_mut(key) {
            Some(values) => values,
            None => self.by_key.entry(key.to_owned()).or_default(),
        };
        match values.get_mut(value) {
            Some(count) => {
                *count += amount;
                if drop_zero && *count == 0 {
                    values.remove(value);
                }
            }
            None if drop_zero && amount == 0 => {}
            None => {
                values.insert(value.to_owned(), amount);
            }
        }
        if values.is_empty() {
            self.by_key.remove(key);
        }
    }

    fn add_on_node(&mut self, key: &str, node: &NodeInfo, amount: i64, drop_zero: bool) {
        if key == HOSTNAME_LABEL {
            if let Some(host) = &node.hostname {
                add_to(&mut self.hosts, host.clone(), amount, drop_zero);
            }
            return;
        }
        if let Some(value) = node.label(key) {
            self.add_named(key, value, amount, drop_zero);
        }
    }

    /// The amount of the node's domain of `key` (0 without the label or the domain).
    pub(super) fn get_on(&self, key: &str, node: &NodeInfo) -> i64 {
        if key == HOSTNAME_LABEL {
            return node
                .hostname
                .as_ref()
                .and_then(|host| self.hosts.get(host))
                .copied()
                .unwrap_or(0);
        }
        node.label(key)
            .and_then(|value| self.by_key.get(key)?.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty() && self.hosts.is_empty()
    }

    /// The node's domains' amounts, one per key counted.
    fn on<'a>(&'a self, node: &'a NodeInfo) -> impl Iterator<Item = i64> + 'a {
        // Most states count no hostname domain: no lookup then.
        let host = (!self.hosts.is_empty())
            .then(|| node.hostname.as_ref().and_then(|host| self.hosts.get(host)))
            .flatten()
            .copied();
        let others = self
            .by_key
            .iter()
            .filter_map(|(key, values)| values.get(node.label(key)?).copied());
        host.into_iter().chain(others)
    }

    /// Whether a domain of the node has a positive count.
    pub(super) fn any_positive_on(&self, node: &NodeInfo) -> bool {
        self.on(node).any(|count| count > 0)
    }

    /// The amounts of the node's domains, summed.
    pub(super) fn sum_on(&self, node: &NodeInfo) -> i64 {
        self.on(node).sum()
    }
}
