//! `PodTopologySpread`: `DoNotSchedule` constraints filter, `ScheduleAnyway` constraints
//! (and, for pods without constraints, the system defaults) score.

use rustc_hash::FxHashMap;

use super::{
    image_architecture::CompatiblePlatforms,
    node_affinity::{required_matches, selects_nodes},
    taint_toleration::tolerates,
};
use crate::model::controller_counts::controller_hash;
use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
        ScorePlugin, Status, score_each,
    },
    model::{
        cluster::ClusterState,
        node::{NodeInfo, ZONE_LABEL},
        pod::{PodInfo, SpreadConstraint},
    },
};
use multiarch_policy::selectors::LabelSelector;

pub const NAME: &str = "PodTopologySpread";
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";

pub struct PodTopologySpread;

mod domains;
mod hard;
use domains::{DomainCounts, KeyKind, ZoneCounts};
use hard::FilterState;

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::NodeUpdate,
            EventKind::NodeDelete,
            EventKind::AssignedPodAdd,
            EventKind::AssignedPodUpdate,
            EventKind::AssignedPodDelete,
        ]
    }

    /// kube-scheduler's hints: a pod of the namespace that a constraint selects comes,
    /// goes or changes labels; a node with every topology key comes, goes, or changes
    /// those keys or its taints.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        let constraints = &pod.spread_constraints;
        let selected = |other: &PodInfo| {
            other.namespace == pod.namespace
                && constraints
                    .iter()
                    .any(|c| c.selector.matches(&other.labels))
        };
        let has_keys = |node: &NodeInfo| {
            constraints
                .iter()
                .all(|c| node.label(&c.topology_key).is_some())
        };
        let queue = match change {
            ClusterChange::AssignedPodAdded(other) | ClusterChange::AssignedPodDeleted(other) => {
                selected(other)
            }
            ClusterChange::AssignedPodUpdated { old, new } => {
                new.namespace == pod.namespace
                    && constraints
                        .iter()
                        .any(|c| c.selector.matches(&old.labels) != c.selector.matches(&new.labels))
            }
            ClusterChange::NodeAdded(node) | ClusterChange::NodeDeleted(node) => has_keys(node),
            ClusterChange::NodeUpdated { old, new, .. } => {
                has_keys(old) != has_keys(new)
                    || (has_keys(new)
                        && (constraints
                            .iter()
                            .any(|c| old.label(&c.topology_key) != new.label(&c.topology_key))
                            || old.taints != new.taints))
            }
            _ => false,
        };
        QueueingHint::from_bool(queue)
    }
}

/// kube-scheduler's system defaults, applied to pods of a controller that set none.
fn default_constraints(pod: &PodInfo) -> Vec<SpreadConstraint> {
    let constraint = |key: &str, skew| SpreadConstraint {
        max_skew: skew,
        topology_key: key.into(),
        hard: false,
        selector: LabelSelector::default(),
        min_domains: None,
        honor_node_affinity: true,
        honor_node_taints: false,
        same_controller: true,
    };
    match pod.controller_uid {
        Some(_) => vec![constraint(HOSTNAME, 3), constraint(ZONE_LABEL, 5)],
        None => Vec::new(),
    }
}

/// Whether the node counts as a domain of the constraint for this pod.
/// With `nodeAffinityPolicy: Honor` (the default), a node counts only if it is of a
/// platform of the pod's images (`platforms`, from ImageArchitecture's PreFilter): the
/// architecture is the pod's node affinity here, as MTO and gate mode write it for
/// kube-scheduler, which then leaves the other platforms' nodes out of the domains.
fn node_counts(
    pod: &PodInfo,
    constraint: &SpreadConstraint,
    node: &NodeInfo,
    platforms: Option<&CompatiblePlatforms>,
) -> bool {
    (!constraint.honor_node_affinity
        || (required_matches(pod, node) && platforms.is_none_or(|p| p.admits(node))))
        && (!constraint.honor_node_taints
            || node.taints.iter().all(|taint| {
                !(taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                    || pod.tolerations.iter().any(|t| tolerates(t, taint))
            }))
}

/// [`controller_hash`] of the pod's controller, looked up once per cycle.
fn owner_hash(pod: &PodInfo) -> u64 {
    controller_hash(pod.controller_uid.as_deref().unwrap_or_default())
}

/// The positions of the nodes of the pods the constraint selects (one per pod), from the
/// cluster's label index: only those pods are read, not every pod of every node that
/// counts. `None` when the index cannot answer: the selector has no `In` requirement, or
/// the constraint counts the pod's controller (see [`matching_pods`]).
fn indexed_positions(ctx: &CycleContext<'_>, constraint: &SpreadConstraint) -> Option<Vec<usize>> {
    if constraint.same_controller {
        return None;
    }
    let pods = ctx
        .cluster
        .pod_label_index()
        .selected(&ctx.pod.namespace, &constraint.selector)?;
    Some(pods.map(|(_, position)| position).collect())
}

/// Pods on the node that the constraint counts (`owner_hash`: [`owner_hash`] of `pod`).
fn matching_pods(
    pod: &PodInfo,
    owner_hash: u64,
    constraint: &SpreadConstraint,
    node: &NodeInfo,
) -> i64 {
    if constraint.same_controller {
        return i64::from(node.controller_counts.get_hashed(owner_hash));
    }
    let count = node
        .pods
        .iter()
        .filter(|p| {
            !p.deleting && p.namespace == pod.namespace && constraint.selector.matches(&p.labels)
        })
        .count();
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        match FilterState::new(ctx, state.read::<CompatiblePlatforms>()) {
            Some(s) => {
                state.write(s);
                Status::success()
            }
            None => Status::skip(),
        }
    }

    fn add_pod(
        &self,
        ctx: &CycleContext<'_>,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) {
        if let Some(s) = state.read_mut::<FilterState>() {
            s.update_with_pod(ctx.pod, pod, node, 1);
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
            s.update_with_pod(ctx.pod, pod, node, -1);
        }
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, _: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        match state.read::<FilterState>() {
            Some(state) => state.filter(node),
            None => Status::error("PodTopologySpread: PreFilter did not run"),
        }
    }
}

