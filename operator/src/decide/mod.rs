//! Decide: from the spec, the snapshot and the clocks, the plan of one pass: the actions
//! to carry out, in order, and when to look again. Install and uninstall are two outcomes
//! of the same decision. No I/O: every rule of a mode switch, a rename and an uninstall
//! is a table test (`tests.rs`).

mod install;
mod running_clocks;
mod spec_in_force;
mod uninstall;
pub mod what_to_install;

#[cfg(test)]
mod tests;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use multiarch_crd::{ClusterPodPlacementConfigSpec, PlacementMode};

pub use running_clocks::running_clocks;
pub use spec_in_force::spec_in_force;

use crate::{clocks::Expired, observe::Snapshot, pod_ref::PodRef, target::Target};

/// How a waiting pod is released when what it waits for goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// A gated pod loses multiarch's gate (no architecture constraint is added).
    Ungate,
    /// A pending pod naming a scheduler that goes is recreated for the default scheduler.
    Recreate,
}

/// What still waits after a pass's releases of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Left {
    /// Pods the API server refuses to create again: left for a person.
    pub refused: usize,
    /// Pods whose release failed this pass (tried again next pass).
    pub failed: usize,
}

impl Left {
    pub fn total(self) -> usize {
        self.refused + self.failed
    }

    pub fn add(&mut self, other: Left) {
        self.refused += other.refused;
        self.failed += other.failed;
    }
}

/// One write (or set of writes) of a pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Add (`true`) or remove (`false`) each finalizer, in one write.
    SetFinalizers(Vec<(&'static str, bool)>),
    /// Create again the pods these journal entries hold (a previous pass deleted them).
    FinishRecreations(Vec<ConfigMap>),
    /// Delete the exec-format-error reports nobody will handle any more.
    DeleteReports(Vec<String>),
    /// Delete the mutating webhook configuration: no new pod is routed or gated.
    DeleteRoute,
    /// Write every operand `target` wants (only what differs), delete the others.
    ApplyOperands {
        target: Target,
        previous_scheduler_names: Vec<String>,
    },
    /// Release these pods, each with an event saying `why`.
    Release {
        how: Release,
        pods: Vec<PodRef>,
        why: String,
    },
    /// Delete the exec-format-error daemon: no new reports while the handler drains.
    DeleteDaemonSets,
    /// Delete every operand.
    DeleteOperands,
    /// Remove the pod-placement finalizer: the object goes. Carried out only when no
    /// earlier action of the pass failed.
    ReleaseFinalizer,
    /// Say in an event where new pods go now.
    AnnounceRouting {
        before: Option<PlacementMode>,
        after: Option<PlacementMode>,
    },
}

/// What an uninstall waits for, in the order it says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    PodPlacementConfigs(Vec<String>),
    /// Reviews under way may still route pods: the last look comes after this.
    Settle {
        left: Duration,
    },
    /// Pods deleted to be recreated, not created again yet.
    Journal(usize),
    /// Gated pods, left to the gate controller until the drain timeout.
    Gated {
        pods: usize,
        left: Duration,
    },
    /// Pending pods, left to the scheduler until the drain timeout.
    Pending {
        pods: usize,
        scheduler: String,
        left: Duration,
    },
    /// Pods this pass releases; a last look follows.
    Released {
        how: Release,
        pods: usize,
    },
    /// Reports, left to the handler until the drain timeout.
    Reports {
        count: usize,
        left: Duration,
    },
    /// The exec-format-error daemon, so that no report comes after the last look.
    Daemon,
}

/// Where the configuration stands after the pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Not the operator's to act on: nothing is written.
    Ignored,
    /// The finalizers are written first; the watch brings the object back as it is now,
    /// for the next pass (a pass on the copy read before would be refused by its
    /// resourceVersion).
    Finalizing,
    Installed,
    Uninstalling(Vec<Wait>),
    /// Every operand deleted and the finalizer released.
    Uninstalled,
}

/// When to look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Something is in progress.
    Soon,
    /// Nothing is (the certificates are checked then).
    Later,
}

impl Requeue {
    pub const SOON: Duration = Duration::from_secs(5);
    pub const LATER: Duration = Duration::from_secs(300);

    pub fn after(self) -> Duration {
        match self {
            Requeue::Soon => Self::SOON,
            Requeue::Later => Self::LATER,
        }
    }
}

/// The plan of a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub requeue: Requeue,
    pub stage: Stage,
    /// What is installed once the actions are carried out (the status reports it).
    pub target: Target,
}

impl Plan {
    fn only(actions: Vec<Action>, requeue: Requeue, stage: Stage) -> Plan {
        Plan {
            actions,
            requeue,
            stage,
            target: Target::NOTHING,
        }
    }
}

/// The plan of one pass over the configuration `spec` (being deleted or not), from what
/// `snapshot` saw and what has expired.
pub fn decide(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
    expired: &Expired,
) -> Plan {
    if snapshot.deleting {
        uninstall::decide(spec, snapshot, expired)
    } else {
        install::decide(spec, snapshot, expired)
    }
}
