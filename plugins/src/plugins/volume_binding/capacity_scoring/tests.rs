//! kube-scheduler's `scorer_test.go` (`TestScore`) and the scoring cases of
//! `volume_binding_test.go` (`TestVolumeBinding`), run through PreFilter, Filter,
//! PreScore and Score as a cycle does.

use multiarch_crd::{StorageCapacityScoring, UtilizationShapePoint};
use multiarch_policy::selectors::LabelSelector;

use super::*;
use crate::{
    framework::{Code, FilterPlugin, PreFilterPlugin},
    model::{
        cluster::ClusterState,
        node::NodeBuilder,
        pod::{PodBuilder, PodInfo},
        storage::{
            CsiDriverInfo, NO_PROVISIONER,
            builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
        },
    },
    testing::Fixture,
};

const GI: i64 = 1 << 30;
const CAPACITY_CLASS: &str = "wait-sc-with-storage-capacity";
const CAPACITY_DRIVER: &str = "driver-with-storage-capacity";
const NODE_KEY: &str = "nodeKey";

fn shape(points: &[(i32, i32)]) -> Vec<UtilizationShapePoint> {
    points
        .iter()
        .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
        .collect()
}

/// The shape kube-scheduler's tests use (`defaultShapePoint` there, not its default):
/// the score rises with utilization.
fn rising() -> Vec<UtilizationShapePoint> {
    shape(&[(0, 0), (100, 10)])
}

fn classes(resources: &[(i64, i64)]) -> Vec<ClassStorage<'static>> {
    const NAMES: [&str; 2] = ["hdd", "ssd"];
    resources
        .iter()
        .zip(NAMES)
        .map(|(&(requested, capacity), class)| ClassStorage {
            class,
            requested,
            capacity,
        })
        .collect()
}

#[test]
fn the_score_of_class_utilizations_is_kube_schedulers() {
    let rising = UtilizationScore::new(&rising());
    // kube-scheduler's custom shape {50, 0}, {80, 30}, {100, 50} in node scores.
    let custom = UtilizationScore::new(&shape(&[(50, 0), (80, 3), (100, 5)]));
    // (scorer, (requested, capacity) per class, node score)
    type Case<'a> = (&'a UtilizationScore, &'a [(i64, i64)], i64);
    let cases: &[Case<'_>] = &[
        (&rising, &[(0, 100)], 0),
        (&rising, &[(30, 100)], 30),
        (&rising, &[(50, 100)], 50),
        (&rising, &[(100, 100)], 100),
        (&rising, &[(0, 100), (0, 100)], 0),
        (&rising, &[(0, 100), (30, 100)], 15),
        (&rising, &[(30, 100), (30, 100)], 30),
        (&rising, &[(30, 100), (60, 100)], 45),
        (&rising, &[(50, 100), (50, 100)], 50),
        (&rising, &[(50, 100), (100, 100)], 75),
        (&rising, &[(100, 100), (100, 100)], 100),
        (&custom, &[(0, 100), (0, 100)], 0),
        (&custom, &[(0, 100), (30, 100)], 0),
        (&custom, &[(30, 100), (30, 100)], 0),
        (&custom, &[(30, 100), (60, 100)], 5),
        (&custom, &[(50, 100), (100, 100)], 25),
        (&custom, &[(90, 100), (90, 100)], 40),
        (&custom, &[(100, 100), (100, 100)], 50),
    ];
    for (i, &(scorer, resources, want)) in cases.iter().enumerate() {
        assert_eq!(
            scorer.node(&classes(resources)),
            want,
            "case {i}: {resources:?}"
        );
    }
}

#[test]
fn no_capacity_or_more_than_it_counts_as_full_and_no_class_scores_zero() {
    let rising = UtilizationScore::new(&rising());
    assert_eq!(rising.node(&classes(&[(10, 0)])), 100);
    assert_eq!(rising.node(&classes(&[(200, 100)])), 100);
    assert_eq!(rising.node(&[]), 0);
    // A petabyte-scale request does not overflow.
    assert_eq!(rising.node(&classes(&[(i64::MAX / 2, i64::MAX)])), 49);
}

