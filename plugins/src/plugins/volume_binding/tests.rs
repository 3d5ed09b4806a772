//! The cases of kube-scheduler's `volume_binding_test.go` and `binder_test.go` that decide
//! placement, with kube-scheduler's reasons.

use super::*;
use crate::{
    model::{
        node::NodeBuilder,
        pod::PodBuilder,
        storage::{
            CsiDriverInfo, StorageCapacityInfo,
            builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
        },
    },
    testing::Fixture,
};

/// Nodes n1 (zone a) and n2 (zone b).
fn cluster() -> ClusterState {
    let mut cluster = ClusterState::new();
    for (name, zone) in [("n1", "a"), ("n2", "b")] {
        cluster.upsert_node(
            NodeBuilder::new(name, "amd64")
                .label("topology.kubernetes.io/zone", zone)
                .info(),
        );
    }
    cluster
}

/// PreFilter, then Filter on every node it leaves: per node, the status message ("" when
/// it fits).
fn run(pod: PodInfo, cluster: ClusterState) -> Result<Vec<(String, String)>, Status> {
    let f = Fixture::new(pod).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let pre = VolumeBinding::default().pre_filter(&ctx, &mut state);
    if pre.code != Code::Success {
        return Err(pre);
    }
    let eligible = VolumeBinding::default().eligible_nodes(&ctx, &state);
    Ok(f.cluster
        .nodes()
        .iter()
        .filter(|n| eligible.as_ref().is_none_or(|e| e.contains(&n.name)))
        .map(|n| {
            (
                n.name.clone(),
                VolumeBinding::default().filter(&ctx, &state, n).message(),
            )
        })
        .collect())
}

fn pod_with_claim(claim: &str) -> PodInfo {
    PodBuilder::new("ns", "p").pvc("data", claim).info()
}

#[test]
fn pods_without_claims_are_skipped() {
    let err = run(PodBuilder::new("ns", "p").info(), cluster()).unwrap_err();
    assert_eq!(err.code, Code::Skip);
}

#[test]
fn missing_claims_and_unbound_immediate_claims_are_refused_as_kube_scheduler_does() {
    let err = run(pod_with_claim("does-not-exist"), cluster()).unwrap_err();
    assert_eq!(err.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        err.message(),
        "persistentvolumeclaim \"does-not-exist\" not found"
    );

    // The class does not exist: not delayed, so it waits for the PV controller.
    let mut c = cluster();
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "missing-sc", "nonexistent", "1Gi").info());
    let err = run(pod_with_claim("missing-sc"), c).unwrap_err();
    assert_eq!(err.message(), UNBOUND_IMMEDIATE);

    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("standard", "csi.example.com", false).info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "imm", "standard", "1Gi").info());
    assert_eq!(
        run(pod_with_claim("imm"), c).unwrap_err().message(),
        UNBOUND_IMMEDIATE
    );

    let mut c = cluster();
    let mut unset = ClassBuilder::new("unset", "p", true).info();
    unset.wait_for_first_consumer = None;
    c.storage_mut().upsert_class(unset);
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "c", "unset", "1Gi").info());
    let err = run(pod_with_claim("c"), c).unwrap_err();
    assert_eq!(err.code, Code::Error);
    assert_eq!(
        err.message(),
        "VolumeBindingMode not set for StorageClass \"unset\""
    );
}

#[test]
fn ephemeral_claims_must_exist_and_belong_to_the_pod() {
    let pod = PodBuilder::new("ns", "p").ephemeral("scratch").info();
    let err = run(pod.clone(), cluster()).unwrap_err();
    assert_eq!(
        err.message(),
        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
    );
    let mut c = cluster();
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "p-scratch", "", "1Gi")
            .owned_by_pod("someone-else", "uid-x")
            .bound_to("pv")
            .info(),
    );
    assert_eq!(
        run(pod.clone(), c).unwrap_err().message(),
        "PVC ns/p-scratch was not created for pod ns/p (pod is not owner)"
    );
    let mut c = cluster();
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "p-scratch", "", "1Gi")
            .owned_by_pod("p", &pod.uid)
            .bound_to("pv")
            .info(),
    );
    c.storage_mut()
        .upsert_volume(VolumeBuilder::new("pv", "", "1Gi").info());
    assert!(run(pod, c).unwrap().iter().all(|(_, m)| m.is_empty()));
}

