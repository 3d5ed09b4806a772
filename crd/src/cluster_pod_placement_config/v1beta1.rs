//! `multiarch.openshift.io/v1beta1` `ClusterPodPlacementConfig` (storage version).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Architecture, ClusterPlugins, LogVerbosity, PlacementSpec, architecture::empty_as_none,
};

/// The cluster-wide configuration of multiarch pod placement. Only one object may exist,
/// named `cluster`.
// `printcolumn(type_ = ..)` repeated per column is kube-derive's syntax, not a mistake.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "multiarch.openshift.io",
    version = "v1beta1",
    kind = "ClusterPodPlacementConfig",
    plural = "clusterpodplacementconfigs",
    singular = "clusterpodplacementconfig",
    shortname = "cppc",
    category = "multiarch",
    status = "ClusterPodPlacementConfigStatus",
    derive = "PartialEq",
    doc = "ClusterPodPlacementConfig configures architecture-aware placement of pods for the whole cluster. It is a singleton: the only accepted name is 'cluster'.",
    validation = Rule::new("self.metadata.name == 'cluster'").message(
        "ClusterPodPlacementConfig is a singleton: name it 'cluster'"
    ),
    printcolumn(name = "Routing", type_ = "string", json_path = ".status.routing"),
    printcolumn(name = "Architectures", type_ = "string", json_path = ".status.architectures"),
    printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"Available\")].status"),
    printcolumn(name = "Progressing", type_ = "string", json_path = ".status.conditions[?(@.type==\"Progressing\")].status"),
    printcolumn(name = "Degraded", type_ = "string", json_path = ".status.conditions[?(@.type==\"Degraded\")].status"),
    printcolumn(name = "Since", type_ = "date", json_path = ".status.conditions[?(@.type==\"Progressing\")].lastTransitionTime"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Available\")].reason"),
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPodPlacementConfigSpec {
    /// How much the multiarch components log: Normal, Debug, Trace or TraceAll.
    #[serde(default)]
    pub log_verbosity: LogVerbosity,

    /// Selects the namespaces whose pods multiarch handles. It is copied into the mutating
    /// webhook's namespaceSelector. Unset means every namespace; namespaces named `kube-*`
    /// and multiarch's own namespace are never handled. A common choice excludes namespaces
    /// labelled `multiarch.openshift.io/exclude-pod-placement`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic_label_selector")]
    pub namespace_selector: Option<LabelSelector>,

    /// Optional features: architecture preferences (nodeAffinityScoring), the
    /// exec-format-error monitor (execFormatErrorMonitor) and the misplaced-pod
    /// correction (misplacedPodCorrection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<ClusterPlugins>,

    /// The architecture to place a pod on when its images cannot be inspected (for
    /// example the registry keeps failing). Empty means such pods wait and the reason is
    /// reported on them.
    #[serde(
        default,
        with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::schema::fallback_architecture")]
    pub fallback_architecture: Option<Architecture>,

    /// How pods reach a compatible node: through the multiarch scheduler (default) or
    /// through MTO's scheduling-gate path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
}

impl ClusterPodPlacementConfigSpec {
    /// The placement settings, with defaults when the section is absent.
    pub fn placement_or_default(&self) -> PlacementSpec {
        self.placement.clone().unwrap_or_default()
    }
}

/// The observed state of the multiarch components, written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPodPlacementConfigStatus {
    /// Available, Progressing, Degraded, Deprovisioning and one condition per component
    /// that is not rolled out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The generation of the spec the operator last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Where new pods go now: `Scheduler` (routed to the multiarch scheduler),
    /// `SchedulingGate` (gated for the gate controller) or `Off` (no webhook
    /// configuration: pods are admitted unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,

    /// The CPU architectures of the cluster's nodes (their `kubernetes.io/arch` labels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub architectures: Vec<String>,

    /// With `misplacedPodCorrection` on: pods found running on a node their own images
    /// have no build for, and not moved (yet): dry run, limits, budgets, bare pods...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misplaced_pods: Option<i64>,
}

/// What the mutating webhook does with new pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Routing {
    Scheduler,
    SchedulingGate,
    Off,
}
