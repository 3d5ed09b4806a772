//! One reconcile of the ClusterPodPlacementConfig `cluster`: the finalizer, the
//! certificates, what to install (`plan`), writing it (`apply`, only what differs), and
//! the status; deletion goes to `uninstall`. A step that fails on one object (an operand
//! the API server refuses, a pod that cannot be recreated) is recorded in the Degraded
//! condition while the other steps, the status and the certificates go on.

use std::time::{Duration, SystemTime};

use kube::{Resource, ResourceExt};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigStatus,
    names::{DEFAULT_SCHEDULER_NAME, KUBE_SCHEDULER_NAME, SINGLETON_NAME},
};
use multiarch_runtime::event_reason::EventReason;
use tracing::warn;

use crate::{
    context::{Drain, OperatorContext},
    desired::webhook_configuration_key,
    finalizers, journal,
    metrics::ResultLabel,
    mode_switch, observe,
    operands::{self, Operands},
    plan::{Component, Expired, Observed, Plan, plan},
    rename, routing_event,
    scheduler_name_check::NameTaken,
    status,
    step::{
        BUSY_REQUEUE, IDLE_REQUEUE, ReconcileError, StepFailures, delete, now_time, write_status,
    },
    uninstall,
};

/// A configuration stored before the CRD refused kube-scheduler's name (`None`: it does
/// not name it), with multiarch's default name instead: multiarch's scheduler never runs
/// as kube-scheduler, and kube-scheduler's pods are never its to release.
fn without_kube_schedulers_name(
    cppc: &ClusterPodPlacementConfig,
) -> Option<ClusterPodPlacementConfig> {
    let placement = cppc.spec.placement.as_ref()?;
    if placement.scheduler_name != KUBE_SCHEDULER_NAME {
        return None;
    }
    let mut kept = cppc.clone();
    if let Some(placement) = kept.spec.placement.as_mut() {
        DEFAULT_SCHEDULER_NAME.clone_into(&mut placement.scheduler_name);
    }
    Some(kept)
}

