//! Workloads shared by the benchmarks, after kube-scheduler's `scheduler_perf`:
//! SchedulingBasic nodes are 4 cpu / 32Gi / 110 pods, pods request 100m / 500Mi.

use std::sync::Arc;

use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};
use multiarch_crd::Architecture;
use multiarch_plugins::{
    image_platforms::{ContainerImagePlatforms, PodImagePlatforms},
    model::{cluster::ClusterState, node::NodeBuilder, pod::PodBuilder},
    testing::{Fixture, known},
};

/// `nodes` SchedulingBasic nodes (architectures round-robin, three zones) with
/// `init_pods` pods already bound, round-robin.
pub fn cluster(nodes: usize, init_pods: usize) -> ClusterState {
    let mut cluster = ClusterState::new();
    for i in 0..nodes {
        cluster.upsert_node(
            NodeBuilder::new(
                &format!("node-{i}"),
                Architecture::NAMES[i % Architecture::NAMES.len()],
            )
            .capacity("4", "32Gi", 110)
            .label("topology.kubernetes.io/zone", &format!("zone-{}", i % 3))
            .info(),
        );
    }
    for i in 0..init_pods {
        let pod = basic_pod(&format!("init-{i}"))
            .node(&format!("node-{}", i % nodes))
            .info();
        cluster.add_assigned_pod(Arc::new(pod));
    }
    cluster
}

/// `cluster` with `per_node` more pods on every node, of other workloads (`app=other-N`,
/// ten of them): what a busy cluster holds besides the pods a selector is after.
pub fn with_other_pods(mut cluster: ClusterState, per_node: usize) -> ClusterState {
    let names: Vec<String> = cluster.nodes().iter().map(|n| n.name.clone()).collect();
    for (i, node) in names.iter().enumerate() {
        for j in 0..per_node {
            let pod = PodBuilder::new("bench", &format!("other-{i}-{j}"))
                .label("app", &format!("other-{}", j % 10))
                .container("pause", "registry.k8s.io/pause:3.10", "10m", "10Mi")
                .node(node)
                .info();
            cluster.add_assigned_pod(Arc::new(pod));
        }
    }
    cluster
}

pub fn basic_pod(name: &str) -> PodBuilder {
    PodBuilder::new("bench", name)
        .label("app", "bench")
        .container("pause", "registry.k8s.io/pause:3.10", "100m", "500Mi")
}

/// A SchedulingBasic pod whose image runs on amd64 and arm64.
pub fn basic(cluster: ClusterState) -> Fixture {
    with_images(Fixture::new(basic_pod("measured").info()).with_cluster(cluster))
}

/// A pod with a hard zone spread constraint and required anti-affinity per host, against
/// a cluster where `init_pods` pods of the same app already run.
pub fn spread_and_anti_affinity(cluster: ClusterState) -> Fixture {
    let pod = basic_pod("measured")
        .spread(core::TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector()),
            ..Default::default()
        })
        .affinity(core::Affinity {
            pod_anti_affinity: Some(core::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![
                    core::PodAffinityTerm {
                        label_selector: Some(selector()),
                        topology_key: "kubernetes.io/hostname".into(),
                        ..Default::default()
                    },
                ]),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        })
        .info();
    with_images(Fixture::new(pod).with_cluster(cluster))
}

fn selector() -> meta::LabelSelector {
    meta::LabelSelector {
        match_labels: Some([("app".to_owned(), "bench".to_owned())].into()),
        match_expressions: None,
    }
}

fn with_images(mut fixture: Fixture) -> Fixture {
    fixture.images = PodImagePlatforms {
        containers: vec![ContainerImagePlatforms {
            container: "pause".into(),
            image: "registry.k8s.io/pause:3.10".into(),
            platforms: known(&["amd64", "arm64"]),
            left_out: None,
        }],
    };
    fixture
}
