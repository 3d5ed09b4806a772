//! The scheduling loop: owns the core and everything it learns; reads its inbox, decides,
//! hands bindings and reports to background writers. Nothing in it waits on the network.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_plugins::{
    model::{
        pod::PodInfo,
        quantity::QUANTITY_LIMIT,
        resources::{NonZero, Resources},
    },
    profile::Profile,
};
use multiarch_policy::architecture_rules::ArchitectureDecision;
use multiarch_runtime::{
    event_reason::EventReason,
    leader_election::{Leadership, LostLease},
    placement_config::PlacementConfigs,
};
use tokio::sync::{mpsc, watch as signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    SchedulerOptions,
    binder::KubeBinder,
    evictions::Evictions,
    image_lookups::InspectedImages,
    in_flight::{InFlight, InFlightBindings},
    inbox::{BindOutcome, Kind, LoopMessage},
    metrics::{
        AttemptResultLabel, DecidedByLabel, HintLabel, QueueLabel, SchedulerMetrics, TypeLabel,
    },
    pod_reports::{PodReport, PodReports},
};
mod fencing;
mod readiness;

use crate::engine::outcome::{FailureKind, Nomination, Outcome, RuleOverride};
use crate::engine::placement_inputs::PlacementInputs;
use crate::engine::{
    binder::{Binder, Binding},
    scheduler::SchedulerCore,
};

pub(super) struct Loop {
    core: SchedulerCore,
    options: SchedulerOptions,
    images: InspectedImages,
    writers: Writers,
    exports: Exports,
    lease: LeaseState,
    books: Bookkeeping,
}

/// The background writers the loop hands its decisions to.
pub(super) struct Writers {
    pub binder: KubeBinder,
    pub reports: PodReports,
    pub evictions: Evictions,
}

/// What the loop tells the rest of the process: metrics, readiness, log verbosity.
pub(super) struct Exports {
    pub metrics: SchedulerMetrics,
    pub ready: signal::Sender<bool>,
    pub verbosity: signal::Sender<multiarch_crd::LogVerbosity>,
    /// Queueing hint counts already exported to the metrics.
    pub exported_hints: HashMap<(&'static str, &'static str), u64>,
}

/// Where the loop stands with the Lease.
struct LeaseState {
    leading: bool,
    /// Led at some point: losing the lease afterwards ends the process.
    led: bool,
    /// Owned by the loop: when the loop ends, however it ends, the elector stops renewing.
    leadership: Option<Leadership>,
    /// The elector's watch closed: its last value stands.
    elector_stopped: bool,
}

/// What the loop keeps between turns.
struct Bookkeeping {
    synced: HashSet<Kind>,
    configs: Arc<PlacementConfigs>,
    in_flight: InFlightBindings,
    /// The last FailedScheduling message per pod: unchanged failures are not re-reported.
    last_failure: HashMap<String, String>,
    started: Instant,
}

/// Pods decided per turn before the inbox is read again, so watch events and binding
/// results are never starved by a long queue.
const PODS_PER_TURN: usize = 256;
/// Nor by slow decisions: a turn ends after this long, however few it decided.
const TURN_TIME: Duration = Duration::from_millis(100);

impl Loop {
    pub(super) fn new(
        core: SchedulerCore,
        options: SchedulerOptions,
        images: InspectedImages,
        writers: Writers,
        exports: Exports,
        leadership: Leadership,
    ) -> Self {
        Loop {
            core,
            lease: LeaseState {
                leading: options.election.is_none(),
                led: false,
                leadership: Some(leadership),
                elector_stopped: false,
            },
            options,
            images,
            writers,
            exports,
            books: Bookkeeping {
                synced: HashSet::new(),
                configs: Arc::default(),
                in_flight: InFlightBindings::default(),
                last_failure: HashMap::new(),
                started: Instant::now(),
            },
        }
    }

