use std::sync::Arc;

use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

use super::*;
use crate::{
    events::{ClusterChange, QueueingHint},
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
