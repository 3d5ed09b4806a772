//! `PodTopologySpread`: `DoNotSchedule` constraints filter, `ScheduleAnyway` constraints
//! (and, for pods without constraints, the system defaults) score.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::{node_affinity::required_matches, taint_toleration::tolerates};
use crate::{
    framework::{
        CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
        ScorePlugin, Status,
    },
    model::{
        cluster::ClusterEvent,
        node::{NodeInfo, ZONE_LABEL},
        pod::{PodInfo, SpreadConstraint},
        selectors::LabelSelector,
    },
};

pub const NAME: &str = "PodTopologySpread";
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";

pub struct PodTopologySpread;

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::NodeAdded,
            ClusterEvent::NodeChanged,
            ClusterEvent::AssignedPodAdded,
            ClusterEvent::AssignedPodDeleted,
        ]
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
fn node_counts(pod: &PodInfo, constraint: &SpreadConstraint, node: &NodeInfo) -> bool {
    (!constraint.honor_node_affinity || required_matches(pod, node))
        && (!constraint.honor_node_taints
            || node.taints.iter().all(|taint| {
                !(taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                    || pod.tolerations.iter().any(|t| tolerates(t, taint))
            }))
}

/// Pods on the node that the constraint counts.
fn matching_pods(pod: &PodInfo, constraint: &SpreadConstraint, node: &NodeInfo) -> i64 {
    if constraint.same_controller {
        let owner = pod.controller_uid.as_deref().unwrap_or_default();
        return i64::from(node.controller_counts.get(owner).copied().unwrap_or(0));
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

struct HardConstraint {
    constraint: SpreadConstraint,
    counts: HashMap<String, i64>,
    min: i64,
    self_match: i64,
}

struct FilterState {
    constraints: Vec<HardConstraint>,
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        let pod = ctx.pod;
        let hard: Vec<&SpreadConstraint> =
            pod.spread_constraints.iter().filter(|c| c.hard).collect();
        if hard.is_empty() {
            return Status::skip();
        }
        let mut constraints: Vec<HardConstraint> = hard
            .iter()
            .map(|c| HardConstraint {
                constraint: (*c).clone(),
                counts: HashMap::new(),
                min: 0,
                self_match: i64::from(c.selector.matches(&pod.labels)),
            })
            .collect();
        for node in ctx.cluster.nodes() {
            // Only nodes with every topology key of the pod are domains.
            if !hard
                .iter()
                .all(|c| node.labels.contains_key(&c.topology_key))
            {
                continue;
            }
            for hc in &mut constraints {
                if !node_counts(pod, &hc.constraint, node) {
                    continue;
                }
                let Some(value) = node.labels.get(&hc.constraint.topology_key) else {
                    continue;
                };
                *hc.counts.entry(value.clone()).or_default() +=
                    matching_pods(pod, &hc.constraint, node);
            }
        }
        for hc in &mut constraints {
            let domains = i32::try_from(hc.counts.len()).unwrap_or(i32::MAX);
            hc.min = match hc.constraint.min_domains {
                // Fewer domains than required: the global minimum counts as 0.
                Some(min_domains) if domains < min_domains => 0,
                _ => hc.counts.values().copied().min().unwrap_or(0),
            };
        }
        state.write(FilterState { constraints });
        Status::success()
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, _: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(state) = state.read::<FilterState>() else {
            return Status::error("PodTopologySpread: PreFilter did not run");
        };
        for hc in &state.constraints {
            let Some(value) = node.labels.get(&hc.constraint.topology_key) else {
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

struct ScoreState {
    constraints: Vec<SpreadConstraint>,
    /// Per constraint (non-hostname keys): pods per domain.
    counts: Vec<FxHashMap<String, i64>>,
    /// Per constraint: `ln(domains + 2)`, so constraints over many domains weigh more.
    weights: Vec<f64>,
    /// Per constraint: how its key is read.
    kinds: Vec<KeyKind>,
    require_all_keys: bool,
}

/// How a constraint's key is read from a node, decided once per cycle rather than by
/// comparing the key per node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// Every node is its own domain.
    Hostname,
    /// Read from the node's cached zone.
    Zone,
    Label,
}

fn key_kind(constraint: &SpreadConstraint) -> KeyKind {
    match constraint.topology_key.as_str() {
        HOSTNAME => KeyKind::Hostname,
        ZONE_LABEL => KeyKind::Zone,
        _ => KeyKind::Label,
    }
}

fn value_of<'n>(kind: KeyKind, key: &str, node: &'n NodeInfo) -> Option<&'n str> {
    match kind {
        KeyKind::Zone => node.zone.as_deref(),
        KeyKind::Hostname | KeyKind::Label => node.labels.get(key).map(String::as_str),
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
        let mut counts: Vec<FxHashMap<String, i64>> = vec![FxHashMap::default(); constraints.len()];
        let mut domains: Vec<usize> = vec![0; constraints.len()];
        let kinds: Vec<KeyKind> = constraints.iter().map(key_kind).collect();
        for node in nodes {
            if require_all_keys
                && !constraints
                    .iter()
                    .zip(&kinds)
                    .all(|(c, kind)| value_of(*kind, &c.topology_key, node).is_some())
            {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if kinds[i] == KeyKind::Hostname {
                    domains[i] += 1;
                } else if let Some(value) = value_of(kinds[i], &c.topology_key, node)
                    && !counts[i].contains_key(value)
                {
                    counts[i].insert(value.to_owned(), 0);
                    domains[i] += 1;
                }
            }
        }
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key == HOSTNAME || counts[i].is_empty() {
                continue;
            }
            if c.same_controller && c.topology_key == ZONE_LABEL {
                // Maintained by the cluster model: no walk over every node.
                let owner = pod.controller_uid.as_deref().unwrap_or_default();
                if let Some(zones) = ctx.cluster.controller_zone_counts(owner) {
                    for (zone, count) in counts[i].iter_mut() {
                        *count = i64::from(zones.get(zone).copied().unwrap_or(0));
                    }
                }
                continue;
            }
            for node in ctx.cluster.nodes() {
                if !node_counts(pod, c, node) {
                    continue;
                }
                if let Some(value) = value_of(kinds[i], &c.topology_key, node)
                    && let Some(count) = counts[i].get_mut(value)
                {
                    *count += matching_pods(pod, c, node);
                }
            }
        }
        #[allow(clippy::cast_precision_loss)] // domain counts are small
        let weights = domains.iter().map(|d| ((*d + 2) as f64).ln()).collect();
        state.write(ScoreState {
            constraints,
            counts,
            weights,
            kinds,
            require_all_keys,
        });
        Status::success()
    }

    /// Fewer matching pods in the node's domains is better; `-1` marks an ignored node.
    fn score(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64 {
        let Some(state) = state.read::<ScoreState>() else {
            return 0;
        };
        if state.require_all_keys
            && !state
                .constraints
                .iter()
                .zip(&state.kinds)
                .all(|(c, kind)| value_of(*kind, &c.topology_key, node).is_some())
        {
            return -1;
        }
        let mut score = 0.0;
        for (i, c) in state.constraints.iter().enumerate() {
            let kind = state.kinds[i];
            let count = if kind == KeyKind::Hostname {
                matching_pods(ctx.pod, c, node)
            } else {
                match value_of(kind, &c.topology_key, node) {
                    Some(value) => state.counts[i].get(value).copied().unwrap_or(0),
                    None => continue,
                }
            };
            #[allow(clippy::cast_precision_loss)]
            let weighted = count as f64 * state.weights[i] + f64::from(c.max_skew - 1);
            score += weighted;
        }
        #[allow(clippy::cast_possible_truncation)]
        let rounded = score.round() as i64;
        rounded
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
mod tests {
    use std::sync::Arc;

    use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

    use super::*;
    use crate::{
        framework::Code,
        model::{cluster::ClusterState, node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    fn constraint(key: &str, skew: i32, hard: bool) -> core::TopologySpreadConstraint {
        core::TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.into(),
            when_unsatisfiable: if hard {
                "DoNotSchedule"
            } else {
                "ScheduleAnyway"
            }
            .into(),
            label_selector: Some(meta::LabelSelector {
                match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                match_expressions: None,
            }),
            ..Default::default()
        }
    }

    /// Zones a (2 web pods), b (1), c (0); node `nozone` has no zone label.
    fn cluster() -> ClusterState {
        let mut cluster = ClusterState::new();
        for (node, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")] {
            cluster.upsert_node(NodeBuilder::new(node, "amd64").label("zone", zone).info());
        }
        cluster.upsert_node(NodeBuilder::new("nozone", "amd64").info());
        for (pod, node) in [("w1", "a1"), ("w2", "a2"), ("w3", "b1")] {
            cluster.add_assigned_pod(Arc::new(
                PodBuilder::new("ns", pod)
                    .label("app", "web")
                    .node(node)
                    .info(),
            ));
        }
        // Another namespace and another app never count.
        cluster.add_assigned_pod(Arc::new(
            PodBuilder::new("other", "x")
                .label("app", "web")
                .node("c1")
                .info(),
        ));
        cluster.add_assigned_pod(Arc::new(
            PodBuilder::new("ns", "db")
                .label("app", "db")
                .node("c1")
                .info(),
        ));
        cluster
    }

    fn filter_all(pod: PodInfo, cluster: ClusterState) -> Vec<(String, Code)> {
        let f = Fixture::new(pod).with_cluster(cluster);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(PodTopologySpread.pre_filter(&ctx, &mut state).is_success());
        f.cluster
            .nodes()
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    PodTopologySpread.filter(&ctx, &state, n).code,
                )
            })
            .collect()
    }

    #[test]
    fn hard_constraint_bounds_the_skew() {
        let pod = PodBuilder::new("ns", "new")
            .label("app", "web")
            .spread(constraint("zone", 1, true))
            .info();
        let result = filter_all(pod, cluster());
        // min is 0 (zone c): a (2+1-0=3) and b (1+1=2) exceed skew 1; c fits.
        assert_eq!(
            result,
            [
                ("a1".to_owned(), Code::Unschedulable),
                ("a2".to_owned(), Code::Unschedulable),
                ("b1".to_owned(), Code::Unschedulable),
                ("c1".to_owned(), Code::Success),
                ("nozone".to_owned(), Code::UnschedulableAndUnresolvable),
            ]
        );
        let pod = PodBuilder::new("ns", "new")
            .label("app", "web")
            .spread(constraint("zone", 2, true))
            .info();
        let fits: Vec<String> = filter_all(pod, cluster())
            .into_iter()
            .filter(|(_, c)| *c == Code::Success)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(fits, ["b1", "c1"]);
    }

    #[test]
    fn a_pod_that_does_not_match_its_own_selector_adds_nothing() {
        let pod = PodBuilder::new("ns", "new")
            .label("app", "other")
            .spread(constraint("zone", 2, true))
            .info();
        let fits: Vec<String> = filter_all(pod, cluster())
            .into_iter()
            .filter(|(_, c)| *c == Code::Success)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(fits, ["a1", "a2", "b1", "c1"]);
    }

    #[test]
    fn min_domains_treats_missing_domains_as_empty() {
        let mut c = constraint("zone", 1, true);
        c.min_domains = Some(5);
        // Only zone a and b exist for nodeAffinity-matching nodes below.
        let pod = PodBuilder::new("ns", "new")
            .label("app", "web")
            .spread(c)
            .info();
        let mut cluster = cluster();
        cluster.remove_node("c1");
        let fits: Vec<String> = filter_all(pod, cluster)
            .into_iter()
            .filter(|(_, c)| *c == Code::Success)
            .map(|(n, _)| n)
            .collect();
        // With min 0, b (1+1-0=2) exceeds skew 1 as well.
        assert!(fits.is_empty(), "{fits:?}");
    }

    #[test]
    fn soft_constraints_score_emptier_domains_higher() {
        let pod = PodBuilder::new("ns", "new")
            .label("app", "web")
            .spread(constraint("zone", 1, false))
            .info();
        let f = Fixture::new(pod).with_cluster(cluster());
        let ctx = f.ctx();
        let nodes: Vec<&NodeInfo> = f.cluster.nodes().iter().collect();
        let mut state = CycleState::new();
        assert!(
            PodTopologySpread
                .pre_score(&ctx, &mut state, &nodes)
                .is_success()
        );
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| PodTopologySpread.score(&ctx, &state, n))
            .collect();
        PodTopologySpread.normalize(&ctx, &state, &mut scores);
        let by_node: HashMap<&str, i64> =
            nodes.iter().map(|n| n.name.as_str()).zip(scores).collect();
        assert!(by_node["c1"] > by_node["b1"]);
        assert!(by_node["b1"] > by_node["a1"]);
        assert_eq!(by_node["nozone"], 0);
    }

    #[test]
    fn pods_of_a_controller_spread_by_default() {
        let mut cluster = ClusterState::new();
        for n in ["n1", "n2"] {
            cluster.upsert_node(NodeBuilder::new(n, "amd64").info());
        }
        cluster.add_assigned_pod(Arc::new(
            PodBuilder::new("ns", "r1")
                .owner("ReplicaSet", "rs")
                .node("n1")
                .info(),
        ));
        let pod = PodBuilder::new("ns", "r2").owner("ReplicaSet", "rs").info();
        let f = Fixture::new(pod).with_cluster(cluster);
        let ctx = f.ctx();
        let nodes: Vec<&NodeInfo> = f.cluster.nodes().iter().collect();
        let mut state = CycleState::new();
        assert!(
            PodTopologySpread
                .pre_score(&ctx, &mut state, &nodes)
                .is_success()
        );
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| PodTopologySpread.score(&ctx, &state, n))
            .collect();
        PodTopologySpread.normalize(&ctx, &state, &mut scores);
        assert!(scores[1] > scores[0], "{scores:?}");

        let lone = Fixture::new(PodBuilder::new("ns", "lone").info());
        assert_eq!(
            PodTopologySpread
                .pre_score(&lone.ctx(), &mut CycleState::new(), &[])
                .code,
            Code::Skip
        );
    }
}
