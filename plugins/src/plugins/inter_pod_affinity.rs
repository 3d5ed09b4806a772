//! `InterPodAffinity`: required pod affinity and anti-affinity (including the
//! anti-affinity of pods already running, which is symmetric) filter; preferred terms and
//! existing pods' terms score. Namespace selectors are evaluated against the namespaces'
//! labels.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
        ScorePlugin, Status,
    },
    model::{
        cluster::ClusterState,
        node::NodeInfo,
        pod::{NamespaceScope, PodAffinityTerm, PodInfo},
    },
};

pub const NAME: &str = "InterPodAffinity";
pub const AFFINITY_REASON: &str = "node(s) didn't match pod affinity rules";
pub const ANTI_AFFINITY_REASON: &str = "node(s) didn't match pod anti-affinity rules";
pub const EXISTING_ANTI_AFFINITY_REASON: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// kube-scheduler's `hardPodAffinityWeight`: how much an existing pod's *required*
/// affinity toward the incoming pod counts in scoring.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

pub struct InterPodAffinity;

type TopologyPair = (String, String);

fn selects(term: &PodAffinityTerm, pod: &PodInfo, cluster: &ClusterState) -> bool {
    term.selects(pod, cluster.namespace_labels(&pod.namespace))
}

/// `podMatchesAllAffinityTerms`: false without terms.
fn matches_all(terms: &[PodAffinityTerm], pod: &PodInfo, cluster: &ClusterState) -> bool {
    !terms.is_empty() && terms.iter().all(|t| selects(t, pod, cluster))
}

fn node_pair(term: &PodAffinityTerm, node: &NodeInfo) -> Option<TopologyPair> {
    node.labels
        .get(&term.topology_key)
        .map(|v| (term.topology_key.clone(), v.clone()))
}

/// Matching pods per topology pair (kube-scheduler's `topologyToMatchedTermCount`).
type Counts = FxHashMap<TopologyPair, i64>;

fn update(counts: &mut Counts, node: &NodeInfo, key: &str, delta: i64) {
    if let Some(value) = node.labels.get(key) {
        let pair = (key.to_owned(), value.clone());
        let count = counts.entry(pair.clone()).or_default();
        *count += delta;
        if *count == 0 {
            counts.remove(&pair);
        }
    }
}

#[derive(Clone, Default)]
struct FilterState {
    /// Where an existing pod's required anti-affinity forbids the incoming pod.
    existing_anti: Counts,
    /// Pods matching every required affinity term of the incoming pod.
    affinity: Counts,
    /// Pods matching a required anti-affinity term of the incoming pod.
    anti: Counts,
}

impl FilterState {
    /// Counts `other` on `node` (`delta` 1) or removes it (`-1`): kube-scheduler's
    /// `updateWithPod`.
    fn update_with_pod(
        &mut self,
        pod: &PodInfo,
        cluster: &ClusterState,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        for term in &other.anti_affinity.required {
            if selects(term, pod, cluster) {
                update(&mut self.existing_anti, node, &term.topology_key, delta);
            }
        }
        if matches_all(&pod.affinity.required, other, cluster) {
            for term in &pod.affinity.required {
                update(&mut self.affinity, node, &term.topology_key, delta);
            }
        }
        for term in &pod.anti_affinity.required {
            if selects(term, other, cluster) {
                update(&mut self.anti, node, &term.topology_key, delta);
            }
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::NodeUpdate,
            EventKind::AssignedPodAdd,
            EventKind::AssignedPodUpdate,
            EventKind::AssignedPodDelete,
            EventKind::NamespaceChange,
        ]
    }