/// Reconciles `cppc` once; `Ok` says when to look again (sooner on any change).
pub async fn reconcile(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<Duration, ReconcileError> {
    let result = reconcile_once(cppc, ctx).await;
    let label = ResultLabel {
        result: if result.is_ok() { "ok" } else { "error" },
    };
    ctx.metrics.reconciles.get_or_create(&label).inc();
    result
}

async fn reconcile_once(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<Duration, ReconcileError> {
    if cppc.name_any() != SINGLETON_NAME {
        return Ok(IDLE_REQUEUE);
    }
    let now = SystemTime::now();
    let (authority, _) = ctx.authority.authority(now).await?;
    if cppc.meta().deletion_timestamp.is_some() {
        return uninstall::run(cppc, ctx).await;
    }
    // From here one failing step is recorded (Degraded) and the others go on.
    let mut failures = StepFailures::default();
    let kept;
    let cppc = match without_kube_schedulers_name(cppc) {
        Some(refused) => {
            failures.record(
                ctx,
                "use the configuration's schedulerName",
                NameTaken::KubeScheduler,
            );
            kept = refused;
            &kept
        }
        None => cppc,
    };
    if finalizers::keep_installed(ctx, cppc, &mut failures).await? {
        // Written: the watch brings the object back as it is now, for the next pass
        // (a pass on the copy read before would be refused by its resourceVersion).
        return Ok(BUSY_REQUEUE);
    }
    finish_recreations(cppc, ctx, &mut failures).await;

    let spec = &cppc.spec;
    ctx.follow_log_verbosity(spec.log_verbosity);
    let mode = spec.placement_or_default().mode;
    let scheduler_name = spec.placement_or_default().scheduler_name;
    let mut observed = Observed {
        rollouts: observe::rollouts(&ctx.client, &ctx.settings).await?,
        routing: observe::routing(&ctx.applier).await?,
        ..Observed::default()
    };
    let routing_before = observed.routing;
    let deployed_scheduler = if observed.exists(Component::Scheduler) {
        rename::deployed(ctx).await?
    } else {
        None
    };
    let previous_scheduler_names =
        rename::previous_names(deployed_scheduler.as_ref(), &scheduler_name);

    // Pods waiting for a scheduler that a mode switch removes.
    let route_settled = mode_switch::drain(
        ctx,
        deployed_scheduler.as_ref(),
        mode,
        &mut observed,
        &mut failures,
    )
    .await?;
    let monitor = spec
        .plugins
        .as_ref()
        .is_some_and(|p| p.exec_format_error_monitor_enabled());
    let reports = if !monitor && observed.exists(Component::EnoexecHandler) {
        observe::enoexec_events(&ctx.client, &ctx.settings).await?
    } else {
        Vec::new()
    };
    observed.enoexec_events = reports.len();
    if spec
        .plugins
        .as_ref()
        .is_some_and(|p| p.enabled_misplaced_pod_correction().is_some())
    {
        observed.misplaced_pods = Some(observe::misplaced_pods(&ctx.client).await?);
    }
    let expired = Expired {
        scheduler_route_settled: route_settled,
        enoexec_reports: ctx.drain_clock(Drain::EnoexecReports, !reports.is_empty()),
    };
    let plan = plan(spec, &observed, expired);
    if expired.enoexec_reports && !plan.enoexec_handler {
        let deleted = uninstall::delete_reports(ctx, &reports).await;
        failures.keep(ctx, "delete unhandled exec-format-error reports", deleted);
    }

    // Routing off first, so no pod is sent to what is about to change.
    if plan.routing.is_none() && routing_before.is_some() {
        let deleted = delete(ctx, &webhook_configuration_key()).await;
        failures.keep(ctx, "remove the webhook configuration", deleted);
    }
    let apis = observe::optional_apis(&ctx.client).await?;
    operands::apply(
        cppc,
        ctx,
        &Operands {
            authority: &authority,
            now,
            plan: &plan,
            apis,
            previous_scheduler_names: &previous_scheduler_names,
        },
        &mut failures,
    )
    .await;
    // A renamed scheduler, rolled out: what still waits under its old names is recreated.
    let rolled_out = plan.scheduler
        && deployed_scheduler
            .as_ref()
            .is_some_and(|d| d.name == scheduler_name)
        && observed
            .rollouts
            .get(&Component::Scheduler)
            .is_some_and(|r| r.rolled_out);
    if rolled_out {
        rename::release_renamed(
            ctx,
            &previous_scheduler_names,
            &scheduler_name,
            &mut failures,
        )
        .await;
    }
    observed.routing = plan.routing;
    ctx.metrics.routing.set(i64::from(plan.routing.is_some()));
    if plan.routing != routing_before {
        routing_event::announce(ctx, cppc, routing_before, plan.routing, mode).await;
    }

    let new_status = status::status(&status::Inputs {
        spec,
        generation: cppc.metadata.generation.unwrap_or(0),
        plan: &plan,
        observed: &observed,
        deprovisioning: None,
        architectures: ctx.architectures(),
        failures: failures.messages(),
        previous: cppc.status.as_ref(),
        now: now_time(),
    });
    let progressing = is_true(&new_status, "Progressing");
    write_status(ctx, cppc, new_status).await?;
    Ok(
        if progressing || busy(&plan) || !failures.messages().is_empty() {
            BUSY_REQUEUE
        } else {
            IDLE_REQUEUE
        },
    )
}

/// Finishes the recreations a previous pass started; one that fails is reported (an
/// event on the ClusterPodPlacementConfig, Degraded) and left, never stopping the pass.
async fn finish_recreations(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
    failures: &mut StepFailures,
) {
    let replayed = journal::replay_all(&ctx.client, &ctx.events, &ctx.settings.namespace).await;
    for unfinished in failures
        .keep(ctx, "read the journal of pods being recreated", replayed)
        .into_iter()
        .flatten()
    {
        let note = format!(
            "Cannot create again the pod journaled in ConfigMap {}/{} (the pod was deleted to be recreated for the default scheduler): {}. The copy is kept and retried; create it yourself from the ConfigMap's pod.json, then delete the ConfigMap",
            ctx.settings.namespace, unfinished.entry, unfinished.error
        );
        failures.record(
            ctx,
            "recreate a journaled pod",
            format!(
                "ConfigMap {}/{}: {}",
                ctx.settings.namespace, unfinished.entry, unfinished.error
            ),
        );
        if let Err(e) = ctx
            .events
            .publish(
                &routing_event::reference(cppc),
                EventReason::PodNotRecreated,
                "Release",
                note,
            )
            .await
        {
            warn!(error = %e, "cannot publish the event");
        }
    }
}

fn busy(plan: &Plan) -> bool {
    plan.draining_scheduler || plan.draining_enoexec
}

pub(crate) fn is_true(status: &ClusterPodPlacementConfigStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}
