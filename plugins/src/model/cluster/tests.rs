use super::*;
use crate::model::{
    node::{NodeBuilder, ZONE_LABEL},
    pod::PodBuilder,
    storage::HostVolumes,
};

fn pod(name: &str, node: Option<&str>) -> Arc<PodInfo> {
    let mut b = PodBuilder::new("ns", name).container("c", "i", "1", "1Gi");
    if let Some(node) = node {
        b = b.node(node);
    }
    Arc::new(b.info())
}

proptest::proptest! {
    /// After any sequence of node adds, architecture and hostname changes and
    /// removals, the indexes name exactly the nodes a walk over every node would find.
    #[test]
    fn the_node_indexes_follow_every_node_change(
        ops in proptest::collection::vec((0u8..3, 0usize..12, 0usize..5), 1..80)
    ) {
        const ARCHES: [&str; 5] = ["amd64", "arm64", "ppc64le", "s390x", "riscv64"];
        let mut cluster = ClusterState::new();
        for (op, node, arch) in ops {
            let name = format!("n{node}");
            match op {
                0 | 1 => {
                    let mut b = NodeBuilder::new(&name, ARCHES[arch]);
                    if arch == 4 {
                        // An OS without a platform bit.
                        b = b.label("kubernetes.io/os", "plan9");
                    }
                    if op == 1 {
                        // Hostnames need not be node names, nor unique.
                        b = b.label("kubernetes.io/hostname", "shared");
                    }
                    cluster.upsert_node(b.info());
                }
                _ => {
                    cluster.remove_node(&name);
                }
            }
            // Asked after every change, so a list cached before it must not be reused.
            for mask in [0u64, 1, 2, 1 << 3, u64::MAX, 0b1010] {
                let walked: Vec<usize> = cluster
                    .nodes()
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.platform_bit.is_none_or(|b| mask & (1 << b) != 0))
                    .map(|(i, _)| i)
                    .collect();
                proptest::prop_assert_eq!(
                    cluster.platform_index().candidates(mask).to_vec(),
                    walked
                );
            }
            for host in ["n0", "n3", "n11", "shared"] {
                let walked: Vec<usize> = cluster
                    .nodes()
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.hostname.as_deref() == Some(host))
                    .map(|(i, _)| i)
                    .collect();
                proptest::prop_assert_eq!(cluster.hostname_index().nodes(host), &walked[..]);
            }
        }
    }
}

proptest::proptest! {
    /// After any sequence of node changes and local volumes appearing, being claimed and
    /// going, the nodes with an unclaimed local volume of a class are those a walk finds.
    #[test]
    fn the_local_volume_nodes_follow_every_node_and_volume_change(
        ops in proptest::collection::vec((0u8..5, 0usize..6, 0usize..4, 0usize..2), 1..80)
    ) {
        use crate::model::storage::builders::VolumeBuilder;
        const CLASSES: [&str; 2] = ["local-a", "local-b"];
        let mut cluster = ClusterState::new();
        let mut held: Option<(Vec<HostVolumes>, crate::model::local_volume_nodes::LocalVolumes)> = None;
        for (op, item, host, class) in ops {
            let hostname = format!("h{host}");
            let volume = format!("pv{item}");
            match op {
                0 => {
                    let mut node = NodeBuilder::new(&format!("n{item}"), "amd64")
                        .label("kubernetes.io/hostname", &hostname)
                        .info();
                    if host == 3 {
                        // A node without the label: never a candidate, and moving it
                        // in the node list changes no hostname bucket.
                        node.hostname = None;
                    }
                    cluster.upsert_node(node);
                }
                1 => {
                    cluster.remove_node(&format!("n{item}"));
                }
                2 => cluster.storage_mut().upsert_volume(
                    VolumeBuilder::new(&volume, CLASSES[class], &format!("{}Gi", item + 1))
                        .local_on(&hostname)
                        .info(),
                ),
                3 => cluster.storage_mut().upsert_volume(
                    VolumeBuilder::new(&volume, CLASSES[class], "1Gi")
                        .local_on(&hostname)
                        .claim_ref("ns", "data", "")
                        .info(),
                ),
                _ => cluster.storage_mut().delete_volume(&volume),
            }
            for class in CLASSES {
                let walked: Vec<usize> = cluster
                    .nodes()
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| {
                        n.hostname.as_deref().is_some_and(|h| {
                            cluster.storage().unclaimed_on_host(class, h).next().is_some()
                        })
                    })
                    .map(|(i, _)| i)
                    .collect();
                let local = cluster.local_volumes(class);
                // Held as a cycle holds it: the next change must not write into it.
                if let Some((seen, summaries)) = &held {
                    proptest::prop_assert_eq!(&seen[..], &summaries.by_position[..]);
                }
                held = Some((local.by_position.to_vec(), local.clone()));
                proptest::prop_assert_eq!(local.nodes.to_vec(), walked);
                for (position, node) in cluster.nodes().iter().enumerate() {
                    let volumes = node.hostname.as_deref().map_or(HostVolumes::None, |h| {
                        HostVolumes::of(cluster.storage().unclaimed_on_host(class, h).map(|v| &**v))
                    });
                    proptest::prop_assert_eq!(local.at(position), volumes, "{}", node.name);
                }
            }
        }
    }
}

