//! Every rule of install, mode switch, rename and uninstall, as a table of snapshots and
//! the plans they give.

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use multiarch_crd::{
    ClusterPlugins, ClusterPodPlacementConfigSpec, ExecFormatErrorMonitor, PlacementMode,
    PlacementSpec,
    names::{FINALIZER_NO_POD_PLACEMENT_CONFIG, FINALIZER_POD_PLACEMENT},
};

use super::*;
use crate::{
    clocks::Drain,
    component::{Component, Rollout},
    observe::reads::OptionalApis,
    observe::{Snapshot, scheduler_names::DeployedScheduler},
};
use Component::*;
use PlacementMode::{Scheduler as SchedulerMode, SchedulingGate as GateMode};

const SCHEDULER_NAME: &str = "multiarch-scheduler";

fn spec(mode: PlacementMode) -> ClusterPodPlacementConfigSpec {
    ClusterPodPlacementConfigSpec {
        placement: Some(PlacementSpec {
            mode,
            ..PlacementSpec::default()
        }),
        ..ClusterPodPlacementConfigSpec::default()
    }
}

fn renamed(to: &str) -> ClusterPodPlacementConfigSpec {
    let mut s = spec(SchedulerMode);
    if let Some(p) = s.placement.as_mut() {
        p.scheduler_name = to.into();
    }
    s
}

fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: "shop".into(),
        name: name.into(),
        uid: format!("u-{name}"),
    }
}

fn rollout(available: bool) -> Rollout {
    Rollout {
        exists: true,
        available,
        rolled_out: available,
        detail: String::new(),
    }
}

/// An installed configuration whose finalizers are MTO's, with `available` up and the
/// route at `routing`.
fn seen(available: &[Component], routing: Option<PlacementMode>) -> Snapshot {
    Snapshot {
        deleting: false,
        finalizers: vec![FINALIZER_POD_PLACEMENT.into()],
        rollouts: available.iter().map(|c| (*c, rollout(true))).collect(),
        route_configured: routing.is_some(),
        routing,
        seen_at: Instant::now(),
        deployed_scheduler: available.contains(&Scheduler).then(|| DeployedScheduler {
            name: SCHEDULER_NAME.into(),
            previous: Vec::new(),
        }),
        waiting: BTreeMap::new(),
        gated: Vec::new(),
        reports: Vec::new(),
        misplaced_pods: None,
        apis: OptionalApis::default(),
        pod_placement_configs: Some(Vec::new()),
        journal: Vec::new(),
        unread: Vec::new(),
    }
}

fn deleting(available: &[Component], route: bool) -> Snapshot {
    let mut s = seen(available, route.then_some(SchedulerMode));
    s.deleting = true;
    s
}

const ALL_UP: [Component; 4] = [Inspector, Webhook, GateController, Scheduler];

