//! One condition per operand the target installs (MTO's `*NotRolledOut` types), and in
//! words what is not available or still rolling out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use multiarch_crd::cluster_pod_placement_config::conditions::{
    POD_PLACEMENT_CONTROLLER_NOT_ROLLED_OUT, POD_PLACEMENT_WEBHOOK_NOT_ROLLED_OUT,
};

use crate::{component::Component, observe::Snapshot, status::condition, target::Target};

pub const SCHEDULER_NOT_ROLLED_OUT: &str = "SchedulerNotRolledOut";
pub const INSPECTOR_NOT_ROLLED_OUT: &str = "InspectorNotRolledOut";
pub const EXEC_FORMAT_ERROR_MONITOR_NOT_ROLLED_OUT: &str = "ExecFormatErrorMonitorNotRolledOut";

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

/// The operands' conditions, and what they say in words.
#[derive(Default)]
pub struct OperandsSay {
    pub conditions: Vec<Condition>,
    /// The condition types of the operands not fully rolled out.
    pub not_ready: Vec<&'static str>,
    /// Components not available, in words.
    pub problems: Vec<String>,
    /// Components available but still rolling out, in words.
    pub rolling: Vec<String>,
}

fn rolled_out(snapshot: &Snapshot, component: Component) -> bool {
    snapshot.available(component) && snapshot.rolled_out(component)
}

fn detail(snapshot: &Snapshot, component: Component) -> String {
    match snapshot.rollouts.get(&component) {
        Some(r) if r.exists => r.detail.clone(),
        _ => "it is being created".into(),
    }
}

/// What the operands `target` installs say, as `snapshot` saw them.
pub fn operands_say(target: &Target, snapshot: &Snapshot) -> OperandsSay {
    let mut say = OperandsSay::default();
    for operand in &OPERANDS {
        let components: Vec<Component> = operand
            .components
            .iter()
            .copied()
            .filter(|c| target.wants(*c))
            .collect();
        if components.is_empty() {
            continue;
        }
        let ready = components.iter().all(|c| rolled_out(snapshot, *c));
        if !ready {
            say.not_ready.push(operand.condition);
        }
        for c in components.iter().filter(|c| !rolled_out(snapshot, **c)) {
            let (list, state) = if snapshot.available(*c) {
                (&mut say.rolling, "is rolling out")
            } else {
                (&mut say.problems, "is not available")
            };
            list.push(format!(
                "the {} {state}: {}",
                c.title(),
                detail(snapshot, *c)
            ));
        }
        let titles: Vec<&str> = components.iter().map(|c| c.title()).collect();
        let message = format!(
            "The {} {} {}fully rolled out.",
            titles.join(" and the "),
            if titles.len() > 1 { "are" } else { "is" },
            if ready { "" } else { "not " }
        );
        let reason = if ready {
            operand.ready_reason
        } else {
            operand.not_ready_reason
        };
        say.conditions
            .push(condition(operand.condition, !ready, reason, message));
    }
    say
}
