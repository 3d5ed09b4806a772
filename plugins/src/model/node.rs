//! A node and the aggregate of the pods on it (kube-scheduler's `NodeInfo`).

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use multiarch_crd::names::{NODE_ARCH_LABEL, NODE_OS_LABEL};
use thin_vec::ThinVec;

use super::{
    controller_counts::ControllerCounts,
    declared_features::FeatureSet,
    hostname::Hostname,
    image_states::NodeImages,
    pod::{HostPort, PodInfo},
    quantity::{InvalidQuantity, parse_scaled},
    resources::{NonZero, Resources},
};
use multiarch_policy::node_level::node_variant;
use multiarch_policy::platform::{Platform, VariantLevel, platform_bit};
use multiarch_policy::selectors::{LabelLookup, Labels};

/// The well-known label of a node's zone (topology spreading, cluster summaries).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label local PersistentVolumes name their node by.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// A node plus everything assigned to it. Pods are counted whoever scheduled them.
///
/// Laid out in declaration order, starting on a cache line: what the filters read for
/// every candidate node fills the first two lines, what scoring adds the third (a cycle
/// visits hundreds of nodes that are not in the CPU cache; profiles showed each line
/// as a miss). `hot_fields_fit_three_cache_lines` holds the layout to that.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
pub struct NodeInfo {
    pub allocatable: Resources,
    pub requested: Resources,
    pub allowed_pods: i64,
    pub pods: Vec<Arc<PodInfo>>,
    /// Thin: an untainted node's empty list is one pointer to a shared header.
    pub taints: ThinVec<Taint>,
    /// [`platform_bit`] of `platform`, computed once.
    pub platform_bit: Option<u8>,
    pub unschedulable: bool,
    pub ready: bool,
    /// [`VariantLevel`] of `platform`, computed once: the filter's variant check (x86-64
    /// levels) reads it, not `platform` (three lines further, a miss per node).
    pub variant_level: VariantLevel,
    /// Read by the inter-pod affinity filter, `pods_with_affinity` by its scoring.
    pub pods_with_required_anti_affinity: u32,
    pub pods_with_affinity: u32,
    /// Read by scoring only: it may straddle the second and third lines.
    pub non_zero_requested: NonZero,
    /// Pods per controller UID, for the default spread constraints.
    pub controller_counts: ControllerCounts,
    /// The `topology.kubernetes.io/zone` label, read once. The cluster model gives the
    /// nodes of one zone the same allocation (see `ClusterState::upsert_node`), so a
    /// cycle reads each zone's name once, not once per node.
    pub zone: Option<Arc<str>>,

    pub used_ports: Vec<HostPort>,
    /// Every label but `kubernetes.io/hostname` (kept in `hostname`): without the one
    /// label unique to each node, the nodes of a pool share one allocation of their
    /// labels (see `ClusterState::upsert_node`). Read a node's labels with
    /// [`NodeInfo::label`] or as a [`LabelLookup`], never here alone.
    pub pool_labels: Arc<Labels>,
    /// The `kubernetes.io/hostname` label (what local volumes are pinned to), read once.
    pub hostname: Option<Hostname>,
    pub name: String,
    pub platform: Platform,
    /// What `status.images` reports (read by `ImageLocality`'s scoring only).
    pub images: NodeImages,
    /// `status.declaredFeatures`, of the features this version knows (read only for the
    /// few pods that need one).
    pub declared_features: FeatureSet,
}

impl LabelLookup for NodeInfo {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.label(key)
    }
}

