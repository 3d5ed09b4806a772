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

/// A kind of cluster change and what the queueing hints made of it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HintLabel {
    pub event: &'static str,
    /// `Queue` or `QueueSkip`.
    pub hint: &'static str,
}

/// What decided a rule-governed pod's architectures: `rule` or `fallback`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecidedByLabel {
    pub decided_by: &'static str,
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
    /// Events and status writes the API server refused or failed.
    pub reports_failed: Counter,
    /// Bound pods whose requests cannot be read (each counted as filling its node).
    pub unreadable_bound_pods: Counter,
    /// Messages (watch events, results) waiting for the scheduling loop.
    pub inbox_depth: Gauge,
    pub is_leader: Gauge,
    /// Unschedulable pods an event moved (`Queue`) or left (`QueueSkip`).
    pub queueing_hints: Family<HintLabel, Counter>,
    pub preemption_attempts: Counter,
    pub preemption_victims: Counter,
    /// Writing a pod's volume decisions and waiting for its claims to be bound.
    pub volume_binding_seconds: Histogram,
    /// Pods placed by a `celArchitecturePlacement` decision.
    pub architecture_rule_decisions: Family<DecidedByLabel, Counter>,
    /// Rule decisions that send pods where their images have no build.
    pub architecture_rule_overrides: Counter,
    /// Rules that could not be evaluated for a pod (treated as not matching).
    pub architecture_rule_errors: Counter,
    /// 1 while the image inspector answers the scheduler's probes.
    pub inspector_reachable: Gauge,
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
            reports_failed: Counter::default(),
            unreadable_bound_pods: Counter::default(),
            inbox_depth: Gauge::default(),
            is_leader: Gauge::default(),
            queueing_hints: Family::default(),
            preemption_attempts: Counter::default(),
            preemption_victims: Counter::default(),
            volume_binding_seconds: Histogram::new([
                0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            ]),
            architecture_rule_decisions: Family::default(),
            architecture_rule_overrides: Counter::default(),
            architecture_rule_errors: Counter::default(),
            inspector_reachable: Gauge::default(),
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
            "inbox_depth",
            "Watch events and results waiting for the scheduling loop (bounded: watches pause when it is full)",
            self.inbox_depth.clone(),
        );
        sub.register(
            "events_dropped",
            "Events and status writes dropped because the writer was saturated",
            self.events_dropped.clone(),
        );
        sub.register(
            "reports_failed",
            "Events and status writes the API server refused or failed (each logged with its pod)",
            self.reports_failed.clone(),
        );
        sub.register(
            "unreadable_bound_pods",
            "Bound pods whose resource requests cannot be read, each counted as filling its node",
            self.unreadable_bound_pods.clone(),
        );
        sub.register(
            "is_leader",
            "1 while this replica holds the lease",
            self.is_leader.clone(),
        );
        sub.register(
            "queueing_hints",
            "Unschedulable pods a cluster change moved back to the queue (Queue) or left waiting (QueueSkip), by kind of change",
            self.queueing_hints.clone(),
        );
        sub.register(
            "preemption_attempts",
            "Scheduling attempts that ran preemption",
            self.preemption_attempts.clone(),
        );
        sub.register(
            "preemption_victims",
            "Pods evicted to make room for higher-priority pods",
            self.preemption_victims.clone(),
        );
        sub.register(
            "volume_binding_duration_seconds",
            "Time to write a pod's volume decisions and see its claims bound",
            self.volume_binding_seconds.clone(),
        );
        sub.register(
            "architecture_rule_decisions",
            "Pods scheduled on the architectures a celArchitecturePlacement rule (or its fallback) decided",
            self.architecture_rule_decisions.clone(),
        );
        sub.register(
            "architecture_rule_overrides_images",
            "Scheduling attempts whose rule sent the pod where its images have no build (event ArchitectureRuleOverridesImages)",
            self.architecture_rule_overrides.clone(),
        );
        sub.register(
            "architecture_rule_errors",
            "celArchitecturePlacement rules that could not be evaluated for a pod and did not match it",
            self.architecture_rule_errors.clone(),
        );
        sub.register(
            "inspector_reachable",
            "1 while the image inspector answers this scheduler's probes (always 1 when it inspects images in process)",
            self.inspector_reachable.clone(),
        );
    }
}
