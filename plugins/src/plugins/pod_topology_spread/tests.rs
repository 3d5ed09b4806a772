use std::{collections::HashMap, sync::Arc};

use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

use super::*;
use crate::{
    events::{ClusterChange, QueueingHint},
    framework::Code,
    image_platforms::{ContainerImagePlatforms, PodImagePlatforms},
    model::{cluster::ClusterState, node::NodeBuilder, pod::PodBuilder},
    plugins::image_architecture::ImageArchitecture,
    testing::{Fixture, known},
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
    let mut all = vec![0; nodes.len()];
    PodTopologySpread.score_all(&ctx, &state, &nodes, &mut all);
    assert_eq!(all, scores, "scoring every node at once scores each alike");
    assert!(
        scores.contains(&-1),
        "the node without the key is marked ignored"
    );
    PodTopologySpread.normalize(&ctx, &state, &mut scores);
    let by_node: HashMap<&str, i64> = nodes.iter().map(|n| n.name.as_str()).zip(scores).collect();
    assert!(by_node["c1"] > by_node["b1"]);
    assert!(by_node["b1"] > by_node["a1"]);
    assert_eq!(by_node["nozone"], 0);
}

/// Zones a (arm64 `a-arm` without pods, amd64 `a-amd` with two web pods) and b (arm64
/// `b-arm` with one), and c (amd64 `c-amd` only, empty).
fn mixed_zones() -> ClusterState {
    let mut cluster = ClusterState::new();
    for (node, arch, zone) in [
        ("a-arm", "arm64", "a"),
        ("a-amd", "amd64", "a"),
        ("b-arm", "arm64", "b"),
        ("c-amd", "amd64", "c"),
    ] {
        cluster.upsert_node(NodeBuilder::new(node, arch).label("zone", zone).info());
    }
    for (pod, node) in [("w1", "a-amd"), ("w2", "a-amd"), ("w3", "b-arm")] {
        cluster.add_assigned_pod(Arc::new(
            PodBuilder::new("ns", pod)
                .label("app", "web")
                .node(node)
                .info(),
        ));
    }
    cluster
}

/// A pod of arm64-only images, after ImageArchitecture's PreFilter (whose platforms the
/// spread reads), as a cycle runs them.
fn arm64_only(pod: PodInfo) -> (Fixture, CycleState) {
    let mut f = Fixture::new(pod).with_cluster(mixed_zones());
    f.images = PodImagePlatforms {
        containers: vec![ContainerImagePlatforms {
            container: "app".into(),
            image: "arm-only:1".into(),
            platforms: known(&["arm64"]),
            left_out: None,
        }],
    };
    let mut state = CycleState::new();
    assert!(
        ImageArchitecture
            .pre_filter(&f.ctx(), &mut state)
            .is_success()
    );
    (f, state)
}

#[test]
fn nodes_of_platforms_the_images_lack_are_no_domain_of_a_hard_constraint() {
    let fits = |policy: Option<&str>| {
        let mut c = constraint("zone", 1, true);
        c.node_affinity_policy = policy.map(str::to_owned);
        let pod = PodBuilder::new("ns", "new")
            .label("app", "web")
            .spread(c)
            .info();
        let (f, mut state) = arm64_only(pod);
        let ctx = f.ctx();
        assert!(PodTopologySpread.pre_filter(&ctx, &mut state).is_success());
        f.cluster
            .nodes()
            .iter()
            .filter(|n| PodTopologySpread.filter(&ctx, &state, n).is_success())
            .map(|n| n.name.clone())
            .collect::<Vec<_>>()
    };
    // Honoured (the default), as kube-scheduler with the architecture in the pod's node
    // affinity: zone c has no arm64 node and a's pods are on an amd64 node, so a counts
    // 0 and b 1; min 0 (zone a): a fits, b (1 + 1 - 0) does not. Zone c, no domain,
    // counts 0 as in kube-scheduler (ImageArchitecture rejects its node and a-amd).
    assert_eq!(fits(None), ["a-arm", "a-amd", "c-amd"]);
    // Ignored: every node counts; min 0 (zone c), a (2 + 1) and b (1 + 1) exceed 1.
    assert_eq!(fits(Some("Ignore")), ["c-amd"]);
}

