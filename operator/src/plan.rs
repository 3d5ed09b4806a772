//! What should be installed now, from the ClusterPodPlacementConfig and what the operator
//! observes: which operands exist, and where the webhook configuration routes pods.
//!
//! The rules that keep pods safe: pods are routed only to a path whose components are
//! available (a mode switch keeps the old route until the new one is ready, then switches
//! the webhook configuration's path at once); the scheduler stays until no review under
//! way can route a pod to it any more (the route's settle period) and no pod waits for it;
//! the exec-format-error handler stays while reports wait for it; past the drain timeout
//! the operator itself releases what is left (`drain`). No I/O.

use std::collections::BTreeMap;

use multiarch_crd::{ClusterPodPlacementConfigSpec, PlacementMode};

/// An operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Inspector,
    Webhook,
    GateController,
    Scheduler,
    EnoexecDaemon,
    EnoexecHandler,
}

impl Component {
    pub const ALL: [Component; 6] = [
        Component::Inspector,
        Component::Webhook,
        Component::GateController,
        Component::Scheduler,
        Component::EnoexecDaemon,
        Component::EnoexecHandler,
    ];

    /// As users read it in conditions.
    pub fn title(self) -> &'static str {
        match self {
            Component::Inspector => "image inspector",
            Component::Webhook => "pod placement webhook",
            Component::GateController => "pod placement controller (gate controller)",
            Component::Scheduler => "scheduler",
            Component::EnoexecDaemon => "exec-format-error daemon",
            Component::EnoexecHandler => "exec-format-error handler",
        }
    }
}

/// A workload's rollout, from its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    pub exists: bool,
    /// At least one replica (pod) available.
    pub available: bool,
    /// Every replica updated, ready and available, for the current generation.
    pub rolled_out: bool,
    /// Why it is not available or rolled out, in words (for conditions).
    pub detail: String,
}

/// What the reconciler saw this time.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub rollouts: BTreeMap<Component, Rollout>,
    /// The mode the webhook configuration routes to now (`None`: no configuration).
    pub routing: Option<PlacementMode>,
    /// Pending pods naming a scheduler that is being removed, still waiting after this
    /// pass's releases (only counted when it matters).
    pub pods_waiting_for_scheduler: usize,
    /// Pods with multiarch's scheduling gate (only counted when uninstalling).
    pub gated_pods: usize,
    /// ENoExecEvents not yet handled (only counted while the monitor is turned off).
    pub enoexec_events: usize,
    /// Pods labelled misplaced (only counted while the correction is on).
    pub misplaced_pods: Option<usize>,
}

impl Observed {
    pub fn available(&self, component: Component) -> bool {
        self.rollouts.get(&component).is_some_and(|r| r.available)
    }

    pub fn exists(&self, component: Component) -> bool {
        self.rollouts.get(&component).is_some_and(|r| r.exists)
    }
}

/// What to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub scheduler: bool,
    pub enoexec_daemon: bool,
    pub enoexec_handler: bool,
    /// The mode the webhook configuration routes to (`None`: no configuration).
    pub routing: Option<PlacementMode>,
    /// Pods still wait for a scheduler that is being removed.
    pub draining_scheduler: bool,
    /// Reports still wait for a handler that is being removed.
    pub draining_enoexec: bool,
}

/// What a route needs available: the webhook and inspector, and the mode's placer.
pub fn route_ready(mode: PlacementMode, observed: &Observed) -> bool {
    let placer = match mode {
        PlacementMode::Scheduler => Component::Scheduler,
        PlacementMode::SchedulingGate => Component::GateController,
    };
    [Component::Webhook, Component::Inspector, placer]
        .into_iter()
        .all(|c| observed.available(c))
}

/// Which clocks have run out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// The webhook configuration has not routed to the scheduler for the settle period:
    /// no review under way can still send it a pod.
    pub scheduler_route_settled: bool,
    /// The reports' drain timeout has passed (the caller deletes what is left).
    pub enoexec_reports: bool,
}

/// The plan for an installed (not deleting) configuration.
pub fn plan(spec: &ClusterPodPlacementConfigSpec, observed: &Observed, expired: Expired) -> Plan {
    let mode = spec.placement_or_default().mode;
    let waiting = observed.pods_waiting_for_scheduler > 0;
    // Past the drain timeout the caller has released what waits; what it could not
    // release still waits and keeps the scheduler.
    let draining_scheduler = mode != PlacementMode::Scheduler
        && observed.exists(Component::Scheduler)
        && (waiting || !expired.scheduler_route_settled);
    let scheduler = mode == PlacementMode::Scheduler || draining_scheduler;
    let routing = if route_ready(mode, observed) {
        Some(mode)
    } else {
        // Keep the route in place while it still works; never route to what is not there.
        observed
            .routing
            .filter(|current| route_ready(*current, observed))
    };
    let monitor = spec
        .plugins
        .as_ref()
        .is_some_and(|p| p.exec_format_error_monitor_enabled());
    // The correction runs in the handler: with it alone, the handler without the daemon.
    let correction = spec
        .plugins
        .as_ref()
        .is_some_and(|p| p.enabled_misplaced_pod_correction().is_some());
    let draining_enoexec = !monitor
        && observed.exists(Component::EnoexecHandler)
        && observed.enoexec_events > 0
        && !expired.enoexec_reports;
    Plan {
        scheduler,
        enoexec_daemon: monitor,
        enoexec_handler: monitor || correction || draining_enoexec,
        routing,
        draining_scheduler,
        draining_enoexec,
    }
}

