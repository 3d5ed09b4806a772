//! What every condition is computed from: the route, what is not ready and why, what is
//! in progress, what failed, and why an uninstall waits.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use multiarch_crd::{
    PlacementMode,
    cluster_pod_placement_config::conditions::{
        MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE, REASON_ALL_COMPONENTS_READY,
    },
};

use crate::{
    decide::{Stage, what_to_install::pods_waiting_for_a_leaving_scheduler},
    status::{Inputs, deprovisioning::why_uninstall_waits, operands::operands_say},
};

pub fn mode_words(mode: PlacementMode) -> &'static str {
    match mode {
        PlacementMode::Scheduler => "scheduler mode",
        PlacementMode::SchedulingGate => "gate mode",
    }
}

pub struct ConditionFacts {
    /// The mode the spec asks for.
    pub mode: PlacementMode,
    /// Where the webhook configuration routes pods after the pass.
    pub routing: Option<PlacementMode>,
    pub routing_words: String,
    pub per_operand: Vec<Condition>,
    /// MTO's reason: the not-ready condition types run together, or all ready.
    pub reason: String,
    pub problems: Vec<String>,
    pub rolling: Vec<String>,
    pub failures: Vec<String>,
    /// Why an uninstall waits (`None`: installed).
    pub deprovisioning: Option<String>,
    pub available: bool,
    pub progressing: bool,
    pub degraded: bool,
}

impl ConditionFacts {
    pub fn of(inputs: &Inputs<'_>) -> ConditionFacts {
        let (plan, snapshot) = (inputs.plan, inputs.snapshot);
        let placement = inputs.spec.placement_or_default();
        let mode = placement.mode;
        let routing = plan.target.routing;
        let deprovisioning = match &plan.stage {
            Stage::Uninstalling(waits) => Some(why_uninstall_waits(waits, inputs)),
            Stage::Uninstalled => Some("waiting for every component to be removed".into()),
            _ => None,
        };
        let say = operands_say(&plan.target, snapshot);
        let mut not_ready = say.not_ready;
        if routing.is_none() {
            not_ready.push(MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE);
        }
        let mut rolling = say.rolling;
        rolling.extend(in_progress(inputs, mode, routing));
        let failures = inputs.failures.to_vec();
        let available = routing.is_some() && deprovisioning.is_none();
        let uninstalling = deprovisioning.is_some();
        ConditionFacts {
            mode,
            routing,
            routing_words: routing_words(routing, &placement.scheduler_name),
            per_operand: say.conditions,
            reason: if not_ready.is_empty() {
                REASON_ALL_COMPONENTS_READY.to_owned()
            } else {
                not_ready.concat()
            },
            progressing: !uninstalling && (!not_ready.is_empty() || !rolling.is_empty()),
            degraded: (!available && !uninstalling) || !failures.is_empty(),
            problems: say.problems,
            rolling,
            failures,
            deprovisioning,
            available,
        }
    }
}

/// A mode switch under way, and what a removed component still waits for.
fn in_progress(
    inputs: &Inputs<'_>,
    mode: PlacementMode,
    routing: Option<PlacementMode>,
) -> Vec<String> {
    let mut rolling = Vec::new();
    if routing.is_some_and(|r| r != mode) {
        rolling.push(format!(
            "switching to {}: pods are routed in {} until the {} is available",
            mode_words(mode),
            mode_words(routing.unwrap_or(mode)),
            match mode {
                PlacementMode::Scheduler => "scheduler",
                PlacementMode::SchedulingGate => "gate controller",
            }
        ));
    }
    let target = &inputs.plan.target;
    if target.draining_scheduler {
        rolling.push(format!(
            "{} pending pods still wait for the scheduler, which is removed once they are placed",
            pods_waiting_for_a_leaving_scheduler(inputs.spec, inputs.snapshot)
        ));
    }
    if target.draining_enoexec {
        rolling.push(format!(
            "{} exec-format-error reports still wait for the handler, which is removed once they are handled",
            inputs.snapshot.reports.len()
        ));
    }
    rolling
}

fn routing_words(routing: Option<PlacementMode>, scheduler_name: &str) -> String {
    match routing {
        Some(PlacementMode::Scheduler) => {
            format!("new pods in the selected namespaces go to {scheduler_name}")
        }
        Some(PlacementMode::SchedulingGate) => {
            "new pods in the selected namespaces are gated and given an architecture affinity"
                .into()
        }
        None => "new pods are admitted unchanged".into(),
    }
}