fn releases(plan: &Plan) -> Vec<(Release, Vec<String>, String)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { how, pods, why } => Some((
                *how,
                pods.iter().map(|p| p.name.clone()).collect(),
                why.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn has(plan: &Plan, wanted: &Action) -> bool {
    plan.actions.iter().any(|a| a == wanted)
}

fn position(plan: &Plan, which: fn(&Action) -> bool) -> Option<usize> {
    plan.actions.iter().position(which)
}

#[test]
fn mto_s_finalizers_are_written_first_and_alone() {
    let mut bare = seen(&ALL_UP, Some(SchedulerMode));
    bare.finalizers.clear();
    let plan = decide(&spec(SchedulerMode), &bare, &Expired::none());
    assert_eq!(plan.stage, Stage::Finalizing);
    assert_eq!(
        plan.actions,
        [Action::SetFinalizers(vec![
            (FINALIZER_POD_PLACEMENT, true),
            (FINALIZER_NO_POD_PLACEMENT_CONFIG, false)
        ])]
    );
    // A PodPlacementConfig appears: its finalizer with it.
    let mut with_config = seen(&ALL_UP, Some(SchedulerMode));
    with_config.pod_placement_configs = Some(vec!["shop/prefs".into()]);
    let plan = decide(&spec(SchedulerMode), &with_config, &Expired::none());
    assert!(has(
        &plan,
        &Action::SetFinalizers(vec![
            (FINALIZER_POD_PLACEMENT, true),
            (FINALIZER_NO_POD_PLACEMENT_CONFIG, true)
        ])
    ));
    // The configs could not be listed: that finalizer is left as it is.
    let mut unread = seen(&ALL_UP, Some(SchedulerMode));
    unread.pod_placement_configs = None;
    unread
        .finalizers
        .push(FINALIZER_NO_POD_PLACEMENT_CONFIG.into());
    let plan = decide(&spec(SchedulerMode), &unread, &Expired::none());
    assert_eq!(plan.stage, Stage::Installed);
}

#[test]
fn pods_are_routed_only_once_the_mode_s_components_are_available() {
    let starting = seen(&[Inspector, Webhook, GateController], None);
    let plan = decide(&spec(SchedulerMode), &starting, &Expired::none());
    assert!(plan.target.scheduler);
    assert_eq!(
        plan.target.routing, None,
        "the scheduler is not available yet"
    );
    assert!(!has(&plan, &Action::DeleteRoute));
    let up = seen(&ALL_UP, None);
    let plan = decide(&spec(SchedulerMode), &up, &Expired::none());
    assert_eq!(plan.target.routing, Some(SchedulerMode));
    assert!(has(
        &plan,
        &Action::AnnounceRouting {
            before: None,
            after: Some(SchedulerMode)
        }
    ));
    assert_eq!(plan.requeue, Requeue::Later);
}

#[test]
fn routing_goes_off_before_any_operand_changes() {
    let mut lost = seen(&[Inspector, GateController, Scheduler], Some(SchedulerMode));
    lost.rollouts.insert(Webhook, rollout(false));
    let plan = decide(&spec(SchedulerMode), &lost, &Expired::none());
    assert_eq!(plan.target.routing, None);
    let delete = position(&plan, |a| *a == Action::DeleteRoute).unwrap();
    let apply = position(&plan, |a| matches!(a, Action::ApplyOperands { .. })).unwrap();
    assert!(delete < apply);
}

#[test]
fn a_mode_switch_keeps_the_old_route_until_the_new_one_is_ready() {
    let gate_mode = seen(&[Inspector, Webhook, GateController], Some(GateMode));
    let plan = decide(&spec(SchedulerMode), &gate_mode, &Expired::none());
    assert_eq!(plan.target.routing, Some(GateMode));
    assert!(plan.target.scheduler);
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::AnnounceRouting { .. }))
    );
}

#[test]
fn a_switch_away_keeps_the_scheduler_while_pods_wait_and_until_its_route_settles() {
    let gate = spec(GateMode);
    let mut switching = seen(&ALL_UP, Some(SchedulerMode));
    switching
        .waiting
        .insert(SCHEDULER_NAME.into(), vec![pod("web-1"), pod("batch")]);
    let settled = Expired::none().with(Drain::SchedulerRouteSettle);
    // Routed to the gate at once; the scheduler stays, nothing is released yet.
    let plan = decide(&gate, &switching, &settled);
    assert_eq!(plan.target.routing, Some(GateMode));
    assert!(plan.target.scheduler && plan.target.draining_scheduler);
    assert!(releases(&plan).is_empty());
    assert_eq!(plan.requeue, Requeue::Soon);
    // Past the drain timeout: released, and the scheduler still stays this pass.
    let drained = settled.clone().with(Drain::SchedulerPods);
    let plan = decide(&gate, &switching, &drained);
    assert_eq!(releases(&plan).len(), 1);
    let (how, pods, why) = &releases(&plan)[0];
    assert_eq!(
        (*how, pods.as_slice()),
        (
            Release::Recreate,
            &["web-1".to_owned(), "batch".to_owned()][..]
        )
    );
    assert!(why.contains("switched to gate mode"), "{why}");
    assert!(
        plan.target.scheduler,
        "the scheduler goes only once none is seen waiting"
    );
    // Nothing waits, but reviews under way may still route pods to it.
    switching.waiting.clear();
    let plan = decide(&gate, &switching, &Expired::none());
    assert!(plan.target.scheduler && plan.target.draining_scheduler);
    // Nothing waits and the route has settled: it goes.
    let plan = decide(&gate, &switching, &settled);
    assert!(!plan.target.scheduler);
    // Gone already: nothing to keep.
    switching.rollouts.remove(&Scheduler);
    assert!(!decide(&gate, &switching, &Expired::none()).target.scheduler);
}

