//! The ClusterPodPlacementConfig's status: MTO's condition types and reasons (so its
//! users' dashboards and `kubectl wait --for=condition=Available` keep working), one
//! condition per operand, each with `observedGeneration` and a message in words, and
//! where pods are routed and which architectures the nodes have. A condition's
//! `lastTransitionTime` moves only when its status does. No I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use multiarch_crd::{
    ClusterPodPlacementConfigSpec, ClusterPodPlacementConfigStatus, PlacementMode, Routing,
    cluster_pod_placement_config::conditions::*,
};

use crate::plan::{Component, Observed, Plan};

pub const SCHEDULER_NOT_ROLLED_OUT: &str = "SchedulerNotRolledOut";
pub const INSPECTOR_NOT_ROLLED_OUT: &str = "InspectorNotRolledOut";
pub const EXEC_FORMAT_ERROR_MONITOR_NOT_ROLLED_OUT: &str = "ExecFormatErrorMonitorNotRolledOut";

/// Everything the status is computed from.
pub struct Inputs<'a> {
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub generation: i64,
    pub plan: &'a Plan,
    pub observed: &'a Observed,
    /// Why an uninstall waits, when the object is being deleted.
    pub deprovisioning: Option<String>,
    pub architectures: Vec<String>,
    /// Steps of this pass that failed while the others went on (`StepFailures`).
    pub failures: &'a [String],
    pub previous: Option<&'a ClusterPodPlacementConfigStatus>,
    pub now: Time,
}

fn mode_words(mode: PlacementMode) -> &'static str {
    match mode {
        PlacementMode::Scheduler => "scheduler mode",
        PlacementMode::SchedulingGate => "gate mode",
    }
}

struct Operand {
    condition: &'static str,
    ready_reason: &'static str,
    not_ready_reason: &'static str,
    components: &'static [Component],
}

const OPERANDS: [Operand; 5] = [
    Operand {
        condition: POD_PLACEMENT_CONTROLLER_NOT_ROLLED_OUT,
        ready_reason: "PodPlacementControllerReady",
        not_ready_reason: "PodPlacementControllerNotReady",
        components: &[Component::GateController],
    },
    Operand {
        condition: POD_PLACEMENT_WEBHOOK_NOT_ROLLED_OUT,
        ready_reason: "PodPlacementWebhookReady",
        not_ready_reason: "PodPlacementWebhookNotReady",
        components: &[Component::Webhook],
    },
    Operand {
        condition: SCHEDULER_NOT_ROLLED_OUT,
        ready_reason: "SchedulerReady",
        not_ready_reason: "SchedulerNotReady",
        components: &[Component::Scheduler],
    },
    Operand {
        condition: INSPECTOR_NOT_ROLLED_OUT,
        ready_reason: "InspectorReady",
        not_ready_reason: "InspectorNotReady",
        components: &[Component::Inspector],
    },
    Operand {
        condition: EXEC_FORMAT_ERROR_MONITOR_NOT_ROLLED_OUT,
        ready_reason: "ExecFormatErrorMonitorReady",
        not_ready_reason: "ExecFormatErrorMonitorNotReady",
        components: &[Component::EnoexecDaemon, Component::EnoexecHandler],
    },
];

/// The components the plan installs.
fn wanted(plan: &Plan, component: Component) -> bool {
    match component {
        Component::Inspector | Component::Webhook | Component::GateController => true,
        Component::Scheduler => plan.scheduler,
        Component::EnoexecDaemon => plan.enoexec_daemon,
        Component::EnoexecHandler => plan.enoexec_handler,
    }
}

fn rolled_out(observed: &Observed, component: Component) -> bool {
    observed
        .rollouts
        .get(&component)
        .is_some_and(|r| r.available && r.rolled_out)
}

fn detail(observed: &Observed, component: Component) -> String {
    match observed.rollouts.get(&component) {
        Some(r) if r.exists => r.detail.clone(),
        _ => "it is being created".into(),
    }
}