#[test]
fn a_bound_local_volume_narrows_the_nodes_to_its_own() {
    let mut c = cluster();
    c.storage_mut().upsert_volume(
        VolumeBuilder::new("pv", "local", "10Gi")
            .local_on("n2")
            .info(),
    );
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "local", "1Gi")
            .bound_to("pv")
            .info(),
    );
    let per_node = run(pod_with_claim("data"), c).unwrap();
    assert_eq!(per_node, [("n2".to_owned(), String::new())]);
}

#[test]
fn a_bound_volume_filters_by_its_node_affinity() {
    let mut c = cluster();
    c.storage_mut().upsert_volume(
        VolumeBuilder::new("pv", "zonal", "10Gi")
            .affinity("topology.kubernetes.io/zone", &["b"])
            .info(),
    );
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "zonal", "1Gi")
            .bound_to("pv")
            .info(),
    );
    let per_node = run(pod_with_claim("data"), c).unwrap();
    assert_eq!(
        per_node,
        [
            ("n1".to_owned(), NODE_CONFLICT.to_owned()),
            ("n2".to_owned(), String::new())
        ]
    );
}

#[test]
fn a_claim_bound_to_a_missing_volume_fits_nowhere() {
    let mut c = cluster();
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "x", "1Gi")
            .bound_to("gone")
            .info(),
    );
    let per_node = run(pod_with_claim("data"), c).unwrap();
    assert!(
        per_node.iter().all(|(_, m)| m == PV_NOT_EXIST),
        "{per_node:?}"
    );
}

/// The recorded situation: local volumes exist but are `Pending` (no PV controller made
/// them `Available`) and the class cannot provision.
#[test]
fn wait_for_first_consumer_without_available_volumes() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("local-wffc", NO_PROVISIONER, true).info());
    for (pv, node) in [("pv-0", "n1"), ("pv-1", "n2")] {
        c.storage_mut().upsert_volume(
            VolumeBuilder::new(pv, "local-wffc", "1Gi")
                .local_on(node)
                .phase("Pending")
                .info(),
        );
    }
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "wffc", "local-wffc", "1Gi").info());
    let per_node = run(pod_with_claim("wffc"), c).unwrap();
    assert!(
        per_node.iter().all(|(_, m)| m == BIND_CONFLICT),
        "{per_node:?}"
    );
}

#[test]
fn wait_for_first_consumer_binds_an_available_volume_on_its_node() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("local", NO_PROVISIONER, true).info());
    c.storage_mut().upsert_volume(
        VolumeBuilder::new("pv-n2", "local", "5Gi")
            .local_on("n2")
            .info(),
    );
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "local", "1Gi").info());
    let pod = pod_with_claim("data");
    let per_node = run(pod.clone(), c.clone()).unwrap();
    assert_eq!(
        per_node,
        [
            ("n1".to_owned(), BIND_CONFLICT.to_owned()),
            ("n2".to_owned(), String::new())
        ]
    );
    let f = Fixture::new(pod).with_cluster(c);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(
        VolumeBinding::default()
            .pre_filter(&ctx, &mut state)
            .is_success()
    );
    let plan = binding_plan(&ctx, &state, f.cluster.node("n2").unwrap());
    assert_eq!(plan.bindings.len(), 1);
    assert_eq!(plan.bindings[0].volume, "pv-n2");
    assert_eq!(plan.bindings[0].claim.name, "data");
    assert!(plan.bindings[0].bound_by_scheduler);
    assert!(plan.provisions.is_empty());
}

#[test]
fn wait_for_first_consumer_provisions_where_the_class_allows() {
    let mut c = cluster();
    c.storage_mut().upsert_class(
        ClassBuilder::new("zonal", "csi.example.com", true)
            .allowed("topology.kubernetes.io/zone", &["a"])
            .info(),
    );
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "zonal", "1Gi").info());
    let pod = pod_with_claim("data");
    let per_node = run(pod.clone(), c.clone()).unwrap();
    assert_eq!(
        per_node,
        [
            ("n1".to_owned(), String::new()),
            ("n2".to_owned(), BIND_CONFLICT.to_owned())
        ]
    );
    let f = Fixture::new(pod).with_cluster(c);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(
        VolumeBinding::default()
            .pre_filter(&ctx, &mut state)
            .is_success()
    );
    let plan = binding_plan(&ctx, &state, f.cluster.node("n1").unwrap());
    assert!(plan.bindings.is_empty());
    assert_eq!(plan.provisions.len(), 1);
    assert_eq!(plan.provisions[0].claim.name, "data");
}