#[test]
fn nodes_of_platforms_the_images_lack_do_not_count_in_soft_scores() {
    let pod = PodBuilder::new("ns", "new")
        .label("app", "web")
        .spread(constraint("zone", 1, false))
        .info();
    let (f, mut state) = arm64_only(pod);
    let ctx = f.ctx();
    // The feasible nodes: the arm64 ones.
    let nodes: Vec<&NodeInfo> = f
        .cluster
        .nodes()
        .iter()
        .filter(|n| n.name.ends_with("arm"))
        .collect();
    assert!(
        PodTopologySpread
            .pre_score(&ctx, &mut state, &nodes)
            .is_success()
    );
    let mut scores = vec![0; nodes.len()];
    PodTopologySpread.score_all(&ctx, &state, &nodes, &mut scores);
    PodTopologySpread.normalize(&ctx, &state, &mut scores);
    // Zone a's two pods are on its amd64 node, which does not count: a (0) beats b (1).
    let by_node: HashMap<&str, i64> = nodes.iter().map(|n| n.name.as_str()).zip(scores).collect();
    assert!(by_node["a-arm"] > by_node["b-arm"], "{by_node:?}");
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

#[test]
fn preemption_updates_the_domain_counts() {
    let pod = PodBuilder::new("ns", "new")
        .label("app", "web")
        .spread(constraint("zone", 1, true))
        .info();
    let f = Fixture::new(pod).with_cluster(cluster());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(PodTopologySpread.pre_filter(&ctx, &mut state).is_success());
    let b1 = f.cluster.node("b1").unwrap();
    assert_eq!(
        PodTopologySpread.filter(&ctx, &state, b1).code,
        Code::Unschedulable
    );
    // Without zone b's pod, b is the emptiest zone.
    let victim = b1.pods[0].clone();
    let mut without = state.clone();
    PodTopologySpread.remove_pod(&ctx, &mut without, &victim, b1);
    assert!(PodTopologySpread.filter(&ctx, &without, b1).is_success());
    PodTopologySpread.add_pod(&ctx, &mut without, &victim, b1);
    assert_eq!(
        PodTopologySpread.filter(&ctx, &without, b1).code,
        Code::Unschedulable
    );
}

#[test]
fn hints_follow_selected_pods_and_topology_keys() {
    let c = ClusterState::new();
    let pod = PodBuilder::new("ns", "new")
        .label("app", "web")
        .spread(constraint("zone", 1, true))
        .info();
    let hint = |change| PodTopologySpread.queueing_hint(&pod, &change, &c);
    let web = PodBuilder::new("ns", "w")
        .label("app", "web")
        .node("a1")
        .info();
    let db = PodBuilder::new("ns", "d")
        .label("app", "db")
        .node("a1")
        .info();
    let other_ns = PodBuilder::new("x", "w")
        .label("app", "web")
        .node("a1")
        .info();
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&web)),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodAdded(&db)),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&other_ns)),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodUpdated {
            old: &db,
            new: &web
        }),
        QueueingHint::Queue
    );
    let zoned = NodeBuilder::new("z", "amd64").label("zone", "q").info();
    let plain = NodeBuilder::new("z", "amd64").info();
    assert_eq!(hint(ClusterChange::NodeAdded(&zoned)), QueueingHint::Queue);
    assert_eq!(
        hint(ClusterChange::NodeAdded(&plain)),
        QueueingHint::QueueSkip
    );
    let relabelled = NodeBuilder::new("z", "amd64")
        .label("zone", "q")
        .label("x", "y")
        .info();
    let update = ClusterChange::NodeUpdated {
        old: &zoned,
        new: &relabelled,
        changes: crate::events::NodeChanges::between(&zoned, &relabelled),
    };
    assert_eq!(hint(update), QueueingHint::QueueSkip);
}