    /// kube-scheduler's hints: a pod that matches the affinity arrives (or comes to
    /// match), a pod matching the anti-affinity (or holding one against this pod) leaves,
    /// a node gains a topology key the terms use, or a namespace's labels change what a
    /// namespace selector selects.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        cluster: &ClusterState,
    ) -> QueueingHint {
        let affinity = &pod.affinity.required;
        let anti = &pod.anti_affinity.required;
        let matches_any_anti = |other: &PodInfo| anti.iter().any(|t| selects(t, other, cluster));
        let holds_anti_against = |other: &PodInfo| {
            other
                .anti_affinity
                .required
                .iter()
                .any(|t| selects(t, pod, cluster))
        };
        let queue = match change {
            ClusterChange::AssignedPodAdded(added) => matches_all(affinity, added, cluster),
            ClusterChange::AssignedPodUpdated { old, new } => {
                (!matches_all(affinity, old, cluster) && matches_all(affinity, new, cluster))
                    || (matches_any_anti(old) && !matches_any_anti(new))
                    || (holds_anti_against(old) && !holds_anti_against(new))
            }
            ClusterChange::AssignedPodDeleted(deleted) => {
                matches_any_anti(deleted) || holds_anti_against(deleted)
            }
            ClusterChange::NodeAdded(node) => {
                // Without terms of its own, the pod was kept out by running pods' terms:
                // a new node may be free of them.
                (affinity.is_empty() && anti.is_empty())
                    || !anti.is_empty()
                    || affinity
                        .iter()
                        .any(|t| node.labels.contains_key(&t.topology_key))
            }
            ClusterChange::NodeUpdated { old, new, .. } => affinity
                .iter()
                .chain(anti)
                .any(|t| old.labels.get(&t.topology_key) != new.labels.get(&t.topology_key)),
            ClusterChange::NamespaceChanged(namespace) => {
                *namespace == pod.namespace
                    || affinity.iter().chain(anti).any(|t| {
                        let NamespaceScope::Listed(_, selector) = &t.namespaces;
                        selector.as_ref().is_some_and(|s| !s.is_empty())
                    })
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        let pod = ctx.pod;
        let cluster = ctx.cluster;
        let own_terms = !pod.affinity.required.is_empty() || !pod.anti_affinity.required.is_empty();
        if !own_terms && cluster.pods_with_required_anti_affinity() == 0 {
            return Status::skip();
        }
        let mut s = FilterState::default();
        for node in cluster.nodes() {
            if !own_terms && node.pods_with_required_anti_affinity == 0 {
                continue;
            }
            for existing in &node.pods {
                s.update_with_pod(pod, cluster, existing, node, 1);
            }
        }
        if s.existing_anti.is_empty() && !own_terms {
            return Status::skip();
        }
        state.write(s);
        Status::success()
    }

    fn add_pod(
        &self,
        ctx: &CycleContext<'_>,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) {
        if let Some(s) = state.read_mut::<FilterState>() {
            s.update_with_pod(ctx.pod, ctx.cluster, pod, node, 1);
        }
    }

    fn remove_pod(
        &self,
        ctx: &CycleContext<'_>,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) {
        if let Some(s) = state.read_mut::<FilterState>() {
            s.update_with_pod(ctx.pod, ctx.cluster, pod, node, -1);
        }
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<FilterState>() else {
            return Status::error("InterPodAffinity: PreFilter did not run");
        };
        let pod = ctx.pod;
        // kube-scheduler's order: the pod's affinity, its anti-affinity, then the
        // anti-affinity of the pods already running.
        let mut pods_exist = true;
        for term in &pod.affinity.required {
            let Some(value) = node.labels.get(&term.topology_key) else {
                return Status::new(Code::UnschedulableAndUnresolvable, AFFINITY_REASON);
            };
            let pair = (term.topology_key.clone(), value.clone());
            if s.affinity.get(&pair).copied().unwrap_or(0) <= 0 {
                pods_exist = false;
            }
        }
        // The first pod of a group with affinity to itself may go anywhere its topology
        // keys exist.
        if !pods_exist {
            let first_of_group =
                s.affinity.is_empty() && matches_all(&pod.affinity.required, pod, ctx.cluster);
            if !first_of_group {
                return Status::new(Code::UnschedulableAndUnresolvable, AFFINITY_REASON);
            }
        }
        if !s.anti.is_empty() {
            for term in &pod.anti_affinity.required {
                if let Some(pair) = node_pair(term, node)
                    && s.anti.get(&pair).copied().unwrap_or(0) > 0
                {
                    return Status::unschedulable(ANTI_AFFINITY_REASON);
                }
            }
        }
        if !s.existing_anti.is_empty()
            && node.labels.iter().any(|(key, value)| {
                s.existing_anti
                    .get(&(key.clone(), value.clone()))
                    .is_some_and(|c| *c > 0)
            })
        {
            return Status::unschedulable(EXISTING_ANTI_AFFINITY_REASON);
        }
        Status::success()
    }
}

#[derive(Clone)]
struct ScoreState {
    by_pair: HashMap<TopologyPair, i64>,
}

impl ScorePlugin for InterPodAffinity {
    fn pre_score(&self, ctx: &CycleContext<'_>, state: &mut CycleState, _: &[&NodeInfo]) -> Status {
        let pod = ctx.pod;
        let cluster = ctx.cluster;
        let own_preferences =
            !pod.affinity.preferred.is_empty() || !pod.anti_affinity.preferred.is_empty();
        if !own_preferences && cluster.pods_with_affinity() == 0 {
            return Status::skip();
        }
        let mut by_pair: HashMap<TopologyPair, i64> = HashMap::new();
        let mut add = |term: &PodAffinityTerm, node: &NodeInfo, weight: i64| {
            if let Some(pair) = node_pair(term, node) {
                *by_pair.entry(pair).or_default() += weight;
            }
        };
        for node in cluster.nodes() {
            if !own_preferences && node.pods_with_affinity == 0 {
                continue;
            }
            for existing in &node.pods {
                for (weight, term) in &pod.affinity.preferred {
                    if selects(term, existing, cluster) {
                        add(term, node, i64::from(*weight));
                    }
                }
                for (weight, term) in &pod.anti_affinity.preferred {
                    if selects(term, existing, cluster) {
                        add(term, node, -i64::from(*weight));
                    }
                }
                if !existing.has_pod_affinity() {
                    continue;
                }
                // The existing pod's own terms toward the incoming pod (symmetry).
                for term in &existing.affinity.required {
                    if selects(term, pod, cluster) {
                        add(term, node, HARD_POD_AFFINITY_WEIGHT);
                    }
                }
                for (weight, term) in &existing.affinity.preferred {
                    if selects(term, pod, cluster) {
                        add(term, node, i64::from(*weight));
                    }
                }
                for (weight, term) in &existing.anti_affinity.preferred {
                    if selects(term, pod, cluster) {
                        add(term, node, -i64::from(*weight));
                    }
                }
            }
        }
        if by_pair.is_empty() {
            return Status::skip();
        }
        state.write(ScoreState { by_pair });
        Status::success()
    }

    fn score(&self, _: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>() else {
            return 0;
        };
        s.by_pair
            .iter()
            .filter(|((key, value), _)| node.labels.get(key) == Some(value))
            .map(|(_, score)| *score)
            .sum()
    }

    fn normalize(&self, _: &CycleContext<'_>, _: &CycleState, scores: &mut [i64]) {
        let max = scores.iter().copied().max().unwrap_or(0);
        let min = scores.iter().copied().min().unwrap_or(0);
        let spread = max - min;
        for s in scores.iter_mut() {
            *s = if spread > 0 {
                MAX_NODE_SCORE * (*s - min) / spread
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests;
