//! Inspector metrics (prometheus-client), registered into the caller's registry.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InspectionResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug)]
pub struct InspectorMetrics {
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    pub cache_entries: Gauge,
    /// Estimated bytes held by the cache's entries.
    pub cache_bytes: Gauge,
    /// Inspections that went to a registry, by result (`ok` or an error label).
    pub registry_inspections: Family<InspectionResultLabel, Counter>,
    /// Inspections that failed before any registry was asked, reading the pod's pull
    /// credentials, by error label (`secret`, `pull_secrets_over_limit`).
    pub credential_failures: Family<InspectionResultLabel, Counter>,
    pub inspection_seconds: Histogram,
}

impl Default for InspectorMetrics {
    fn default() -> Self {
        InspectorMetrics {
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            cache_entries: Gauge::default(),
            cache_bytes: Gauge::default(),
            registry_inspections: Family::default(),
            credential_failures: Family::default(),
            inspection_seconds: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
        }
    }
}

impl InspectorMetrics {
    /// Registers under `multiarch_inspector_*`.
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("multiarch_inspector");
        sub.register(
            "cache_hits",
            "Inspections answered from the cache",
            self.cache_hits.clone(),
        );
        sub.register(
            "cache_misses",
            "Inspections not in the cache",
            self.cache_misses.clone(),
        );
        sub.register(
            "cache_entries",
            "Entries in the inspection cache",
            self.cache_entries.clone(),
        );
        sub.register(
            "cache_bytes",
            "Estimated bytes held by the inspection cache's entries",
            self.cache_bytes.clone(),
        );
        sub.register(
            "registry_inspections",
            "Inspections sent to a registry, by result",
            self.registry_inspections.clone(),
        );
        sub.register(
            "credential_failures",
            "Inspections that failed reading the pod's pull credentials, by result",
            self.credential_failures.clone(),
        );
        sub.register(
            "registry_inspection_duration_seconds",
            "Time to inspect an image at its registry",
            self.inspection_seconds.clone(),
        );
    }
}