proptest::proptest! {
    /// The per-node rounding is `f64::round`, for any value.
    #[test]
    fn rounding_matches_the_standard_library(x in proptest::num::f64::ANY) {
        #[allow(clippy::cast_possible_truncation)]
        let want = x.round() as i64;
        proptest::prop_assert_eq!(round(x), want);
    }
}

#[test]
fn rounding_matches_the_standard_library_at_the_edges() {
    for x in [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        0.499_999_999_999_999_94,
        4_503_599_627_370_495.5,
        9.3e18,
        -9.3e18,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
    ] {
        #[allow(clippy::cast_possible_truncation)]
        let want = x.round() as i64;
        assert_eq!(round(x), want, "{x}");
    }
}

/// One constraint's part of a node's score; `None` when the node has no value for its key.
type ReferenceTerm<'a> = dyn Fn(&NodeInfo) -> Option<f64> + 'a;

/// kube-scheduler's spread scoring written plainly, from the pods on each node: the
/// domains of each constraint among the scored nodes, pods counted per domain over the
/// nodes of the cluster that count, `round(Σ count × ln(domains + 2) + maxSkew − 1)` in
/// constraint order, and -1 for a node without every key of the pod's own constraints.
fn reference_scores(
    pod: &PodInfo,
    cluster: &ClusterState,
    scored: &[&NodeInfo],
) -> Option<Vec<i64>> {
    let (constraints, require_all) = if pod.spread_constraints.is_empty() {
        (default_constraints(pod), false)
    } else {
        let soft: Vec<_> = pod
            .spread_constraints
            .iter()
            .filter(|c| !c.hard)
            .cloned()
            .collect();
        (soft, true)
    };
    if constraints.is_empty() {
        return None;
    }
    let has_all = |node: &NodeInfo| {
        !require_all
            || constraints
                .iter()
                .all(|c| node.label(&c.topology_key).is_some())
    };
    let pods_on = |c: &SpreadConstraint, node: &NodeInfo| -> i64 {
        let matching = node.pods.iter().filter(|p| {
            if c.same_controller {
                p.controller_uid == pod.controller_uid
            } else {
                !p.deleting && p.namespace == pod.namespace && c.selector.matches(&p.labels)
            }
        });
        i64::try_from(matching.count()).unwrap()
    };
    let kept: Vec<&NodeInfo> = scored.iter().copied().filter(|n| has_all(n)).collect();
    let mut terms: Vec<Box<ReferenceTerm<'_>>> = Vec::new();
    for c in &constraints {
        let bias = f64::from(c.max_skew - 1);
        if c.topology_key == HOSTNAME {
            let weight = ((kept.len() + 2) as f64).ln();
            terms.push(Box::new(move |node| {
                Some(pods_on(c, node) as f64 * weight + bias)
            }));
            continue;
        }
        let domains: std::collections::BTreeSet<&str> = kept
            .iter()
            .filter_map(|n| n.label(&c.topology_key))
            .collect();
        let weight = ((domains.len() + 2) as f64).ln();
        let mut counts: HashMap<String, i64> = HashMap::new();
        for node in cluster.nodes() {
            match node.label(&c.topology_key) {
                Some(value)
                    if domains.contains(value)
                        && has_all(node)
                        && node_counts(pod, c, node, None) =>
                {
                    *counts.entry(value.to_owned()).or_default() += pods_on(c, node);
                }
                _ => {}
            }
        }
        terms.push(Box::new(move |node| {
            let value = node.label(&c.topology_key)?;
            Some(counts.get(value).copied().unwrap_or(0) as f64 * weight + bias)
        }));
    }
    Some(
        scored
            .iter()
            .map(|node| {
                if !has_all(node) {
                    return -1;
                }
                let mut score = 0.0;
                for term in &terms {
                    if let Some(value) = term(node) {
                        score += value;
                    }
                }
                score.round() as i64
            })
            .collect(),
    )
}

