//! The `DoNotSchedule` constraints: kube-scheduler's PreFilter state (the matching pods
//! per domain of the nodes that count, and the smallest count) and the Filter on it.

use rustc_hash::FxHashMap;

use super::{MISSING_LABEL, REASON, indexed_positions, matching_pods, node_counts, owner_hash};
use crate::{
    framework::{CycleContext, Status},
    model::{node::NodeInfo, pod::PodInfo, pod::SpreadConstraint},
    plugins::image_architecture::CompatiblePlatforms,
};

#[derive(Clone)]
struct HardConstraint {
    constraint: SpreadConstraint,
    counts: FxHashMap<String, i64>,
    min: i64,
    self_match: i64,
}

impl HardConstraint {
    /// The global minimum, counting missing domains as empty below `minDomains`.
    fn recompute_min(&mut self) {
        let domains = i32::try_from(self.counts.len()).unwrap_or(i32::MAX);
        self.min = match self.constraint.min_domains {
            Some(min_domains) if domains < min_domains => 0,
            _ => self.counts.values().copied().min().unwrap_or(0),
        };
    }
}

#[derive(Clone)]
pub(super) struct FilterState {
    constraints: Vec<HardConstraint>,
    /// The platforms of the pod's images, which count as its node affinity.
    platforms: Option<CompatiblePlatforms>,
}

/// Whether the node has a value for every constraint's key (only such nodes are domains).
fn has_every_key(constraints: &[&SpreadConstraint], node: &NodeInfo) -> bool {
    constraints
        .iter()
        .all(|c| node.label(&c.topology_key).is_some())
}

impl FilterState {
    /// The state for the pod's hard constraints (`None`: it has none). Each node of the
    /// cluster is read once per constraint, to make its domain; the pods counted come
    /// from the label index when it can answer, else from the nodes that count.
    pub(super) fn new<'a>(
        ctx: &CycleContext<'a>,
        platforms: Option<&CompatiblePlatforms>,
    ) -> Option<Self> {
        let pod = ctx.pod;
        let hard: Vec<&SpreadConstraint> =
            pod.spread_constraints.iter().filter(|c| c.hard).collect();
        if hard.is_empty() {
            return None;
        }
        let owner = owner_hash(pod);
        // The node's domain of the constraint, if the node counts.
        let domain = |constraint: &SpreadConstraint, node: &'a NodeInfo| {
            let value = node.label(&constraint.topology_key)?;
            (has_every_key(&hard, node) && node_counts(pod, constraint, node, platforms))
                .then_some(value)
        };
        let nodes = ctx.cluster.nodes();
        // Counted under the nodes' own label values; owned once per domain at the end.
        let mut counts: Vec<FxHashMap<&str, i64>> = vec![FxHashMap::default(); hard.len()];
        for (constraint, counts) in hard.iter().zip(&mut counts) {
            let indexed = indexed_positions(ctx, constraint);
            // Every node that counts makes its domain one, with pods or without.
            for node in nodes {
                if let Some(value) = domain(constraint, node) {
                    let count = counts.entry(value).or_default();
                    if indexed.is_none() {
                        *count += matching_pods(pod, owner, constraint, node);
                    }
                }
            }
            for node in indexed.into_iter().flatten().filter_map(|at| nodes.get(at)) {
                if let Some(value) = domain(constraint, node) {
                    *counts.entry(value).or_default() += 1;
                }
            }
        }
        let constraints = hard
            .iter()
            .zip(counts)
            .map(|(constraint, counts)| {
                let mut hc = HardConstraint {
                    constraint: (*constraint).clone(),
                    counts: counts
                        .into_iter()
                        .map(|(value, n)| (value.to_owned(), n))
                        .collect(),
                    min: 0,
                    self_match: i64::from(constraint.selector.matches(&pod.labels)),
                };
                hc.recompute_min();
                hc
            })
            .collect();
        Some(FilterState {
            constraints,
            platforms: platforms.cloned(),
        })
    }

    /// Preemption: `other` on `node` is counted (`delta` 1) or not (`-1`).
    pub(super) fn update_with_pod(
        &mut self,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        if other.namespace != pod.namespace || other.deleting {
            return;
        }
        if !self
            .constraints
            .iter()
            .all(|hc| node.label(&hc.constraint.topology_key).is_some())
        {
            return;
        }
        for hc in &mut self.constraints {
            if !hc.constraint.selector.matches(&other.labels)
                || !node_counts(pod, &hc.constraint, node, self.platforms.as_ref())
            {
                continue;
            }
            if let Some(value) = node.label(&hc.constraint.topology_key) {
                match hc.counts.get_mut(value) {
                    Some(count) => *count += delta,
                    None => {
                        hc.counts.insert(value.to_owned(), delta);
                    }
                }
                hc.recompute_min();
            }
        }
    }

    /// kube-scheduler's Filter: the node's domain may not exceed the smallest by more
    /// than `maxSkew` with the pod in it.
    pub(super) fn filter(&self, node: &NodeInfo) -> Status {
        for hc in &self.constraints {
            let Some(value) = node.label(&hc.constraint.topology_key) else {
                return Status::unresolvable(MISSING_LABEL);
            };
            let count = hc.counts.get(value).copied().unwrap_or(0);
            let skew = count + hc.self_match - hc.min;
            if skew > i64::from(hc.constraint.max_skew) {
                return Status::unschedulable(REASON);
            }
        }
        Status::success()
    }
}
