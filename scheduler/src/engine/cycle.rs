//! One scheduling cycle: PreFilter (which may narrow the candidate nodes), Filter in
//! parallel over a rotating window of nodes (adaptive `percentageOfNodesToScore`), with
//! the pods nominated to a node counted there, PreScore, Score, normalize, weight, pick
//! with a random tie-break. Reads the cluster only; the caller assumes and binds.

use multiarch_plugins::model::storage::VolumeBindingPlan;
use multiarch_plugins::{
    framework::{Code, CycleContext, CycleState, FilterPlugin, PreFilterPlugin, Status},
    model::node::NodeInfo,
    plugins::{image_architecture::CompatiblePlatforms, volume_binding},
    profile::Profile,
};
use rand::{Rng, rngs::SmallRng};
use rayon::prelude::*;
use std::sync::Arc;

use super::diagnosis::Diagnosis;

mod walk;
use walk::{Candidates, filter_parallel, filter_sequential};

/// Filtering and scoring fan out to the thread pool only when a cycle has this much
/// work: below it, waking the pool (a futex wake and a sleep per fan-out, several per
/// cycle) costs more than it saves. Measured with `simulate` on 2 cores, one thread
/// against fanned out from 1,000: 130,000 nodes scoring 1,300 (1 %) 6,359 against 4,011
/// pods/s, 6,500 (the adaptive 5 %) 1,432 against 1,314, 13,000 (10 %) 735 against 802,
/// 32,500 (25 %) 256 against 335; 15,000 nodes scoring 1,500 11,017 against 5,238. The
/// crossover lies between 6,500 and 13,000 nodes here; machines with more cores were not
/// measured.
const PARALLEL_FILTER_MIN_FEASIBLE: usize = 10_000;
const PARALLEL_SCORE_MIN_NODES: usize = 10_000;
const SCORE_CHUNK: usize = 256;
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;

/// kube-scheduler's `numFeasibleNodesToFind`.
pub fn num_feasible_nodes_to_find(nodes: usize, percentage: u32) -> usize {
    if nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return nodes;
    }
    let percentage = if percentage == 0 {
        // Adaptive: 50% at small sizes, down to 5% for 5,625 nodes and more.
        let adaptive = 50 - i64::try_from(nodes / 125).unwrap_or(i64::MAX);
        u32::try_from(adaptive.max(5)).unwrap_or(5)
    } else {
        percentage.min(100)
    };
    let count = nodes * percentage as usize / 100;
    count.max(MIN_FEASIBLE_NODES_TO_FIND).min(nodes)
}

#[derive(Clone, Debug)]
pub struct NodeChoice {
    pub node: usize,
    pub feasible: usize,
    pub evaluated: usize,
    pub compatible: Option<CompatiblePlatforms>,
    /// Volumes to bind and claims to provision on the node before the pod is bound.
    pub volumes: VolumeBindingPlan,
}

/// Where the next cycle starts looking, so every node is considered over time.
#[derive(Debug, Default)]
pub struct Rotation(usize);

/// A cycle after PreFilter: the state the filters read and the filters that run.
pub struct Cycle<'a> {
    profile: &'a Profile,
    pub ctx: &'a CycleContext<'a>,
    pub state: CycleState,
    /// Resolved once per cycle: the filters run per node, and each `Arc` would cost a
    /// pointer chase and an offset computation per node.
    filters: Vec<&'a dyn FilterPlugin>,
    /// PreFilter plugins that did not skip: they adjust the state when pods are added or
    /// removed (preemption, nominated pods).
    extensions: Vec<&'a Arc<dyn PreFilterPlugin>>,
    /// Node indexes PreFilter narrowed the candidates to, and the plugins that did.
    eligible: Option<(Vec<usize>, Vec<&'static str>)>,
    /// Every node that can pass the filters whose index knows it (a shortcut that changes
    /// no outcome; see `PreFilterPlugin::candidate_nodes`).
    shortcut: Option<Arc<[usize]>>,
}