#[test]
fn an_empty_shape_is_kube_schedulers_default_and_a_bad_one_is_made_safe() {
    assert_eq!(
        UtilizationScore::new(&[]),
        UtilizationScore::new(&shape(&[(0, 10), (100, 0)]))
    );
    // Unsorted points, a repeated utilization and out-of-range values: sorted, the
    // first of the repeated kept, clamped.
    assert_eq!(
        UtilizationScore::new(&shape(&[(100, 0), (0, 10), (100, 7), (150, -3)])),
        UtilizationScore::new(&shape(&[(0, 10), (100, 0)]))
    );
    // One point: flat.
    let flat = UtilizationScore::new(&shape(&[(40, 6)]));
    assert_eq!(flat.node(&classes(&[(0, 100)])), 60);
    assert_eq!(flat.node(&classes(&[(90, 100)])), 60);
    assert_eq!(
        UtilizationScore::configured(None),
        None,
        "unset: no storage score"
    );
    assert_eq!(
        UtilizationScore::configured(Some(&StorageCapacityScoring::default())),
        Some(UtilizationScore::new(&[]))
    );
}

/// Nodes named as given, each with `nodeKey` = its name (what the capacities select).
fn nodes(names: &[&str]) -> ClusterState {
    let mut cluster = ClusterState::new();
    for name in names {
        cluster.upsert_node(NodeBuilder::new(name, "amd64").label(NODE_KEY, name).info());
    }
    cluster
        .storage_mut()
        .upsert_class(ClassBuilder::new("wait-sc", NO_PROVISIONER, true).info());
    cluster
        .storage_mut()
        .upsert_class(ClassBuilder::new("wait-hdd-sc", NO_PROVISIONER, true).info());
    cluster
        .storage_mut()
        .upsert_class(ClassBuilder::new(CAPACITY_CLASS, CAPACITY_DRIVER, true).info());
    cluster.storage_mut().upsert_csi_driver(CsiDriverInfo {
        name: CAPACITY_DRIVER.into(),
        storage_capacity: true,
    });
    cluster
}

fn local_volume(cluster: &mut ClusterState, name: &str, class: &str, size: &str, node: &str) {
    cluster
        .storage_mut()
        .upsert_volume(VolumeBuilder::new(name, class, size).local_on(node).info());
}

fn claim(cluster: &mut ClusterState, name: &str, class: &str, size: &str) {
    cluster
        .storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", name, class, size).info());
}

fn capacity(cluster: &mut ClusterState, node: &str, gib: i64) {
    cluster.storage_mut().upsert_capacity(StorageCapacityInfo {
        key: format!("kube-system/{node}"),
        storage_class: CAPACITY_CLASS.into(),
        node_topology: Some(LabelSelector::from_labels(
            &[(NODE_KEY.to_owned(), node.to_owned())].into(),
        )),
        capacity: Some(gib * GI),
        maximum_volume_size: None,
    });
}

fn pod(claims: &[&str]) -> PodInfo {
    claims
        .iter()
        .enumerate()
        .fold(PodBuilder::new("ns", "pod-a"), |pod, (i, claim)| {
            pod.pvc(&format!("v{i}"), claim)
        })
        .info()
}

/// A cycle's view: per node, its score, or `None` where Filter rejected it; `None` for
/// the whole when PreScore skipped.
fn scores(plugin: &VolumeBinding, pod: PodInfo, cluster: ClusterState) -> Option<Vec<Option<i64>>> {
    let f = Fixture::new(pod).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let pre = plugin.pre_filter(&ctx, &mut state);
    assert!(matches!(pre.code, Code::Success | Code::Skip), "{pre:?}");
    let all = f.cluster.nodes();
    let feasible: Vec<&NodeInfo> = all
        .iter()
        .filter(|n| pre.code == Code::Skip || plugin.filter(&ctx, &state, n).is_success())
        .collect();
    if plugin.pre_score(&ctx, &mut state, &feasible).code == Code::Skip {
        return None;
    }
    let mut out = vec![-1; feasible.len()];
    plugin.score_all(&ctx, &state, &feasible, &mut out);
    Some(
        all.iter()
            .map(|n| {
                feasible
                    .iter()
                    .position(|f| f.name == n.name)
                    .map(|at| out[at])
            })
            .collect(),
    )
}

fn scoring(points: Vec<UtilizationShapePoint>) -> VolumeBinding {
    VolumeBinding::with_capacity_scoring(Some(UtilizationScore::new(&points)))
}

