//! The correction's counters: `multiarch_misplaced_pods_found_total`,
//! `_evicted_total`, `_eviction_refused_total` (by a PodDisruptionBudget) and
//! `_not_corrected_total{reason}`.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::verdict::NotCorrected;

/// The reason of a pod whose images could not be read: not judged.
pub const UNINSPECTABLE: &str = "uninspectable";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct CorrectionMetrics {
    pub found: Counter,
    pub evicted: Counter,
    pub refused: Counter,
    pub not_corrected: Family<ReasonLabel, Counter>,
}

impl CorrectionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "multiarch_misplaced_pods_found",
            "Pods found running on a node their own images have no build for",
            self.found.clone(),
        );
        registry.register(
            "multiarch_misplaced_pods_evicted",
            "Misplaced pods evicted for their controller to recreate on a compatible node",
            self.evicted.clone(),
        );
        registry.register(
            "multiarch_misplaced_pods_eviction_refused",
            "Evictions of misplaced pods a PodDisruptionBudget refused (retried at the next scan)",
            self.refused.clone(),
        );
        registry.register(
            "multiarch_misplaced_pods_not_corrected",
            "Misplaced pods left where they are, by reason (bare_pod, daemonset, dry_run, rate_limited, disruption_budget, not_routed, ...) or not judged (uninspectable)",
            self.not_corrected.clone(),
        );
        // Every reason's series from the start, at 0: a counter born at 1 shows an alert
        // no increase until its second change.
        for reason in NotCorrected::LABELS.into_iter().chain([UNINSPECTABLE]) {
            let _ = self.not_corrected.get_or_create(&ReasonLabel { reason });
        }
    }

    pub fn skipped(&self, reason: &'static str) {
        self.not_corrected
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn not_corrected(&self, reason: &'static str) -> u64 {
        self.not_corrected
            .get_or_create(&ReasonLabel { reason })
            .get()
    }
}
