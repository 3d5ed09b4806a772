//! `PodPlacementConfig`: namespaced architecture preferences for selected pods.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::LocalPlugins;

/// Architecture preferences for the pods of one namespace that match `labelSelector`.
/// When several configs match a pod, higher `priority` wins for each architecture; the
/// cluster-wide `ClusterPodPlacementConfig` preferences come last. Architecture rules
/// (`celArchitecturePlacement`) come only from the highest-priority config that matches.
// `printcolumn(type_ = ..)` repeated per column is kube-derive's syntax, not a mistake.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "multiarch.openshift.io",
    version = "v1beta1",
    kind = "PodPlacementConfig",
    plural = "podplacementconfigs",
    singular = "podplacementconfig",
    shortname = "ppc",
    category = "multiarch",
    namespaced,
    status = "PodPlacementConfigStatus",
    derive = "PartialEq",
    doc = "PodPlacementConfig sets architecture preferences for the pods of its namespace that match labelSelector.",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacementConfigSpec {
    /// Selects the pods of this namespace the config applies to. Unset means every pod of
    /// the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic_label_selector")]
    pub label_selector: Option<LabelSelector>,

    /// The plugins: nodeAffinityScoring (preferences) and celArchitecturePlacement (rules
    /// that decide the architectures).
    pub plugins: LocalPlugins,

    /// Order among the configs that match one pod, from 0 to 255; higher is applied first.
    /// Give each config of a namespace its own priority.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::priority")]
    pub priority: u8,
}

/// Empty: a `PodPlacementConfig` has no observed state yet (as in MTO).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodPlacementConfigStatus {}
