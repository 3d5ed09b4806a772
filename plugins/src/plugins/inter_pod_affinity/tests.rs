use std::sync::Arc;

use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

use super::*;
use crate::{
    events::{ClusterChange, QueueingHint},
    model::{node::NodeBuilder, pod::PodBuilder},
    testing::Fixture,
};
use multiarch_policy::selectors::Requirement;

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

fn ns_selector(term: &mut core::PodAffinityTerm, key: &str, value: &str) {
    term.namespace_selector = Some(meta::LabelSelector {
        match_labels: Some([(key.to_owned(), value.to_owned())].into()),
        match_expressions: None,
    });
}

/// The recorded situation: a term selecting pods in namespaces labelled team=x keeps
/// a pod of team-b off the node where a team-x pod runs.
#[test]
fn namespace_selectors_read_the_namespaces_labels() {
    let mut c = ClusterState::new();
    for n in ["n1", "n2"] {
        c.upsert_node(NodeBuilder::new(n, "amd64").info());
    }
    c.add_assigned_pod(Arc::new(
        PodBuilder::new("team-a", "solo")
            .label("app", "solo")
            .node("n1")
            .info(),
    ));
    let mut t = term("solo", "kubernetes.io/hostname");
    ns_selector(&mut t, "team", "x");
    let pod = PodBuilder::new("team-b", "y")
        .affinity(affinity(vec![], vec![t.clone()]))
        .info();
    // Without the namespace's labels the selector matches nothing.
    assert_eq!(fits(pod.clone(), c.clone()), ["n1", "n2"]);
    c.set_namespace_labels("team-a", [("team".to_owned(), "x".to_owned())].into());
    assert_eq!(fits(pod.clone(), c.clone()), ["n2"]);
    let f = Fixture::new(pod.clone()).with_cluster(c.clone());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(InterPodAffinity.pre_filter(&ctx, &mut state).is_success());
    let status = InterPodAffinity.filter(&ctx, &state, f.cluster.node("n1").unwrap());
    assert_eq!(status.code, Code::Unschedulable);
    assert_eq!(status.message(), ANTI_AFFINITY_REASON);
    // An empty selector selects every namespace.
    let mut every = term("solo", "kubernetes.io/hostname");
    ns_selector(&mut every, "team", "x");
    every.namespace_selector = Some(meta::LabelSelector::default());
    let everywhere = PodBuilder::new("team-c", "z")
        .affinity(affinity(vec![], vec![every]))
        .info();
    c.set_namespace_labels("team-a", Default::default());
    assert_eq!(fits(everywhere, c.clone()), ["n2"]);
    // A namespace change is a reason to retry such a pod.
    assert_eq!(
        InterPodAffinity.queueing_hint(&pod, &ClusterChange::NamespaceChanged("team-a"), &c),
        QueueingHint::Queue
    );
}

/// kube-scheduler counts a pod toward affinity only when it matches every term.
#[test]
fn affinity_needs_pods_matching_all_terms() {
    let mut c = ClusterState::new();
    for (n, zone) in [("n1", "a"), ("n2", "b")] {
        c.upsert_node(NodeBuilder::new(n, "amd64").label("zone", zone).info());
    }
    c.add_assigned_pod(Arc::new(
        PodBuilder::new("ns", "db")
            .label("app", "db")
            .node("n1")
            .info(),
    ));
    c.add_assigned_pod(Arc::new(
        PodBuilder::new("ns", "cache")
            .label("app", "cache")
            .node("n2")
            .info(),
    ));
    let pod = PodBuilder::new("ns", "web")
        .affinity(affinity(
            vec![term("db", "zone"), term("cache", "zone")],
            vec![],
        ))
        .info();
    assert!(fits(pod, c).is_empty());
}

#[test]
fn preemption_updates_the_counts() {
    let db = PodBuilder::new("ns", "db").label("app", "db");
    let c = cluster(db.clone());
    let pod = PodBuilder::new("ns", "web")
        .affinity(affinity(vec![], vec![term("db", "zone")]))
        .info();
    let f = Fixture::new(pod).with_cluster(c);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(InterPodAffinity.pre_filter(&ctx, &mut state).is_success());
    let n2 = f.cluster.node("n2").unwrap();
    assert!(!InterPodAffinity.filter(&ctx, &state, n2).is_success());
    let victim = f.cluster.node("n1").unwrap().pods[0].clone();
    let mut without = state.clone();
    InterPodAffinity.remove_pod(&ctx, &mut without, &victim, f.cluster.node("n1").unwrap());
    assert!(InterPodAffinity.filter(&ctx, &without, n2).is_success());
    // The original state is untouched (each candidate node works on a copy).
    assert!(!InterPodAffinity.filter(&ctx, &state, n2).is_success());
    InterPodAffinity.add_pod(&ctx, &mut without, &victim, n2);
    assert!(!InterPodAffinity.filter(&ctx, &without, n2).is_success());
}