#[test]
fn local_volumes_with_close_capacity_are_preferred() {
    let mut c = nodes(&["node-a", "node-b", "node-c"]);
    claim(&mut c, "pvc-a", "wait-sc", "50Gi");
    for (volume, size, node) in [
        ("pv-a-0", "200Gi", "node-a"),
        ("pv-a-1", "200Gi", "node-a"),
        ("pv-b-0", "100Gi", "node-b"),
        ("pv-b-1", "100Gi", "node-b"),
    ] {
        local_volume(&mut c, volume, "wait-sc", size, node);
    }
    assert_eq!(
        scores(&scoring(rising()), pod(&["pvc-a"]), c.clone()),
        Some(vec![Some(25), Some(50), None])
    );
    // kube-scheduler's default shape prefers the emptier node.
    assert_eq!(
        scores(&scoring(Vec::new()), pod(&["pvc-a"]), c.clone()),
        Some(vec![Some(75), Some(50), None])
    );
    // Not configured: no score at all (kube-scheduler 1.36 by default).
    assert_eq!(scores(&VolumeBinding::default(), pod(&["pvc-a"]), c), None);
}

#[test]
fn local_volumes_with_close_capacity_are_preferred_with_two_claims_of_two_classes() {
    let mut c = nodes(&["node-a", "node-b", "node-c"]);
    claim(&mut c, "pvc-0", "wait-sc", "50Gi");
    claim(&mut c, "pvc-1", "wait-hdd-sc", "100Gi");
    for (volume, class, size, node) in [
        ("pv-a-0", "wait-sc", "200Gi", "node-a"),
        ("pv-a-1", "wait-sc", "200Gi", "node-a"),
        ("pv-a-2", "wait-hdd-sc", "200Gi", "node-a"),
        ("pv-a-3", "wait-hdd-sc", "200Gi", "node-a"),
        ("pv-b-0", "wait-sc", "100Gi", "node-b"),
        ("pv-b-1", "wait-sc", "100Gi", "node-b"),
        ("pv-b-2", "wait-hdd-sc", "100Gi", "node-b"),
        ("pv-b-3", "wait-hdd-sc", "100Gi", "node-b"),
    ] {
        local_volume(&mut c, volume, class, size, node);
    }
    assert_eq!(
        scores(&scoring(rising()), pod(&["pvc-0", "pvc-1"]), c),
        Some(vec![Some(38), Some(75), None])
    );
}

#[test]
fn zonal_volumes_with_close_capacity_are_preferred_with_either_shape() {
    let mut c = ClusterState::new();
    for (name, zone) in [
        ("zone-a-node-a", "zone-a"),
        ("zone-a-node-b", "zone-a"),
        ("zone-b-node-a", "zone-b"),
        ("zone-b-node-b", "zone-b"),
        ("zone-c-node-a", "zone-c"),
        ("zone-c-node-b", "zone-c"),
    ] {
        c.upsert_node(
            NodeBuilder::new(name, "amd64")
                .label("topology.kubernetes.io/zone", zone)
                .info(),
        );
    }
    c.storage_mut()
        .upsert_class(ClassBuilder::new("wait-sc", NO_PROVISIONER, true).info());
    claim(&mut c, "pvc-a", "wait-sc", "50Gi");
    for (volume, size, zone) in [
        ("pv-a-0", "200Gi", "zone-a"),
        ("pv-a-1", "200Gi", "zone-a"),
        ("pv-b-0", "100Gi", "zone-b"),
        ("pv-b-1", "100Gi", "zone-b"),
    ] {
        c.storage_mut().upsert_volume(
            VolumeBuilder::new(volume, "wait-sc", size)
                .affinity("topology.kubernetes.io/zone", &[zone])
                .info(),
        );
    }
    assert_eq!(
        scores(&scoring(rising()), pod(&["pvc-a"]), c.clone()),
        Some(vec![Some(25), Some(25), Some(50), Some(50), None, None])
    );
    assert_eq!(
        scores(
            &scoring(shape(&[(0, 0), (50, 3), (100, 5)])),
            pod(&["pvc-a"]),
            c
        ),
        Some(vec![Some(15), Some(15), Some(30), Some(30), None, None])
    );
}

/// Capacities of 100, 50 and 10 GiB (or as given) for a 10 GiB claim.
fn provisioning(capacities: [i64; 3]) -> ClusterState {
    let mut c = nodes(&["node-a", "node-b", "node-c"]);
    claim(&mut c, "pvc-dynamic", CAPACITY_CLASS, "10Gi");
    for (node, gib) in ["node-a", "node-b", "node-c"].into_iter().zip(capacities) {
        capacity(&mut c, node, gib);
    }
    c
}