/// Nodes `n0`, `n1`... from (zone, rack) choices: no zone or a, b, c; no rack or r1, r2.
fn generated_nodes(nodes: &[(usize, usize)]) -> ClusterState {
    let zones = [None, Some("a"), Some("b"), Some("c")];
    let racks = [None, Some("r1"), Some("r2")];
    let mut cluster = ClusterState::new();
    for (i, (zone, rack)) in nodes.iter().enumerate() {
        let mut node = NodeBuilder::new(&format!("n{i}"), "amd64");
        if let Some(zone) = zones[*zone] {
            node = node.label(ZONE_LABEL, zone);
        }
        if let Some(rack) = racks[*rack] {
            node = node.label("rack", rack);
        }
        cluster.upsert_node(node.info());
    }
    cluster
}

fn soft(key: &str, skew: i32) -> core::TopologySpreadConstraint {
    constraint(key, skew, false)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Scoring (per node and all at once) gives what the plain reference gives, for the
    /// default constraints (with and without a node selector to honour) and for a pod's
    /// own constraints over zones, a label and hostnames.
    #[test]
    fn scores_match_the_plain_reference(
        nodes in proptest::collection::vec((0..4usize, 0..3usize), 1..10),
        pods in proptest::collection::vec((0..10usize, 0..3usize, 0..2usize, proptest::bool::ANY, proptest::bool::ANY), 0..25),
        own in proptest::collection::vec((0..3usize, 1..4i32), 0..4),
        selector in proptest::bool::ANY,
        scored_mask in proptest::num::u16::ANY,
    ) {
        let mut cluster = generated_nodes(&nodes);
        for (j, (node, owner, app, other_ns, deleting)) in pods.iter().enumerate() {
            let mut p = PodBuilder::new(if *other_ns { "other" } else { "ns" }, &format!("p{j}"))
                .label("app", ["web", "db"][*app])
                .node(&format!("n{}", node % nodes.len()));
            if *owner > 0 {
                p = p.owner("ReplicaSet", &format!("rs{owner}"));
            }
            if *deleting {
                p = p.deleting();
            }
            cluster.add_assigned_pod(Arc::new(p.info()));
        }
        let mut pod = PodBuilder::new("ns", "new").label("app", "web").owner("ReplicaSet", "rs1");
        for (key, skew) in &own {
            pod = pod.spread(soft([ZONE_LABEL, "rack", HOSTNAME][*key], *skew));
        }
        if selector {
            pod = pod.node_selector("rack", "r1");
        }
        let f = Fixture::new(pod.info()).with_cluster(cluster);
        let ctx = f.ctx();
        let scored: Vec<&NodeInfo> = f
            .cluster
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, _)| scored_mask & (1 << i) != 0)
            .map(|(_, n)| n)
            .collect();
        let mut state = CycleState::new();
        let status = PodTopologySpread.pre_score(&ctx, &mut state, &scored);
        match reference_scores(&f.pod, &f.cluster, &scored) {
            None => proptest::prop_assert_eq!(status.code, Code::Skip),
            Some(want) => {
                proptest::prop_assert!(status.is_success());
                let each: Vec<i64> = scored.iter().map(|n| PodTopologySpread.score(&ctx, &state, n)).collect();
                let mut all = vec![0; scored.len()];
                PodTopologySpread.score_all(&ctx, &state, &scored, &mut all);
                proptest::prop_assert_eq!(&each, &want);
                proptest::prop_assert_eq!(&all, &want);
            }
        }
    }
}