#[test]
fn a_selected_node_keeps_the_claim_there() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("dyn", "csi.example.com", true).info());
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "dyn", "1Gi")
            .selected_node("n2")
            .info(),
    );
    let per_node = run(pod_with_claim("data"), c).unwrap();
    assert_eq!(
        per_node,
        [
            ("n1".to_owned(), BIND_CONFLICT.to_owned()),
            ("n2".to_owned(), String::new())
        ]
    );
}

#[test]
fn storage_capacity_is_checked_for_drivers_that_publish_it() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("cap", "csi.example.com", true).info());
    c.storage_mut().upsert_csi_driver(CsiDriverInfo {
        name: "csi.example.com".into(),
        storage_capacity: true,
    });
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "cap", "5Gi").info());
    c.storage_mut().upsert_capacity(StorageCapacityInfo {
        key: "kube-system/a".into(),
        storage_class: "cap".into(),
        node_topology: Some(multiarch_policy::selectors::LabelSelector::from_labels(
            &[("topology.kubernetes.io/zone".to_owned(), "a".to_owned())].into(),
        )),
        capacity: Some(10 << 30),
        maximum_volume_size: None,
    });
    c.storage_mut().upsert_capacity(StorageCapacityInfo {
        key: "kube-system/b".into(),
        storage_class: "cap".into(),
        node_topology: Some(multiarch_policy::selectors::LabelSelector::from_labels(
            &[("topology.kubernetes.io/zone".to_owned(), "b".to_owned())].into(),
        )),
        capacity: Some(1 << 30),
        maximum_volume_size: None,
    });
    let per_node = run(pod_with_claim("data"), c).unwrap();
    assert_eq!(
        per_node,
        [
            ("n1".to_owned(), String::new()),
            ("n2".to_owned(), NOT_ENOUGH_SPACE.to_owned())
        ]
    );
}

#[test]
fn a_local_volume_that_also_requires_a_label_is_checked_against_it() {
    // The hostname index finds both volumes on n1; only the hostname-only one is taken
    // as fitting without reading the node's labels.
    let plain = VolumeBuilder::new("pv-plain", "local", "5Gi")
        .local_on("n1")
        .info();
    let ssd = VolumeBuilder::new("pv-ssd", "local", "5Gi")
        .local_on("n1")
        .also_requiring("disk", &["ssd"])
        .info();
    assert!(plain.hostname_only_affinity);
    assert!(!ssd.hostname_only_affinity);
    assert_eq!(
        ssd.pinned_hostnames.as_deref(),
        Some(&["n1".to_owned()][..])
    );
    for (volumes, labelled, want) in [
        (vec![ssd.clone()], false, BIND_CONFLICT),
        (vec![ssd.clone()], true, ""),
        (vec![plain.clone()], false, ""),
    ] {
        let mut c = ClusterState::new();
        let mut node = NodeBuilder::new("n1", "amd64");
        if labelled {
            node = node.label("disk", "ssd");
        }
        c.upsert_node(node.info());
        c.storage_mut()
            .upsert_class(ClassBuilder::new("local", NO_PROVISIONER, true).info());
        for volume in volumes {
            c.storage_mut().upsert_volume(volume);
        }
        c.storage_mut()
            .upsert_claim(ClaimBuilder::new("ns", "data", "local", "1Gi").info());
        let result = run(pod_with_claim("data"), c).unwrap();
        assert_eq!(
            result,
            [("n1".to_owned(), want.to_owned())],
            "labelled: {labelled}"
        );
    }
}

#[test]
fn two_claims_get_two_volumes_smallest_first() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("local", NO_PROVISIONER, true).info());
    for (pv, size) in [("pv-small", "2Gi"), ("pv-big", "20Gi")] {
        c.storage_mut()
            .upsert_volume(VolumeBuilder::new(pv, "local", size).local_on("n1").info());
    }
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "big", "local", "10Gi").info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "small", "local", "1Gi").info());
    let pod = PodBuilder::new("ns", "p")
        .pvc("a", "big")
        .pvc("b", "small")
        .info();
    let f = Fixture::new(pod).with_cluster(c);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(
        VolumeBinding::default()
            .pre_filter(&ctx, &mut state)
            .is_success()
    );
    let plan = binding_plan(&ctx, &state, f.cluster.node("n1").unwrap());
    let pairs: Vec<(&str, &str)> = plan
        .bindings
        .iter()
        .map(|b| (b.claim.name.as_str(), b.volume.as_str()))
        .collect();
    assert_eq!(pairs, [("small", "pv-small"), ("big", "pv-big")]);
}

