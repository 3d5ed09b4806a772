//! The embedded default of `multiarch simulate`: a mixed-architecture cluster and pods
//! drawn from a catalog of real-world image platform sets.

use std::{collections::BTreeMap, sync::Arc};

use multiarch_crd::{
    Architecture, ClusterPlugins, ClusterPodPlacementConfigSpec, NodeAffinityScoring,
    PlatformWeight,
};
use rand::{Rng, SeedableRng, rngs::SmallRng, seq::SliceRandom};
use serde::Deserialize;

use super::scenario::{
    ClaimTemplate, ContainerSpec, LocalVolumeGroup, NamespaceSpec, NodeGroup, PodGroup,
    PriorityClassSpec, Scenario, ScenarioError, StorageClassSpec, TaintSpec,
};

const CATALOG: &str = include_str!("catalog.yaml");

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Catalog {
    images: BTreeMap<String, Vec<String>>,
    priority_classes: Vec<PriorityClassSpec>,
    storage_classes: Vec<StorageClassSpec>,
    namespaces: Vec<NamespaceSpec>,
    workloads: Vec<Workload>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Workload {
    name: String,
    weight: u32,
    containers: Vec<ContainerSpec>,
    #[serde(default)]
    init_containers: Vec<ContainerSpec>,
    #[serde(default)]
    tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    #[serde(default = "replica_set")]
    owner_kind: String,
    #[serde(default)]
    claims: Vec<ClaimTemplate>,
    #[serde(default)]
    priority_class_name: Option<String>,
    #[serde(default)]
    wave: u32,
    #[serde(default)]
    affinity: Option<k8s_openapi::api::core::v1::Affinity>,
}

fn replica_set() -> String {
    "ReplicaSet".into()
}

/// The label of nodes with local NVMe volumes (the two larger sizes).
const LOCAL_NVME_LABEL: &str = "storage.example.com/local-nvme";

/// Node architectures and their share of the default cluster.
const ARCH_MIX: [(&str, u32); 4] = [("amd64", 60), ("arm64", 30), ("ppc64le", 5), ("s390x", 5)];
/// cpu, memory.
const SIZES: [(&str, &str); 4] = [
    ("4", "16Gi"),
    ("8", "32Gi"),
    ("16", "64Gi"),
    ("32", "128Gi"),
];
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The amd64 nodes' x86-64 levels (the node daemon's label), in twentieths: older and
/// virtualised CPUs at v2, most at v3, the newest with AVX-512 at v4.
const X86_64_LEVELS: [(&str, usize); 3] = [("v2", 4), ("v3", 11), ("v4", 5)];

/// The level of the `i`th node when it is amd64: from its index, so that the levels
/// draw nothing from the random sequence the sizes and taints come from.
fn x86_64_level(i: usize) -> &'static str {
    let mut slot = i % 20;
    for (level, share) in X86_64_LEVELS {
        if slot < share {
            return level;
        }
        slot -= share;
    }
    X86_64_LEVELS[1].0
}
/// Replicas per generated Deployment (pods of one controller spread by default).
const REPLICAS: usize = 10;

/// `nodes` nodes: the architecture mix shuffled, sizes drawn, a few tainted, in zones,
/// the amd64 ones at several x86-64 levels.
fn node_groups(nodes: usize, rng: &mut SmallRng) -> Vec<NodeGroup> {
    let mut archs: Vec<&str> = Vec::with_capacity(nodes);
    for (arch, share) in ARCH_MIX {
        let count = nodes * share as usize / 100;
        archs.extend(std::iter::repeat_n(arch, count));
    }
    while archs.len() < nodes {
        archs.push(ARCH_MIX[0].0);
    }
    archs.shuffle(rng);
    // The label sets, shared: per zone, without and with the local NVMe label.
    let label_sets: Vec<[Arc<BTreeMap<String, String>>; 2]> = ZONES
        .iter()
        .map(|zone| {
            let zone_only: BTreeMap<String, String> =
                [("topology.kubernetes.io/zone".to_owned(), (*zone).to_owned())].into();
            let mut with_nvme = zone_only.clone();
            with_nvme.insert(LOCAL_NVME_LABEL.to_owned(), "true".to_owned());
            [Arc::new(zone_only), Arc::new(with_nvme)]
        })
        .collect();
    archs
        .iter()
        .enumerate()
        .map(|(i, arch)| {
            let size = rng.random_range(0..SIZES.len());
            let (cpu, memory) = SIZES[size];
            let tainted = rng.random_range(0..100) < 5;
            let labels = label_sets[i % ZONES.len()][usize::from(size >= 2)].clone();
            NodeGroup {
                name: format!("{arch}-{i:05}"),
                count: 1,
                arch: (*arch).to_owned(),
                os: None,
                variant: (*arch == "amd64").then(|| x86_64_level(i).to_owned()),
                cpu: cpu.into(),
                memory: memory.into(),
                pods: 110,
                labels,
                taints: if tainted {
                    vec![TaintSpec {
                        key: "dedicated".into(),
                        value: "infra".into(),
                        effect: "NoSchedule".into(),
                    }]
                } else {
                    Vec::new()
                },
                unschedulable: false,
            }
        })
        .collect()
}