impl<'a> Cycle<'a> {
    /// Runs PreFilter; a rejection (or an error) is the cycle's answer for every node.
    pub fn pre_filter(
        profile: &'a Profile,
        ctx: &'a CycleContext<'a>,
    ) -> Result<Self, Box<Diagnosis>> {
        let nodes = ctx.cluster.nodes();
        let mut diagnosis = Diagnosis {
            num_nodes: nodes.len(),
            ..Diagnosis::default()
        };
        let mut state = CycleState::new();
        // A handful of names: a vector beats hashing them.
        let mut skipped: Vec<&'static str> = Vec::new();
        let mut extensions = Vec::new();
        let mut eligible: Option<Vec<String>> = None;
        let mut narrowing: Vec<&'static str> = Vec::new();
        let mut shortcut: Option<Arc<[usize]>> = None;
        for plugin in &profile.pre_filters {
            let status = plugin.pre_filter(ctx, &mut state);
            match status.code {
                Code::Success => {
                    extensions.push(plugin);
                    if let Some(list) = plugin.candidate_nodes(ctx, &state) {
                        shortcut = Some(match shortcut {
                            None => list,
                            Some(have) => intersect(&have, &list).into(),
                        });
                    }
                    if let Some(names) = plugin.eligible_nodes(ctx, &state) {
                        narrowing.push(plugin.name());
                        eligible = Some(match eligible {
                            None => names,
                            Some(have) => have.into_iter().filter(|n| names.contains(n)).collect(),
                        });
                        if eligible.as_ref().is_some_and(Vec::is_empty) {
                            let message = if narrowing.len() == 1 {
                                format!("node(s) didn't satisfy plugin {}", narrowing[0])
                            } else {
                                format!(
                                    "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                                    narrowing.join(" ")
                                )
                            };
                            diagnosis.pre_filter_message = Some(message);
                            diagnosis.rejectors.extend(narrowing.iter().copied());
                            return Err(Box::new(diagnosis));
                        }
                    }
                }
                Code::Skip => skipped.push(plugin.name()),
                Code::Error => {
                    diagnosis.error = Some(format!("{}: {}", plugin.name(), status.message()));
                    return Err(Box::new(diagnosis));
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    diagnosis.pre_filter_message = Some(status.message());
                    diagnosis.rejectors.insert(plugin.name());
                    diagnosis.retry_with_backoff = status.retry_with_backoff;
                    return Err(Box::new(diagnosis));
                }
            }
        }
        let filters = profile
            .filters
            .iter()
            .filter(|f| !skipped.contains(&f.name()))
            .map(|f| &**f)
            .collect();
        let eligible = eligible.map(|names| {
            let mut indexes: Vec<usize> = names
                .iter()
                .filter_map(|n| ctx.cluster.node_index(n))
                .collect();
            indexes.sort_unstable();
            (indexes, narrowing)
        });
        Ok(Cycle {
            profile,
            ctx,
            state,
            filters,
            extensions,
            eligible,
            shortcut,
        })
    }

    /// The filters on one node with `state`; `None` when it fits.
    pub fn filter_node(&self, state: &CycleState, node: &NodeInfo) -> Option<Status> {
        for filter in &self.filters {
            let status = filter.filter(self.ctx, state, node);
            if !status.is_success() {
                return Some(status.with_plugin(filter.name()));
            }
        }
        None
    }

    /// kube-scheduler's `RunFilterPluginsWithNominatedPods`: the node must fit with the
    /// pods nominated to it (of at least the pod's priority) and, if any, without them.
    pub fn filter_with_nominated(&self, state: &CycleState, node: &NodeInfo) -> Option<Status> {
        if self.ctx.nominated.is_empty() {
            return self.filter_node(state, node);
        }
        let mut nominated = self
            .ctx
            .nominated
            .counted_for(self.ctx.pod, &node.name)
            .filter(|p| p.node_name.is_none())
            .peekable();
        if nominated.peek().is_none() {
            return self.filter_node(state, node);
        }
        let mut with_state = state.clone();
        let mut with_node = node.clone();
        for pod in nominated {
            with_node.add_pod(pod.clone());
            for plugin in &self.extensions {
                plugin.add_pod(self.ctx, &mut with_state, pod, &with_node);
            }
        }
        if let Some(status) = self.filter_node(&with_state, &with_node) {
            return Some(status);
        }
        self.filter_node(state, node)
    }

    /// Adds `pod` to `node` (a copy) and to `state`, as preemption does with nominated pods.
    pub fn add_pod(
        &self,
        state: &mut CycleState,
        node: &mut NodeInfo,
        pod: &Arc<multiarch_plugins::model::pod::PodInfo>,
    ) {
        node.add_pod(pod.clone());
        for plugin in &self.extensions {
            plugin.add_pod(self.ctx, state, pod, node);
        }
    }

    /// Removes `pod` from `node` (a copy) and from `state` (a preemption victim).
    pub fn remove_pod(
        &self,
        state: &mut CycleState,
        node: &mut NodeInfo,
        pod: &multiarch_plugins::model::pod::PodInfo,
    ) {
        node.remove_pod(&pod.uid);
        for plugin in &self.extensions {
            plugin.remove_pod(self.ctx, state, pod, node);
        }
    }

