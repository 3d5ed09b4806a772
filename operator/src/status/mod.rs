//! The ClusterPodPlacementConfig's status, computed from a pass's plan, snapshot and
//! outcome: MTO's condition types and reasons (so its users' dashboards and `kubectl wait
//! --for=condition=Available` keep working), one condition per operand, each with
//! `observedGeneration` and a message in words, and where pods are routed and which
//! architectures the nodes have. A condition's `lastTransitionTime` moves only when its
//! status does. One small function per condition; no I/O.

mod deprovisioning;
mod facts;
mod operands;

#[cfg(test)]
mod tests;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use multiarch_crd::{
    ClusterPodPlacementConfigSpec, ClusterPodPlacementConfigStatus, Routing,
    cluster_pod_placement_config::conditions::*,
};

use crate::{
    decide::{Left, Plan},
    observe::Snapshot,
};
use facts::{ConditionFacts, mode_words};

pub use operands::{
    EXEC_FORMAT_ERROR_MONITOR_NOT_ROLLED_OUT, INSPECTOR_NOT_ROLLED_OUT, SCHEDULER_NOT_ROLLED_OUT,
};

/// Everything the status is computed from.
pub struct Inputs<'a> {
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub generation: i64,
    pub plan: &'a Plan,
    pub snapshot: &'a Snapshot,
    /// What failed this pass while the rest went on.
    pub failures: &'a [String],
    /// What this pass's releases left gated and pending.
    pub ungated_left: Left,
    pub recreated_left: Left,
    pub architectures: Vec<String>,
    pub previous: Option<&'a ClusterPodPlacementConfigStatus>,
    pub now: Time,
}

/// The status after the pass.
pub fn of(inputs: &Inputs<'_>) -> ClusterPodPlacementConfigStatus {
    let facts = ConditionFacts::of(inputs);
    let mut conditions = vec![
        available(&facts),
        progressing(&facts),
        degraded(&facts),
        deprovisioning(&facts),
    ];
    conditions.extend(facts.per_operand.iter().cloned());
    conditions.push(webhook_configuration(&facts));
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
        routing: Some(match facts.routing {
            Some(multiarch_crd::PlacementMode::Scheduler) => Routing::Scheduler,
            Some(multiarch_crd::PlacementMode::SchedulingGate) => Routing::SchedulingGate,
            None => Routing::Off,
        }),
        architectures: inputs.architectures.clone(),
        misplaced_pods: inputs
            .snapshot
            .misplaced_pods
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
    }
}

/// Whether the condition `type_` is true in `status`.
pub fn is_true(status: &ClusterPodPlacementConfigStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn available(facts: &ConditionFacts) -> Condition {
    let message = if facts.available {
        format!(
            "Routing is on ({}): {}.",
            mode_words(facts.routing.unwrap_or(facts.mode)),
            facts.routing_words
        )
    } else if facts.deprovisioning.is_some() {
        "Routing is off: multiarch is being uninstalled.".into()
    } else if facts.problems.is_empty() {
        format!(
            "Routing is off: {} until the {} can take them.",
            facts.routing_words,
            mode_words(facts.mode)
        )
    } else {
        format!(
            "Routing is off: {} until the {} can take them: {}.",
            facts.routing_words,
            mode_words(facts.mode),
            facts.problems.join("; ")
        )
    };
    condition(AVAILABLE, facts.available, &facts.reason, message)
}

fn progressing(facts: &ConditionFacts) -> Condition {
    let message = if facts.progressing {
        let mut what = facts.problems.clone();
        what.extend(facts.rolling.iter().cloned());
        if what.is_empty() {
            what.push("the webhook configuration is being written".into());
        }
        format!("In progress: {}.", what.join("; "))
    } else {
        "Nothing is in progress.".into()
    };
    condition(PROGRESSING, facts.progressing, &facts.reason, message)
}

fn degraded(facts: &ConditionFacts) -> Condition {
    let degraded = facts.degraded;
    let message = if degraded && (facts.available || facts.deprovisioning.is_some()) {
        format!(
            "Some of the operator's work failed (the rest went on; it is retried): {}.",
            facts.failures.join("; ")
        )
    } else if degraded {
        let mut why = facts.problems.clone();
        if why.is_empty() {
            why.push("the webhook configuration is not in place yet".into());
        }
        why.extend(facts.failures.iter().cloned());
        format!(
            "Pods are not placed by architecture: {}. New pods go to the default scheduler unchanged meanwhile.",
            why.join("; ")
        )
    } else {
        "Nothing is degraded.".into()
    };
    let reason = if degraded { "Degraded" } else { "NotDegraded" };
    condition(DEGRADED, degraded, reason, message)
}

fn deprovisioning(facts: &ConditionFacts) -> Condition {
    let (on, reason, message) = match &facts.deprovisioning {
        Some(why) => (
            true,
            "Deprovisioning",
            format!("multiarch is being uninstalled: {why}"),
        ),
        None => (
            false,
            "NotDeprovisioning",
            "multiarch is installed.".to_owned(),
        ),
    };
    condition(DEPROVISIONING, on, reason, message)
}

fn webhook_configuration(facts: &ConditionFacts) -> Condition {
    let routed = facts.routing.is_some();
    let message = if routed {
        format!(
            "The mutating webhook configuration is ready: {}.",
            facts.routing_words
        )
    } else {
        "The mutating webhook configuration is not ready: new pods are admitted unchanged.".into()
    };
    condition(
        MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE,
        !routed,
        &facts.reason,
        message,
    )
}

pub(crate) fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: None,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    }
}
