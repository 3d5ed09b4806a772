//! The gate controller's metrics, under MTO's names so that existing dashboards keep
//! working.

use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// MTO's metric names, so existing dashboards keep working.
#[derive(Clone, Debug)]
pub struct GateMetrics {
    /// Pods carrying the gate right now, as this controller's watch sees them.
    pub gated: Gauge,
    pub processed: Counter,
    pub failed_inspections: Counter,
    /// Passes that could not read the ClusterPodPlacementConfig or PodPlacementConfigs.
    pub configuration_read_errors: Counter,
    pub seconds: Histogram,
    /// Pods ungated on a rule's architectures where their images have no build.
    pub architecture_rule_overrides: Counter,
    /// Rules that could not be evaluated for a pod (treated as not matching).
    pub architecture_rule_errors: Counter,
}

impl Default for GateMetrics {
    fn default() -> Self {
        GateMetrics {
            gated: Gauge::default(),
            processed: Counter::default(),
            failed_inspections: Counter::default(),
            configuration_read_errors: Counter::default(),
            architecture_rule_overrides: Counter::default(),
            architecture_rule_errors: Counter::default(),
            seconds: Histogram::new([
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                1.0, 2.0, 4.0,
            ]),
        }
    }
}

impl GateMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "mto_ppo_pods_gated",
            "Pods that carry the multiarch scheduling gate",
            self.gated.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_processed_pods",
            "Gated pods processed",
            self.processed.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_failed_image_inspection",
            "Failed image inspections",
            self.failed_inspections.clone(),
        );
        registry.register(
            "multiarch_gate_configuration_read_errors",
            "Passes over a gated pod that could not read the placement configuration",
            self.configuration_read_errors.clone(),
        );
        registry.register(
            "multiarch_gate_architecture_rule_overrides_images",
            "Pods ungated on the architectures of a celArchitecturePlacement rule where their images have no build (event ArchitectureRuleOverridesImages)",
            self.architecture_rule_overrides.clone(),
        );
        registry.register(
            "multiarch_gate_architecture_rule_errors",
            "celArchitecturePlacement rules that could not be evaluated for a pod and did not match it",
            self.architecture_rule_errors.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_time_to_process_gated_pod_seconds",
            "Time to process a gated pod",
            self.seconds.clone(),
        );
    }
}