    /// Filters and scores; the chosen node, or why none fits. A node the pod is nominated
    /// to is tried first, alone (kube-scheduler's `evaluateNominatedNode`).
    pub fn run(
        &mut self,
        rotation: &mut Rotation,
        rng: &mut SmallRng,
        nominated_node: Option<&str>,
    ) -> Result<NodeChoice, Box<Diagnosis>> {
        let ctx = self.ctx;
        let nodes = ctx.cluster.nodes();
        if let Some(i) = nominated_node.and_then(|n| ctx.cluster.node_index(n))
            && self
                .eligible
                .as_ref()
                .is_none_or(|(e, _)| e.binary_search(&i).is_ok())
            && self.filter_with_nominated(&self.state, &nodes[i]).is_none()
        {
            return Ok(self.choice(i, 1, 1));
        }

        // With `eligible`, kube-scheduler's rules: the narrowed list is all there is. With
        // only a shortcut, the cycle must find what a walk over every node would: the
        // same number of feasible nodes, from the same place, and the same diagnosis.
        let shortcut = match (&self.eligible, &self.shortcut) {
            (None, Some(list)) => Some(list.clone()),
            _ => None,
        };
        let candidates = self.candidates();
        let mut diagnosis = Diagnosis {
            num_nodes: nodes.len(),
            ..Diagnosis::default()
        };
        if let Some((_, plugins)) = &self.eligible {
            let absent = nodes.len() - candidates.len();
            if absent > 0 {
                diagnosis.reasons.insert(
                    format!("node(s) didn't satisfy plugin(s) [{}]", plugins.join(" ")),
                    absent,
                );
                diagnosis.rejectors.extend(plugins.iter().copied());
            }
        }
        let n = candidates.len();
        let check = |i: usize| self.filter_with_nominated(&self.state, &nodes[i]);
        let (mut feasible, mut failures) = (Vec::new(), Vec::new());
        let mut evaluated = 0;
        if n > 0 {
            let (target, start) = match &shortcut {
                Some(list) => (
                    num_feasible_nodes_to_find(
                        nodes.len(),
                        self.profile.percentage_of_nodes_to_score,
                    ),
                    list.partition_point(|&i| i < rotation.0 % nodes.len()) % n,
                ),
                None => (
                    num_feasible_nodes_to_find(n, self.profile.percentage_of_nodes_to_score),
                    rotation.0 % n,
                ),
            };
            (feasible, failures, evaluated) = if target < PARALLEL_FILTER_MIN_FEASIBLE {
                filter_sequential(candidates, start, target, &check)
            } else {
                filter_parallel(candidates, start, target, &check)
            };
            rotation.0 = match &shortcut {
                // A full walk would have stopped at the same node (the ones skipped fail),
                // or, finding too few, gone round to where it started.
                Some(list) if feasible.len() >= target => list[(start + evaluated - 1) % n] + 1,
                Some(_) => rotation.0,
                None => (start + evaluated) % n,
            };
        }
        if feasible.is_empty() && shortcut.is_some() {
            // Fits nowhere: every node's own reason, as the walk would have found them.
            let all = Candidates::All(nodes.len());
            (_, failures, _) = if nodes.len() < PARALLEL_FILTER_MIN_FEASIBLE {
                filter_sequential(all, 0, nodes.len(), &check)
            } else {
                filter_parallel(all, 0, nodes.len(), &check)
            };
        } else if n == 0 {
            return Err(Box::new(diagnosis));
        }

        if feasible.is_empty() {
            for (node, status) in failures {
                if status.code == Code::Error {
                    diagnosis.error = Some(format!("{}: {}", status.plugin, status.message()));
                }
                if status.code == Code::Unschedulable {
                    diagnosis.preemption_candidates.push(node);
                }
                diagnosis.rejectors.insert(status.plugin);
                for reason in &status.reasons {
                    *diagnosis
                        .reasons
                        .entry(reason.as_str().to_owned())
                        .or_default() += 1;
                }
            }
            diagnosis.preemption_candidates.sort_unstable();
            return Err(Box::new(diagnosis));
        }

        let node = self.best(&feasible, rng);
        Ok(self.choice(node, feasible.len(), evaluated))
    }