#[test]
fn a_node_has_a_position_and_its_copies_have_none() {
    let mut cluster = ClusterState::new();
    for name in ["n0", "n1", "n2"] {
        cluster.upsert_node(NodeBuilder::new(name, "amd64").info());
    }
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(cluster.position_of(node), Some(i));
        assert_eq!(cluster.position_of(&node.clone()), None);
    }
    cluster.remove_node("n0");
    let moved = cluster.node("n2").unwrap();
    assert_eq!(cluster.position_of(moved), Some(0));
    let elsewhere = ClusterState::new();
    assert_eq!(elsewhere.position_of(moved), None);
}

#[test]
fn assume_then_confirm_counts_once() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    let p = pod("p", None);
    cluster.assume(p.clone(), "n1");
    assert!(cluster.is_assumed(&p.uid));
    assert_eq!(cluster.node("n1").unwrap().requested.milli_cpu, 1000);
    cluster.add_assigned_pod(pod("p", Some("n1")));
    assert!(!cluster.is_assumed(&p.uid));
    assert_eq!(cluster.node("n1").unwrap().requested.milli_cpu, 1000);
    assert_eq!(cluster.node("n1").unwrap().pods.len(), 1);
}

#[test]
fn forget_frees_an_assumed_pod_only() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    let p = pod("p", None);
    cluster.assume(p.clone(), "n1");
    assert!(cluster.forget(&p.uid).is_some());
    assert!(cluster.node("n1").unwrap().requested.is_zero());
    cluster.add_assigned_pod(pod("q", Some("n1")));
    assert!(cluster.forget("uid-ns-q").is_none());
    assert_eq!(cluster.node("n1").unwrap().pods.len(), 1);
}

#[test]
fn a_pod_bound_elsewhere_than_assumed_moves() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    cluster.upsert_node(NodeBuilder::new("n2", "amd64").info());
    let p = pod("p", None);
    cluster.assume(p.clone(), "n1");
    cluster.add_assigned_pod(pod("p", Some("n2")));
    assert!(cluster.node("n1").unwrap().pods.is_empty());
    assert_eq!(cluster.node("n2").unwrap().pods.len(), 1);
}