/// `math.Round` (half away from zero) to an integer, as `f64::round` does, without its
/// library call (`round` is no instruction on baseline x86-64, and this runs per node):
/// `x - trunc(x)` is exact.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn round(x: f64) -> i64 {
    let truncated = x as i64;
    let fraction = x - truncated as f64;
    if fraction >= 0.5 {
        truncated.saturating_add(1)
    } else if fraction <= -0.5 {
        truncated.saturating_sub(1)
    } else {
        truncated
    }
}

/// One constraint's part of a node's score: `count × weight + (maxSkew − 1)`, where
/// `count` is the matching pods in the node's domain and `weight` grows with the number
/// of domains. Zone and label terms are worked out per domain once per cycle, so scoring
/// a node is one lookup per constraint.
#[derive(Clone)]
enum Term {
    /// Every node is its own domain: its pods are counted when it is scored.
    Hostname {
        constraint: SpreadConstraint,
        weight: f64,
    },
    /// The node's zone: the term per zone domain, by its position in `zones`.
    Zone {
        zones: ZoneCounts,
        terms: Vec<f64>,
        /// The term of a zone not among the scored nodes' (no pods counted).
        unnoted: f64,
    },
    /// Any other key: the term per value.
    Label {
        key: String,
        terms: FxHashMap<String, f64>,
        unnoted: f64,
    },
}

#[derive(Clone)]
struct ScoreState {
    terms: Vec<Term>,
    /// The keys a node must all have to be scored (a pod's own constraints; not the
    /// defaults): a node without one scores -1.
    required: Option<Keys>,
    /// [`controller_hash`] of the pod's controller (default constraints count its pods).
    owner_hash: u64,
}

/// Topology keys, each with how it is read from a node.
#[derive(Clone)]
struct Keys(Vec<(KeyKind, String)>);

impl Keys {
    fn of(constraints: &[SpreadConstraint]) -> Self {
        Keys(
            constraints
                .iter()
                .map(|c| (KeyKind::of(&c.topology_key), c.topology_key.clone()))
                .collect(),
        )
    }

    /// Whether the node has a value for every key.
    fn all_on(&self, node: &NodeInfo) -> bool {
        self.0
            .iter()
            .all(|(kind, key)| kind.value(key, node).is_some())
    }
}

/// One constraint's term for `count` pods (`weight`: see [`Term`]).
#[allow(clippy::cast_precision_loss)] // pod counts are far below 2^52
fn term(count: i64, weight: f64, constraint: &SpreadConstraint) -> f64 {
    count as f64 * weight + f64::from(constraint.max_skew - 1)
}

impl ScoreState {
    #[inline]
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        if self
            .required
            .as_ref()
            .is_some_and(|keys| !keys.all_on(node))
        {
            return -1;
        }
        // Summed in constraint order, as kube-scheduler does: the float sum is the same.
        let mut score = 0.0;
        for part in &self.terms {
            score += match part {
                Term::Hostname { constraint, weight } => term(
                    matching_pods(pod, self.owner_hash, constraint, node),
                    *weight,
                    constraint,
                ),
                Term::Zone {
                    zones,
                    terms,
                    unnoted,
                } => match &node.zone {
                    Some(zone) => zones.find(zone).map_or(*unnoted, |at| terms[at]),
                    None => continue,
                },
                Term::Label {
                    key,
                    terms,
                    unnoted,
                } => match node.label(key) {
                    Some(value) => terms.get(value).copied().unwrap_or(*unnoted),
                    None => continue,
                },
            };
        }
        round(score)
    }
}

