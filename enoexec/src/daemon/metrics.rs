//! What became of each exec format error the kernel reported on this node.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// `multiarch_enoexec_daemon_events_total{outcome}`: what became of each kernel report.
#[derive(Clone, Debug, Default)]
pub struct DaemonMetrics {
    pub events: Family<OutcomeLabel, Counter>,
    /// Reports the kernel program dropped because the ring buffer was full.
    pub lost: Counter,
}

impl DaemonMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "multiarch_enoexec_daemon_events",
            "Exec format errors seen on this node, by outcome: reported, duplicate, outside_container, process_gone, unresolved, queue_full, write_failed, undecodable",
            self.events.clone(),
        );
        registry.register(
            "multiarch_enoexec_daemon_lost_events",
            "Exec format errors the kernel program could not queue (ring buffer full)",
            self.lost.clone(),
        );
    }

    pub fn count(&self, outcome: &'static str) {
        self.events.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn get(&self, outcome: &'static str) -> u64 {
        self.events.get_or_create(&OutcomeLabel { outcome }).get()
    }
}
