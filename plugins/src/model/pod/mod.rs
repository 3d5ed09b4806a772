//! What the scheduler needs to know about a pod, read once from the API object.

mod builder;
mod extras;
mod from_api;
pub mod volumes;

pub use builder::PodBuilder;
pub use extras::PodExtras;

use std::sync::Arc;

use thin_vec::ThinVec;

use super::resources::{NonZero, Resources};
use multiarch_policy::{
    pod_images::{ContainerImage, PullCredentials},
    selectors::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm},
};

/// A pod as the scheduler sees it. Built once per pod version, shared behind `Arc`.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: Arc<str>,
    pub name: String,
    /// Shared: the pods of one workload hold one allocation (see `SharedLabels`).
    pub labels: Arc<Labels>,
    /// Annotations, image volumes, gates, nomination, unsupported features and pull
    /// secrets: what few pods have, out of line (read them with [`PodInfo::extras`]).
    pub extras: Option<Box<PodExtras>>,
    pub priority: i32,
    pub scheduler_name: Arc<str>,
    pub node_name: Option<String>,
    /// UID of the controller owner (ReplicaSet, StatefulSet...), the group the default
    /// spread constraints apply to.
    pub controller_uid: Option<String>,
    pub requests: Resources,
    pub non_zero: NonZero,
    pub host_ports: ThinVec<HostPort>,
    pub node_selector: Labels,
    pub required_node_affinity: Option<NodeSelector>,
    pub preferred_node_affinity: ThinVec<(i32, NodeSelectorTerm)>,
    pub tolerations: ThinVec<Toleration>,
    pub spread_constraints: ThinVec<SpreadConstraint>,
    pub affinity: PodAffinity,
    pub anti_affinity: PodAffinity,
    /// Containers and init containers, in spec order (ephemeral containers are added after
    /// scheduling and never decide placement). Shared: the pods of one workload hold one
    /// allocation (see `SharedImages`).
    pub images: Arc<[ContainerImage]>,
    pub deleting: bool,
    /// Claims, unshareable disks and attachable in-tree volumes (the volume plugins).
    pub volumes: ThinVec<volumes::PodVolume>,
    /// `preemptionPolicy: Never`: the pod waits instead of evicting others.
    pub preemption_never: bool,
    /// What the pod needs its node to declare (`NodeDeclaredFeatures`).
    pub needed_features: crate::model::declared_features::FeatureSet,
    /// `status.startTime` in seconds since the epoch (preemption prefers victims that
    /// started last).
    pub start_time: Option<i64>,
    /// The service account: with `imagePullSecrets`, where the image inspector finds the
    /// pod's pull credentials (every pod of a real cluster has one, so it is kept here).
    pub service_account: Option<String>,
    pub resource_version: String,
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
    pub required: ThinVec<PodAffinityTerm>,
    pub preferred: ThinVec<(i32, PodAffinityTerm)>,
}

impl PodAffinity {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: NamespaceScope,
    pub topology_key: String,
}

/// Which namespaces a pod-affinity term looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NamespaceScope {
    /// Listed names, plus the namespaces a selector matches (`None` when no selector).
    Listed(Vec<String>, Option<LabelSelector>),
}

impl PodAffinityTerm {
    /// Whether `pod` (in a namespace labelled `namespace_labels`) is selected by the term.
    pub fn selects(&self, pod: &PodInfo, namespace_labels: Option<&Labels>) -> bool {
        self.covers_namespace(&pod.namespace, namespace_labels)
            && self.selector.matches(&pod.labels)
    }

    /// Whether the term looks at pods of `namespace` (labelled `namespace_labels`).
    pub fn covers_namespace(&self, namespace: &str, namespace_labels: Option<&Labels>) -> bool {
        let NamespaceScope::Listed(names, selector) = &self.namespaces;
        // A namespace not known (yet) has no labels, as kube-scheduler's snapshot.
        let no_labels = Labels::new();
        names.iter().any(|n| n == namespace)
            || selector
                .as_ref()
                .is_some_and(|s| s.matches(namespace_labels.unwrap_or(&no_labels)))
    }
}

impl PodInfo {
    /// Where its images' pull credentials are (for image inspection).
    pub fn pull_credentials(&self) -> PullCredentials<'_> {
        PullCredentials {
            namespace: &self.namespace,
            pull_secrets: &self.extras().image_pull_secrets,
            service_account: self.service_account.as_deref(),
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn has_pod_affinity(&self) -> bool {
        !self.affinity.is_empty() || !self.anti_affinity.is_empty()
    }

    /// Names of the claims the pod mounts (persistent and ephemeral).
    pub fn claim_names(&self) -> impl Iterator<Item = &str> {
        self.volumes
            .iter()
            .filter_map(|v| v.claim.as_ref().map(|c| c.name.as_str()))
    }

    /// Whether the pod mounts the claim `name` in `namespace` (the volume plugins' hint
    /// that a claim's change concerns it).
    pub fn mounts_claim(&self, namespace: &str, name: &str) -> bool {
        *self.namespace == *namespace && self.claim_names().any(|n| n == name)
    }

    /// Whether two versions of a pod differ in anything scheduling reads (a status-only
    /// update, such as the scheduler's own condition patch, does not).
    pub fn same_scheduling_inputs(&self, other: &PodInfo) -> bool {
        let PodInfo {
            uid,
            namespace,
            name,
            labels,
            extras: _, // below, without the nomination
            priority,
            scheduler_name,
            node_name,
            controller_uid,
            requests,
            non_zero,
            host_ports,
            node_selector,
            required_node_affinity,
            preferred_node_affinity,
            tolerations,
            spread_constraints,
            affinity,
            anti_affinity,
            images,
            deleting,
            volumes,
            preemption_never,
            needed_features,
            // Status and version: what the scheduler itself writes.
            start_time: _,
            service_account,
            resource_version: _,
        } = self;
        *uid == other.uid
            && *namespace == other.namespace
            && *name == other.name
            && *labels == other.labels
            && same_extras_but_nomination(self.extras(), other.extras())
            && *priority == other.priority
            && *scheduler_name == other.scheduler_name
            && *node_name == other.node_name
            && *controller_uid == other.controller_uid
            && *requests == other.requests
            && *non_zero == other.non_zero
            && *host_ports == other.host_ports
            && *node_selector == other.node_selector
            && *required_node_affinity == other.required_node_affinity
            && *preferred_node_affinity == other.preferred_node_affinity
            && *tolerations == other.tolerations
            && *spread_constraints == other.spread_constraints
            && *affinity == other.affinity
            && *anti_affinity == other.anti_affinity
            && *images == other.images
            && *needed_features == other.needed_features
            && *deleting == other.deleting
            && *volumes == other.volumes
            && *preemption_never == other.preemption_never
            && *service_account == other.service_account
    }
}

/// The extras compared as `same_scheduling_inputs` does: the nomination is status, what
/// the scheduler itself writes.
fn same_extras_but_nomination(a: &PodExtras, b: &PodExtras) -> bool {
    let PodExtras {
        annotations,
        image_volumes,
        scheduling_gates,
        nominated_node: _,
        unsupported,
        image_pull_secrets,
    } = a;
    *annotations == b.annotations
        && *image_volumes == b.image_volumes
        && *scheduling_gates == b.scheduling_gates
        && *unsupported == b.unsupported
        && *image_pull_secrets == b.image_pull_secrets
}

#[cfg(test)]
mod tests;