#[test]
fn a_renamed_scheduler_releases_what_waits_under_its_old_names_once_rolled_out() {
    let mut renaming = seen(&ALL_UP, Some(SchedulerMode));
    renaming.deployed_scheduler = Some(DeployedScheduler {
        name: "arch-aware".into(),
        previous: vec![SCHEDULER_NAME.into()],
    });
    renaming
        .waiting
        .insert(SCHEDULER_NAME.into(), vec![pod("late")]);
    let new_name = renamed("arch-aware");
    let plan = decide(&new_name, &renaming, &Expired::none());
    let (how, pods, why) = &releases(&plan)[0];
    assert_eq!(
        (*how, pods.as_slice()),
        (Release::Recreate, &["late".to_owned()][..])
    );
    assert!(why.contains("renamed the scheduler from multiarch-scheduler to arch-aware"));
    let apply = position(&plan, |a| matches!(a, Action::ApplyOperands { .. })).unwrap();
    let release = position(&plan, |a| matches!(a, Action::Release { .. })).unwrap();
    assert!(apply < release);
    // Not rolled out under the new name yet: nothing is released.
    renaming.rollouts.insert(
        Scheduler,
        Rollout {
            rolled_out: false,
            ..rollout(true)
        },
    );
    assert!(releases(&decide(&new_name, &renaming, &Expired::none())).is_empty());
    // The Deployment still places the old name: it is remembered, nothing released.
    renaming.rollouts.insert(Scheduler, rollout(true));
    renaming.deployed_scheduler = Some(DeployedScheduler {
        name: SCHEDULER_NAME.into(),
        previous: Vec::new(),
    });
    let plan = decide(&new_name, &renaming, &Expired::none());
    assert!(releases(&plan).is_empty());
    assert!(has(
        &plan,
        &Action::ApplyOperands {
            target: plan.target.clone(),
            previous_scheduler_names: vec![SCHEDULER_NAME.into()]
        }
    ));
}

#[test]
fn the_monitor_s_handler_drains_its_reports_before_it_goes() {
    let mut on = spec(SchedulerMode);
    on.plugins = Some(ClusterPlugins {
        exec_format_error_monitor: Some(ExecFormatErrorMonitor { enabled: true }),
        ..ClusterPlugins::default()
    });
    let plan = decide(&on, &seen(&ALL_UP, Some(SchedulerMode)), &Expired::none());
    assert!(plan.target.enoexec_daemon && plan.target.enoexec_handler);
    let mut off_with_reports = seen(&[EnoexecHandler], None);
    off_with_reports.reports = vec!["r1".into(), "r2".into()];
    let plan = decide(&spec(SchedulerMode), &off_with_reports, &Expired::none());
    let target = &plan.target;
    assert!(!target.enoexec_daemon && target.enoexec_handler && target.draining_enoexec);
    // Past the drain timeout the reports go, and the handler with them.
    let expired = Expired::none().with(Drain::EnoexecReports);
    let plan = decide(&spec(SchedulerMode), &off_with_reports, &expired);
    assert!(!plan.target.enoexec_handler);
    assert!(has(
        &plan,
        &Action::DeleteReports(vec!["r1".into(), "r2".into()])
    ));
}

