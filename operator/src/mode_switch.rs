//! A switch away from scheduler mode, inside a reconcile: the pods still waiting for the
//! scheduler being removed (under any name it had), the settle clock of its route, and,
//! past the drain timeout, their release (recreated for the default scheduler).

use multiarch_crd::PlacementMode;

use crate::{
    context::{Drain, OperatorContext},
    plan::Observed,
    release,
    rename::{self, DeployedScheduler},
    step::{ReconcileError, StepFailures},
};

/// Counts the pods waiting for `deployed` (the scheduler in place) when `mode` no longer
/// wants it, into `observed`, and releases them once the drain timeout has passed; what
/// cannot be released keeps the scheduler. `true` once the scheduler's route has settled.
pub async fn drain(
    ctx: &OperatorContext,
    deployed: Option<&DeployedScheduler>,
    mode: PlacementMode,
    observed: &mut Observed,
    failures: &mut StepFailures,
) -> Result<bool, ReconcileError> {
    let leaving = deployed.filter(|_| mode != PlacementMode::Scheduler);
    let waiting = match leaving {
        Some(deployed) => {
            let names = rename::every_name(Some(deployed), &deployed.name);
            rename::pods_waiting_for_any(ctx, &names).await?
        }
        None => Vec::new(),
    };
    // The scheduler serves its route until the webhook configuration, as read, has not
    // routed to it for the settle period: reviews already under way still send it pods.
    let route_settled = if observed.routing == Some(PlacementMode::Scheduler) {
        ctx.drain_done(Drain::SchedulerRouteSettle);
        false
    } else {
        ctx.drain_expired(Drain::SchedulerRouteSettle)
    };
    // Past the drain timeout, release what still waits; what cannot be released keeps
    // the scheduler.
    observed.pods_waiting_for_scheduler = waiting.len();
    let mut refused = 0;
    if ctx.drain_clock(Drain::SchedulerPods, !waiting.is_empty()) && leaving.is_some() {
        let why = format!(
            "the ClusterPodPlacementConfig switched to gate mode, and the multiarch scheduler is being removed after waiting {:?} for it to place this pod",
            ctx.drain_timeout
        );
        let left = release::reset_all(ctx, &waiting, &why, failures).await;
        refused = left.refused;
        observed.pods_waiting_for_scheduler = left.total();
    }
    ctx.metrics.pods_not_recreatable.set(refused as i64);
    Ok(route_settled)
}