    /// The nodes to filter: those PreFilter narrowed the cycle to, else those an index
    /// says can pass (a shortcut that changes no outcome), else every node.
    fn candidates(&self) -> Candidates<'_> {
        match (&self.eligible, &self.shortcut) {
            (Some((indexes, _)), _) => Candidates::Some(indexes),
            (None, Some(list)) => Candidates::Some(list),
            (None, None) => Candidates::All(self.ctx.cluster.nodes().len()),
        }
    }

    /// The best-scoring of the feasible nodes (the only one needs no scoring).
    fn best(&mut self, feasible: &[usize], rng: &mut SmallRng) -> usize {
        if feasible.len() == 1 {
            return feasible[0];
        }
        let nodes = self.ctx.cluster.nodes();
        let fan_out = fan_out(feasible);
        let totals = score(
            self.profile,
            self.ctx,
            &mut self.state,
            nodes,
            feasible,
            fan_out,
        );
        pick(&totals, feasible, rng)
    }

    fn choice(&self, node: usize, feasible: usize, evaluated: usize) -> NodeChoice {
        NodeChoice {
            node,
            feasible,
            evaluated,
            compatible: self.state.read::<CompatiblePlatforms>().cloned(),
            volumes: volume_binding::binding_plan(
                self.ctx,
                &self.state,
                &self.ctx.cluster.nodes()[node],
            ),
        }
    }
}

/// PreFilter, then the rest of the cycle.
pub fn run(
    profile: &Profile,
    ctx: &CycleContext<'_>,
    rotation: &mut Rotation,
    rng: &mut SmallRng,
) -> Result<NodeChoice, Box<Diagnosis>> {
    if ctx.cluster.nodes().is_empty() {
        return Err(Box::default());
    }
    Cycle::pre_filter(profile, ctx)?.run(rotation, rng, None)
}

/// Every feasible node with its weighted total, as a cycle scoring all of them (100 %
/// of the nodes) weighs them: what a placement-quality audit compares a cycle's choice
/// with. Touches neither the rotation nor the random tie-break, so the audited run
/// places every pod where it would have unaudited. `None` when PreFilter rejects.
pub fn every_feasible_score(
    profile: &Profile,
    ctx: &CycleContext<'_>,
) -> Option<Vec<(usize, i64)>> {
    let mut cycle = Cycle::pre_filter(profile, ctx).ok()?;
    let nodes = ctx.cluster.nodes();
    let feasible = {
        let candidates = cycle.candidates();
        let check = |i: usize| cycle.filter_with_nominated(&cycle.state, &nodes[i]);
        filter_sequential(candidates, 0, candidates.len(), &check).0
    };
    let totals = score(
        profile,
        ctx,
        &mut cycle.state,
        nodes,
        &feasible,
        fan_out(&feasible),
    );
    Some(feasible.into_iter().zip(totals).collect())
}

/// The positions in both sorted lists.
fn intersect(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter()
        .copied()
        .filter(|i| b.binary_search(i).is_ok())
        .collect()
}

/// Whether scoring these nodes is worth waking the thread pool for.
fn fan_out(feasible: &[usize]) -> bool {
    feasible.len() >= PARALLEL_SCORE_MIN_NODES
}

/// Weighted sum of normalized scores per feasible node; with `fan_out`, each plugin
/// scores chunks of them on the thread pool (the same totals either way).
fn score(
    profile: &Profile,
    ctx: &CycleContext<'_>,
    state: &mut CycleState,
    nodes: &[NodeInfo],
    feasible: &[usize],
    fan_out: bool,
) -> Vec<i64> {
    let feasible_nodes: Vec<&NodeInfo> = feasible.iter().map(|&i| &nodes[i]).collect();
    let scorers: Vec<_> = profile
        .scorers
        .iter()
        .filter(|s| s.plugin.pre_score(ctx, state, &feasible_nodes).code != Code::Skip)
        .collect();
    let mut totals = vec![0i64; feasible.len()];
    let mut column = vec![0i64; feasible.len()];
    let state = &*state;
    // One plugin over every node at a time: one dynamic call per plugin, not per node.
    for s in &scorers {
        if fan_out {
            column
                .par_chunks_mut(SCORE_CHUNK)
                .zip(feasible_nodes.par_chunks(SCORE_CHUNK))
                .for_each(|(out, nodes)| s.plugin.score_all(ctx, state, nodes, out));
        } else {
            s.plugin.score_all(ctx, state, &feasible_nodes, &mut column);
        }
        s.plugin.normalize(ctx, state, &mut column);
        for (total, value) in totals.iter_mut().zip(&column) {
            *total += value * s.weight;
        }
    }
    totals
}

/// The highest total; among equals, one chosen uniformly at random.
fn pick(totals: &[i64], feasible: &[usize], rng: &mut SmallRng) -> usize {
    let mut best = feasible[0];
    let mut best_score = i64::MIN;
    let mut ties = 0u32;
    for (&node, &score) in feasible.iter().zip(totals) {
        if score > best_score {
            best = node;
            best_score = score;
            ties = 1;
        } else if score == best_score {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = node;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests;
