//! Scheduler metrics, named like kube-scheduler's with a `multiarch_` prefix.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub r#type: &'static str,
}

fn latency() -> Histogram {
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0,
    ])
}

#[derive(Clone, Debug)]
pub struct SchedulerMetrics {
    /// `scheduled`, `unschedulable`, `error`.
    pub attempts: Family<AttemptResultLabel, Counter>,
    pub attempt_seconds: Histogram,
    pub binding_seconds: Histogram,
    /// `active`, `backoff`, `unschedulable`, `waiting_for_images`.
    pub pending_pods: Family<QueueLabel, Gauge>,
    /// `nodes`, `pods`, `assumed_pods`.
    pub cache_size: Family<TypeLabel, Gauge>,
    pub events_dropped: Counter,
    pub is_leader: Gauge,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        SchedulerMetrics {
            attempts: Family::default(),
            attempt_seconds: latency(),
            binding_seconds: latency(),
            pending_pods: Family::default(),
            cache_size: Family::default(),
            events_dropped: Counter::default(),
            is_leader: Gauge::default(),
        }
    }
}

impl SchedulerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("multiarch_scheduler");
        sub.register(
            "schedule_attempts",
            "Scheduling attempts by result",
            self.attempts.clone(),
        );
        sub.register(
            "scheduling_attempt_duration_seconds",
            "Time of one scheduling attempt",
            self.attempt_seconds.clone(),
        );
        sub.register(
            "binding_duration_seconds",
            "Time of one pods/binding call",
            self.binding_seconds.clone(),
        );
        sub.register(
            "pending_pods",
            "Pods waiting in the queue, by sub-queue",
            self.pending_pods.clone(),
        );
        sub.register(
            "cache_size",
            "Objects in the scheduler cache, by type",
            self.cache_size.clone(),
        );
        sub.register(
            "events_dropped",
            "Events and status writes dropped because the writer was saturated",
            self.events_dropped.clone(),
        );
        sub.register(
            "is_leader",
            "1 while this replica holds the lease",
            self.is_leader.clone(),
        );
    }
}