#[test]
fn pod_hints_follow_kube_scheduler() {
    let c = ClusterState::new();
    let wants_db = PodBuilder::new("ns", "web")
        .affinity(affinity(
            vec![term("db", "zone")],
            vec![term("noisy", "zone")],
        ))
        .info();
    let db = PodBuilder::new("ns", "db")
        .label("app", "db")
        .node("n1")
        .info();
    let noisy = PodBuilder::new("ns", "n")
        .label("app", "noisy")
        .node("n1")
        .info();
    let other = PodBuilder::new("ns", "o")
        .label("app", "other")
        .node("n1")
        .info();
    let hint = |change| InterPodAffinity.queueing_hint(&wants_db, &change, &c);
    assert_eq!(
        hint(ClusterChange::AssignedPodAdded(&db)),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodAdded(&other)),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&noisy)),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&other)),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodUpdated {
            old: &other,
            new: &db
        }),
        QueueingHint::Queue
    );
    let plain = NodeBuilder::new("n9", "amd64").info();
    let zoned = NodeBuilder::new("n9", "amd64").label("zone", "c").info();
    // The pod has anti-affinity terms: any new node may be free of matching pods.
    assert_eq!(hint(ClusterChange::NodeAdded(&plain)), QueueingHint::Queue);
    let update = ClusterChange::NodeUpdated {
        old: &plain,
        new: &zoned,
        changes: crate::events::NodeChanges::between(&plain, &zoned),
    };
    assert_eq!(hint(update), QueueingHint::Queue);
    let affinity_only = PodBuilder::new("ns", "a")
        .affinity(affinity(vec![term("db", "zone")], vec![]))
        .info();
    assert_eq!(
        InterPodAffinity.queueing_hint(&affinity_only, &ClusterChange::NodeAdded(&plain), &c),
        QueueingHint::QueueSkip
    );
}

/// PreFilter's state as kube-scheduler builds it: every pod on every node.
fn walked_filter_state(pod: &PodInfo, cluster: &ClusterState) -> FilterState {
    let mut s = FilterState::default();
    for node in cluster.nodes() {
        for existing in &node.pods {
            s.update_with_pod(pod, cluster, existing, node, 1);
        }
    }
    s
}