#[test]
fn queueing_hints_look_at_the_pods_own_claims() {
    let mut c = cluster();
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "local", "1Gi").info());
    let pod = pod_with_claim("data");
    let hint =
        |change: ClusterChange<'_>| VolumeBinding::default().queueing_hint(&pod, &change, &c);
    let mine = ClaimBuilder::new("ns", "data", "local", "1Gi").info();
    let other = ClaimBuilder::new("ns", "other", "local", "1Gi").info();
    let elsewhere = ClaimBuilder::new("other-ns", "data", "local", "1Gi").info();
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::Claim(&mine))),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::Claim(&other))),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::Claim(&elsewhere))),
        QueueingHint::QueueSkip
    );
    let same_class = VolumeBuilder::new("v", "local", "1Gi").info();
    let other_class = VolumeBuilder::new("v", "fast", "1Gi").info();
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::PersistentVolume(
            &same_class
        ))),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::PersistentVolume(
            &other_class
        ))),
        QueueingHint::QueueSkip
    );
    let class = ClassBuilder::new("local", NO_PROVISIONER, true).info();
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::StorageClass(&class))),
        QueueingHint::Queue
    );
    let node = NodeBuilder::new("n3", "amd64").info();
    assert_eq!(hint(ClusterChange::NodeAdded(&node)), QueueingHint::Queue);
    let tainted = NodeBuilder::new("n3", "amd64")
        .taint("k", "v", "NoSchedule")
        .info();
    assert_eq!(
        hint(ClusterChange::NodeUpdated {
            old: &node,
            new: &tainted,
            changes: NodeChanges::between(&node, &tainted)
        }),
        QueueingHint::QueueSkip
    );
}

/// The candidate nodes of a claim only local volumes can serve hold every node the
/// filter accepts (hostnames, not node names, are what volumes are pinned to); a class
/// that can provision offers no shortcut.
#[test]
fn candidate_nodes_of_a_local_claim_cover_every_node_that_fits() {
    let mut c = ClusterState::new();
    for i in 1..=6 {
        let name = format!("n{i}");
        let host = if i == 3 {
            "host-n3".to_owned()
        } else {
            name.clone()
        };
        c.upsert_node(
            NodeBuilder::new(&name, "amd64")
                .label("kubernetes.io/hostname", &host)
                .info(),
        );
    }
    c.storage_mut()
        .upsert_class(ClassBuilder::new("local", NO_PROVISIONER, true).info());
    c.storage_mut()
        .upsert_class(ClassBuilder::new("dynamic", "csi.example.com", true).info());
    for (pv, host, size) in [
        ("pv-2", "n2", "10Gi"),
        ("pv-3", "host-n3", "10Gi"),
        ("pv-5", "n5", "1Gi"),
    ] {
        c.storage_mut()
            .upsert_volume(VolumeBuilder::new(pv, "local", size).local_on(host).info());
    }
    // Claimed by another claim: not a candidate for this one.
    c.storage_mut().upsert_volume(
        VolumeBuilder::new("pv-4", "local", "10Gi")
            .local_on("n4")
            .claim_ref("ns", "other", "uid-other")
            .info(),
    );
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "local", "5Gi").info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "scratch", "dynamic", "5Gi").info());

    let f = Fixture::new(pod_with_claim("data")).with_cluster(c.clone());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert_eq!(
        VolumeBinding::default().pre_filter(&ctx, &mut state).code,
        Code::Success
    );
    let candidates = VolumeBinding::default()
        .candidate_nodes(&ctx, &state)
        .unwrap();
    let names: Vec<&str> = candidates
        .iter()
        .map(|&i| f.cluster.nodes()[i].name.as_str())
        .collect();
    assert_eq!(names, ["n2", "n3", "n5"]);
    for (i, node) in f.cluster.nodes().iter().enumerate() {
        let fits = VolumeBinding::default()
            .filter(&ctx, &state, node)
            .is_success();
        assert_eq!(
            fits,
            ["n2", "n3"].contains(&node.name.as_str()),
            "{}",
            node.name
        );
        assert!(
            !fits || candidates.contains(&i),
            "{} fits but is no candidate",
            node.name
        );
    }

    let f = Fixture::new(pod_with_claim("scratch")).with_cluster(c);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert_eq!(
        VolumeBinding::default().pre_filter(&ctx, &mut state).code,
        Code::Success
    );
    assert!(
        VolumeBinding::default()
            .candidate_nodes(&ctx, &state)
            .is_none()
    );
}

