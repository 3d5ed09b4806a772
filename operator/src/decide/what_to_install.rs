//! What an installed configuration should have now, from the spec and the snapshot.
//!
//! The rules that keep pods safe: pods are routed only to a path whose components are
//! available (a mode switch keeps the old route until the new one is ready, then switches
//! the webhook configuration's path at once); the scheduler stays until no review under
//! way can route a pod to it any more (the route's settle period) and no pod waits for it;
//! the exec-format-error handler stays while reports wait for it; past the drain timeout
//! the operator itself releases what is left. No I/O.

use multiarch_crd::{ClusterPodPlacementConfigSpec, PlacementMode};

use crate::{
    clocks::{Drain, Expired},
    component::Component,
    observe::Snapshot,
    target::Target,
};

/// What a route needs available: the webhook and inspector, and the mode's placer.
pub fn route_ready(mode: PlacementMode, snapshot: &Snapshot) -> bool {
    let placer = match mode {
        PlacementMode::Scheduler => Component::Scheduler,
        PlacementMode::SchedulingGate => Component::GateController,
    };
    [Component::Webhook, Component::Inspector, placer]
        .into_iter()
        .all(|c| snapshot.available(c))
}

/// Pods waiting for a scheduler that a mode switch removes (none in scheduler mode).
pub fn pods_waiting_for_a_leaving_scheduler(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
) -> usize {
    let leaving = spec.placement_or_default().mode != PlacementMode::Scheduler
        && snapshot.exists(Component::Scheduler);
    if leaving {
        snapshot.waiting_pods().len()
    } else {
        0
    }
}

/// The target of an installed (not deleting) configuration.
pub fn target(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
    expired: &Expired,
) -> Target {
    let mode = spec.placement_or_default().mode;
    let waiting = pods_waiting_for_a_leaving_scheduler(spec, snapshot) > 0;
    // Past the drain timeout this pass releases what waits; the scheduler goes at a later
    // pass, once none is seen waiting.
    let draining_scheduler = mode != PlacementMode::Scheduler
        && snapshot.exists(Component::Scheduler)
        && (waiting || !expired.expired(Drain::SchedulerRouteSettle));
    let scheduler = mode == PlacementMode::Scheduler || draining_scheduler;
    let routing = if route_ready(mode, snapshot) {
        Some(mode)
    } else {
        // Keep the route in place while it still works; never route to what is not there.
        snapshot
            .routing
            .filter(|current| route_ready(*current, snapshot))
    };
    let plugins = spec.plugins.as_ref();
    let monitor = plugins.is_some_and(|p| p.exec_format_error_monitor_enabled());
    // The correction runs in the handler: with it alone, the handler without the daemon.
    let correction = plugins.is_some_and(|p| p.enabled_misplaced_pod_correction().is_some());
    let draining_enoexec = !monitor
        && snapshot.exists(Component::EnoexecHandler)
        && !snapshot.reports.is_empty()
        && !expired.expired(Drain::EnoexecReports);
    Target {
        scheduler,
        enoexec_daemon: monitor,
        enoexec_handler: monitor || correction || draining_enoexec,
        routing,
        draining_scheduler,
        draining_enoexec,
    }
}
