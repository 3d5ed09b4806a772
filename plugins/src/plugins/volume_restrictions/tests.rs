//! kube-scheduler's `volume_restrictions_test.go`: disk conflicts and ReadWriteOncePod.

use std::sync::Arc;

use super::*;
use crate::{
    framework::Code,
    model::{node::NodeBuilder, pod::PodBuilder, storage::builders::ClaimBuilder},
    testing::Fixture,
};

fn verdict(pod: PodInfo, cluster: ClusterState) -> (Code, String) {
    let f = Fixture::new(pod).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let pre = VolumeRestrictions.pre_filter(&ctx, &mut state);
    if pre.code != Code::Success {
        return (pre.code, pre.message());
    }
    let status = VolumeRestrictions.filter(&ctx, &state, f.cluster.node("n1").unwrap());
    (status.code, status.message())
}

fn node_with(existing: PodInfo) -> ClusterState {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    cluster.add_assigned_pod(Arc::new(existing));
    cluster
}

#[test]
fn disk_conflicts_unless_both_read_only() {
    let cases = [
        (
            "same gce disk, one writes",
            true,
            false,
            Some(DISK_CONFLICT),
        ),
        ("same gce disk, both read-only", true, true, None),
    ];
    for (name, existing_ro, new_ro, want) in cases {
        let existing = PodBuilder::new("ns", "e")
            .node("n1")
            .gce_disk("d", "pd-1", existing_ro)
            .info();
        let pod = PodBuilder::new("ns", "p")
            .gce_disk("d", "pd-1", new_ro)
            .info();
        let (code, message) = verdict(pod, node_with(existing));
        match want {
            Some(reason) => {
                assert_eq!(
                    (code, message.as_str()),
                    (Code::Unschedulable, reason),
                    "{name}"
                )
            }
            None => assert_eq!(code, Code::Success, "{name}"),
        }
    }
    let ebs = PodBuilder::new("ns", "e")
        .node("n1")
        .ebs("d", "vol-1")
        .info();
    let pod = PodBuilder::new("ns", "p").ebs("d", "vol-1").info();
    assert_eq!(verdict(pod, node_with(ebs.clone())).1, DISK_CONFLICT);
    let other = PodBuilder::new("ns", "p").ebs("d", "vol-2").info();
    assert_eq!(verdict(other, node_with(ebs)).0, Code::Success);
}

#[test]
fn read_write_once_pod_claims_are_exclusive() {
    let mut cluster = node_with(
        PodBuilder::new("ns", "holder")
            .node("n1")
            .pvc("d", "solo")
            .info(),
    );
    cluster.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "solo", "fast", "1Gi")
            .access_modes(&["ReadWriteOncePod"])
            .info(),
    );
    let pod = PodBuilder::new("ns", "p").pvc("d", "solo").info();
    assert_eq!(
        verdict(pod.clone(), cluster.clone()),
        (Code::Unschedulable, READ_WRITE_ONCE_POD_CONFLICT.to_owned())
    );
    cluster.remove_pod("uid-ns-holder");
    assert_eq!(verdict(pod, cluster).0, Code::Skip);
}

#[test]
fn a_missing_claim_is_named() {
    let pod = PodBuilder::new("ns", "p").pvc("d", "does-not-exist").info();
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("n1", "amd64").info());
    assert_eq!(
        verdict(pod, cluster),
        (
            Code::UnschedulableAndUnresolvable,
            "persistentvolumeclaim \"does-not-exist\" not found".to_owned()
        )
    );
}

#[test]
fn preemption_can_remove_the_claims_holder() {
    let holder = PodBuilder::new("ns", "holder")
        .node("n1")
        .pvc("d", "solo")
        .info();
    let mut cluster = node_with(holder.clone());
    cluster.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "solo", "fast", "1Gi")
            .access_modes(&["ReadWriteOncePod"])
            .info(),
    );
    let f = Fixture::new(PodBuilder::new("ns", "p").pvc("d", "solo").info()).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(VolumeRestrictions.pre_filter(&ctx, &mut state).is_success());
    let node = f.cluster.node("n1").unwrap();
    VolumeRestrictions.remove_pod(&ctx, &mut state, &holder, node);
    assert!(VolumeRestrictions.filter(&ctx, &state, node).is_success());
    VolumeRestrictions.add_pod(&ctx, &mut state, &holder, node);
    assert!(!VolumeRestrictions.filter(&ctx, &state, node).is_success());
}

#[test]
fn hints_follow_the_freed_disk_or_claim() {
    let cluster = ClusterState::new();
    let pod = PodBuilder::new("ns", "p")
        .gce_disk("d", "pd-1", false)
        .info();
    let holder = PodBuilder::new("ns", "h")
        .node("n1")
        .gce_disk("d", "pd-1", false)
        .info();
    let unrelated = PodBuilder::new("ns", "u")
        .node("n1")
        .gce_disk("d", "pd-2", false)
        .info();
    let hint = |change| VolumeRestrictions.queueing_hint(&pod, &change, &cluster);
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&holder)),
        QueueingHint::Queue
    );
    assert_eq!(
        hint(ClusterChange::AssignedPodDeleted(&unrelated)),
        QueueingHint::QueueSkip
    );
}
