//! The pods on the nodes by label and namespace, so a pod's own affinity terms look at the
//! pods their selector can match (those with one of the values its first `In`
//! requirement names, in the namespaces the term covers) instead of at every pod of the
//! cluster; with each pod the position of its node, and per zone how many there are (a
//! term over zones needs no pod at all). Kept in step with each pod placed or removed and
//! each node added, removed, moved in the node list or relabelled (see `PodIndexes`).

use std::{collections::BTreeSet, sync::Arc};

use rustc_hash::FxHashMap;

use super::pod::PodInfo;
use multiarch_policy::selectors::LabelSelector;

/// The pods of one namespace with one label value.
#[derive(Clone, Debug, Default)]
pub struct LabelledPods {
    /// The pod's address (see [`address`]) → the pod and its node's position.
    pods: FxHashMap<usize, (Arc<PodInfo>, usize)>,
    /// Zone of their nodes → pods there (pods on nodes without a zone are not counted).
    zones: FxHashMap<String, u32>,
}

impl LabelledPods {
    /// The pods, each with its node's position.
    pub fn pods(&self) -> impl Iterator<Item = (&PodInfo, usize)> {
        self.pods.values().map(|(pod, at)| (pod.as_ref(), *at))
    }

    /// Zones with their number of pods.
    pub fn zones(&self) -> impl Iterator<Item = (&str, u32)> {
        self.zones.iter().map(|(zone, n)| (zone.as_str(), *n))
    }

    fn zone(&mut self, zone: Option<&str>, placed: bool) {
        let Some(zone) = zone else {
            return;
        };
        if placed {
            *self.zones.entry(zone.to_owned()).or_default() += 1;
        } else if let Some(n) = self.zones.get_mut(zone) {
            *n -= 1;
            if *n == 0 {
                self.zones.remove(zone);
            }
        }
    }
}

/// Keyed by the pods' own (shared) namespace names.
type ByNamespace = FxHashMap<Arc<str>, LabelledPods>;

/// Where the placed pod lives: the cluster model keeps one allocation per placed pod, the
/// same from placing to removing, so it names the pod without a copy of its UID.
fn address(pod: &PodInfo) -> usize {
    std::ptr::from_ref(pod).addr()
}

/// (key, value, namespace, zone) and the pods there, as [`PodsByLabel::entries`] lists them.
pub type ZoneEntry = (Vec<String>, u32);

#[derive(Clone, Debug, Default)]
pub struct PodsByLabel {
    /// Label key → value → namespace → pods.
    by_label: FxHashMap<String, FxHashMap<String, ByNamespace>>,
}

impl PodsByLabel {
    /// The pod, on the node at `position` (in `zone`).
    pub fn add(&mut self, pod: &Arc<PodInfo>, position: usize, zone: Option<&str>) {
        for (key, value) in pod.labels.iter() {
            let group = self
                .by_label
                .entry(key.clone())
                .or_default()
                .entry(value.clone())
                .or_default()
                .entry(pod.namespace.clone())
                .or_default();
            group.pods.insert(address(pod), (pod.clone(), position));
            group.zone(zone, true);
        }
    }

    /// The pod left its node (in `zone`).
    pub fn remove(&mut self, pod: &PodInfo, zone: Option<&str>) {
        for (key, value) in pod.labels.iter() {
            let Some(values) = self.by_label.get_mut(key) else {
                continue;
            };
            if let Some(namespaces) = values.get_mut(value) {
                if let Some(group) = namespaces.get_mut(&*pod.namespace)
                    && group.pods.remove(&address(pod)).is_some()
                {
                    group.zone(zone, false);
                    if group.pods.is_empty() {
                        namespaces.remove(&*pod.namespace);
                    }
                }
                if namespaces.is_empty() {
                    values.remove(value);
                }
            }
            if values.is_empty() {
                self.by_label.remove(key);
            }
        }
    }