impl NodeInfo {
    /// Reads the API object (without pods).
    pub fn from_node(node: &core::Node) -> Result<Self, InvalidQuantity> {
        let mut labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        let images = NodeImages::reported(&status);
        let declared_features = FeatureSet::declared_by(&status);
        let info = status.node_info.as_ref();
        let os = labels
            .get(NODE_OS_LABEL)
            .cloned()
            .or_else(|| info.map(|i| i.operating_system.clone()))
            .unwrap_or_else(|| "linux".into());
        let arch = labels
            .get(NODE_ARCH_LABEL)
            .cloned()
            .or_else(|| info.map(|i| i.architecture.clone()))
            .unwrap_or_default();
        let platform = Platform::new(&os, &arch, node_variant(&labels, &arch).as_deref());
        let allocatable_map = status.allocatable.or(status.capacity).unwrap_or_default();
        let allocatable = Resources::from_map(&allocatable_map)?;
        let allowed_pods = allocatable_map
            .get("pods")
            .map(|q| parse_scaled(&q.0, 1))
            .transpose()?
            .unwrap_or(110);
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok(NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            zone: labels.get(ZONE_LABEL).map(|z| Arc::from(z.as_str())),
            hostname: labels.remove(HOSTNAME_LABEL).map(|h| Hostname::new(&h)),
            taints: spec
                .taints
                .iter()
                .flatten()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone(),
                })
                .collect(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            ready,
            declared_features,
            platform_bit: platform_bit(&platform),
            variant_level: VariantLevel::of(&platform),
            platform,
            allocatable,
            allowed_pods,
            pool_labels: Arc::new(labels),
            images,
            ..NodeInfo::default()
        })
    }

    /// The value of a label; the zone and hostname from the fields read once (no walk of
    /// the label map, whose keys are separate allocations).
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            ZONE_LABEL => self.zone.as_deref(),
            HOSTNAME_LABEL => self.hostname.as_deref(),
            _ => self.pool_labels.get(key).map(String::as_str),
        }
    }

    /// Whether the two carry the same labels (the hostname included).
    pub fn same_labels(&self, other: &NodeInfo) -> bool {
        self.hostname == other.hostname && self.pool_labels == other.pool_labels
    }

    /// Every label, the hostname included, as the API object has them (the tests'
    /// reference walks read them so; the scheduler reads one label at a time).
    #[cfg(test)]
    pub fn labels(&self) -> Labels {
        let mut labels = (*self.pool_labels).clone();
        if let Some(hostname) = &self.hostname {
            labels.insert(HOSTNAME_LABEL.to_owned(), hostname.as_str().to_owned());
        }
        labels
    }

    /// Replaces the node's own fields, keeping the pods and their aggregate.
    pub fn update_from(&mut self, fresh: NodeInfo) {
        self.pool_labels = fresh.pool_labels;
        self.zone = fresh.zone;
        self.hostname = fresh.hostname;
        self.taints = fresh.taints;
        self.unschedulable = fresh.unschedulable;
        self.ready = fresh.ready;
        self.declared_features = fresh.declared_features;
        self.platform = fresh.platform;
        self.platform_bit = fresh.platform_bit;
        self.variant_level = fresh.variant_level;
        self.allocatable = fresh.allocatable;
        self.allowed_pods = fresh.allowed_pods;
        self.images = fresh.images;
    }

    /// The node without its pods (what an update replaced).
    pub fn own_fields(&self) -> NodeInfo {
        NodeInfo {
            name: self.name.clone(),
            pool_labels: self.pool_labels.clone(),
            taints: self.taints.clone(),
            unschedulable: self.unschedulable,
            ready: self.ready,
            declared_features: self.declared_features,
            platform: self.platform.clone(),
            platform_bit: self.platform_bit,
            variant_level: self.variant_level,
            allocatable: self.allocatable.clone(),
            allowed_pods: self.allowed_pods,
            zone: self.zone.clone(),
            hostname: self.hostname.clone(),
            images: self.images.clone(),
            ..NodeInfo::default()
        }
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(pod.non_zero);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if let Some(owner) = &pod.controller_uid {
            self.controller_counts.add(owner);
        }
        if pod.has_pod_affinity() {
            self.pods_with_affinity += 1;
        }
        if !pod.anti_affinity.required.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes the pod with this UID; returns it when it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let position = self.pods.iter().position(|p| p.uid == uid)?;
        let pod = self.pods.swap_remove(position);
        self.requested.subtract(&pod.requests);
        self.non_zero_requested.subtract(pod.non_zero);
        for port in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(i);
            }
        }
        if let Some(owner) = &pod.controller_uid {
            self.controller_counts.remove(owner);
        }
        if pod.has_pod_affinity() {
            self.pods_with_affinity -= 1;
        }
        if !pod.anti_affinity.required.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        Some(pod)
    }
}