pub fn status(inputs: &Inputs<'_>) -> ClusterPodPlacementConfigStatus {
    let Inputs {
        spec,
        plan,
        observed,
        ..
    } = inputs;
    let mode = spec.placement_or_default().mode;
    let deprovisioning = inputs.deprovisioning.is_some();
    let mut conditions = Vec::new();
    let mut not_ready: Vec<&str> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut rolling: Vec<String> = Vec::new();
    let mut per_operand = Vec::new();
    for operand in &OPERANDS {
        let components: Vec<Component> = operand
            .components
            .iter()
            .copied()
            .filter(|c| wanted(plan, *c))
            .collect();
        if components.is_empty() {
            continue;
        }
        let ready = components.iter().all(|c| rolled_out(observed, *c));
        if !ready {
            not_ready.push(operand.condition);
            for c in &components {
                if !observed.available(*c) {
                    problems.push(format!(
                        "the {} is not available: {}",
                        c.title(),
                        detail(observed, *c)
                    ));
                } else if !rolled_out(observed, *c) {
                    rolling.push(format!(
                        "the {} is rolling out: {}",
                        c.title(),
                        detail(observed, *c)
                    ));
                }
            }
        }
        let titles: Vec<&str> = components.iter().map(|c| c.title()).collect();
        per_operand.push(condition(
            operand.condition,
            !ready,
            if ready {
                operand.ready_reason
            } else {
                operand.not_ready_reason
            },
            format!(
                "The {} {} {}fully rolled out.",
                titles.join(" and the "),
                if titles.len() > 1 { "are" } else { "is" },
                if ready { "" } else { "not " }
            ),
        ));
    }
    let routed = observed.routing.is_some();
    if !routed {
        not_ready.push(MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE);
    }
    let reason = if not_ready.is_empty() {
        REASON_ALL_COMPONENTS_READY.to_owned()
    } else {
        not_ready.concat()
    };
    let available = routed && !deprovisioning;
    let switching = routed && observed.routing != Some(mode);
    if switching {
        rolling.push(format!(
            "switching to {}: pods are routed in {} until the {} is available",
            mode_words(mode),
            mode_words(observed.routing.unwrap_or(mode)),
            match mode {
                PlacementMode::Scheduler => "scheduler",
                PlacementMode::SchedulingGate => "gate controller",
            }
        ));
    }
    if plan.draining_scheduler {
        rolling.push(format!(
            "{} pending pods still wait for the scheduler, which is removed once they are placed",
            observed.pods_waiting_for_scheduler
        ));
    }
    if plan.draining_enoexec {
        rolling.push(format!(
            "{} exec-format-error reports still wait for the handler, which is removed once they are handled",
            observed.enoexec_events
        ));
    }
    let progressing = !deprovisioning && (!not_ready.is_empty() || !rolling.is_empty());
    let degraded = (!available && !deprovisioning) || !inputs.failures.is_empty();
    let routing_words = match observed.routing {
        Some(PlacementMode::Scheduler) => format!(
            "new pods in the selected namespaces go to {}",
            spec.placement_or_default().scheduler_name
        ),
        Some(PlacementMode::SchedulingGate) => {
            "new pods in the selected namespaces are gated and given an architecture affinity"
                .into()
        }
        None => "new pods are admitted unchanged".into(),
    };
    conditions.push(condition(
        AVAILABLE,
        available,
        &reason,
        if available {
            format!(
                "Routing is on ({}): {routing_words}.",
                mode_words(observed.routing.unwrap_or(mode))
            )
        } else if deprovisioning {
            "Routing is off: multiarch is being uninstalled.".into()
        } else {
            format!(
                "Routing is off: {routing_words} until the {} can take them.",
                mode_words(mode)
            )
        },
    ));
    conditions.push(condition(
        PROGRESSING,
        progressing,
        &reason,
        if progressing {
            let mut what = problems.clone();
            what.extend(rolling.iter().cloned());
            if what.is_empty() {
                what.push("the webhook configuration is being written".into());
            }
            format!("In progress: {}.", what.join("; "))
        } else {
            "Nothing is in progress.".into()
        },
    ));
    conditions.push(condition(
        DEGRADED,
        degraded,
        if degraded { "Degraded" } else { "NotDegraded" },
        if degraded && (available || deprovisioning) {
            format!(
                "Some of the operator's work failed (the rest went on; it is retried): {}.",
                inputs.failures.join("; ")
            )
        } else if degraded {
            let mut why = problems;
            if why.is_empty() {
                why.push("the webhook configuration is not in place yet".into());
            }
            why.extend(inputs.failures.iter().cloned());
            format!(
                "Pods are not placed by architecture: {}. New pods go to the default scheduler unchanged meanwhile.",
                why.join("; ")
            )
        } else {
            "Nothing is degraded.".into()
        },
    ));
    conditions.push(condition(
        DEPROVISIONING,
        deprovisioning,
        if deprovisioning {
            "Deprovisioning"
        } else {
            "NotDeprovisioning"
        },
        match &inputs.deprovisioning {
            Some(why) => format!("multiarch is being uninstalled: {why}"),
            None => "multiarch is installed.".into(),
        },
    ));
    conditions.extend(per_operand);
    conditions.push(condition(
        MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE,
        !routed,
        &reason,
        if routed {
            format!("The mutating webhook configuration is ready: {routing_words}.")
        } else {
            "The mutating webhook configuration is not ready: new pods are admitted unchanged."
                .into()
        },
    ));
    for c in &mut conditions {
        c.observed_generation = Some(inputs.generation);
        c.last_transition_time = inputs
            .previous
            .and_then(|p| p.conditions.iter().find(|old| old.type_ == c.type_))
            .filter(|old| old.status == c.status)
            .map(|old| old.last_transition_time.clone())
            .unwrap_or_else(|| inputs.now.clone());
    }
    ClusterPodPlacementConfigStatus {
        conditions,
        observed_generation: Some(inputs.generation),
        routing: Some(match observed.routing {
            Some(PlacementMode::Scheduler) => Routing::Scheduler,
            Some(PlacementMode::SchedulingGate) => Routing::SchedulingGate,
            None => Routing::Off,
        }),
        architectures: inputs.architectures.clone(),
        misplaced_pods: observed
            .misplaced_pods
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
    }
}

fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: None,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::plan::{Expired, Rollout, plan};

    fn observed(available: &[Component], routing: Option<PlacementMode>) -> Observed {
        let mut o = Observed {
            routing,
            ..Observed::default()
        };
        for c in available {
            o.rollouts.insert(
                *c,
                Rollout {
                    exists: true,
                    available: true,
                    rolled_out: true,
                    detail: "2 of 2 replicas available".into(),
                },
            );
        }
        o
    }

    fn find<'a>(s: &'a ClusterPodPlacementConfigStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    fn compute(
        spec: &ClusterPodPlacementConfigSpec,
        o: &Observed,
        previous: Option<&ClusterPodPlacementConfigStatus>,
        now: i64,
    ) -> ClusterPodPlacementConfigStatus {
        compute_with(spec, o, previous, now, &[])
    }

    fn compute_with(
        spec: &ClusterPodPlacementConfigSpec,
        o: &Observed,
        previous: Option<&ClusterPodPlacementConfigStatus>,
        now: i64,
        failures: &[String],
    ) -> ClusterPodPlacementConfigStatus {
        let p = plan(spec, o, Expired::default());
        status(&Inputs {
            spec,
            generation: 3,
            plan: &p,
            observed: o,
            deprovisioning: None,
            architectures: vec!["amd64".into(), "arm64".into()],
            failures,
            previous,
            now: Time(Timestamp::from_second(now).unwrap()),
        })
    }

    #[test]
    fn all_ready_is_mto_s_healthy_steady_state() {
        use Component::*;
        let spec = ClusterPodPlacementConfigSpec::default();
        let o = observed(
            &[Inspector, Webhook, GateController, Scheduler],
            Some(PlacementMode::Scheduler),
        );
        let s = compute(&spec, &o, None, 1000);
        for (t, want) in [
            (AVAILABLE, "True"),
            (PROGRESSING, "False"),
            (DEGRADED, "False"),
            (DEPROVISIONING, "False"),
            (POD_PLACEMENT_CONTROLLER_NOT_ROLLED_OUT, "False"),
            (POD_PLACEMENT_WEBHOOK_NOT_ROLLED_OUT, "False"),
            (MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE, "False"),
            (SCHEDULER_NOT_ROLLED_OUT, "False"),
        ] {
            assert_eq!(find(&s, t).status, want, "{t}");
            assert_eq!(find(&s, t).observed_generation, Some(3));
        }
        assert_eq!(find(&s, AVAILABLE).reason, "AllComponentsReady");
        assert_eq!(s.routing, Some(Routing::Scheduler));
        assert_eq!(s.observed_generation, Some(3));
        // Unchanged status keeps its transition times.
        let again = compute(&spec, &o, Some(&s), 2000);
        assert_eq!(again, s);
    }

    #[test]
    fn a_failed_step_degrades_a_working_install_without_turning_routing_off() {
        use Component::*;
        let spec = ClusterPodPlacementConfigSpec::default();
        let o = observed(
            &[Inspector, Webhook, GateController, Scheduler],
            Some(PlacementMode::Scheduler),
        );
        let failure =
            "apply an operand: MutatingWebhookConfiguration multiarch-webhook: refused".to_owned();
        let s = compute_with(&spec, &o, None, 1000, &[failure]);
        assert_eq!(find(&s, AVAILABLE).status, "True");
        let degraded = find(&s, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "Degraded")
        );
        assert_eq!(
            degraded.message,
            "Some of the operator's work failed (the rest went on; it is retried): apply an operand: MutatingWebhookConfiguration multiarch-webhook: refused."
        );
    }

    #[test]
    fn a_missing_scheduler_is_degraded_in_words() {
        use Component::*;
        let spec = ClusterPodPlacementConfigSpec::default();
        let mut o = observed(&[Inspector, Webhook, GateController], None);
        o.rollouts.insert(
            Scheduler,
            Rollout {
                exists: true,
                available: false,
                rolled_out: false,
                detail: "Deployment multiarch/multiarch-scheduler has 0 of 2 replicas available"
                    .into(),
            },
        );
        let s = compute(&spec, &o, None, 1000);
        let degraded = find(&s, DEGRADED);
        assert_eq!(degraded.status, "True");
        assert_eq!(
            degraded.message,
            "Pods are not placed by architecture: the scheduler is not available: Deployment multiarch/multiarch-scheduler has 0 of 2 replicas available. New pods go to the default scheduler unchanged meanwhile."
        );
        assert_eq!(
            find(&s, AVAILABLE).reason,
            "SchedulerNotRolledOutMutatingWebhookConfigurationNotAvailable"
        );
        assert_eq!(s.routing, Some(Routing::Off));
    }
}
