//! kube-scheduler's `csi_test.go`: attach limits per CSI driver.

use std::sync::Arc;

use super::*;
use crate::{
    framework::Code,
    model::{
        node::NodeBuilder,
        pod::PodBuilder,
        storage::{
            CsiNodeInfo, VolumeAttachmentInfo,
            builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
        },
    },
    testing::Fixture,
};

const DRIVER: &str = "ebs.csi.aws.com";

/// Node n1 attaches at most `limit` volumes of the driver; `bound` claims `c0..` are bound
/// to CSI volumes `v0..`.
fn cluster(limit: i64, bound: usize) -> ClusterState {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    cluster.storage_mut().upsert_csi_node(CsiNodeInfo {
        name: "n1".into(),
        limits: vec![(DRIVER.into(), limit)],
        migrated_plugins: vec!["kubernetes.io/aws-ebs".into()],
    });
    for i in 0..bound {
        cluster.storage_mut().upsert_volume(
            VolumeBuilder::new(&format!("v{i}"), "ebs", "1Gi")
                .csi(DRIVER, &format!("vol-{i}"))
                .info(),
        );
        cluster.storage_mut().upsert_claim(
            ClaimBuilder::new("ns", &format!("c{i}"), "ebs", "1Gi")
                .bound_to(&format!("v{i}"))
                .info(),
        );
    }
    cluster
}

fn verdict(pod: PodInfo, cluster: ClusterState) -> Status {
    let f = Fixture::new(pod).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let pre = NodeVolumeLimits.pre_filter(&ctx, &mut state);
    if pre.code != Code::Success {
        return pre;
    }
    NodeVolumeLimits.filter(&ctx, &state, f.cluster.node("n1").unwrap())
}

fn running(name: &str, claims: &[&str]) -> Arc<PodInfo> {
    let mut b = PodBuilder::new("ns", name).node("n1");
    for (i, c) in claims.iter().enumerate() {
        b = b.pvc(&format!("d{i}"), c);
    }
    Arc::new(b.info())
}

#[test]
fn the_limit_counts_distinct_volumes_of_the_driver() {
    let mut c = cluster(2, 3);
    c.add_assigned_pod(running("a", &["c0"]));
    c.add_assigned_pod(running("b", &["c1"]));
    let pod = PodBuilder::new("ns", "p").pvc("d", "c2").info();
    let status = verdict(pod.clone(), c.clone());
    assert_eq!(
        (status.code, status.message()),
        (Code::Unschedulable, REASON.to_owned())
    );
    // A volume already attached for another pod counts once.
    let sharing = PodBuilder::new("ns", "p").pvc("d", "c1").info();
    assert!(verdict(sharing, c.clone()).is_success());
    c.remove_pod("uid-ns-b");
    assert!(verdict(pod, c).is_success());
}

#[test]
fn attached_volumes_count_after_their_pod_is_gone() {
    let mut c = cluster(1, 2);
    c.storage_mut().upsert_attachment(VolumeAttachmentInfo {
        name: "csi-1".into(),
        node: "n1".into(),
        attacher: DRIVER.into(),
        volume: Some("v0".into()),
    });
    let pod = PodBuilder::new("ns", "p").pvc("d", "c1").info();
    assert_eq!(verdict(pod.clone(), c.clone()).message(), REASON);
    c.storage_mut().delete_attachment("csi-1");
    assert!(verdict(pod, c).is_success());
}

#[test]
fn unbound_claims_count_for_their_class_driver_and_in_tree_volumes_when_migrated() {
    let mut c = cluster(1, 1);
    c.add_assigned_pod(running("a", &["c0"]));
    c.storage_mut()
        .upsert_class(ClassBuilder::new("ebs", DRIVER, true).info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "new", "ebs", "1Gi").info());
    let unbound = PodBuilder::new("ns", "p").pvc("d", "new").info();
    assert_eq!(verdict(unbound, c.clone()).message(), REASON);
    let inline = PodBuilder::new("ns", "p").ebs("d", "vol-inline").info();
    assert_eq!(verdict(inline.clone(), c.clone()).message(), REASON);
    // Not migrated on this node: the in-tree volume is not a CSI volume there.
    c.storage_mut().upsert_csi_node(CsiNodeInfo {
        name: "n1".into(),
        limits: vec![(DRIVER.into(), 1)],
        migrated_plugins: vec![],
    });
    assert!(verdict(inline, c).is_success());
}

#[test]
fn no_csi_node_or_no_volumes_pass_and_a_missing_claim_is_named() {
    let mut c = ClusterState::new();
    c.upsert_node(NodeBuilder::new("n1", "amd64").info());
    assert_eq!(
        verdict(PodBuilder::new("ns", "p").info(), c.clone()).code,
        Code::Skip
    );
    let missing = PodBuilder::new("ns", "p").pvc("d", "nope").info();
    let status = verdict(missing, c);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        "looking up PVC ns/nope: persistentvolumeclaim \"nope\" not found"
    );
}

#[test]
fn pre_filter_skips_only_while_no_node_limits_a_driver_of_the_pods_volumes() {
    let mut c = cluster(1, 2);
    c.add_assigned_pod(running("a", &["c0"]));
    let pod = PodBuilder::new("ns", "p").pvc("d", "c1").info();
    assert_eq!(verdict(pod.clone(), c.clone()).message(), REASON);
    // Another driver's limit does not make this driver's volumes count.
    c.storage_mut().upsert_csi_node(CsiNodeInfo {
        name: "n1".into(),
        limits: vec![("other.csi.example.com".into(), 1)],
        migrated_plugins: vec![],
    });
    assert_eq!(verdict(pod.clone(), c.clone()).code, Code::Skip);
    // Limits on a second node count until that node's CSINode goes.
    c.upsert_node(NodeBuilder::new("n2", "amd64").info());
    c.storage_mut().upsert_csi_node(CsiNodeInfo {
        name: "n2".into(),
        limits: vec![(DRIVER.into(), 5)],
        migrated_plugins: vec![],
    });
    assert!(c.storage().driver_has_limits(DRIVER));
    assert!(verdict(pod.clone(), c.clone()).is_success());
    c.storage_mut().upsert_csi_node(CsiNodeInfo {
        name: "n1".into(),
        limits: vec![(DRIVER.into(), 1)],
        migrated_plugins: vec![],
    });
    assert_eq!(verdict(pod.clone(), c.clone()).message(), REASON);
    c.storage_mut().delete_csi_node("n1");
    c.storage_mut().delete_csi_node("n2");
    assert!(!c.storage().driver_has_limits(DRIVER));
    assert_eq!(verdict(pod, c.clone()).code, Code::Skip);
    // A missing claim is still reported by Filter, limits or not.
    let missing = PodBuilder::new("ns", "p").pvc("d", "nope").info();
    assert_eq!(verdict(missing, c).code, Code::UnschedulableAndUnresolvable);
}

#[test]
fn hints_requeue_on_freed_volumes_and_new_limits() {
    let c = ClusterState::new();
    let pod = PodBuilder::new("ns", "p").pvc("d", "data").info();
    let with_volume = PodBuilder::new("ns", "x")
        .node("n1")
        .pvc("d", "other")
        .info();
    let without = PodBuilder::new("ns", "y").node("n1").info();
    let hint = |change| NodeVolumeLimits.queueing_hint(&pod, &change, &c);
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&with_volume)),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&without)),
        QueueingHint::QueueSkip
    );
    assert_eq!(
        hint(ClusterChange::Storage(StorageChange::CsiNode("n1"))),
        QueueingHint::Queue
    );
}
