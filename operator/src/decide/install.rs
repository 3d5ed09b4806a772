//! The decision while the configuration is installed: MTO's finalizers first; then the
//! journal's unfinished recreations, a mode switch's releases past the drain timeout,
//! routing off before anything it routes to changes, the operands, a rename's releases
//! once the renamed scheduler is rolled out, and the routing event.

use multiarch_crd::ClusterPodPlacementConfigSpec;

use crate::{
    clocks::{Drain, Expired},
    component::Component,
    decide::{
        Action, Plan, Release, Requeue, Stage,
        what_to_install::{pods_waiting_for_a_leaving_scheduler, target},
    },
    observe::{Snapshot, scheduler_names::previous_names},
    target::Target,
};
use multiarch_crd::names::{FINALIZER_NO_POD_PLACEMENT_CONFIG, FINALIZER_POD_PLACEMENT};

pub(super) fn decide(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
    expired: &Expired,
) -> Plan {
    if let Some(finalizers) = finalizers_to_write(snapshot) {
        return Plan::only(
            vec![Action::SetFinalizers(finalizers)],
            Requeue::Soon,
            Stage::Finalizing,
        );
    }
    let target = target(spec, snapshot, expired);
    let mut actions = Vec::new();
    if !snapshot.journal.is_empty() {
        actions.push(Action::FinishRecreations(snapshot.journal.clone()));
    }
    let released_for_the_switch = mode_switch_release(spec, snapshot, expired);
    let switching = released_for_the_switch.is_some();
    actions.extend(released_for_the_switch);
    if expired.expired(Drain::EnoexecReports) && !target.enoexec_handler {
        actions.push(Action::DeleteReports(snapshot.reports.clone()));
    }
    // Routing off first, so no pod is sent to what is about to change.
    if target.routing.is_none() && snapshot.routing.is_some() {
        actions.push(Action::DeleteRoute);
    }
    let wanted = spec.placement_or_default().scheduler_name;
    actions.push(Action::ApplyOperands {
        target: target.clone(),
        previous_scheduler_names: previous_names(snapshot.deployed_scheduler.as_ref(), &wanted),
    });
    if !switching {
        // (A switch's release takes every name's pods already.)
        actions.extend(rename_releases(&target, snapshot, &wanted));
    }
    if target.routing != snapshot.routing {
        actions.push(Action::AnnounceRouting {
            before: snapshot.routing,
            after: target.routing,
        });
    }
    Plan {
        actions,
        requeue: if target.draining_scheduler || target.draining_enoexec {
            Requeue::Soon
        } else {
            Requeue::Later
        },
        stage: Stage::Installed,
        target,
    }
}

/// MTO's finalizers on an installed configuration, when they differ from what it has:
/// pod-placement always, no-pod-placement-config exactly while any PodPlacementConfig
/// exists (left as it is when they could not be listed).
fn finalizers_to_write(snapshot: &Snapshot) -> Option<Vec<(&'static str, bool)>> {
    let mut wanted = vec![(FINALIZER_POD_PLACEMENT, true)];
    if let Some(configs) = &snapshot.pod_placement_configs {
        wanted.push((FINALIZER_NO_POD_PLACEMENT_CONFIG, !configs.is_empty()));
    }
    let differs = wanted
        .iter()
        .any(|(finalizer, present)| snapshot.finalizers.iter().any(|f| f == finalizer) != *present);
    differs.then_some(wanted)
}

/// A switch away from scheduler mode: past the drain timeout, the pods still waiting for
/// the scheduler being removed (under any name it had) are recreated for the default
/// scheduler.
fn mode_switch_release(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
    expired: &Expired,
) -> Option<Action> {
    let waiting = pods_waiting_for_a_leaving_scheduler(spec, snapshot);
    (waiting > 0 && expired.expired(Drain::SchedulerPods)).then(|| Action::Release {
        how: Release::Recreate,
        pods: snapshot.waiting_pods(),
        why: format!(
            "the ClusterPodPlacementConfig switched to gate mode, and the multiarch scheduler is being removed after waiting {:?} for it to place this pod",
            expired.drain_timeout
        ),
    })
}

/// A renamed scheduler, rolled out: what still waits under its old names is recreated.
fn rename_releases(target: &Target, snapshot: &Snapshot, wanted: &str) -> Vec<Action> {
    let renamed_and_rolled_out = target.scheduler
        && snapshot
            .deployed_scheduler
            .as_ref()
            .is_some_and(|d| d.name == wanted)
        && snapshot.rolled_out(Component::Scheduler);
    if !renamed_and_rolled_out {
        return Vec::new();
    }
    previous_names(snapshot.deployed_scheduler.as_ref(), wanted)
        .into_iter()
        .filter_map(|old| {
            let pods = snapshot.waiting.get(&old).filter(|p| !p.is_empty())?;
            Some(Action::Release {
                how: Release::Recreate,
                pods: pods.clone(),
                why: format!(
                    "the ClusterPodPlacementConfig renamed the scheduler from {old} to {wanted}, and no scheduler places pods named {old} any more"
                ),
            })
        })
        .collect()
}
