//! What became of each `ENoExecEvent`, under MTO's names and ours.

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use crate::daemon::metrics::OutcomeLabel;

/// MTO's names (`mto_enoexecevents_total`, `mto_enoexecevents_invalid_total`) plus
/// `multiarch_enoexec_handler_events_total{outcome}`.
#[derive(Clone, Debug, Default)]
pub struct HandlerMetrics {
    pub reported: Counter,
    pub invalid: Counter,
    pub outcomes: Family<OutcomeLabel, Counter>,
    /// The misplaced-pod correction's.
    pub correction: super::correction::metrics::CorrectionMetrics,
}

impl HandlerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "mto_enoexecevents",
            "Exec format errors reported on pods",
            self.reported.clone(),
        );
        registry.register(
            "mto_enoexecevents_invalid",
            "ENoExecEvents deleted without a report: pod or node gone, pod moved, no status",
            self.invalid.clone(),
        );
        registry.register(
            "multiarch_enoexec_handler_events",
            "ENoExecEvents handled, by outcome: reported (exec format errors), loader_refusal, pod_gone, pod_moved, node_gone, incomplete, api_error",
            self.outcomes.clone(),
        );
        self.correction.register(registry);
    }

    pub(super) fn count(&self, outcome: &'static str) {
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn get(&self, outcome: &'static str) -> u64 {
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).get()
    }
}