#[test]
fn pods_of_unknown_nodes_count_when_the_node_appears() {
    let mut cluster = ClusterState::new();
    cluster.add_assigned_pod(pod("p", Some("late")));
    assert!(matches!(
        cluster.upsert_node(NodeBuilder::new("late", "arm64").info()),
        NodeUpsert::Added
    ));
    assert_eq!(cluster.node("late").unwrap().pods.len(), 1);
    assert!(cluster.remove_node("late").is_some());
    assert!(cluster.node("late").is_none());
    assert_eq!(cluster.remove_pod("uid-ns-p").unwrap().name, "p");
    assert_eq!(cluster.pod_count(), 0);
}

#[test]
fn zone_counts_follow_pods_and_node_labels() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(
        NodeBuilder::new("n1", "amd64")
            .label(ZONE_LABEL, "a")
            .info(),
    );
    let owned = |name: &str| {
        Arc::new(
            PodBuilder::new("ns", name)
                .owner("ReplicaSet", "rs")
                .node("n1")
                .info(),
        )
    };
    cluster.add_assigned_pod(owned("p1"));
    cluster.add_assigned_pod(owned("p2"));
    assert_eq!(
        cluster.controller_zone_counts("rs").unwrap().get("a"),
        Some(&2)
    );
    cluster.upsert_node(
        NodeBuilder::new("n1", "amd64")
            .label(ZONE_LABEL, "b")
            .info(),
    );
    let zones = cluster.controller_zone_counts("rs").unwrap();
    assert_eq!((zones.get("a"), zones.get("b")), (None, Some(&2)));
    cluster.remove_pod("uid-ns-p1");
    cluster.remove_node("n1");
    assert!(cluster.controller_zone_counts("rs").is_none());
    cluster.upsert_node(
        NodeBuilder::new("n1", "amd64")
            .label(ZONE_LABEL, "c")
            .info(),
    );
    assert_eq!(
        cluster.controller_zone_counts("rs").unwrap().get("c"),
        Some(&1)
    );
}

#[test]
fn assigned_pod_updates_say_what_changed() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    let p = pod("p", None);
    cluster.assume(p.clone(), "n1");
    assert!(matches!(
        cluster.add_assigned_pod(pod("p", Some("n1"))),
        AssignedPodUpsert::Added
    ));
    let mut status_only = (*pod("p", Some("n1"))).clone();
    status_only.resource_version = "7".into();
    assert!(matches!(
        cluster.add_assigned_pod(Arc::new(status_only)),
        AssignedPodUpsert::Unchanged
    ));
    let relabelled = Arc::new(
        PodBuilder::new("ns", "p")
            .label("app", "x")
            .container("c", "i", "1", "1Gi")
            .node("n1")
            .info(),
    );
    match cluster.add_assigned_pod(relabelled) {
        AssignedPodUpsert::Updated { old } => assert!(old.labels.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(cluster.pod("uid-ns-p").unwrap().labels["app"], "x");
}

#[test]
fn claims_of_placed_pods_are_counted() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    let p = PodBuilder::new("ns", "p").pvc("data", "claim").info();
    cluster.assume(Arc::new(p.clone()), "n1");
    assert_eq!(cluster.storage().claim_users("ns/claim"), 1);
    cluster.forget(&p.uid);
    assert_eq!(cluster.storage().claim_users("ns/claim"), 0);
}

#[test]
fn namespace_labels_report_changes() {
    let mut cluster = ClusterState::new();
    let labels: Labels = [("team".to_owned(), "x".to_owned())].into();
    assert!(cluster.set_namespace_labels("a", labels.clone()));
    assert!(!cluster.set_namespace_labels("a", labels));
    assert!(cluster.remove_namespace("a"));
    assert!(cluster.namespace_labels("a").is_none());
}

