//! The scenario format of `multiarch simulate --scenario FILE` (YAML): images with their
//! platforms, node groups, pod groups (with priorities, claims and arrival waves),
//! priority classes, storage classes, local volumes, and the placement CRDs.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1 as core;
use multiarch_crd::names::NODE_VARIANT_LABEL;
use multiarch_crd::{ClusterPodPlacementConfigSpec, PodPlacementConfig};
use multiarch_plugins::model::{
    node::{NodeBuilder, NodeInfo},
    pod::{PodBuilder, PodInfo},
    shared::{SharedImages, SharedLabels, SharedStrings},
    storage::builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
};
use multiarch_policy::platform::Platform;
use serde::Deserialize;

use crate::engine::{image_source::CatalogImages, storage_objects::StorageObject};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot parse the scenario: {0}")]
    Parse(#[from] serde_yaml_ng::Error),
    #[error("image {image}: platform {platform:?} is not os/architecture[/variant]")]
    Platform { image: String, platform: String },
    #[error("{kind} group {name:?}: {detail}")]
    Group {
        kind: &'static str,
        name: String,
        detail: String,
    },
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Image reference → platforms, as `linux/arm64` or `linux/arm/v7`.
    #[serde(default)]
    pub images: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub nodes: Vec<NodeGroup>,
    #[serde(default)]
    pub pods: Vec<PodGroup>,
    /// The `spec` of the `ClusterPodPlacementConfig` (weights, fallback, placement).
    #[serde(default)]
    pub cluster_pod_placement_config: Option<ClusterPodPlacementConfigSpec>,
    #[serde(default)]
    pub pod_placement_configs: Vec<PodPlacementConfig>,
    /// PriorityClasses pods name with `priorityClassName`.
    #[serde(default)]
    pub priority_classes: Vec<PriorityClassSpec>,
    #[serde(default)]
    pub storage_classes: Vec<StorageClassSpec>,
    /// Pre-created local PersistentVolumes on the nodes a selector picks.
    #[serde(default)]
    pub local_volumes: Vec<LocalVolumeGroup>,
    /// Namespaces with labels, what pod-affinity `namespaceSelector`s select (a namespace
    /// not listed has no labels).
    #[serde(default)]
    pub namespaces: Vec<NamespaceSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityClassSpec {
    pub name: String,
    pub value: i32,
    /// `Never`: pods of the class wait instead of preempting.
    #[serde(default)]
    pub preemption_policy: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageClassSpec {
    pub name: String,
    /// `kubernetes.io/no-provisioner` for pre-created volumes only.
    pub provisioner: String,
    /// `WaitForFirstConsumer` (the default here) or `Immediate`.
    #[serde(default = "wait_for_first_consumer")]
    pub volume_binding_mode: String,
    /// Label → allowed values where volumes may be provisioned.
    #[serde(default)]
    pub allowed_topologies: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalVolumeGroup {
    /// Labels a node must have (all of them) to get the volumes.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    pub storage_class: String,
    pub size: String,
    #[serde(default = "one")]
    pub per_node: usize,
}

/// A claim each pod of a group gets, named `<name>-<pod>` (a StatefulSet's
/// `volumeClaimTemplates`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimTemplate {
    pub name: String,
    pub storage_class: String,
    pub size: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroup {
    /// The node name, or the prefix of `NAME-0`, `NAME-1`... when `count` > 1.
    pub name: String,
    #[serde(default = "one")]
    pub count: usize,
    pub arch: String,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub variant: Option<String>,
    pub cpu: String,
    pub memory: String,
    #[serde(default = "default_max_pods")]
    pub pods: i64,
    /// Shared: the default cluster's 130,000 groups of one node carry six distinct sets.
    #[serde(default)]
    pub labels: Arc<BTreeMap<String, String>>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    #[serde(default)]
    pub unschedulable: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodGroup {
    /// The pod name, or the prefix of `NAME-0`, `NAME-1`... when `count` > 1.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default)]
    pub priority: Option<i32>,
    /// Shared: the default cluster's groups of one workload carry one set.
    #[serde(default)]
    pub labels: Arc<BTreeMap<String, String>>,
    /// A controller UID shared by the group's pods (they then spread by default).
    #[serde(default)]
    pub owner: Option<String>,
    /// The controller's kind (`ReplicaSet`, `StatefulSet`, `Job`...).
    #[serde(default = "replica_set")]
    pub owner_kind: String,
    /// Sets the priority (and preemption policy) from a class of `priorityClasses`.
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub claims: Vec<ClaimTemplate>,
    /// Pods of wave 1 arrive once wave 0 is scheduled, and so on.
    #[serde(default)]
    pub wave: u32,
    /// Defaults to the scheduler's name.
    #[serde(default)]
    pub scheduler_name: Option<String>,
    pub containers: Vec<ContainerSpec>,
    #[serde(default)]
    pub init_containers: Vec<ContainerSpec>,
    #[serde(default)]
    pub tolerations: Vec<core::Toleration>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub affinity: Option<core::Affinity>,
    #[serde(default)]
    pub topology_spread_constraints: Vec<core::TopologySpreadConstraint>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    #[serde(default)]
    pub cpu: String,
    #[serde(default)]
    pub memory: String,
    /// An init container with `restartPolicy: Always` (a sidecar).
    #[serde(default)]
    pub sidecar: bool,
}

fn one() -> usize {
    1
}

fn default_max_pods() -> i64 {
    110
}

fn default_namespace() -> String {
    "default".into()
}

fn replica_set() -> String {
    "ReplicaSet".into()
}

fn wait_for_first_consumer() -> String {
    "WaitForFirstConsumer".into()
}

impl Scenario {
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        Ok(serde_yaml_ng::from_str(text)?)
    }

    pub fn image_catalog(&self) -> Result<CatalogImages, ScenarioError> {
        let mut catalog = CatalogImages::default();
        for (image, platforms) in &self.images {
            let parsed = platforms
                .iter()
                .map(|p| {
                    Platform::parse(p).ok_or_else(|| ScenarioError::Platform {
                        image: image.clone(),
                        platform: p.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            catalog.images.insert(image.clone(), Arc::from(parsed));
        }
        Ok(catalog)
    }

    /// Sets `spec.placement.percentageOfNodesToScore` (0: adaptive), keeping the rest of
    /// the scenario's configuration.
    pub fn set_percentage_of_nodes_to_score(&mut self, percentage: u8) {
        let spec = self.cluster_pod_placement_config.get_or_insert_default();
        let mut placement = spec.placement_or_default();
        placement.percentage_of_nodes_to_score = i32::from(percentage);
        spec.placement = Some(placement);
    }

    pub fn node_infos(&self) -> Result<Vec<NodeInfo>, ScenarioError> {
        let mut out = Vec::with_capacity(self.nodes.iter().map(|g| g.count).sum());
        // Nodes of one pool share their label set, as in the scheduler's model.
        let mut label_sets = SharedLabels::default();
        for group in &self.nodes {
            for name in names(&group.name, group.count) {
                let mut b = NodeBuilder::new(&name, &group.arch).capacity(
                    &group.cpu,
                    &group.memory,
                    group.pods,
                );
                if let Some(os) = &group.os {
                    b = b.label("kubernetes.io/os", os);
                }
                if let Some(variant) = &group.variant {
                    b = b.label(NODE_VARIANT_LABEL, variant);
                }
                for (k, v) in group.labels.iter() {
                    b = b.label(k, v);
                }
                for t in &group.taints {
                    b = b.taint(&t.key, &t.value, &t.effect);
                }
                if group.unschedulable {
                    b = b.unschedulable();
                }
                let mut info = NodeInfo::from_node(&b.obj()).map_err(|e| ScenarioError::Group {
                    kind: "node",
                    name: group.name.clone(),
                    detail: e.to_string(),
                })?;
                label_sets.share(&mut info.pool_labels);
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The pods, with the wave each arrives in.
    pub fn pod_infos(&self, scheduler_name: &str) -> Result<Vec<PodInfo>, ScenarioError> {
        Ok(self
            .pods_in_waves(scheduler_name)?
            .into_iter()
            .map(|(pod, _)| pod)
            .collect())
    }

    pub fn pods_in_waves(
        &self,
        scheduler_name: &str,
    ) -> Result<Vec<(PodInfo, u32)>, ScenarioError> {
        let mut out = Vec::with_capacity(self.pods.iter().map(|g| g.count).sum());
        // The pods of a group share one label set, one image list and their namespace and
        // scheduler name, as the scheduler's model would share them when the watch
        // delivers them one by one.
        let mut label_sets = SharedLabels::default();
        let mut image_lists = SharedImages::default();
        let mut strings = SharedStrings::default();
        for group in &self.pods {
            let class = match &group.priority_class_name {
                None => None,
                Some(name) => Some(
                    self.priority_classes
                        .iter()
                        .find(|c| c.name == *name)
                        .ok_or_else(|| ScenarioError::Group {
                            kind: "pod",
                            name: group.name.clone(),
                            detail: format!("no PriorityClass with name {name}"),
                        })?,
                ),
            };
            for name in names(&group.name, group.count) {
                let mut pod = group.build(&name, scheduler_name);
                if let (Some(class), Some(spec)) = (class, pod.spec.as_mut()) {
                    spec.priority = Some(class.value);
                    spec.priority_class_name = Some(class.name.clone());
                    spec.preemption_policy = Some(
                        class
                            .preemption_policy
                            .clone()
                            .unwrap_or_else(|| "PreemptLowerPriority".into()),
                    );
                }
                let mut info = PodInfo::from_pod(&pod).map_err(|e| ScenarioError::Group {
                    kind: "pod",
                    name: group.name.clone(),
                    detail: e.to_string(),
                })?;
                label_sets.share(&mut info.labels);
                image_lists.share(&mut info.images);
                strings.share(&mut info.namespace);
                strings.share(&mut info.scheduler_name);
                out.push((info, group.wave));
            }
        }
        Ok(out)
    }

    /// Storage classes, local volumes on the nodes, and the pods' claims.
    /// The storage classes, and the local volumes of `nodes` (this scenario's
    /// [`node_infos`](Self::node_infos), read by the caller once).
    pub fn storage_objects(&self, nodes: &[NodeInfo]) -> Result<Vec<StorageObject>, ScenarioError> {
        let mut out = Vec::new();
        for class in &self.storage_classes {
            let mut b = ClassBuilder::new(
                &class.name,
                &class.provisioner,
                class.volume_binding_mode == "WaitForFirstConsumer",
            );
            for (key, values) in &class.allowed_topologies {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                b = b.allowed(key, &values);
            }
            out.push(StorageObject::Class(b.info()));
        }
        for group in &self.local_volumes {
            for node in nodes.iter().filter(|n| {
                group
                    .node_selector
                    .iter()
                    .all(|(k, v)| n.label(k) == Some(v.as_str()))
            }) {
                for i in 0..group.per_node {
                    let volume = VolumeBuilder::new(
                        &format!("local-{}-{i}", node.name),
                        &group.storage_class,
                        &group.size,
                    )
                    .local_on(&node.name)
                    .obj();
                    let info =
                        multiarch_plugins::model::storage::PersistentVolumeInfo::from_api(&volume)
                            .map_err(|e| ScenarioError::Group {
                                kind: "local volume",
                                name: group.storage_class.clone(),
                                detail: e.to_string(),
                            })?;
                    out.push(StorageObject::Volume(info));
                }
            }
        }
        for group in &self.pods {
            for name in names(&group.name, group.count) {
                for template in &group.claims {
                    let claim = ClaimBuilder::new(
                        &group.namespace,
                        &format!("{}-{name}", template.name),
                        &template.storage_class,
                        &template.size,
                    )
                    .obj();
                    let info = multiarch_plugins::model::storage::ClaimInfo::from_api(&claim)
                        .map_err(|e| ScenarioError::Group {
                            kind: "pod",
                            name: group.name.clone(),
                            detail: e.to_string(),
                        })?;
                    out.push(StorageObject::Claim(info));
                }
            }
        }
        Ok(out)
    }
}

impl PodGroup {
    pub fn build(&self, name: &str, scheduler_name: &str) -> core::Pod {
        let mut b = PodBuilder::new(&self.namespace, name)
            .scheduler(self.scheduler_name.as_deref().unwrap_or(scheduler_name));
        if let Some(priority) = self.priority {
            b = b.priority(priority);
        }
        for (k, v) in self.labels.iter() {
            b = b.label(k, v);
        }
        if let Some(owner) = &self.owner {
            b = b.owner(&self.owner_kind, owner);
        }
        for template in &self.claims {
            b = b.pvc(&template.name, &format!("{}-{name}", template.name));
        }
        for c in &self.init_containers {
            b = if c.sidecar {
                b.sidecar(&c.name, &c.image, &c.cpu, &c.memory)
            } else {
                b.init_container(&c.name, &c.image, &c.cpu, &c.memory)
            };
        }
        for c in &self.containers {
            b = b.container(&c.name, &c.image, &c.cpu, &c.memory);
        }
        for (k, v) in &self.node_selector {
            b = b.node_selector(k, v);
        }
        if let Some(affinity) = &self.affinity {
            b = b.affinity(affinity.clone());
        }
        for c in &self.topology_spread_constraints {
            b = b.spread(c.clone());
        }
        let mut pod = b.obj();
        if let Some(spec) = pod.spec.as_mut()
            && !self.tolerations.is_empty()
        {
            spec.tolerations = Some(self.tolerations.clone());
        }
        pod
    }
}

fn names(name: &str, count: usize) -> Vec<String> {
    if count == 1 {
        vec![name.to_owned()]
    } else {
        (0..count).map(|i| format!("{name}-{i}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_platform_strings() {
        assert_eq!(
            Platform::parse("linux/arm/v7"),
            Some(Platform::new("linux", "arm", Some("v7")))
        );
        assert_eq!(
            Platform::parse("linux/amd64"),
            Some(Platform::linux("amd64"))
        );
        for bad in ["amd64", "linux/", "/amd64", "a/b/c/d"] {
            assert_eq!(Platform::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn unknown_fields_and_bad_platforms_are_errors() {
        let err = Scenario::from_yaml("nodez: []").unwrap_err();
        assert!(err.to_string().contains("unknown field `nodez`"), "{err}");
        let scenario = Scenario::from_yaml("images: {\"a:1\": [amd64]}").unwrap();
        assert_eq!(
            scenario.image_catalog().unwrap_err().to_string(),
            "image a:1: platform \"amd64\" is not os/architecture[/variant]"
        );
    }

    #[test]
    fn groups_expand_to_named_objects() {
        let scenario = Scenario::from_yaml(
            r#"
nodes:
  - {name: arm, count: 2, arch: arm64, cpu: "4", memory: 8Gi, taints: [{key: k, effect: NoSchedule}]}
pods:
  - name: web
    count: 3
    owner: web-rs
    containers: [{name: app, image: "a:1", cpu: 100m, memory: 64Mi}]
    initContainers: [{name: proxy, image: "p:1", cpu: 50m, sidecar: true}]
    tolerations: [{key: k, operator: Exists}]
"#,
        )
        .unwrap();
        let nodes = scenario.node_infos().unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["arm-0", "arm-1"]
        );
        assert_eq!(nodes[0].taints.len(), 1);
        let pods = scenario.pod_infos("multiarch-scheduler").unwrap();
        assert_eq!(pods.len(), 3);
        assert_eq!(pods[2].name, "web-2");
        assert_eq!(pods[0].requests.milli_cpu, 150);
        assert_eq!(pods[0].controller_uid.as_deref(), Some("web-rs"));
        assert_eq!(pods[0].tolerations.len(), 1);
        assert_eq!(&*pods[0].scheduler_name, "multiarch-scheduler");
        // A group's pods share their namespace and scheduler name, as the model would.
        assert!(Arc::ptr_eq(&pods[0].namespace, &pods[2].namespace));
        assert!(Arc::ptr_eq(
            &pods[0].scheduler_name,
            &pods[2].scheduler_name
        ));
    }
}
