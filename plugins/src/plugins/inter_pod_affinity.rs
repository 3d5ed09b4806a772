//! `InterPodAffinity`: required pod affinity and anti-affinity (including the
//! anti-affinity of pods already running, which is symmetric) filter; preferred terms and
//! existing pods' terms score.

use std::collections::HashMap;

use crate::{
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
        ScorePlugin, Status,
    },
    model::{
        cluster::{ClusterEvent, ClusterState},
        node::NodeInfo,
        pod::{PodAffinityTerm, PodInfo},
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

fn node_pair(term: &PodAffinityTerm, node: &NodeInfo) -> Option<TopologyPair> {
    node.labels
        .get(&term.topology_key)
        .map(|v| (term.topology_key.clone(), v.clone()))
}

#[derive(Default)]
struct FilterState {
    /// Domains where an existing pod's required anti-affinity forbids the incoming pod.
    existing_anti: HashMap<TopologyPair, u32>,
    /// Per required affinity term of the incoming pod: matching pods per domain.
    affinity: Vec<HashMap<String, u32>>,
    /// Per required anti-affinity term of the incoming pod: matching pods per domain.
    anti: Vec<HashMap<String, u32>>,
    /// No pod anywhere matches the affinity terms, and the pod matches them itself: the
    /// first pod of a group may go anywhere its topology keys exist.
    first_of_group: bool,
}

impl Plugin for InterPodAffinity {
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

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        let pod = ctx.pod;
        let cluster = ctx.cluster;
        let own_terms = !pod.affinity.required.is_empty() || !pod.anti_affinity.required.is_empty();
        if !own_terms && cluster.pods_with_required_anti_affinity() == 0 {
            return Status::skip();
        }
        let mut s = FilterState {
            affinity: vec![HashMap::new(); pod.affinity.required.len()],
            anti: vec![HashMap::new(); pod.anti_affinity.required.len()],
            ..FilterState::default()
        };
        for node in cluster.nodes() {
            if node.pods_with_required_anti_affinity > 0 {
                for existing in &node.pods {
                    for term in &existing.anti_affinity.required {
                        if selects(term, pod, cluster)
                            && let Some(pair) = node_pair(term, node)
                        {
                            *s.existing_anti.entry(pair).or_default() += 1;
                        }
                    }
                }
            }
            if !own_terms {
                continue;
            }
            for existing in &node.pods {
                for (i, term) in pod.affinity.required.iter().enumerate() {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && selects(term, existing, cluster)
                    {
                        *s.affinity[i].entry(value.clone()).or_default() += 1;
                    }
                }
                for (i, term) in pod.anti_affinity.required.iter().enumerate() {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && selects(term, existing, cluster)
                    {
                        *s.anti[i].entry(value.clone()).or_default() += 1;
                    }
                }
            }
        }
        s.first_of_group = !pod.affinity.required.is_empty()
            && s.affinity.iter().all(HashMap::is_empty)
            && pod
                .affinity
                .required
                .iter()
                .all(|t| selects(t, pod, cluster));
        state.write(s);
        Status::success()
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
        for (i, term) in pod.affinity.required.iter().enumerate() {
            let Some(value) = node.labels.get(&term.topology_key) else {
                return Status::new(Code::UnschedulableAndUnresolvable, AFFINITY_REASON);
            };
            if !s.first_of_group && s.affinity[i].get(value).is_none_or(|c| *c == 0) {
                return Status::new(Code::UnschedulableAndUnresolvable, AFFINITY_REASON);
            }
        }
        for (i, term) in pod.anti_affinity.required.iter().enumerate() {
            if let Some(value) = node.labels.get(&term.topology_key)
                && s.anti[i].get(value).is_some_and(|c| *c > 0)
            {
                return Status::unschedulable(ANTI_AFFINITY_REASON);
            }
        }
        if s.existing_anti
            .keys()
            .any(|(key, value)| node.labels.get(key) == Some(value))
        {
            return Status::unschedulable(EXISTING_ANTI_AFFINITY_REASON);
        }
        Status::success()
    }
}

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
mod tests {
    use std::sync::Arc;

    use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

