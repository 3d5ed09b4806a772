//! The operator's metrics.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabel {
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SecretLabel {
    pub secret: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct OperatorMetrics {
    /// Reconciles of the ClusterPodPlacementConfig by result (`ok`, `error`).
    pub reconciles: Family<ResultLabel, Counter>,
    /// Objects written by action (`created`, `updated`, `deleted`).
    pub writes: Family<ActionLabel, Counter>,
    /// Pods released by the operator (`ungated`, `recreated`).
    pub pods_released: Family<ActionLabel, Counter>,
    /// Reconcile steps that failed while the others went on, by step.
    pub step_failures: Family<StepLabel, Counter>,
    /// Pods left for a person because the API server refuses to create them again.
    pub pods_not_recreatable: Gauge,
    /// When each certificate expires (Unix seconds).
    pub certificate_expiry: Family<SecretLabel, Gauge>,
    /// Whether the webhook configuration routes pods (1) or not (0).
    pub routing: Gauge,
}

impl OperatorMetrics {
    /// Counts an object written (`created`, `updated`, `deleted`).
    pub fn wrote(&self, action: &'static str) {
        self.writes.get_or_create(&ActionLabel { action }).inc();
    }

    /// Counts a pod released (`ungated`, `recreated`).
    pub fn released(&self, action: &'static str) {
        self.pods_released
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "multiarch_operator_reconciles",
            "Reconciles of the ClusterPodPlacementConfig by result",
            self.reconciles.clone(),
        );
        registry.register(
            "multiarch_operator_writes",
            "Objects the operator created, updated or deleted",
            self.writes.clone(),
        );
        registry.register(
            "multiarch_operator_pods_released",
            "Pods the operator released because the component they waited for was removed",
            self.pods_released.clone(),
        );
        registry.register(
            "multiarch_operator_step_failures",
            "Reconcile steps that failed (the Degraded condition says why) while the others went on",
            self.step_failures.clone(),
        );
        registry.register(
            "multiarch_operator_pods_not_recreatable",
            "Pods waiting for a component being removed that the API server refuses to create again (left for a person)",
            self.pods_not_recreatable.clone(),
        );
        registry.register(
            "multiarch_operator_certificate_expiry_seconds",
            "When each of multiarch's certificates expires (Unix time)",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "multiarch_operator_routing",
            "1 while the mutating webhook configuration routes pods",
            self.routing.clone(),
        );
    }
}
