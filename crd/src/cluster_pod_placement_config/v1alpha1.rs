//! `multiarch.openshift.io/v1alpha1` `ClusterPodPlacementConfig` (served, not stored).
//!
//! Its spec is a subset of `v1beta1`'s with the same names and meaning. The operator's
//! conversion webhook (`crate::conversion`) keeps what `v1alpha1` lacks (`plugins`,
//! `fallbackArchitecture`, `placement`) in annotations, so a `v1alpha1` client that reads
//! and writes an object back loses nothing. The status is `v1beta1`'s.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The same status as `v1beta1`: only the operator writes it.
pub use super::v1beta1::ClusterPodPlacementConfigStatus;
use crate::LogVerbosity;

/// The cluster-wide configuration of multiarch pod placement (early version).
// `printcolumn(type_ = ..)` repeated per column is kube-derive's syntax, not a mistake.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "multiarch.openshift.io",
    version = "v1alpha1",
    kind = "ClusterPodPlacementConfig",
    plural = "clusterpodplacementconfigs",
    singular = "clusterpodplacementconfig",
    shortname = "cppc",
    category = "multiarch",
    status = "ClusterPodPlacementConfigStatus",
    derive = "PartialEq",
    doc = "ClusterPodPlacementConfig configures architecture-aware placement of pods for the whole cluster (v1alpha1: use v1beta1). It is a singleton: the only accepted name is 'cluster'.",
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

    /// Selects the namespaces whose pods multiarch handles (copied into the mutating
    /// webhook's namespaceSelector). Unset means every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic_label_selector")]
    pub namespace_selector: Option<LabelSelector>,
}