proptest::proptest! {
    /// Filter answers the same with its shortcuts (local volumes read from the summaries
    /// kept by position, no volume read for a claim that may use none) and without them
    /// (on a copy of the node, which has no position, with the shortcuts turned off in
    /// the state), whatever the local volumes, the claim and the class; and the
    /// summaries are what the first one used.
    #[test]
    fn filter_answers_alike_from_volume_summaries_and_from_the_volumes(
        volumes in proptest::collection::vec(
            (0usize..4, 1u8..5, proptest::bool::ANY, proptest::bool::ANY, proptest::bool::weighted(0.2), 0u8..3),
            0..10,
        ),
        request in 1u8..5,
        claim_rwx in proptest::bool::ANY,
        provisioner in proptest::bool::weighted(0.3),
        zone_a_only in proptest::bool::ANY,
    ) {
        let mut c = ClusterState::new();
        // n4 shares h0 with n0; n5 has no hostname.
        for (name, host, zone) in [
            ("n0", Some("h0"), "a"),
            ("n1", Some("h1"), "b"),
            ("n2", Some("h2"), "a"),
            ("n3", Some("h3"), "b"),
            ("n4", Some("h0"), "b"),
            ("n5", None, "a"),
        ] {
            let mut node = NodeBuilder::new(name, "amd64")
                .label("topology.kubernetes.io/zone", zone)
                .info();
            match host {
                Some(host) => {
                    node.hostname = Some(crate::model::hostname::Hostname::new(host));
                }
                None => {
                    node.hostname = None;
                }
            }
            c.upsert_node(node);
        }
        let mut class = ClassBuilder::new(
            "local",
            if provisioner { "local.csi.example.com" } else { NO_PROVISIONER },
            true,
        );
        if zone_a_only {
            class = class.allowed("topology.kubernetes.io/zone", &["a"]);
        }
        c.storage_mut().upsert_class(class.info());
        for (i, (host, size, rwx, available, deleting, zone)) in volumes.into_iter().enumerate() {
            let mut volume = VolumeBuilder::new(&format!("pv{i}"), "local", &format!("{}Gi", size * 10))
                .local_on(&format!("h{host}"))
                .access_modes(if rwx { &["ReadWriteMany"] } else { &["ReadWriteOnce"] })
                .phase(if available { "Available" } else { "Released" });
            if zone > 0 {
                volume = volume.also_requiring("topology.kubernetes.io/zone", &[["a", "b"][usize::from(zone % 2)]]);
            }
            let mut volume = volume.info();
            volume.deleting = deleting;
            c.storage_mut().upsert_volume(volume);
        }
        c.storage_mut().upsert_claim(
            ClaimBuilder::new("ns", "data", "local", &format!("{}Gi", request * 10))
                .access_modes(if claim_rwx { &["ReadWriteMany"] } else { &["ReadWriteOnce"] })
                .info(),
        );
        let f = Fixture::new(pod_with_claim("data")).with_cluster(c);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        proptest::prop_assert_eq!(VolumeBinding::default().pre_filter(&ctx, &mut state).code, Code::Success);
        let summarized = state
            .read::<ClaimsState>()
            .is_some_and(|s| s.delayed.iter().all(|d| d.local.is_some()));
        let any_volume = f.cluster.storage().hosts_with_unclaimed("local").next().is_some();
        proptest::prop_assert_eq!(summarized, any_volume);
        let mut reading = state.read::<ClaimsState>().cloned().unwrap_or_default();
        for delayed in &mut reading.delayed {
            delayed.local = None;
            delayed.none_pinned = false;
        }
        let mut read_state = CycleState::new();
        read_state.write(reading);
        for node in f.cluster.nodes() {
            proptest::prop_assert!(f.cluster.position_of(node).is_some());
            let shortcut = VolumeBinding::default().filter(&ctx, &state, node);
            let read = VolumeBinding::default().filter(&ctx, &read_state, &node.clone());
            proptest::prop_assert_eq!(&shortcut, &read, "{}", node.name);
        }
    }
}