/// `pods` pods in Deployments of the catalog's workloads, drawn by weight.
fn pod_groups(catalog: &Catalog, pods: usize, rng: &mut SmallRng) -> Vec<PodGroup> {
    let total_weight: u32 = catalog.workloads.iter().map(|w| w.weight).sum();
    let mut pod_groups: Vec<PodGroup> = Vec::new();
    let mut remaining = pods;
    let mut deployment = 0usize;
    let mut workload_labels: BTreeMap<&str, Arc<BTreeMap<String, String>>> = BTreeMap::new();
    while remaining > 0 {
        let mut pick = rng.random_range(0..total_weight.max(1));
        let workload = catalog
            .workloads
            .iter()
            .find(|w| {
                if pick < w.weight {
                    true
                } else {
                    pick -= w.weight;
                    false
                }
            })
            .unwrap_or(&catalog.workloads[0]);
        let replicas = REPLICAS.min(remaining);
        let owner = format!("{}-{deployment:05}", workload.name);
        pod_groups.push(PodGroup {
            name: owner.clone(),
            namespace: workload.name.clone(),
            count: replicas,
            priority: None,
            labels: workload_labels
                .entry(&workload.name)
                .or_insert_with(|| Arc::new([("app".to_owned(), workload.name.clone())].into()))
                .clone(),
            owner: Some(owner),
            owner_kind: workload.owner_kind.clone(),
            priority_class_name: workload.priority_class_name.clone(),
            claims: workload.claims.clone(),
            wave: workload.wave,
            scheduler_name: None,
            containers: workload.containers.clone(),
            init_containers: workload.init_containers.clone(),
            tolerations: workload.tolerations.clone(),
            node_selector: BTreeMap::new(),
            affinity: workload.affinity.clone(),
            topology_spread_constraints: Vec::new(),
        });
        remaining -= replicas;
        deployment += 1;
    }
    pod_groups
}

/// The default scenario with `nodes` nodes and `pods` pods, reproducible from `seed`.
pub fn scenario(nodes: usize, pods: usize, seed: u64) -> Result<Scenario, ScenarioError> {
    let catalog: Catalog = serde_yaml_ng::from_str(CATALOG)?;
    let mut rng = SmallRng::seed_from_u64(seed);

    let node_groups = node_groups(nodes, &mut rng);
    let pod_groups = pod_groups(&catalog, pods, &mut rng);

    Ok(Scenario {
        images: catalog.images,
        nodes: node_groups,
        pods: pod_groups,
        cluster_pod_placement_config: Some(ClusterPodPlacementConfigSpec {
            plugins: Some(ClusterPlugins {
                // Prefer the cheaper arm64 nodes when an image runs on both.
                node_affinity_scoring: Some(NodeAffinityScoring {
                    enabled: true,
                    platforms: vec![
                        PlatformWeight {
                            architecture: Architecture::Arm64,
                            weight: 40,
                        },
                        PlatformWeight {
                            architecture: Architecture::Amd64,
                            weight: 20,
                        },
                    ],
                }),
                exec_format_error_monitor: None,
                misplaced_pod_correction: None,
                binary_inspection: None,
            }),
            ..ClusterPodPlacementConfigSpec::default()
        }),
        pod_placement_configs: Vec::new(),
        priority_classes: catalog.priority_classes,
        storage_classes: catalog.storage_classes,
        local_volumes: vec![LocalVolumeGroup {
            node_selector: [(LOCAL_NVME_LABEL.to_owned(), "true".to_owned())].into(),
            storage_class: "local-nvme".into(),
            size: "200Gi".into(),
            per_node: 2,
        }],
        namespaces: catalog.namespaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_catalog_parses_and_every_workload_image_is_known() {
        let catalog: Catalog = serde_yaml_ng::from_str(CATALOG).unwrap();
        for w in &catalog.workloads {
            for c in w.containers.iter().chain(&w.init_containers) {
                assert!(
                    catalog.images.contains_key(&c.image),
                    "{} uses unknown {}",
                    w.name,
                    c.image
                );
            }
        }
    }

    #[test]
    fn generates_the_requested_mix() {
        let s = scenario(1000, 95, 7).unwrap();
        let nodes = s.node_infos().unwrap();
        assert_eq!(nodes.len(), 1000);
        let count = |arch: &str| {
            nodes
                .iter()
                .filter(|n| n.platform.architecture == arch)
                .count()
        };
        assert_eq!(
            (
                count("amd64"),
                count("arm64"),
                count("ppc64le"),
                count("s390x")
            ),
            (600, 300, 50, 50)
        );
        assert!(nodes.iter().any(|n| !n.taints.is_empty()));
        assert_eq!(s.pod_infos("multiarch-scheduler").unwrap().len(), 95);
        // Same seed, same scenario.
        let again = scenario(1000, 95, 7).unwrap();
        assert_eq!(
            again.pods.iter().map(|p| &p.name).collect::<Vec<_>>(),
            s.pods.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
    }
}