#[test]
fn a_journal_left_by_a_previous_pass_is_finished_first() {
    let mut crashed = seen(&ALL_UP, Some(SchedulerMode));
    crashed.journal = vec![ConfigMap::default()];
    let plan = decide(&spec(SchedulerMode), &crashed, &Expired::none());
    assert!(matches!(plan.actions[0], Action::FinishRecreations(ref e) if e.len() == 1));
}

#[test]
fn an_uninstall_waits_for_the_pod_placement_configs_then_drops_their_finalizer() {
    let mut held = deleting(&ALL_UP, true);
    held.finalizers
        .push(FINALIZER_NO_POD_PLACEMENT_CONFIG.into());
    held.pod_placement_configs = Some(vec!["shop/prefs".into()]);
    let plan = decide(&spec(SchedulerMode), &held, &Expired::none());
    assert!(plan.actions.is_empty(), "nothing moves: pods stay routed");
    assert_eq!(
        plan.stage,
        Stage::Uninstalling(vec![Wait::PodPlacementConfigs(vec!["shop/prefs".into()])])
    );
    held.pod_placement_configs = Some(Vec::new());
    let plan = decide(&spec(SchedulerMode), &held, &Expired::none());
    assert_eq!(
        plan.actions,
        [Action::SetFinalizers(vec![(
            FINALIZER_NO_POD_PLACEMENT_CONFIG,
            false
        )])]
    );
    // Without the operator's finalizer the object is not the operator's to hold.
    held.finalizers.clear();
    assert_eq!(
        decide(&spec(SchedulerMode), &held, &Expired::none()).stage,
        Stage::Ignored
    );
}

#[test]
fn an_uninstall_removes_the_route_first_and_leaves_pods_to_their_components() {
    let mut s = deleting(&ALL_UP, true);
    s.gated = vec![pod("g1"), pod("g2")];
    s.waiting.insert(SCHEDULER_NAME.into(), vec![pod("p1")]);
    let plan = decide(&spec(SchedulerMode), &s, &Expired::none());
    assert_eq!(plan.actions[0], Action::DeleteRoute);
    assert!(releases(&plan).is_empty());
    let Stage::Uninstalling(waits) = &plan.stage else {
        panic!("{plan:?}")
    };
    assert!(matches!(waits[0], Wait::Settle { .. }));
    assert!(
        waits
            .iter()
            .any(|w| matches!(w, Wait::Gated { pods: 2, .. }))
    );
    assert!(
        waits
            .iter()
            .any(|w| matches!(w, Wait::Pending { pods: 1, .. }))
    );
    assert!(!has(&plan, &Action::DeleteOperands));
}

#[test]
fn an_uninstall_releases_what_waits_past_the_drain_or_for_a_component_that_is_down() {
    let mut s = deleting(&[Inspector, Webhook, Scheduler], false);
    s.rollouts.insert(GateController, rollout(false));
    s.gated = vec![pod("g1")];
    s.waiting.insert(SCHEDULER_NAME.into(), vec![pod("p1")]);
    let settled = Expired::none().with(Drain::UninstallSettle);
    // The gate controller is down: its pods are ungated now; the scheduler's wait.
    let plan = decide(&spec(SchedulerMode), &s, &settled);
    let released = releases(&plan);
    assert_eq!(released.len(), 1);
    assert_eq!(
        (released[0].0, released[0].1.as_slice()),
        (Release::Ungate, &["g1".to_owned()][..])
    );
    // Past the drain timeout, every pod is released, and a last look follows.
    let drained = settled.with(Drain::Uninstall);
    let plan = decide(&spec(SchedulerMode), &s, &drained);
    let hows: Vec<Release> = releases(&plan).iter().map(|r| r.0).collect();
    assert_eq!(hows, [Release::Ungate, Release::Recreate]);
    assert!(matches!(plan.stage, Stage::Uninstalling(_)));
    assert!(!has(&plan, &Action::DeleteOperands));
}

