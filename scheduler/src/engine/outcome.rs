//! What one scheduling decision comes to: scheduled, failed (with its preemption), waiting
//! for images, or skipped.

use std::sync::Arc;

use multiarch_plugins::model::{pod::PodInfo, storage::VolumeBindingPlan};
use multiarch_policy::architecture_rules::ArchitectureDecision;
use multiarch_policy::pod_images::ContainerImage;

use super::diagnosis::Diagnosis;

/// Condition reason written on `PodScheduled=False`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Unschedulable,
    SchedulerError,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unschedulable => "Unschedulable",
            FailureKind::SchedulerError => "SchedulerError",
        }
    }
}

/// What happens to `status.nominatedNodeName` with a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nomination {
    Unchanged,
    Set(String),
    Clear,
}

/// Evictions that make room for a pod (kube-scheduler's preemption, carried out by the
/// caller: DisruptionTarget condition, delete, `Preempted` event).
#[derive(Clone, Debug)]
pub struct Preemption {
    pub node: String,
    pub victims: Vec<Arc<PodInfo>>,
    /// Lower-priority pods nominated to the node that lose their nomination.
    pub displaced: Vec<Arc<PodInfo>>,
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// Assumed on `node`; the caller writes `volumes`, then binds it.
    Scheduled {
        pod: Arc<PodInfo>,
        node: String,
        node_architecture: String,
        /// The text of the `Scheduled` event.
        message: String,
        attempts: u32,
        volumes: VolumeBindingPlan,
        /// The rule that decided the pod's architectures, when one did.
        architecture_rule: Option<ArchitectureDecision>,
        rule_override: Option<RuleOverride>,
    },
    Failed {
        pod: Arc<PodInfo>,
        kind: FailureKind,
        /// The text of the `FailedScheduling` event and the condition message.
        message: String,
        diagnosis: Box<Diagnosis>,
        nomination: Nomination,
        /// Set when preemption made room: the caller evicts, then calls
        /// [`SchedulerCore::preemption_done`].
        preemption: Option<Preemption>,
        architecture_rule: Option<ArchitectureDecision>,
        rule_override: Option<RuleOverride>,
    },
    /// Some images are being inspected; the pod waits without blocking the cycle.
    WaitingForImages {
        pod: Arc<PodInfo>,
        images: Vec<ContainerImage>,
    },
    /// Not scheduled: being deleted, or already placed.
    Skipped {
        pod: Arc<PodInfo>,
        why: &'static str,
    },
}

/// A rule-governed pod whose images have no build on the architectures the rule gave it:
/// obeyed, and said (event `ArchitectureRuleOverridesImages`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleOverride {
    pub message: String,
}

impl Outcome {
    /// The outcome with the rule that decided the pod's architectures, and the override
    /// to report.
    pub(crate) fn with_architecture_rule(
        mut self,
        rule: Option<ArchitectureDecision>,
        overrides: Option<RuleOverride>,
    ) -> Self {
        if let Outcome::Scheduled {
            architecture_rule,
            rule_override,
            ..
        }
        | Outcome::Failed {
            architecture_rule,
            rule_override,
            ..
        } = &mut self
        {
            *architecture_rule = rule;
            *rule_override = overrides;
        }
        self
    }
}