#[test]
fn node_updates_keep_pods_and_indexes_survive_removal() {
    let mut cluster = ClusterState::new();
    for n in ["a", "b", "c"] {
        cluster.upsert_node(NodeBuilder::new(n, "amd64").info());
    }
    cluster.add_assigned_pod(pod("p", Some("c")));
    cluster.remove_node("a");
    let updated = NodeBuilder::new("c", "amd64").label("zone", "z1").info();
    match cluster.upsert_node(updated) {
        NodeUpsert::Updated { old, changes } => {
            assert!(changes.contains(NodeChanges::LABELS));
            assert!(!changes.contains(NodeChanges::TAINTS));
            assert!(old.label("zone").is_none());
            assert!(old.pods.is_empty());
        }
        other => panic!("{other:?}"),
    }
    // The same node again (a heartbeat): no change anyone could act on.
    let same = NodeBuilder::new("c", "amd64").label("zone", "z1").info();
    assert!(matches!(cluster.upsert_node(same), NodeUpsert::Unchanged));
    let c = cluster.node("c").unwrap();
    assert_eq!(c.pods.len(), 1);
    assert_eq!(c.label("zone"), Some("z1"));
    assert!(cluster.node("b").is_some());
}

proptest::proptest! {
    /// After any sequence of node adds, relabels and removals and pods (with required
    /// anti-affinity, preferred affinity, or none) coming and going, on known nodes or
    /// not yet known ones, the counted affinity terms, the pods by label and the
    /// controllers' pods per zone are what a walk over every pod on every node builds.
    #[test]
    fn the_affinity_terms_and_pod_labels_follow_every_pod_and_node_change(
        ops in proptest::collection::vec((0u8..5, 0usize..6, 0usize..12, 0u8..3), 1..80)
    ) {
        use k8s_openapi::api::core::v1 as core;
        use crate::model::{affinity_terms::AffinityTerms, pod_labels::PodsByLabel};
        let term = |key: &str| core::PodAffinityTerm {
            label_selector: None,
            topology_key: key.into(),
            ..Default::default()
        };
        let mut cluster = ClusterState::new();
        for (op, node, pod, kind) in ops {
            match op {
                0 | 1 => {
                    // Added, or relabelled to another zone.
                    let zone = ["a", "b", "c"][usize::from(kind)];
                    cluster.upsert_node(
                        NodeBuilder::new(&format!("n{node}"), "amd64").label(ZONE_LABEL, zone).info(),
                    );
                }
                2 => {
                    cluster.remove_node(&format!("n{node}"));
                }
                3 => {
                    let mut b = PodBuilder::new("ns", &format!("p{pod}"))
                        .label("app", ["a", "b"][pod % 2])
                        .owner("ReplicaSet", ["rs0", "rs1", "rs2"][pod % 3])
                        .node(&format!("n{node}"));
                    b = match kind {
                        0 => b,
                        1 => b.affinity(core::Affinity {
                            pod_anti_affinity: Some(core::PodAntiAffinity {
                                required_during_scheduling_ignored_during_execution: Some(vec![term("kubernetes.io/hostname")]),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        _ => b.affinity(core::Affinity {
                            pod_affinity: Some(core::PodAffinity {
                                preferred_during_scheduling_ignored_during_execution: Some(vec![
                                    core::WeightedPodAffinityTerm {
                                        weight: 5,
                                        pod_affinity_term: term(ZONE_LABEL),
                                    },
                                ]),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    };
                    cluster.add_assigned_pod(Arc::new(b.info()));
                }
                _ => {
                    cluster.remove_pod(&format!("uid-ns-p{pod}"));
                }
            }
            let mut terms = AffinityTerms::default();
            let mut labels = PodsByLabel::default();
            let mut zones: HashMap<String, HashMap<String, u32>> = HashMap::default();
            for (position, node) in cluster.nodes().iter().enumerate() {
                for pod in &node.pods {
                    terms.count(pod, node, true);
                    labels.add(pod, position, node.zone.as_deref());
                    if let (Some(owner), Some(zone)) = (&pod.controller_uid, &node.zone) {
                        *zones.entry(owner.clone()).or_default().entry(zone.to_string()).or_default() += 1;
                    }
                }
            }
            proptest::prop_assert_eq!(cluster.affinity_terms(), &terms);
            proptest::prop_assert_eq!(cluster.pod_label_index().entries(), labels.entries());
            for owner in ["rs0", "rs1", "rs2"] {
                let uid = PodBuilder::new("ns", "x").owner("ReplicaSet", owner).info().controller_uid.unwrap();
                let got: HashMap<String, u32> = cluster
                    .controller_zone_counts(&uid)
                    .map(|z| z.iter().map(|(k, v)| (k.clone(), *v)).collect())
                    .unwrap_or_default();
                proptest::prop_assert_eq!(got, zones.remove(&uid).unwrap_or_default());
            }
        }
    }
}

#[test]
fn an_assumed_pod_is_shared_with_the_caller_not_copied() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    let p = pod("p", None);
    let placed = cluster.assume(p, "n1");
    assert_eq!(placed.node_name.as_deref(), Some("n1"));
    assert!(Arc::ptr_eq(&placed, &cluster.node("n1").unwrap().pods[0]));
    // A caller that still shares its pod keeps its unplaced copy.
    let q = pod("q", None);
    let placed_q = cluster.assume(q.clone(), "n1");
    assert_eq!(q.node_name, None);
    assert_eq!(placed_q.node_name.as_deref(), Some("n1"));
}

/// The nodes of a pool share one allocation of their labels (issue 53), and the hostname
/// each keeps apart still answers selectors and counts as a label change.
#[test]
fn nodes_of_a_pool_share_their_labels_and_keep_their_hostnames() {
    use crate::model::node::HOSTNAME_LABEL;
    use multiarch_policy::selectors::NodeSelector;

    let mut cluster = ClusterState::new();
    for name in ["a", "b"] {
        let node = NodeBuilder::new(name, "arm64")
            .label(ZONE_LABEL, "z1")
            .label("pool", "gpu")
            .label(HOSTNAME_LABEL, &format!("host-{name}"))
            .info();
        cluster.upsert_node(node);
    }
    let (a, b) = (cluster.node("a").unwrap(), cluster.node("b").unwrap());
    assert!(Arc::ptr_eq(&a.pool_labels, &b.pool_labels));
    assert!(!a.pool_labels.contains_key(HOSTNAME_LABEL));
    assert_eq!(a.label(HOSTNAME_LABEL), Some("host-a"));
    assert_eq!(
        a.labels().get(HOSTNAME_LABEL).map(String::as_str),
        Some("host-a")
    );
    assert_eq!(a.label("pool"), Some("gpu"));

    let on_host_b = NodeSelector::from(&k8s_openapi::api::core::v1::NodeSelector {
        node_selector_terms: vec![k8s_openapi::api::core::v1::NodeSelectorTerm {
            match_expressions: Some(vec![k8s_openapi::api::core::v1::NodeSelectorRequirement {
                key: HOSTNAME_LABEL.into(),
                operator: "In".into(),
                values: Some(vec!["host-b".into()]),
            }]),
            match_fields: None,
        }],
    });
    assert!(!on_host_b.matches(a, &a.name));
    assert!(on_host_b.matches(b, &b.name));

    // A node renamed on its host (only the hostname label changes) changes labels.
    let moved = NodeBuilder::new("a", "arm64")
        .label(ZONE_LABEL, "z1")
        .label("pool", "gpu")
        .label(HOSTNAME_LABEL, "host-c")
        .info();
    match cluster.upsert_node(moved) {
        NodeUpsert::Updated { changes, .. } => assert!(changes.contains(NodeChanges::LABELS)),
        other => panic!("{other:?}"),
    }
    let (a, b) = (cluster.node("a").unwrap(), cluster.node("b").unwrap());
    assert!(Arc::ptr_eq(&a.pool_labels, &b.pool_labels));
    assert_eq!(a.label(HOSTNAME_LABEL), Some("host-c"));
}