/// A compact builder for tests, simulate and benches (`st.MakeNode()` in kube-scheduler).
#[derive(Clone, Debug, Default)]
pub struct NodeBuilder {
    node: core::Node,
}

impl NodeBuilder {
    /// A ready Linux node with the hostname label.
    pub fn new(name: &str, arch: &str) -> Self {
        let mut node = core::Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.labels = Some(
            [
                ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                (NODE_ARCH_LABEL.to_owned(), arch.to_owned()),
                (NODE_OS_LABEL.to_owned(), "linux".to_owned()),
            ]
            .into(),
        );
        node.spec = Some(core::NodeSpec::default());
        node.status = Some(core::NodeStatus {
            conditions: Some(vec![core::NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        NodeBuilder { node }.capacity("4", "32Gi", 110)
    }

    pub fn capacity(mut self, cpu: &str, memory: &str, pods: i64) -> Self {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let map: std::collections::BTreeMap<String, Quantity> = [
            ("cpu".to_owned(), Quantity(cpu.into())),
            ("memory".to_owned(), Quantity(memory.into())),
            ("pods".to_owned(), Quantity(pods.to_string())),
            ("ephemeral-storage".to_owned(), Quantity("100Gi".into())),
        ]
        .into();
        if let Some(status) = self.node.status.as_mut() {
            status.capacity = Some(map.clone());
            status.allocatable = Some(map);
        }
        self
    }

    /// An image in `status.images` under `names`, of `size_bytes`.
    pub fn image(mut self, names: &[&str], size_bytes: i64) -> Self {
        if let Some(status) = self.node.status.as_mut() {
            status
                .images
                .get_or_insert_with(Vec::new)
                .push(core::ContainerImage {
                    names: Some(names.iter().map(|n| (*n).to_owned()).collect()),
                    size_bytes: Some(size_bytes),
                });
        }
        self
    }

    pub fn extended(mut self, resource: &str, amount: &str) -> Self {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        if let Some(alloc) = self
            .node
            .status
            .as_mut()
            .and_then(|s| s.allocatable.as_mut())
        {
            alloc.insert(resource.into(), Quantity(amount.into()));
        }
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        if let Some(spec) = self.node.spec.as_mut() {
            spec.taints.get_or_insert_with(Vec::new).push(core::Taint {
                key: key.into(),
                value: (!value.is_empty()).then(|| value.into()),
                effect: effect.into(),
                time_added: None,
            });
        }
        self
    }

    /// `status.declaredFeatures`.
    pub fn declared_features(mut self, names: &[&str]) -> Self {
        if let Some(status) = self.node.status.as_mut() {
            status.declared_features = Some(names.iter().map(|n| (*n).to_owned()).collect());
        }
        self
    }

    pub fn unschedulable(mut self) -> Self {
        if let Some(spec) = self.node.spec.as_mut() {
            spec.unschedulable = Some(true);
        }
        self
    }

    pub fn obj(self) -> core::Node {
        self.node
    }

    /// The [`NodeInfo`]; builders only produce valid quantities.
    pub fn info(self) -> NodeInfo {
        match NodeInfo::from_node(&self.node) {
            Ok(info) => info,
            Err(e) => panic!("NodeBuilder produced an invalid node: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pod::PodBuilder;

    #[test]
    fn hot_fields_fit_three_cache_lines() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<Resources>(), 32);
        // Line 0: requests and capacity (NodeResourcesFit's filter).
        assert!(offset_of!(NodeInfo, requested) + size_of::<Resources>() <= 64);
        // Line 1: the rest of what every filter reads.
        for end in [
            offset_of!(NodeInfo, allowed_pods) + 8,
            offset_of!(NodeInfo, pods) + size_of::<Vec<Arc<PodInfo>>>(),
            offset_of!(NodeInfo, taints) + size_of::<ThinVec<Taint>>(),
            offset_of!(NodeInfo, platform_bit) + 2,
            offset_of!(NodeInfo, unschedulable) + 1,
            offset_of!(NodeInfo, variant_level) + size_of::<VariantLevel>(),
            offset_of!(NodeInfo, pods_with_required_anti_affinity) + 4,
        ] {
            assert!(end <= 128, "a filter field ends at {end}");
        }
        // Line 2: what scoring adds.
        for end in [
            offset_of!(NodeInfo, non_zero_requested) + size_of::<NonZero>(),
            offset_of!(NodeInfo, pods_with_affinity) + 4,
            offset_of!(NodeInfo, controller_counts) + size_of::<ControllerCounts>(),
            offset_of!(NodeInfo, zone) + size_of::<Option<Arc<str>>>(),
        ] {
            assert!(end <= 192, "a scoring field ends at {end}");
        }
    }

    #[test]
    fn reads_platform_capacity_and_taints() {
        let node = NodeBuilder::new("n1", "arm64")
            .capacity("8", "16Gi", 50)
            .taint("dedicated", "gpu", "NoSchedule")
            .info();
        assert_eq!(node.platform, Platform::linux("arm64"));
        assert_eq!(node.allocatable.milli_cpu, 8000);
        assert_eq!(node.allowed_pods, 50);
        assert_eq!(node.taints.len(), 1);
        assert!(node.ready);
    }

    #[test]
    fn falls_back_to_node_info_for_the_architecture() {
        let mut node = NodeBuilder::new("n1", "x").obj();
        node.metadata.labels = None;
        if let Some(status) = node.status.as_mut() {
            status.node_info = Some(core::NodeSystemInfo {
                architecture: "s390x".into(),
                operating_system: "linux".into(),
                ..Default::default()
            });
        }
        assert_eq!(
            NodeInfo::from_node(&node).unwrap().platform,
            Platform::linux("s390x")
        );
    }

    #[test]
    fn labels_read_once_answer_as_the_label_map() {
        let node = NodeBuilder::new("n1", "arm64")
            .label(ZONE_LABEL, "zone-a")
            .label("rack", "r7")
            .info();
        for key in [
            ZONE_LABEL,
            HOSTNAME_LABEL,
            "rack",
            "missing",
            NODE_ARCH_LABEL,
        ] {
            assert_eq!(
                node.label(key),
                node.labels().get(key).map(String::as_str),
                "{key}"
            );
        }
        let bare = NodeBuilder::new("n2", "amd64").info();
        assert_eq!(bare.label(ZONE_LABEL), None);
    }

    #[test]
    fn pods_add_and_remove_from_the_aggregate() {
        let mut node = NodeBuilder::new("n1", "amd64").info();
        let pod = Arc::new(
            PodBuilder::new("ns", "p")
                .owner("ReplicaSet", "rs1")
                .container("a", "i", "500m", "1Gi")
                .host_port(80, "TCP", "")
                .info(),
        );
        node.add_pod(pod.clone());
        assert_eq!(node.requested.milli_cpu, 500);
        assert_eq!(node.used_ports.len(), 1);
        assert_eq!(node.controller_counts.get("rs1"), 1);
        assert!(node.remove_pod(&pod.uid).is_some());
        assert!(node.requested.is_zero());
        assert!(node.used_ports.is_empty());
        assert!(node.controller_counts.is_empty());
        assert!(node.remove_pod(&pod.uid).is_none());
    }
}