/// kube-scheduler's hard-constraint Filter written plainly: per constraint, every node
/// with all the keys that counts is a domain, its matching pods (same namespace, not
/// deleting) counted by walking every pod; a node fits when its domain's count plus the
/// pod's own match exceeds the smallest by at most `maxSkew`.
fn reference_filter(pod: &PodInfo, cluster: &ClusterState) -> Vec<Code> {
    let hard: Vec<&SpreadConstraint> = pod.spread_constraints.iter().filter(|c| c.hard).collect();
    let has_all = |node: &NodeInfo| {
        hard.iter()
            .all(|c| node.labels().contains_key(&c.topology_key))
    };
    let tables: Vec<(HashMap<String, i64>, i64)> = hard
        .iter()
        .map(|c| {
            let mut counts: HashMap<String, i64> = HashMap::new();
            for node in cluster.nodes() {
                if !has_all(node) || !node_counts(pod, c, node, None) {
                    continue;
                }
                let matching = node
                    .pods
                    .iter()
                    .filter(|p| {
                        !p.deleting && p.namespace == pod.namespace && c.selector.matches(&p.labels)
                    })
                    .count();
                *counts
                    .entry(node.labels()[&c.topology_key].clone())
                    .or_default() += i64::try_from(matching).unwrap();
            }
            let min = match c.min_domains {
                Some(m) if (counts.len() as i32) < m => 0,
                _ => counts.values().copied().min().unwrap_or(0),
            };
            (counts, min)
        })
        .collect();
    cluster
        .nodes()
        .iter()
        .map(|node| {
            for (c, (counts, min)) in hard.iter().zip(&tables) {
                let labels = node.labels();
                let Some(value) = labels.get(&c.topology_key) else {
                    return Code::UnschedulableAndUnresolvable;
                };
                let own = i64::from(c.selector.matches(&pod.labels));
                if counts.get(value).copied().unwrap_or(0) + own - min > i64::from(c.max_skew) {
                    return Code::Unschedulable;
                }
            }
            Code::Success
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// The hard constraints filter as the plain walk does, whether the label index
    /// answers the selector (`matchLabels`, an `In` listing a value twice, with another
    /// requirement) or the nodes' pods are walked (`Exists`).
    #[test]
    fn hard_constraints_filter_as_the_plain_reference(
        nodes in proptest::collection::vec((0..4usize, 0..3usize), 1..10),
        pods in proptest::collection::vec((0..10usize, 0..3usize, 0..2usize, proptest::bool::ANY, proptest::bool::ANY), 0..25),
        own in proptest::collection::vec((0..3usize, 1..4i32, 0..4usize), 1..3),
        selector in proptest::bool::ANY,
        min_domains in proptest::option::of(1..5i32),
    ) {
        let mut cluster = generated_nodes(&nodes);
        for (j, (node, tier, app, other_ns, deleting)) in pods.iter().enumerate() {
            let mut p = PodBuilder::new(if *other_ns { "other" } else { "ns" }, &format!("p{j}"))
                .label("app", ["web", "db"][*app])
                .label("tier", ["front", "back", "none"][*tier])
                .node(&format!("n{}", node % nodes.len()));
            if *deleting {
                p = p.deleting();
            }
            cluster.add_assigned_pod(Arc::new(p.info()));
        }
        let requirement = |key: &str, operator: &str, values: &[&str]| meta::LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        };
        let mut pod = PodBuilder::new("ns", "new").label("app", "web").label("tier", "front");
        for (key, skew, selector_kind) in &own {
            let mut c = constraint([ZONE_LABEL, "rack", HOSTNAME][*key], *skew, true);
            c.min_domains = min_domains;
            c.label_selector = Some(match selector_kind {
                0 => meta::LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    match_expressions: None,
                },
                1 => meta::LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![requirement("app", "In", &["web", "db", "web"])]),
                },
                2 => meta::LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                    match_expressions: Some(vec![requirement("tier", "NotIn", &["back"])]),
                },
                _ => meta::LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![meta::LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: "Exists".into(),
                        values: None,
                    }]),
                },
            });
            pod = pod.spread(c);
        }
        if selector {
            pod = pod.node_selector("rack", "r1");
        }
        let f = Fixture::new(pod.info()).with_cluster(cluster);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        proptest::prop_assert!(PodTopologySpread.pre_filter(&ctx, &mut state).is_success());
        let got: Vec<Code> = f
            .cluster
            .nodes()
            .iter()
            .map(|n| PodTopologySpread.filter(&ctx, &state, n).code)
            .collect();
        proptest::prop_assert_eq!(got, reference_filter(&f.pod, &f.cluster));
    }
}