/// PreScore's sums as kube-scheduler builds them: every pod on every node.
fn walked_score_pairs(pod: &PodInfo, cluster: &ClusterState) -> Counts {
    let mut by_pair = Counts::default();
    let mut add = |term: &PodAffinityTerm, node: &NodeInfo, weight: i64| {
        if let Some(value) = node.labels().get(&term.topology_key) {
            by_pair.add(&term.topology_key, value, weight);
        }
    };
    for node in cluster.nodes() {
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
    by_pair
}

/// A term from small numbers: its selector, namespaces and topology key.
fn random_term(selector: u8, namespaces: u8, key: u8) -> PodAffinityTerm {
    use crate::model::pod::NamespaceScope;
    use multiarch_policy::selectors::LabelSelector;
    let req = |r: Requirement| LabelSelector {
        requirements: vec![r],
    };
    let s = |v: &str| v.to_owned();
    let selector = match selector % 6 {
        0 => req(Requirement::In(s("app"), vec![s("a")])),
        1 => req(Requirement::In(s("app"), vec![s("a"), s("a")])),
        2 => req(Requirement::In(s("app"), vec![s("a"), s("b")])),
        3 => req(Requirement::Exists(s("app"))),
        4 => req(Requirement::NotIn(s("app"), vec![s("a")])),
        _ => LabelSelector {
            requirements: vec![
                Requirement::Exists(s("tier")),
                Requirement::In(s("app"), vec![s("b")]),
            ],
        },
    };
    let team = |t: &str| LabelSelector {
        requirements: vec![Requirement::In(s("team"), vec![s(t)])],
    };
    let namespaces = match namespaces % 4 {
        0 => NamespaceScope::Listed(vec![s("ns1")], None),
        1 => NamespaceScope::Listed(vec![], Some(team("x"))),
        2 => NamespaceScope::Listed(vec![], Some(LabelSelector::default())),
        _ => NamespaceScope::Listed(vec![s("ns2")], Some(team("y"))),
    };
    PodAffinityTerm {
        selector,
        namespaces,
        topology_key: [ZONE_LABEL, "kubernetes.io/hostname", "rack"][usize::from(key % 3)]
            .to_owned(),
    }
}

/// A pod with random labels, namespace and terms (`terms`: (kind, selector, namespaces,
/// key) each; kinds: required/preferred affinity/anti-affinity).
fn random_pod(name: &str, labels: u8, namespace: u8, terms: &[(u8, u8, u8, u8)]) -> PodInfo {
    let mut b = PodBuilder::new(["ns1", "ns2", "ns3"][usize::from(namespace % 3)], name)
        .label("app", ["a", "b", "c"][usize::from(labels % 3)]);
    if labels >= 3 {
        b = b.label("tier", "x");
    }
    let mut pod = b.info();
    for (i, &(kind, selector, namespaces, key)) in terms.iter().enumerate() {
        let term = random_term(selector, namespaces, key);
        let weight = i32::try_from(i).unwrap_or(0) + 1;
        match kind % 4 {
            0 => pod.affinity.required.push(term),
            1 => pod.anti_affinity.required.push(term),
            2 => pod.affinity.preferred.push((weight * 10, term)),
            _ => pod.anti_affinity.preferred.push((weight * 7, term)),
        }
    }
    pod
}

proptest::proptest! {
    /// PreFilter's state and PreScore's sums built from the cluster's indexes (the
    /// counted terms of the pods on nodes, the pods by label) equal kube-scheduler's walk
    /// over every pod on every node, after any sequence of nodes coming, being relabelled
    /// and going, pods (with every kind of term, selectors the label index can and cannot
    /// serve, namespace names and selectors) coming and going, on known nodes or not, and
    /// namespaces being labelled.
    #[test]
    fn the_indexes_build_what_a_walk_over_every_pod_builds(
        ops in proptest::collection::vec(
            (0u8..6, 0usize..5, 0usize..10, 0u8..6, 0u8..3,
             proptest::collection::vec((0u8..4, 0u8..6, 0u8..4, 0u8..3), 0..3)),
            1..40,
        ),
        incoming in (0u8..6, 0u8..3, proptest::collection::vec((0u8..4, 0u8..6, 0u8..4, 0u8..3), 0..4)),
    ) {
        let mut cluster = ClusterState::new();
        for (op, node, pod, labels, namespace, terms) in ops {
            let node_name = format!("n{node}");
            match op {
                0 | 1 => {
                    // Added, or relabelled (zone and rack from `labels`).
                    let mut b = NodeBuilder::new(&node_name, "amd64");
                    if labels != 2 {
                        b = b.label(ZONE_LABEL, ["a", "b"][usize::from(labels % 2)]);
                    }
                    if labels >= 3 {
                        b = b.label("rack", ["r1", "r2"][usize::from(labels % 2)]);
                    }
                    cluster.upsert_node(b.info());
                }
                2 => {
                    cluster.remove_node(&node_name);
                }
                3 | 4 => {
                    let mut p = random_pod(&format!("p{pod}"), labels, namespace, &terms);
                    p.node_name = Some(node_name);
                    cluster.add_assigned_pod(Arc::new(p));
                }
                _ => {
                    cluster.remove_pod(&format!("uid-ns{}-p{pod}", namespace % 3 + 1));
                    cluster.set_namespace_labels(
                        ["ns1", "ns2", "ns3"][usize::from(namespace % 3)],
                        [("team".to_owned(), ["x", "y"][usize::from(labels % 2)].to_owned())].into(),
                    );
                }
            }
        }
        let (labels, namespace, terms) = incoming;
        let pod = random_pod("incoming", labels, namespace, &terms);
        proptest::prop_assert_eq!(filter_state(&pod, &cluster), walked_filter_state(&pod, &cluster));
        proptest::prop_assert_eq!(score_pairs(&pod, &cluster), walked_score_pairs(&pod, &cluster));
    }
}
