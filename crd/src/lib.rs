//! API types of multiarch, kept compatible with the Multiarch Tuning Operator (MTO):
//! group `multiarch.openshift.io`, the cluster singleton `ClusterPodPlacementConfig`
//! (`v1beta1` storage, `v1alpha1` served), the namespaced `PodPlacementConfig` and the
//! node-reported `ENoExecEvent`.
//!
//! This crate holds types, their schemas and the conversion between versions only: no I/O. Validation that MTO did in
//! webhooks and that a single object can express is written as CEL
//! (`x-kubernetes-validations`), so the API server enforces it without a webhook.

pub mod architecture;
pub mod cel;
pub mod cel_architecture_placement;
pub mod cluster_pod_placement_config;
pub mod conversion;
pub mod enoexec_event;
pub mod label_selector;
pub mod log_verbosity;
pub mod names;
pub mod placement;
pub mod plugins;
pub mod pod_placement_config;
pub mod reference;
pub mod render;
mod schema;

pub use architecture::Architecture;
pub use cel_architecture_placement::{ArchitectureRule, CelArchitecturePlacement};
pub use cluster_pod_placement_config::v1beta1::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, ClusterPodPlacementConfigStatus,
    Routing,
};
pub use enoexec_event::{ENoExecEvent, ENoExecEventSpec, ENoExecEventStatus};
pub use log_verbosity::LogVerbosity;
pub use placement::{
    AdmissionAffinity, PlacementMode, PlacementSpec, ScorePluginName, ScorePluginWeight,
    StorageCapacityScoring, UtilizationShapePoint,
};
pub use plugins::{
    BinaryInspection, ClusterPlugins, ExecFormatErrorMonitor, LocalPlugins, MisplacedPodCorrection,
    NodeAffinityScoring, PlatformWeight, UnknownNodeLevel,
};
pub use pod_placement_config::{PodPlacementConfig, PodPlacementConfigSpec};

/// The API group of every multiarch kind (MTO's group, so existing objects keep working).
pub const GROUP: &str = "multiarch.openshift.io";