#[cfg(test)]
mod tests {
    use multiarch_crd::{ClusterPlugins, ExecFormatErrorMonitor, PlacementSpec};

    use super::*;

    fn ready(components: &[Component]) -> Observed {
        let mut observed = Observed::default();
        for c in components {
            observed.rollouts.insert(
                *c,
                Rollout {
                    exists: true,
                    available: true,
                    rolled_out: true,
                    detail: String::new(),
                },
            );
        }
        observed
    }

    fn spec(mode: PlacementMode) -> ClusterPodPlacementConfigSpec {
        ClusterPodPlacementConfigSpec {
            placement: Some(PlacementSpec {
                mode,
                ..PlacementSpec::default()
            }),
            ..ClusterPodPlacementConfigSpec::default()
        }
    }

    use Component::*;

    #[test]
    fn pods_are_routed_only_once_the_mode_s_components_are_available() {
        let starting = ready(&[Inspector, Webhook, GateController]);
        let p = plan(
            &spec(PlacementMode::Scheduler),
            &starting,
            Expired::default(),
        );
        assert!(p.scheduler);
        assert_eq!(p.routing, None, "the scheduler is not available yet");
        let up = ready(&[Inspector, Webhook, GateController, Scheduler]);
        assert_eq!(
            plan(&spec(PlacementMode::Scheduler), &up, Expired::default()).routing,
            Some(PlacementMode::Scheduler)
        );
    }

    #[test]
    fn a_mode_switch_keeps_the_old_route_until_the_new_one_is_ready() {
        let mut gate_mode = ready(&[Inspector, Webhook, GateController]);
        gate_mode.routing = Some(PlacementMode::SchedulingGate);
        let p = plan(
            &spec(PlacementMode::Scheduler),
            &gate_mode,
            Expired::default(),
        );
        assert_eq!(p.routing, Some(PlacementMode::SchedulingGate));
        assert!(p.scheduler);
    }

    #[test]
    fn the_scheduler_stays_while_pods_wait_for_it_and_until_its_route_has_settled() {
        let mut switching = ready(&[Inspector, Webhook, GateController, Scheduler]);
        switching.routing = Some(PlacementMode::Scheduler);
        switching.pods_waiting_for_scheduler = 3;
        let settled = Expired {
            scheduler_route_settled: true,
            enoexec_reports: false,
        };
        let p = plan(&spec(PlacementMode::SchedulingGate), &switching, settled);
        assert_eq!(
            p.routing,
            Some(PlacementMode::SchedulingGate),
            "switched at once"
        );
        assert!(p.scheduler && p.draining_scheduler);
        // Nothing waits, but reviews under way may still route pods to it.
        switching.pods_waiting_for_scheduler = 0;
        let unsettled = plan(
            &spec(PlacementMode::SchedulingGate),
            &switching,
            Expired::default(),
        );
        assert!(unsettled.scheduler && unsettled.draining_scheduler);
        assert!(!plan(&spec(PlacementMode::SchedulingGate), &switching, settled).scheduler);
        // Gone already: nothing to keep.
        switching.rollouts.remove(&Scheduler);
        assert!(
            !plan(
                &spec(PlacementMode::SchedulingGate),
                &switching,
                Expired::default()
            )
            .scheduler
        );
    }

    #[test]
    fn the_monitor_s_handler_drains_its_reports_before_it_goes() {
        let mut on = spec(PlacementMode::Scheduler);
        on.plugins = Some(ClusterPlugins {
            exec_format_error_monitor: Some(ExecFormatErrorMonitor { enabled: true }),
            ..ClusterPlugins::default()
        });
        let p = plan(&on, &Observed::default(), Expired::default());
        assert!(p.enoexec_daemon && p.enoexec_handler);
        let mut off_with_reports = ready(&[EnoexecHandler]);
        off_with_reports.enoexec_events = 2;
        let p = plan(
            &spec(PlacementMode::Scheduler),
            &off_with_reports,
            Expired::default(),
        );
        assert!(!p.enoexec_daemon && p.enoexec_handler && p.draining_enoexec);
    }
}
