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

/// An inspection sent to a registry: the registry's host (see [`RegistryLabels`]) and
/// the result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryResultLabel {
    pub registry: String,
    pub result: &'static str,
}

/// The registries named in `registry` labels: the first [`RegistryLabels::MAX`] seen
/// keep their own series, every later one is counted as `other`. Tenants name
/// registries, so the label's values (and the series a scrape returns) must be bounded
/// like every other map read from outside.
#[derive(Debug, Default)]
pub struct RegistryLabels(std::sync::Mutex<std::collections::HashSet<String>>);

impl RegistryLabels {
    pub const MAX: usize = 64;
    pub const OTHER: &'static str = "other";

    /// The label for `registry`.
    pub fn label(&self, registry: &str) -> String {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(registry) {
            return registry.to_owned();
        }
        if seen.len() < Self::MAX {
            seen.insert(registry.to_owned());
            return registry.to_owned();
        }
        Self::OTHER.to_owned()
    }
}

#[derive(Clone, Debug)]
pub struct InspectorMetrics {
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    pub cache_entries: Gauge,
    /// Estimated bytes held by the cache's entries.
    pub cache_bytes: Gauge,
    /// Inspections that went to a registry, by registry and result (`ok` or an error
    /// label).
    pub registry_inspections: Family<RegistryResultLabel, Counter>,
    pub registry_labels: std::sync::Arc<RegistryLabels>,
    /// Inspections that failed before any registry was asked, reading the pod's pull
    /// credentials, by error label (`secret`, `pull_secrets_over_limit`).
    pub credential_failures: Family<InspectionResultLabel, Counter>,
    pub inspection_seconds: Histogram,
    /// Builds' binaries read for placement (`binaryInspection`), by result (`ok`,
    /// `mislabelled` or an error label).
    pub binary_reads: Family<InspectionResultLabel, Counter>,
    /// Layer bytes fetched by those reads.
    pub binary_read_bytes: Counter,
    /// Reads under way or waiting for their turn.
    pub binary_reads_under_way: Gauge,
}

impl Default for InspectorMetrics {
    fn default() -> Self {
        InspectorMetrics {
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            cache_entries: Gauge::default(),
            cache_bytes: Gauge::default(),
            registry_inspections: Family::default(),
            registry_labels: std::sync::Arc::default(),
            credential_failures: Family::default(),
            inspection_seconds: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            binary_reads: Family::default(),
            binary_read_bytes: Counter::default(),
            binary_reads_under_way: Gauge::default(),
        }
    }
}

impl InspectorMetrics {
    /// Counts one inspection sent to `registry` that ended with `result`.
    pub fn count_inspection(&self, registry: &str, result: &'static str) {
        let registry = self.registry_labels.label(registry);
        self.registry_inspections
            .get_or_create(&RegistryResultLabel { registry, result })
            .inc();
    }

    /// Counts one build's binaries read, ending with `result`.
    pub fn count_binary_read(&self, result: &'static str) {
        self.binary_reads
            .get_or_create(&InspectionResultLabel { result })
            .inc();
    }

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
            "Inspections sent to a registry, by registry (the first 64 seen; later ones as `other`) and result",
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
        sub.register(
            "binary_reads",
            "Builds whose binaries were read for placement (binaryInspection), by result",
            self.binary_reads.clone(),
        );
        sub.register(
            "binary_read_bytes",
            "Layer bytes fetched reading builds' binaries for placement",
            self.binary_read_bytes.clone(),
        );
        sub.register(
            "binary_reads_under_way",
            "Reads of builds' binaries under way or waiting for their turn",
            self.binary_reads_under_way.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_labels_are_bounded_and_stable() {
        let labels = RegistryLabels::default();
        for i in 0..RegistryLabels::MAX {
            assert_eq!(
                labels.label(&format!("r{i}.example")),
                format!("r{i}.example")
            );
        }
        assert_eq!(labels.label("one-too-many.example"), RegistryLabels::OTHER);
        // One already seen keeps its own label.
        assert_eq!(labels.label("r0.example"), "r0.example");
    }

    #[test]
    fn inspections_are_counted_by_registry_and_result() {
        let metrics = InspectorMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.count_inspection("quay.io", "ok");
        metrics.count_inspection("quay.io", "ok");
        metrics.count_inspection("registry.example:5000", "unreachable");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                "multiarch_inspector_registry_inspections_total{registry=\"quay.io\",result=\"ok\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("multiarch_inspector_registry_inspections_total{registry=\"registry.example:5000\",result=\"unreachable\"} 1"),
            "{text}"
        );
    }
}
