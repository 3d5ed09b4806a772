//! `InterPodAffinity`: required pod affinity and anti-affinity (including the
//! anti-affinity of pods already running, which is symmetric) filter; preferred terms and
//! existing pods' terms score. Namespace selectors are evaluated against the namespaces'
//! labels.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
        ScorePlugin, Status,
    },
    model::{
        cluster::ClusterState,
        node::NodeInfo,
        node::ZONE_LABEL,
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

mod counts;
use counts::Counts;

fn selects(term: &PodAffinityTerm, pod: &PodInfo, cluster: &ClusterState) -> bool {
    term.selects(pod, cluster.namespace_labels(&pod.namespace))
}

/// `podMatchesAllAffinityTerms`: false without terms.
fn matches_all(terms: &[PodAffinityTerm], pod: &PodInfo, cluster: &ClusterState) -> bool {
    !terms.is_empty() && terms.iter().all(|t| selects(t, pod, cluster))
}

/// Whether the term looks at the pods of a namespace (by the namespace's labels).
fn covers<'a>(term: &'a PodAffinityTerm, cluster: &'a ClusterState) -> impl Fn(&str) -> bool + 'a {
    move |namespace| term.covers_namespace(namespace, cluster.namespace_labels(namespace))
}

/// The pods on nodes the term selects, with their node: from the cluster's label index
/// when the selector has an `In` requirement (the pods with one of its values, in the
/// namespaces the term covers), else from every pod on every node.
fn selected<'a>(
    term: &'a PodAffinityTerm,
    cluster: &'a ClusterState,
) -> Box<dyn Iterator<Item = (&'a PodInfo, &'a NodeInfo)> + 'a> {
    match cluster
        .pod_label_index()
        .selected_in(&term.selector, covers(term, cluster))
    {
        Some(pods) => Box::new(pods.filter_map(|(pod, at)| Some((pod, cluster.nodes().get(at)?)))),
        None => Box::new(cluster.nodes().iter().flat_map(move |node| {
            node.pods
                .iter()
                .filter(move |pod| selects(term, pod, cluster))
                .map(move |pod| (pod.as_ref(), node))
        })),
    }
}

/// Adds `amount` per pod the term selects to its domain (`update`: as pod counts, which
/// go at zero). A term over zones whose selector is only the indexed requirement reads
/// the index's counts per zone and no pod.
fn count_selected(
    term: &PodAffinityTerm,
    cluster: &ClusterState,
    amount: i64,
    counts: &mut Counts,
    update: bool,
) {
    let key = &term.topology_key;
    if *key == ZONE_LABEL
        && term.selector.requirements.len() == 1
        && let Some((label, values)) = term.selector.first_in()
    {
        for group in cluster
            .pod_label_index()
            .groups(label, values, covers(term, cluster))
        {
            for (zone, pods) in group.zones() {
                let n = amount * i64::from(pods);
                if update {
                    counts.update(key, zone, n);
                } else {
                    counts.add(key, zone, n);
                }
            }
        }
        return;
    }
    for (_, node) in selected(term, cluster) {
        if update {
            counts.update_on(key, node, amount);
        } else {
            counts.add_on(key, node, amount);
        }
    }
}

/// kube-scheduler's PreFilter state (`getExistingAntiAffinityCounts`,
/// `getIncomingAffinityAntiAffinityCounts`), from the cluster's indexes: the required
/// anti-affinity of the pods on nodes from their counted terms, the pod's own terms from
/// the pods their selectors can match.
fn filter_state(pod: &PodInfo, cluster: &ClusterState) -> FilterState {
    let mut s = FilterState::default();
    for (term, domains) in cluster.affinity_terms().required_anti_affinity() {
        if selects(term, pod, cluster) {
            for (value, pods) in domains.iter() {
                s.existing_anti.update(&term.topology_key, value, pods);
            }
        }
    }
    // A pod matching every term matches the first.
    if let Some((first, others)) = pod.affinity.required.split_first() {
        for (other, node) in selected(first, cluster) {
            if others.iter().all(|t| selects(t, other, cluster)) {
                for term in &pod.affinity.required {
                    s.affinity.update_on(&term.topology_key, node, 1);
                }
            }
        }
    }
    for term in &pod.anti_affinity.required {
        count_selected(term, cluster, 1, &mut s.anti, true);
    }
    s
}

/// kube-scheduler's PreScore sums per topology pair: the pod's preferred terms over the
/// pods their selectors can match, and the terms of the pods on nodes toward the pod
/// (required affinity at the hard weight, preferred affinity and anti-affinity) from
/// their counts.
fn score_pairs(pod: &PodInfo, cluster: &ClusterState) -> Counts {
    let mut by_pair = Counts::default();
    for (sign, preferred) in [
        (1, &pod.affinity.preferred),
        (-1, &pod.anti_affinity.preferred),
    ] {
        for (weight, term) in preferred {
            count_selected(
                term,
                cluster,
                sign * i64::from(*weight),
                &mut by_pair,
                false,
            );
        }
    }
    let terms = cluster.affinity_terms();
    for (weight, counted) in [
        (
            HARD_POD_AFFINITY_WEIGHT,
            terms.required_affinity().collect::<Vec<_>>(),
        ),
        (1, terms.preferred().collect()),
    ] {
        for (term, domains) in counted {
            if selects(term, pod, cluster) {
                for (value, amount) in domains.iter() {
                    by_pair.add(&term.topology_key, value, weight * amount);
                }
            }
        }
    }
    by_pair
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
                self.existing_anti
                    .update_on(&term.topology_key, node, delta);
            }
        }
        if matches_all(&pod.affinity.required, other, cluster) {
            for term in &pod.affinity.required {
                self.affinity.update_on(&term.topology_key, node, delta);
            }
        }
        for term in &pod.anti_affinity.required {
            if selects(term, other, cluster) {
                self.anti.update_on(&term.topology_key, node, delta);
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
                        .any(|t| node.label(&t.topology_key).is_some())
            }
            ClusterChange::NodeUpdated { old, new, .. } => affinity
                .iter()
                .chain(anti)
                .any(|t| old.label(&t.topology_key) != new.label(&t.topology_key)),
            ClusterChange::NamespaceChanged(namespace) => {
                *namespace == &*pod.namespace
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
        let s = filter_state(pod, cluster);
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
            if node.label(&term.topology_key).is_none() {
                return Status::new(Code::UnschedulableAndUnresolvable, AFFINITY_REASON);
            }
            if s.affinity.get_on(&term.topology_key, node) <= 0 {
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
                if s.anti.get_on(&term.topology_key, node) > 0 {
                    return Status::unschedulable(ANTI_AFFINITY_REASON);
                }
            }
        }
        if s.existing_anti.any_positive_on(node) {
            return Status::unschedulable(EXISTING_ANTI_AFFINITY_REASON);
        }
        Status::success()
    }
}

#[derive(Clone)]
struct ScoreState {
    by_pair: Counts,
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
        let by_pair = score_pairs(pod, cluster);
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
        s.by_pair.sum_on(node)
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