    pub(super) async fn run(
        mut self,
        mut inbox: mpsc::Receiver<LoopMessage>,
        stop: CancellationToken,
    ) -> Result<(), LostLease> {
        let mut last_gauges = Instant::now();
        // Leadership straight from the elector, not behind the inbox's backlog: a lost
        // lease is acted on before the next message, and before the next decision.
        let mut leadership = match &self.lease.leadership {
            Some(l) => l.subscribe(),
            None => return Ok(()),
        };
        self.follow_leadership(&mut leadership)?;
        loop {
            let wait = if self.can_schedule() && self.core.queue.counts().active > 0 {
                Duration::ZERO
            } else {
                Duration::from_millis(200)
            };
            tokio::select! {
                biased;
                changed = leadership.changed(), if self.elector_running() => {
                    self.lease.elector_stopped |= changed.is_err();
                    self.follow_leadership(&mut leadership)?;
                }
                message = inbox.recv() => match message {
                    Some(m) => self.handle_leading(m, &mut leadership)?,
                    None => return Ok(()),
                },
                () = stop.cancelled() => {
                    self.shut_down(&mut inbox, &mut leadership).await;
                    return Ok(());
                }
                () = tokio::time::sleep(wait) => {}
            }
            for _ in 0..10_000 {
                match inbox.try_recv() {
                    Ok(m) => self.handle_leading(m, &mut leadership)?,
                    Err(_) => break,
                }
            }
            self.follow_leadership(&mut leadership)?;
            let now = Instant::now();
            self.core.tick(now);
            self.update_readiness(now);
            if self.can_schedule() {
                let turn = Instant::now();
                for _ in 0..PODS_PER_TURN {
                    // Each decision may run a tenant's architecture rules (bounded by their
                    // cost, not free): the lease is read before each, and a turn that has
                    // taken its time gives way to the inbox.
                    self.follow_leadership(&mut leadership)?;
                    if turn.elapsed() > TURN_TIME {
                        break;
                    }
                    let started = Instant::now();
                    let Some(outcome) = self.core.schedule_next(&self.images, now) else {
                        break;
                    };
                    self.exports
                        .metrics
                        .attempt_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.outcome(outcome);
                }
            }
            if last_gauges.elapsed() > Duration::from_secs(1) {
                self.gauges();
                self.exports
                    .metrics
                    .inbox_depth
                    .set(i64::try_from(inbox.len()).unwrap_or(i64::MAX));
                self.export_hints();
                self.images.expire();
                last_gauges = Instant::now();
            }
        }
    }

    fn can_schedule(&self) -> bool {
        self.lease.leading && *self.exports.ready.borrow()
    }