    use super::*;
    use crate::{
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    fn term(app: &str, key: &str) -> core::PodAffinityTerm {
        core::PodAffinityTerm {
            label_selector: Some(meta::LabelSelector {
                match_labels: Some([("app".to_owned(), app.to_owned())].into()),
                match_expressions: None,
            }),
            topology_key: key.into(),
            ..Default::default()
        }
    }

    fn affinity(
        required: Vec<core::PodAffinityTerm>,
        anti: Vec<core::PodAffinityTerm>,
    ) -> core::Affinity {
        core::Affinity {
            pod_affinity: (!required.is_empty()).then_some(core::PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(required),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            pod_anti_affinity: (!anti.is_empty()).then_some(core::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(anti),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            node_affinity: None,
        }
    }

    /// Nodes n1 (zone a), n2 (zone a), n3 (zone b); a `db` pod runs on n1.
    fn cluster(db: PodBuilder) -> ClusterState {
        let mut cluster = ClusterState::new();
        for (n, zone) in [("n1", "a"), ("n2", "a"), ("n3", "b")] {
            cluster.upsert_node(NodeBuilder::new(n, "amd64").label("zone", zone).info());
        }
        cluster.add_assigned_pod(Arc::new(db.node("n1").info()));
        cluster
    }

    fn fits(pod: PodInfo, cluster: ClusterState) -> Vec<String> {
        let f = Fixture::new(pod).with_cluster(cluster);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        let pre = InterPodAffinity.pre_filter(&ctx, &mut state);
        if pre.code == Code::Skip {
            return f.cluster.nodes().iter().map(|n| n.name.clone()).collect();
        }
        f.cluster
            .nodes()
            .iter()
            .filter(|n| InterPodAffinity.filter(&ctx, &state, n).is_success())
            .map(|n| n.name.clone())
            .collect()
    }

    #[test]
    fn required_affinity_follows_the_topology_of_matching_pods() {
        let db = PodBuilder::new("ns", "db").label("app", "db");
        let pod = PodBuilder::new("ns", "web")
            .affinity(affinity(vec![term("db", "zone")], vec![]))
            .info();
        assert_eq!(fits(pod, cluster(db.clone())), ["n1", "n2"]);
        let by_host = PodBuilder::new("ns", "web")
            .affinity(affinity(vec![term("db", "kubernetes.io/hostname")], vec![]))
            .info();
        assert_eq!(fits(by_host, cluster(db)), ["n1"]);
    }

    #[test]
    fn affinity_to_pods_of_another_namespace_needs_the_namespace() {
        let db = PodBuilder::new("other", "db").label("app", "db");
        let pod = PodBuilder::new("ns", "web")
            .affinity(affinity(vec![term("db", "zone")], vec![]))
            .info();
        assert!(fits(pod, cluster(db.clone())).is_empty());
        let mut listed = term("db", "zone");
        listed.namespaces = Some(vec!["other".into()]);
        let pod = PodBuilder::new("ns", "web")
            .affinity(affinity(vec![listed], vec![]))
            .info();
        assert_eq!(fits(pod, cluster(db)), ["n1", "n2"]);
    }

    #[test]
    fn the_first_pod_of_a_self_affine_group_goes_anywhere() {
        let db = PodBuilder::new("ns", "db").label("app", "db");
        let pod = PodBuilder::new("ns", "web")
            .label("app", "web")
            .affinity(affinity(vec![term("web", "zone")], vec![]))
            .info();
        assert_eq!(fits(pod, cluster(db)), ["n1", "n2", "n3"]);
    }

    #[test]
    fn required_anti_affinity_avoids_matching_domains() {
        let db = PodBuilder::new("ns", "db").label("app", "db");
        let pod = PodBuilder::new("ns", "web")
            .affinity(affinity(vec![], vec![term("db", "zone")]))
            .info();
        assert_eq!(fits(pod, cluster(db)), ["n3"]);
    }

    /// Symmetry: the running pod's anti-affinity keeps the incoming pod away even though
    /// the incoming pod has no terms at all.
    #[test]
    fn existing_pods_anti_affinity_is_symmetric() {
        let db = PodBuilder::new("ns", "db")
            .label("app", "db")
            .affinity(affinity(
                vec![],
                vec![term("web", "kubernetes.io/hostname")],
            ));
        let web = PodBuilder::new("ns", "web").label("app", "web").info();
        assert_eq!(fits(web, cluster(db.clone())), ["n2", "n3"]);
        let other = PodBuilder::new("ns", "api").label("app", "api").info();
        assert_eq!(fits(other, cluster(db)), ["n1", "n2", "n3"]);
    }

    #[test]
    fn preferred_terms_score_domains() {
        let db = PodBuilder::new("ns", "db").label("app", "db");
        let preferred = core::Affinity {
            pod_affinity: Some(core::PodAffinity {
                required_during_scheduling_ignored_during_execution: None,
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    core::WeightedPodAffinityTerm {
                        weight: 10,
                        pod_affinity_term: term("db", "zone"),
                    },
                ]),
            }),
            ..Default::default()
        };
        let f = Fixture::new(PodBuilder::new("ns", "web").affinity(preferred).info())
            .with_cluster(cluster(db));
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(
            InterPodAffinity
                .pre_score(&ctx, &mut state, &[])
                .is_success()
        );
        let mut scores: Vec<i64> = f
            .cluster
            .nodes()
            .iter()
            .map(|n| InterPodAffinity.score(&ctx, &state, n))
            .collect();
        assert_eq!(scores, [10, 10, 0]);
        InterPodAffinity.normalize(&ctx, &state, &mut scores);
        assert_eq!(scores, [100, 100, 0]);
    }
}
