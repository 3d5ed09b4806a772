//! kube-scheduler's `volume_zone_test.go`: bound volumes' zone and region labels.

use super::*;
use crate::{
    framework::Code,
    model::{
        node::NodeBuilder,
        pod::PodBuilder,
        storage::builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
    },
    testing::Fixture,
};

fn cluster() -> ClusterState {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(
        NodeBuilder::new("in-a", "amd64")
            .label(ZONE, "a")
            .label(REGION, "r1")
            .info(),
    );
    cluster.upsert_node(
        NodeBuilder::new("in-b", "amd64")
            .label(ZONE, "b")
            .label(REGION, "r1")
            .info(),
    );
    cluster.upsert_node(
        NodeBuilder::new("beta-a", "amd64")
            .label(BETA_ZONE, "a")
            .info(),
    );
    cluster.upsert_node(NodeBuilder::new("unlabelled", "amd64").info());
    cluster
}

fn fits(cluster: ClusterState) -> Result<Vec<String>, Status> {
    let f = Fixture::new(PodBuilder::new("ns", "p").pvc("d", "data").info()).with_cluster(cluster);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let pre = VolumeZone.pre_filter(&ctx, &mut state);
    if pre.code != Code::Success {
        return Err(pre);
    }
    Ok(f.cluster
        .nodes()
        .iter()
        .filter(|n| {
            let status = VolumeZone.filter(&ctx, &state, n);
            if !status.is_success() {
                assert_eq!(status.message(), REASON);
                assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
            }
            status.is_success()
        })
        .map(|n| n.name.clone())
        .collect())
}

fn with_volume(volume: VolumeBuilder) -> ClusterState {
    let mut c = cluster();
    c.storage_mut().upsert_volume(volume.info());
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "zonal", "1Gi")
            .bound_to("pv")
            .info(),
    );
    c
}

#[test]
fn zone_labels_of_the_volume_pick_nodes() {
    // Only a beta label on the volume is looked up as GA on the node, not the reverse.
    let zoned = with_volume(VolumeBuilder::new("pv", "zonal", "1Gi").label(ZONE, "a"));
    assert_eq!(fits(zoned).unwrap(), ["in-a", "unlabelled"]);
    // A multi-zone volume lists its zones with "__".
    let multi = with_volume(VolumeBuilder::new("pv", "zonal", "1Gi").label(ZONE, "a__b"));
    assert_eq!(fits(multi).unwrap(), ["in-a", "in-b", "unlabelled"]);
    let beta_on_both = with_volume(VolumeBuilder::new("pv", "zonal", "1Gi").label(BETA_ZONE, "a"));
    assert_eq!(
        fits(beta_on_both).unwrap(),
        ["in-a", "beta-a", "unlabelled"]
    );
    // A beta label on the volume matches a GA label on the node.
    let beta = with_volume(VolumeBuilder::new("pv", "zonal", "1Gi").label(BETA_ZONE, "b"));
    assert_eq!(fits(beta).unwrap(), ["in-b", "unlabelled"]);
    let region = with_volume(
        VolumeBuilder::new("pv", "zonal", "1Gi")
            .label(REGION, "r1")
            .label(ZONE, "b"),
    );
    assert_eq!(fits(region).unwrap(), ["in-b", "unlabelled"]);
}

#[test]
fn volumes_without_topology_and_waiting_claims_are_skipped() {
    let plain = with_volume(VolumeBuilder::new("pv", "zonal", "1Gi"));
    assert_eq!(fits(plain).unwrap_err().code, Code::Skip);
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("zonal", "csi.example.com", true).info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "zonal", "1Gi").info());
    assert_eq!(fits(c).unwrap_err().code, Code::Skip);
}

#[test]
fn refusals_name_what_is_missing() {
    let err = fits(cluster()).unwrap_err();
    assert_eq!(err.message(), "persistentvolumeclaim \"data\" not found");
    let mut c = cluster();
    c.storage_mut().upsert_claim(
        ClaimBuilder::new("ns", "data", "zonal", "1Gi")
            .bound_to("pv")
            .info(),
    );
    assert_eq!(
        fits(c).unwrap_err().message(),
        "persistentvolume \"pv\" not found"
    );
    let mut c = cluster();
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "gone", "1Gi").info());
    assert_eq!(
        fits(c).unwrap_err().message(),
        "storageclass.storage.k8s.io \"gone\" not found"
    );
    let mut c = cluster();
    c.storage_mut()
        .upsert_class(ClassBuilder::new("now", "csi.example.com", false).info());
    c.storage_mut()
        .upsert_claim(ClaimBuilder::new("ns", "data", "now", "1Gi").info());
    assert_eq!(
        fits(c).unwrap_err().message(),
        "PersistentVolume had no name"
    );
}
