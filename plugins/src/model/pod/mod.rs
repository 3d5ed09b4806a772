//! What the scheduler needs to know about a pod, read once from the API object.

mod builder;
mod from_api;

pub use builder::PodBuilder;

use super::{
    resources::{NonZero, Resources},
    selectors::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm},
};

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// A pod as the scheduler sees it. Built once per pod version, shared behind `Arc`.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub priority: i32,
    pub scheduler_name: String,
    pub node_name: Option<String>,
    /// UID of the controller owner (ReplicaSet, StatefulSet...), the group the default
    /// spread constraints apply to.
    pub controller_uid: Option<String>,
    pub requests: Resources,
    pub non_zero: NonZero,
    pub host_ports: Vec<HostPort>,
    pub node_selector: Labels,
    pub required_node_affinity: Option<NodeSelector>,
    pub preferred_node_affinity: Vec<(i32, NodeSelectorTerm)>,
    pub tolerations: Vec<Toleration>,
    pub spread_constraints: Vec<SpreadConstraint>,
    pub affinity: PodAffinity,
    pub anti_affinity: PodAffinity,
    /// Containers and init containers, in spec order (ephemeral containers are added after
    /// scheduling and never decide placement).
    pub images: Vec<ContainerImage>,
    pub scheduling_gates: Vec<String>,
    pub deleting: bool,
    /// Volumes the scheduler cannot place correctly yet (PersistentVolumeClaims and
    /// generic ephemeral volumes need volume binding).
    pub unsupported_volumes: Vec<String>,
    /// `imagePullSecrets` names and the service account: where the image inspector finds
    /// the pod's pull credentials.
    pub image_pull_secrets: Vec<String>,
    pub service_account: Option<String>,
    pub resource_version: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerImage {
    pub container: String,
    pub image: String,
    /// `imagePullPolicy: Always`: the tag may have moved, so a cached answer is not enough.
    pub pull_always: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Two host ports clash when protocol and port are equal and either address is the
    /// wildcard or both are the same.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    pub exists: bool,
    pub value: String,
    /// Empty: every effect.
    pub effect: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub hard: bool,
    pub selector: LabelSelector,
    pub min_domains: Option<i32>,
    /// `nodeAffinityPolicy: Honor` (default): only nodes matching the pod's node
    /// affinity/selector count as domains.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates count.
    pub honor_node_taints: bool,
    /// System default constraint: counts pods of the same controller instead of a selector.
    pub same_controller: bool,
}

/// Required and preferred terms of pod affinity or of pod anti-affinity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAffinity {
    pub required: Vec<PodAffinityTerm>,
    pub preferred: Vec<(i32, PodAffinityTerm)>,
}

impl PodAffinity {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: NamespaceScope,
    pub topology_key: String,
}

/// Which namespaces a pod-affinity term looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Listed names, plus the namespaces a selector matches (`None` when no selector).
    Listed(Vec<String>, Option<LabelSelector>),
}

impl PodAffinityTerm {
    /// Whether `pod` (in a namespace labelled `namespace_labels`) is selected by the term.
    pub fn selects(&self, pod: &PodInfo, namespace_labels: Option<&Labels>) -> bool {
        let NamespaceScope::Listed(names, selector) = &self.namespaces;
        let in_scope = names.contains(&pod.namespace)
            || selector.as_ref().is_some_and(|s| {
                s.is_empty() || namespace_labels.is_some_and(|labels| s.matches(labels))
            });
        in_scope && self.selector.matches(&pod.labels)
    }
}

impl PodInfo {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn has_pod_affinity(&self) -> bool {
        !self.affinity.is_empty() || !self.anti_affinity.is_empty()
    }
}

#[cfg(test)]
mod tests;
