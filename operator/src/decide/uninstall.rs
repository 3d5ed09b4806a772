//! The decision while the configuration is being deleted: an uninstall in an order that
//! strands no pod. While PodPlacementConfigs exist nothing moves (MTO's rule); then the
//! webhook configuration goes, so no new pod is routed or gated; every component stays
//! for the route's settle period (reviews already under way, API servers that have not
//! seen the deletion yet), and the pods gated or waiting for the scheduler, including
//! any admitted meanwhile, are left to the gate controller and the scheduler until the
//! drain timeout, then released by the operator; the exec-format-error reports likewise,
//! once the daemon that writes them is gone; then every operand goes, and last the
//! finalizer. Operands are deleted only from a snapshot in which nothing waits: a pass
//! that releases pods is followed by a last look. Pods the API server refuses to create
//! again hold the uninstall, named in the status, until a person acts.

use multiarch_crd::ClusterPodPlacementConfigSpec;

use crate::{
    clocks::{Drain, Expired},
    component::Component,
    decide::{Action, Plan, Release, Requeue, Stage, Wait},
    observe::Snapshot,
    pod_ref::PodRef,
};
use multiarch_crd::names::{FINALIZER_NO_POD_PLACEMENT_CONFIG, FINALIZER_POD_PLACEMENT};

const WHY: &str = "multiarch is being uninstalled (the ClusterPodPlacementConfig was deleted)";

pub(super) fn decide(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
    expired: &Expired,
) -> Plan {
    let has = |finalizer: &str| snapshot.finalizers.iter().any(|f| f == finalizer);
    if !has(FINALIZER_POD_PLACEMENT) {
        return Plan::only(Vec::new(), Requeue::Later, Stage::Ignored);
    }
    let configs = snapshot.pod_placement_configs.clone().unwrap_or_default();
    if !configs.is_empty() {
        let waits = vec![Wait::PodPlacementConfigs(configs)];
        return Plan::only(Vec::new(), Requeue::Soon, Stage::Uninstalling(waits));
    }
    // MTO's order: the no-pod-placement-config finalizer goes once the configs are gone.
    if has(FINALIZER_NO_POD_PLACEMENT_CONFIG) {
        let remove = vec![(FINALIZER_NO_POD_PLACEMENT_CONFIG, false)];
        return Plan::only(
            vec![Action::SetFinalizers(remove)],
            Requeue::Soon,
            Stage::Finalizing,
        );
    }
    let mut actions = vec![Action::DeleteRoute];
    let mut waits = Vec::new();
    if !expired.expired(Drain::UninstallSettle) {
        let left = expired.left(Drain::UninstallSettle);
        waits.push(Wait::Settle { left });
    }
    // Recreations a previous pass started: their copies must not go with the namespace.
    if !snapshot.journal.is_empty() {
        waits.push(Wait::Journal(snapshot.journal.len()));
        actions.push(Action::FinishRecreations(snapshot.journal.clone()));
    }
    let scheduler = spec.placement_or_default().scheduler_name;
    let placers = [
        (
            Release::Ungate,
            snapshot.gated.clone(),
            Component::GateController,
        ),
        (
            Release::Recreate,
            snapshot.waiting_pods(),
            Component::Scheduler,
        ),
    ];
    for (how, pods, placer) in placers {
        let (action, wait) = leave_or_release(how, pods, placer, &scheduler, snapshot, expired);
        actions.extend(action);
        waits.extend(wait);
    }
    // The daemon first: no new reports while the handler drains the old ones.
    actions.push(Action::DeleteDaemonSets);
    if snapshot.exists(Component::EnoexecDaemon) {
        waits.push(Wait::Daemon);
    }
    let reports = &snapshot.reports;
    let handling =
        snapshot.available(Component::EnoexecHandler) && !expired.expired(Drain::Uninstall);
    if !reports.is_empty() && handling {
        let left = expired.left(Drain::Uninstall);
        waits.push(Wait::Reports {
            count: reports.len(),
            left,
        });
    }
    if !waits.is_empty() {
        return Plan::only(actions, Requeue::Soon, Stage::Uninstalling(waits));
    }
    if !reports.is_empty() {
        actions.push(Action::DeleteReports(reports.clone()));
    }
    actions.extend([Action::DeleteOperands, Action::ReleaseFinalizer]);
    Plan::only(actions, Requeue::Later, Stage::Uninstalled)
}

/// Pods waiting for `placer`: left to it while it is available and the drain timeout has
/// not passed, otherwise released by the operator (and looked at again).
fn leave_or_release(
    how: Release,
    pods: Vec<PodRef>,
    placer: Component,
    scheduler: &str,
    snapshot: &Snapshot,
    expired: &Expired,
) -> (Option<Action>, Option<Wait>) {
    if pods.is_empty() {
        return (None, None);
    }
    let count = pods.len();
    if snapshot.available(placer) && !expired.expired(Drain::Uninstall) {
        let left = expired.left(Drain::Uninstall);
        let wait = match how {
            Release::Ungate => Wait::Gated { pods: count, left },
            Release::Recreate => Wait::Pending {
                pods: count,
                scheduler: scheduler.to_owned(),
                left,
            },
        };
        return (None, Some(wait));
    }
    let action = Action::Release {
        how,
        pods,
        why: WHY.to_owned(),
    };
    (Some(action), Some(Wait::Released { how, pods: count }))
}