    fn gauges(&self) {
        let c = self.core.queue.counts();
        for (queue, n) in [
            ("active", c.active),
            ("backoff", c.backoff),
            ("unschedulable", c.unschedulable),
            ("waiting_for_images", c.waiting_for_images),
        ] {
            self.exports
                .metrics
                .pending_pods
                .get_or_create(&QueueLabel { queue })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let cluster = &self.core.cluster;
        let (volumes, claims) = cluster.storage().counts();
        for (r#type, n) in [
            ("nodes", cluster.nodes().len()),
            ("pods", cluster.pod_count()),
            ("assumed_pods", cluster.assumed_count()),
            ("nominated_pods", self.core.nominated.len()),
            ("namespaces", cluster.namespace_count()),
            ("persistent_volumes", volumes),
            ("persistent_volume_claims", claims),
        ] {
            self.exports
                .metrics
                .cache_size
                .get_or_create(&TypeLabel { r#type })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.exports
            .metrics
            .is_leader
            .set(i64::from(self.lease.leading));
    }

    /// Adds what the queueing hints decided since the last export to the counters.
    fn export_hints(&mut self) {
        for (kind, hint, total) in self.core.queue.hint_counts() {
            let key = (kind.as_str(), hint.as_str());
            let before = self.exports.exported_hints.insert(key, total).unwrap_or(0);
            if total > before {
                self.exports
                    .metrics
                    .queueing_hints
                    .get_or_create(&HintLabel {
                        event: key.0,
                        hint: key.1,
                    })
                    .inc_by(total - before);
            }
        }
    }

    fn handle(&mut self, message: LoopMessage) {
        let now = Instant::now();
        match message {
            LoopMessage::Listed(kind) => {
                if self.books.synced.insert(kind) {
                    info!(?kind, "initial list received");
                }
            }
            LoopMessage::NodeUpsert(node) => {
                self.core.apply_node(*node, now);
            }
            LoopMessage::NodeDelete(name) => {
                self.core.delete_node(&name, now);
            }
            LoopMessage::PodUpsert(pod) => {
                if pod.node_name.is_some() {
                    self.books.last_failure.remove(&pod.uid);
                }
                self.core.apply_pod(*pod, now);
            }
            LoopMessage::PodUnreadable(pod, error) => {
                // A pending pod of ours is told why it is not scheduled, once per message;
                // a bound pod fills its node (its usage is unknown, never nothing).
                warn!(pod = %pod.key(), %error, "pod has an unreadable resource request");
                if pod.node_name.is_some() && !pod.deleting {
                    self.unreadable_bound_pod(*pod, &error, now);
                    return;
                }
                let ours = *pod.scheduler_name == *self.options.scheduler_name;
                let message = format!("pod has an unreadable resource request: {error}");
                if ours
                    && pod.node_name.is_none()
                    && !pod.deleting
                    && self.books.last_failure.get(&pod.uid) != Some(&message)
                {
                    self.books
                        .last_failure
                        .insert(pod.uid.clone(), message.clone());
                    self.writers.reports.send(PodReport::about(
                        &pod,
                        EventReason::FailedScheduling,
                        "Scheduling",
                        message,
                        Some("Unschedulable"),
                    ));
                }
            }
            LoopMessage::PodDelete(uid) => {
                self.books.last_failure.remove(&uid);
                self.books.in_flight.pod_deleted(&uid);
                self.writers.binder.cancel(&uid);
                self.core.delete_pod(&uid, now);
            }
            LoopMessage::Namespace(name, labels) => {
                self.core.apply_namespace(&name, labels, now);
            }
            LoopMessage::DeviceClasses(classes) => {
                if classes.synced && self.books.synced.insert(Kind::DeviceClasses) {
                    info!(kind = ?Kind::DeviceClasses, "initial list received");
                }
                self.core
                    .apply_device_classes(classes.resources.clone(), now);
            }
            LoopMessage::NamespaceDelete(name) => {
                self.core.delete_namespace(&name);
            }
            LoopMessage::DisruptionBudget(budget) => {
                self.core.apply_disruption_budget(budget);
            }
            LoopMessage::DisruptionBudgetDelete(key) => {
                self.core.delete_disruption_budget(&key);
            }
            LoopMessage::Storage(object) => {
                self.core.apply_storage(*object, now);
            }
            LoopMessage::StorageDelete(key) => {
                self.core.delete_storage(key, now);
            }
            LoopMessage::Preempted { uid, ok } => self.core.preemption_done(&uid, ok, now),
            LoopMessage::PlacementConfigs(configs) => {
                if configs.synced && self.books.synced.insert(Kind::Configs) {
                    info!(kind = ?Kind::Configs, "initial list received");
                }
                self.books.configs = configs;
                self.reconfigure(now);
            }
            LoopMessage::ImagesResolved(images) => self.core.images_resolved(&images, now),
            LoopMessage::Bind { uid, outcome } => self.bound(&uid, outcome, now),
        }
    }

    /// A bound pod whose requests cannot be read counts as using all of its node: nothing
    /// more is placed there while it runs. Counted, logged, and told on the pod once per
    /// message. (kube-apiserver stores only quantities the parser reads; this is for
    /// objects that reach the watch some other way.)
    fn unreadable_bound_pod(&mut self, mut pod: PodInfo, error: &str, now: Instant) {
        let node = pod.node_name.clone().unwrap_or_default();
        let message = format!(
            "{} cannot read this pod's resource requests ({error}): it counts node {node} as full while the pod is there",
            self.options.scheduler_name
        );
        if self.books.last_failure.get(&pod.uid) != Some(&message) {
            self.exports.metrics.unreadable_bound_pods.inc();
            self.books
                .last_failure
                .insert(pod.uid.clone(), message.clone());
            self.writers.reports.send(PodReport::about(
                &pod,
                EventReason::UnreadableResourceRequest,
                "Scheduling",
                message,
                None,
            ));
        }
        pod.requests = Resources {
            milli_cpu: QUANTITY_LIMIT,
            memory: QUANTITY_LIMIT,
            ephemeral_storage: QUANTITY_LIMIT,
            ..Resources::default()
        };
        pod.non_zero = NonZero {
            milli_cpu: QUANTITY_LIMIT,
            memory: QUANTITY_LIMIT,
        };
        self.core.apply_pod(pod, now);
    }

    fn reconfigure(&mut self, now: Instant) {
        let spec = self.books.configs.cluster_or_default();
        self.exports
            .verbosity
            .send_if_modified(|v| std::mem::replace(v, spec.log_verbosity) != spec.log_verbosity);
        let mut placement = spec.placement_or_default();
        // The name comes from the command line (the operator keeps both in step).
        placement
            .scheduler_name
            .clone_from(&self.options.scheduler_name);
        // Shared with the snapshot, its rules compiled when it was made (off the loop).
        let inputs = PlacementInputs {
            cluster_plugins: spec.plugins.clone(),
            configs: self.books.configs.pod_configs.clone(),
            architecture_rules: self.books.configs.architecture_rules.clone(),
            fallback_architecture: spec.fallback_architecture.map(|a| a.as_str().to_owned()),
        };
        self.core
            .set_configuration(Profile::new(&placement), inputs, now);
    }

    /// A rule's decision that needs saying: rules that could not be evaluated (logged,
    /// counted) and a decision against the images (a Warning event on the pod).
    fn report_rule(
        &self,
        pod: &PodInfo,
        rule: Option<&ArchitectureDecision>,
        overrides: Option<RuleOverride>,
    ) {
        let Some(rule) = rule else {
            return;
        };
        for (name, error) in &rule.errors {
            self.exports.metrics.architecture_rule_errors.inc();
            info!(pod = %pod.key(), config = %rule.config, rule = %name, %error, "architecture rule not evaluated for the pod; it did not match");
        }
        if let Some(overrides) = overrides {
            self.exports.metrics.architecture_rule_overrides.inc();
            self.writers.reports.send(PodReport::about(
                pod,
                EventReason::ArchitectureRuleOverridesImages,
                "Scheduling",
                overrides.message,
                None,
            ));
        }
    }

    fn outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Scheduled {
                pod,
                node,
                message,
                attempts,
                volumes,
                architecture_rule,
                rule_override,
                ..
            } => {
                self.exports
                    .metrics
                    .attempts
                    .get_or_create(&AttemptResultLabel {
                        result: "scheduled",
                    })
                    .inc();
                if let Some(rule) = &architecture_rule {
                    self.exports
                        .metrics
                        .architecture_rule_decisions
                        .get_or_create(&DecidedByLabel {
                            decided_by: if rule.rule.is_some() {
                                "rule"
                            } else {
                                "fallback"
                            },
                        })
                        .inc();
                }
                self.report_rule(&pod, architecture_rule.as_ref(), rule_override);
                self.writers.binder.bind(Binding::of(&pod, &node, volumes));
                self.books.in_flight.start(InFlight {
                    pod,
                    attempts,
                    message,
                });
            }
            Outcome::Failed {
                pod,
                kind,
                message,
                nomination,
                preemption,
                architecture_rule,
                rule_override,
                ..
            } => {
                let result = if kind == FailureKind::SchedulerError {
                    "error"
                } else {
                    "unschedulable"
                };
                self.exports
                    .metrics
                    .attempts
                    .get_or_create(&AttemptResultLabel { result })
                    .inc();
                let nomination = match nomination {
                    Nomination::Unchanged => None,
                    Nomination::Set(node) => Some(Some(node)),
                    Nomination::Clear => Some(None),
                };
                if self.books.last_failure.get(&pod.uid) != Some(&message) || nomination.is_some() {
                    self.books
                        .last_failure
                        .insert(pod.uid.clone(), message.clone());
                    self.report_rule(&pod, architecture_rule.as_ref(), rule_override);
                    let mut report = PodReport::about(
                        &pod,
                        EventReason::FailedScheduling,
                        "Scheduling",
                        message,
                        Some(kind.as_str()),
                    );
                    // A preemptor's nomination is written before its victims are
                    // evicted (so before it can be bound), not by the report writer.
                    if preemption.is_none() {
                        report.nomination = nomination;
                    }
                    self.writers.reports.send(report);
                }
                if let Some(preemption) = preemption {
                    self.exports.metrics.preemption_attempts.inc();
                    info!(pod = %pod.key(), node = %preemption.node, victims = preemption.victims.len(), "preempting");
                    self.writers.evictions.evict(&pod, preemption);
                }
            }
            Outcome::WaitingForImages { .. } | Outcome::Skipped { .. } => {}
        }
    }

    fn bound(&mut self, uid: &str, outcome: BindOutcome, now: Instant) {
        // A pod deleted meanwhile is gone for good, whatever the result.
        let Some(flight) = self.books.in_flight.finish(uid) else {
            return;
        };
        let pod = &flight.pod;
        match outcome {
            BindOutcome::Bound => {
                self.books.last_failure.remove(uid);
                self.writers.reports.send(PodReport::about(
                    pod,
                    EventReason::Scheduled,
                    "Binding",
                    flight.message,
                    None,
                ));
            }
            BindOutcome::Gone(reason) => {
                info!(pod = %pod.key(), %reason, "binding target is gone; dropping the pod");
                self.core.binding_dropped(uid, now);
            }
            BindOutcome::Failed(reason) => {
                self.exports
                    .metrics
                    .attempts
                    .get_or_create(&AttemptResultLabel { result: "error" })
                    .inc();
                let note = format!("Binding rejected: {reason}");
                let mut report = PodReport::about(
                    pod,
                    EventReason::FailedScheduling,
                    "Scheduling",
                    note.clone(),
                    Some(FailureKind::SchedulerError.as_str()),
                );
                // As kube-scheduler after a failed binding cycle: the node the binder
                // may have nominated is not where the pod goes.
                report.nomination = Some(None);
                self.writers.reports.send(report);
                self.books.last_failure.insert(uid.to_owned(), note);
                self.core.binding_failed(flight.pod, flight.attempts, now);
            }
        }
    }
}
