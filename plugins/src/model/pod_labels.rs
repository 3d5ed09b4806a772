//! The pods on the nodes by label and namespace, so a pod's own affinity terms look at the
//! pods their selector can match (those with one of the values its first `In`
//! requirement names, in the namespaces the term covers) instead of at every pod of the
//! cluster; with each pod the position of its node, and per zone how many there are (a
//! term over zones needs no pod at all). Kept in step with each pod placed or removed and
//! each node added, removed, moved in the node list or moved to another zone.

use std::{collections::BTreeSet, sync::Arc};

use rustc_hash::FxHashMap;

use super::{pod::PodInfo, selectors::LabelSelector};

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

type ByNamespace = FxHashMap<String, LabelledPods>;

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
        for (key, value) in &pod.labels {
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
        for (key, value) in &pod.labels {
            let Some(values) = self.by_label.get_mut(key) else {
                continue;
            };
            if let Some(namespaces) = values.get_mut(value) {
                if let Some(group) = namespaces.get_mut(&pod.namespace)
                    && group.pods.remove(&address(pod)).is_some()
                {
                    group.zone(zone, false);
                    if group.pods.is_empty() {
                        namespaces.remove(&pod.namespace);
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

    /// The pod's node moved to `position` in the node list, or to another zone.
    pub fn moved(
        &mut self,
        pod: &PodInfo,
        position: usize,
        zones: Option<(Option<&str>, Option<&str>)>,
    ) {
        for (key, value) in &pod.labels {
            let Some(group) = self
                .by_label
                .get_mut(key)
                .and_then(|values| values.get_mut(value))
                .and_then(|namespaces| namespaces.get_mut(&pod.namespace))
            else {
                continue;
            };
            if let Some(entry) = group.pods.get_mut(&address(pod)) {
                entry.1 = position;
                if let Some((old, new)) = zones {
                    group.zone(old, false);
                    group.zone(new, true);
                }
            }
        }
    }

    /// The pods labelled `key=value`, by namespace, in no order.
    pub fn with<'a>(
        &'a self,
        key: &str,
        value: &str,
    ) -> impl Iterator<Item = (&'a str, &'a LabelledPods)> + use<'a> {
        self.by_label
            .get(key)
            .and_then(|values| values.get(value))
            .into_iter()
            .flat_map(|namespaces| namespaces.iter().map(|(ns, pods)| (ns.as_str(), pods)))
    }

    /// The pods of `namespace` that `selector` matches and are not being deleted, each
    /// with its node's position (in no order); `None` when the selector has no `In`
    /// requirement for the index to answer.
    pub fn selected<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a LabelSelector,
    ) -> Option<impl Iterator<Item = (&'a PodInfo, usize)> + 'a> {
        let (key, values) = selector.first_in()?;
        // A value listed twice must not count its pods twice.
        let values: BTreeSet<&String> = values.iter().collect();
        let only_indexed = selector.requirements.len() == 1;
        Some(
            values
                .into_iter()
                .filter_map(move |value| self.by_label.get(key)?.get(value)?.get(namespace))
                .flat_map(LabelledPods::pods)
                .filter(move |(pod, _)| {
                    !pod.deleting && (only_indexed || selector.matches(&pod.labels))
                }),
        )
    }

    /// Every (key, value, namespace, UID, position) indexed and every (key, value,
    /// namespace, zone, pods), sorted (for tests that compare the index with a walk).
    pub fn entries(&self) -> (Vec<Vec<String>>, Vec<ZoneEntry>) {
        let mut pods = Vec::new();
        let mut zones = Vec::new();
        for (key, values) in &self.by_label {
            for (value, namespaces) in values {
                for (namespace, group) in namespaces {
                    let at =
                        |last: String| vec![key.clone(), value.clone(), namespace.clone(), last];
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