/// The constraint's [`Term`]: its domains among the scored nodes, and the pods counted
/// in each over the nodes of the cluster that count (with every key in `required`, when
/// given, as kube-scheduler's `requireAllTopologies`).
fn spread_term(
    ctx: &CycleContext<'_>,
    constraint: &SpreadConstraint,
    required: Option<&Keys>,
    owner: u64,
    scored: &[&NodeInfo],
    platforms: Option<&CompatiblePlatforms>,
) -> Term {
    let pod = ctx.pod;
    // The pods of the pod's own controller have its images, so they are on nodes of its
    // platforms: the default constraints need not test each node's (and can keep the
    // cluster model's counts per zone).
    let platforms = platforms.filter(|_| !constraint.same_controller);
    // `ln(domains + 2)`, so constraints over many domains weigh more.
    #[allow(clippy::cast_precision_loss)] // domain counts are small
    let weight_of = |domains: usize| ((domains + 2) as f64).ln();
    let kind = KeyKind::of(&constraint.topology_key);
    if kind == KeyKind::Hostname {
        return Term::Hostname {
            constraint: constraint.clone(),
            weight: weight_of(scored.len()),
        };
    }
    let mut domains = DomainCounts::new(kind);
    let noted = scored
        .iter()
        .filter(|node| domains.note(&constraint.topology_key, node))
        .count();
    if !domains.is_empty() {
        // The cluster model counts the controller's pods on every node of a zone: the
        // count wanted when every node counts (no key required of them, no node selection
        // or taints to honour).
        let every_node_counts = required.is_none()
            && !constraint.honor_node_taints
            && !(constraint.honor_node_affinity && selects_nodes(pod));
        if constraint.same_controller && kind == KeyKind::Zone && every_node_counts {
            // Maintained by the cluster model: no walk over every node.
            let uid = pod.controller_uid.as_deref().unwrap_or_default();
            if let Some(zones) = ctx.cluster.controller_zone_counts(uid) {
                for (zone, count) in domains.named_mut() {
                    *count = i64::from(zones.get(zone).copied().unwrap_or(0));
                }
            }
        } else {
            let counts = |node: &NodeInfo| {
                required.is_none_or(|keys| keys.all_on(node))
                    && node_counts(pod, constraint, node, platforms)
            };
            let nodes = ctx.cluster.nodes();
            match indexed_positions(ctx, constraint) {
                Some(positions) => {
                    for node in positions.into_iter().filter_map(|at| nodes.get(at)) {
                        if counts(node)
                            && let Some(count) = domains.count_mut(&constraint.topology_key, node)
                        {
                            *count += 1;
                        }
                    }
                }
                None => {
                    for node in nodes.iter().filter(|node| counts(node)) {
                        if let Some(count) = domains.count_mut(&constraint.topology_key, node) {
                            *count += matching_pods(pod, owner, constraint, node);
                        }
                    }
                }
            }
        }
    }
    let weight = weight_of(noted);
    let unnoted = term(0, weight, constraint);
    match domains {
        DomainCounts::Label(counts) => Term::Label {
            key: constraint.topology_key.clone(),
            terms: counts
                .into_iter()
                .map(|(value, count)| (value, term(count, weight, constraint)))
                .collect(),
            unnoted,
        },
        DomainCounts::Zone(zones) => Term::Zone {
            terms: zones
                .counts()
                .map(|count| term(count, weight, constraint))
                .collect(),
            zones,
            unnoted,
        },
        DomainCounts::Hostname => Term::Hostname {
            constraint: constraint.clone(),
            weight,
        },
    }
}

impl ScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        ctx: &CycleContext<'_>,
        state: &mut CycleState,
        nodes: &[&NodeInfo],
    ) -> Status {
        let pod = ctx.pod;
        let (constraints, require_all_keys) = if pod.spread_constraints.is_empty() {
            (default_constraints(pod), false)
        } else {
            (
                pod.spread_constraints
                    .iter()
                    .filter(|c| !c.hard)
                    .cloned()
                    .collect(),
                true,
            )
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let required = require_all_keys.then(|| Keys::of(&constraints));
        let kept: Vec<&NodeInfo>;
        let scored: &[&NodeInfo] = match &required {
            Some(keys) => {
                kept = nodes.iter().copied().filter(|n| keys.all_on(n)).collect();
                &kept
            }
            None => nodes,
        };
        let owner = owner_hash(pod);
        let platforms = state.read::<CompatiblePlatforms>();
        let terms = constraints
            .iter()
            .map(|c| spread_term(ctx, c, required.as_ref(), owner, scored, platforms))
            .collect();
        state.write(ScoreState {
            terms,
            required,
            owner_hash: owner,
        });
        Status::success()
    }

    /// Fewer matching pods in the node's domains is better; `-1` marks an ignored node.
    fn score(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64 {
        state
            .read::<ScoreState>()
            .map_or(0, |state| state.score(ctx.pod, node))
    }

    fn score_all(
        &self,
        ctx: &CycleContext<'_>,
        state: &CycleState,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) {
        let state = state.read::<ScoreState>();
        score_each(nodes, out, |node| {
            state.map_or(0, |state| state.score(ctx.pod, node))
        });
    }

    fn normalize(&self, _: &CycleContext<'_>, _: &CycleState, scores: &mut [i64]) {
        let valid = scores.iter().copied().filter(|s| *s >= 0);
        let max = valid.clone().max().unwrap_or(0);
        let min = valid.min().unwrap_or(0);
        for s in scores.iter_mut() {
            *s = if *s < 0 {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *s) / max
            };
        }
    }
}

#[cfg(test)]
mod tests;