    /// The pod's node moved to `position` in the node list.
    pub fn moved(&mut self, pod: &PodInfo, position: usize) {
        for (key, value) in pod.labels.iter() {
            if let Some((_, at)) = self
                .by_label
                .get_mut(key)
                .and_then(|values| values.get_mut(value))
                .and_then(|namespaces| namespaces.get_mut(&*pod.namespace))
                .and_then(|group| group.pods.get_mut(&address(pod)))
            {
                *at = position;
            }
        }
    }

    /// The namespaces' groups of the pods labelled `key` with one of `values`, each value
    /// once (a value listed twice must not count its pods twice).
    fn with_any<'a>(
        &'a self,
        key: &str,
        values: &'a [String],
    ) -> impl Iterator<Item = &'a ByNamespace> + 'a {
        let by_value = self.by_label.get(key);
        let values: BTreeSet<&String> = values.iter().collect();
        values
            .into_iter()
            .filter_map(move |value| by_value?.get(value))
    }

    /// The groups of pods labelled `key` with one of `values`, in the namespaces `covers`
    /// accepts.
    pub fn groups<'a>(
        &'a self,
        key: &str,
        values: &'a [String],
        covers: impl Fn(&str) -> bool + 'a,
    ) -> impl Iterator<Item = &'a LabelledPods> + 'a {
        self.with_any(key, values)
            .flat_map(|namespaces| namespaces.iter())
            .filter(move |(namespace, _)| covers(namespace))
            .map(|(_, group)| group)
    }

    /// The pods `selector` matches in the namespaces `covers` accepts, each with its node's
    /// position (in no order); `None` when the selector has no `In` requirement for the
    /// index to answer.
    pub fn selected_in<'a>(
        &'a self,
        selector: &'a LabelSelector,
        covers: impl Fn(&str) -> bool + 'a,
    ) -> Option<impl Iterator<Item = (&'a PodInfo, usize)> + 'a> {
        let (key, values) = selector.first_in()?;
        let pods = self
            .groups(key, values, covers)
            .flat_map(LabelledPods::pods);
        Some(matched(selector, pods))
    }

    /// [`selected_in`](Self::selected_in) one namespace (found by name, not by a search
    /// among the value's namespaces), leaving out the pods being deleted.
    pub fn selected<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a LabelSelector,
    ) -> Option<impl Iterator<Item = (&'a PodInfo, usize)> + 'a> {
        let (key, values) = selector.first_in()?;
        let pods = self
            .with_any(key, values)
            .filter_map(move |namespaces| namespaces.get(namespace))
            .flat_map(LabelledPods::pods);
        Some(matched(selector, pods).filter(|(pod, _)| !pod.deleting))
    }

    /// Every (key, value, namespace, UID, position) indexed and every (key, value,
    /// namespace, zone, pods), sorted (for tests that compare the index with a walk).
    pub fn entries(&self) -> (Vec<Vec<String>>, Vec<ZoneEntry>) {
        let mut pods = Vec::new();
        let mut zones = Vec::new();
        for (key, values) in &self.by_label {
            for (value, namespaces) in values {
                for (namespace, group) in namespaces {
                    let at = |last: String| {
                        vec![key.clone(), value.clone(), namespace.to_string(), last]
                    };
                    for (pod, position) in group.pods.values() {
                        pods.push([at(pod.uid.clone()), vec![position.to_string()]].concat());
                    }
                    for (zone, n) in &group.zones {
                        zones.push((at(zone.clone()), *n));
                    }
                }
            }
        }
        pods.sort_unstable();
        zones.sort_unstable();
        (pods, zones)
    }
}

/// The pods the index found for the selector's first `In` requirement that its other
/// requirements match too.
fn matched<'a>(
    selector: &'a LabelSelector,
    pods: impl Iterator<Item = (&'a PodInfo, usize)> + 'a,
) -> impl Iterator<Item = (&'a PodInfo, usize)> + 'a {
    let only_indexed = selector.requirements.len() == 1;
    pods.filter(move |(pod, _)| only_indexed || selector.matches(&pod.labels))
}
