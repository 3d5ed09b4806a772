//! What became of each exec format error the kernel reported on this node, and of each
//! container process that exited with the loader's status 127.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// Every outcome a report can have. `reported` is an exec format error written;
/// `loader_refusal` a loader's refusal written; `exit_127_other` an exit with 127 whose
/// log shows no refusal (a shell's "command not found", say); `log_unreadable` one whose
/// log could not be read (the pod log directory not mounted, say).
pub const OUTCOMES: [&str; 11] = [
    "reported",
    "loader_refusal",
    "exit_127_other",
    "log_unreadable",
    "duplicate",
    "outside_container",
    "process_gone",
    "unresolved",
    "queue_full",
    "write_failed",
    "undecodable",
];

/// What a write of the node's level label can come to.
pub const LABEL_WRITE_OUTCOMES: [&str; 2] = ["written", "failed"];

/// `multiarch_enoexec_daemon_events_total{outcome}`: what became of each kernel report.
#[derive(Clone, Debug, Default)]
pub struct DaemonMetrics {
    pub events: Family<OutcomeLabel, Counter>,
    /// Reports the kernel program dropped because the ring buffer was full.
    pub lost: Counter,
    /// Writes of the node's x86-64 level label, by outcome (`written`, `failed`).
    pub label_writes: Family<OutcomeLabel, Counter>,
}

impl DaemonMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "multiarch_enoexec_daemon_events",
            "Exec format errors and loader refusals (exit status 127) seen on this node, by outcome: reported, loader_refusal, exit_127_other, log_unreadable, duplicate, outside_container, process_gone, unresolved, queue_full, write_failed, undecodable",
            self.events.clone(),
        );
        registry.register(
            "multiarch_enoexec_daemon_lost_events",
            "Exec format errors the kernel program could not queue (ring buffer full)",
            self.lost.clone(),
        );
        registry.register(
            "multiarch_enoexec_daemon_node_label_writes",
            "Writes of this node's x86-64 level label (multiarch.openshift.io/arch-variant), by outcome: written, failed",
            self.label_writes.clone(),
        );
        for outcome in LABEL_WRITE_OUTCOMES {
            let _ = self.label_writes.get_or_create(&OutcomeLabel { outcome });
        }
        // Every outcome's series from the start, at 0: the node's first exec format
        // error is then an increase an alert sees (a counter born at 1 is not one).
        for outcome in OUTCOMES {
            let _ = self.events.get_or_create(&OutcomeLabel { outcome });
        }
    }

    pub fn count(&self, outcome: &'static str) {
        debug_assert!(OUTCOMES.contains(&outcome), "{outcome} is no outcome");
        self.events.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn count_label_write(&self, outcome: &'static str) {
        debug_assert!(
            LABEL_WRITE_OUTCOMES.contains(&outcome),
            "{outcome} is no outcome"
        );
        self.label_writes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn label_writes(&self, outcome: &'static str) -> u64 {
        self.label_writes
            .get_or_create(&OutcomeLabel { outcome })
            .get()
    }

    pub fn get(&self, outcome: &'static str) -> u64 {
        self.events.get_or_create(&OutcomeLabel { outcome }).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_exported_at_zero_before_the_first_report() {
        let metrics = DaemonMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for outcome in OUTCOMES {
            assert!(
                text.contains(&format!(
                    "multiarch_enoexec_daemon_events_total{{outcome=\"{outcome}\"}} 0"
                )),
                "{text}"
            );
        }
    }
}
