//! Which clocks a snapshot runs: a drain while pods or reports wait for a component that
//! is being removed, a settle while a route is seen gone. No I/O.

use std::collections::BTreeSet;

use multiarch_crd::{ClusterPodPlacementConfigSpec, PlacementMode};

use crate::{clocks::Drain, component::Component, observe::Snapshot};

/// The clocks that run while `snapshot` is seen, under `spec`.
pub fn running_clocks(
    spec: &ClusterPodPlacementConfigSpec,
    snapshot: &Snapshot,
) -> BTreeSet<Drain> {
    let mut running = BTreeSet::new();
    if snapshot.deleting {
        let configs_gone = snapshot
            .pod_placement_configs
            .as_ref()
            .is_some_and(Vec::is_empty);
        if configs_gone && !snapshot.route_configured {
            running.extend([Drain::Uninstall, Drain::UninstallSettle]);
        }
        return running;
    }
    let leaving = spec.placement_or_default().mode != PlacementMode::Scheduler
        && snapshot.exists(Component::Scheduler);
    if leaving && !snapshot.waiting_pods().is_empty() {
        running.insert(Drain::SchedulerPods);
    }
    if snapshot.routing != Some(PlacementMode::Scheduler) {
        running.insert(Drain::SchedulerRouteSettle);
    }
    if !snapshot.reports.is_empty() {
        running.insert(Drain::EnoexecReports);
    }
    running
}
