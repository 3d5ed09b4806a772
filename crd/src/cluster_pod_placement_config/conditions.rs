//! Condition types and reasons of `ClusterPodPlacementConfig.status` (MTO's names).

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
pub const DEPROVISIONING: &str = "Deprovisioning";
pub const POD_PLACEMENT_CONTROLLER_NOT_ROLLED_OUT: &str = "PodPlacementControllerNotRolledOut";
pub const POD_PLACEMENT_WEBHOOK_NOT_ROLLED_OUT: &str = "PodPlacementWebhookNotRolledOut";
pub const MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE: &str =
    "MutatingWebhookConfigurationNotAvailable";

/// Reason of `Available` when every component is ready.
pub const REASON_ALL_COMPONENTS_READY: &str = "AllComponentsReady";