#[test]
fn provisioning_is_scored_by_the_capacity_it_would_come_from() {
    let score = |plugin: &VolumeBinding, capacities| {
        scores(plugin, pod(&["pvc-dynamic"]), provisioning(capacities))
    };
    // "storage capacity score"
    assert_eq!(
        score(&scoring(rising()), [100, 50, 10]),
        Some(vec![Some(10), Some(20), Some(100)])
    );
    // "prefer node with least allocatable"
    assert_eq!(
        score(&scoring(rising()), [100, 20, 10]),
        Some(vec![Some(10), Some(50), Some(100)])
    );
    // "prefer node with maximum allocatable": kube-scheduler's default shape.
    assert_eq!(
        score(&scoring(shape(&[(0, 10), (100, 0)])), [100, 20, 10]),
        Some(vec![Some(90), Some(50), Some(0)])
    );
    assert_eq!(
        score(&scoring(Vec::new()), [100, 20, 10]),
        Some(vec![Some(90), Some(50), Some(0)])
    );
}

#[test]
fn static_bindings_are_scored_instead_of_provisioning() {
    let mut c = provisioning([100, 50, 10]);
    claim(&mut c, "pvc-static", "wait-sc", "50Gi");
    for node in ["node-a", "node-b", "node-c"] {
        local_volume(
            &mut c,
            &format!("pv-static-{node}"),
            "wait-sc",
            "100Gi",
            node,
        );
    }
    assert_eq!(
        scores(&scoring(rising()), pod(&["pvc-dynamic", "pvc-static"]), c),
        Some(vec![Some(50), Some(50), Some(50)])
    );
}

#[test]
fn two_claims_provisioned_from_one_pool_count_its_capacity_once() {
    let mut c = nodes(&["node-a"]);
    claim(&mut c, "pvc-dynamic-0", CAPACITY_CLASS, "50Gi");
    claim(&mut c, "pvc-dynamic-1", CAPACITY_CLASS, "50Gi");
    capacity(&mut c, "node-a", 100);
    assert_eq!(
        scores(
            &scoring(rising()),
            pod(&["pvc-dynamic-0", "pvc-dynamic-1"]),
            c
        ),
        Some(vec![Some(100)])
    );
}

#[test]
fn pods_with_nothing_to_bind_or_provision_are_not_scored() {
    let mut c = nodes(&["node-a", "node-b"]);
    // No claims.
    assert_eq!(scores(&scoring(rising()), pod(&[]), c.clone()), None);
    // A bound claim only.
    local_volume(&mut c, "pv", "wait-sc", "10Gi", "node-b");
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "bound", "wait-sc", "1Gi")
            .bound_to("pv")
            .info(),
    );
    assert_eq!(scores(&scoring(rising()), pod(&["bound"]), c.clone()), None);
    // A claim whose driver publishes no capacity: provisioned, but scored 0 everywhere.
    c.storage_mut()
        .upsert_class(ClassBuilder::new("plain", "csi.example.com", true).info());
    claim(&mut c, "plain", "plain", "1Gi");
    assert_eq!(
        scores(&scoring(rising()), pod(&["plain"]), c),
        Some(vec![Some(0), Some(0)])
    );
}

#[test]
fn the_pool_a_claim_would_come_from_is_the_first_by_name_that_fits() {
    let mut c = nodes(&["node-a"]);
    claim(&mut c, "pvc", CAPACITY_CLASS, "10Gi");
    for (key, gib) in [
        ("kube-system/b", 20),
        ("kube-system/a", 5),
        ("kube-system/c", 100),
    ] {
        c.storage_mut().upsert_capacity(StorageCapacityInfo {
            key: key.into(),
            storage_class: CAPACITY_CLASS.into(),
            node_topology: Some(LabelSelector::from_labels(
                &[(NODE_KEY.to_owned(), "node-a".to_owned())].into(),
            )),
            capacity: Some(gib * GI),
            maximum_volume_size: None,
        });
    }
    // "a" is too small; "b" (20 GiB) is the first that fits: 10 of 20 is 50 %.
    assert_eq!(
        scores(&scoring(rising()), pod(&["pvc"]), c),
        Some(vec![Some(50)])
    );
}