#[test]
fn an_uninstall_stops_the_daemon_before_the_last_look_at_reports() {
    let mut s = deleting(
        &[
            Inspector,
            Webhook,
            GateController,
            EnoexecDaemon,
            EnoexecHandler,
        ],
        false,
    );
    s.reports = vec!["r1".into()];
    let settled = Expired::none().with(Drain::UninstallSettle);
    let plan = decide(&spec(SchedulerMode), &s, &settled);
    assert!(has(&plan, &Action::DeleteDaemonSets));
    let Stage::Uninstalling(waits) = &plan.stage else {
        panic!("{plan:?}")
    };
    assert!(waits.contains(&Wait::Daemon));
    assert!(
        waits
            .iter()
            .any(|w| matches!(w, Wait::Reports { count: 1, .. }))
    );
    // The daemon gone and the handler too: the reports are deleted with the rest.
    s.rollouts.remove(&EnoexecDaemon);
    s.rollouts.remove(&EnoexecHandler);
    let plan = decide(&spec(SchedulerMode), &s, &settled);
    assert_eq!(plan.stage, Stage::Uninstalled);
    assert!(has(&plan, &Action::DeleteReports(vec!["r1".into()])));
}

#[test]
fn an_uninstall_with_nothing_left_deletes_everything_then_the_finalizer() {
    let s = deleting(&ALL_UP, false);
    let settled = Expired::none().with(Drain::UninstallSettle);
    let plan = decide(&spec(SchedulerMode), &s, &settled);
    assert_eq!(
        plan.actions,
        [
            Action::DeleteRoute,
            Action::DeleteDaemonSets,
            Action::DeleteOperands,
            Action::ReleaseFinalizer
        ]
    );
    assert_eq!(
        (plan.stage, plan.requeue),
        (Stage::Uninstalled, Requeue::Later)
    );
    // A journaled pod not created again holds it.
    let mut journaled = deleting(&ALL_UP, false);
    journaled.journal = vec![ConfigMap::default()];
    let plan = decide(
        &spec(SchedulerMode),
        &journaled,
        &Expired::none().with(Drain::UninstallSettle),
    );
    assert_eq!(plan.stage, Stage::Uninstalling(vec![Wait::Journal(1)]));
    assert!(matches!(plan.actions[1], Action::FinishRecreations(_)));
}

#[test]
fn the_clocks_run_only_while_what_they_time_is_seen() {
    let mut s = deleting(&ALL_UP, true);
    s.pod_placement_configs = Some(vec!["shop/prefs".into()]);
    assert!(running_clocks(&spec(SchedulerMode), &s).is_empty());
    s.pod_placement_configs = Some(Vec::new());
    assert!(
        running_clocks(&spec(SchedulerMode), &s).is_empty(),
        "the route is still there"
    );
    s.route_configured = false;
    assert_eq!(
        running_clocks(&spec(SchedulerMode), &s)
            .into_iter()
            .collect::<Vec<_>>(),
        [Drain::Uninstall, Drain::UninstallSettle]
    );
    let mut switching = seen(&ALL_UP, Some(GateMode));
    switching
        .waiting
        .insert(SCHEDULER_NAME.into(), vec![pod("p")]);
    let running = running_clocks(&spec(GateMode), &switching);
    assert!(
        running.contains(&Drain::SchedulerPods) && running.contains(&Drain::SchedulerRouteSettle)
    );
    // In scheduler mode the scheduler's own pods are no drain.
    let running = running_clocks(&spec(SchedulerMode), &seen(&ALL_UP, Some(SchedulerMode)));
    assert!(running.is_empty());
}
