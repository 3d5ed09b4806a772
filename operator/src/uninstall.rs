//! Deleting the ClusterPodPlacementConfig uninstalls multiarch in an order that strands
//! no pod: while PodPlacementConfigs exist nothing moves (MTO's rule); then the webhook
//! configuration goes, so no new pod is routed or gated; every component stays for the
//! route's settle period (reviews already under way, API servers that have not seen the
//! deletion yet), and the pods gated or waiting for the scheduler, including any admitted
//! meanwhile, are left to the gate controller and the scheduler until the drain timeout,
//! then released by the operator; the exec-format-error reports likewise; then every
//! operand goes, and last the finalizer. Pods the API server refuses to create again hold
//! the uninstall, named in the status, until a person acts.

use std::time::Duration;

use kube::{Api, api::DeleteParams};
use multiarch_crd::{ClusterPodPlacementConfig, ENoExecEvent};
use tracing::info;

use crate::{
    context::{Drain, OperatorContext},
    desired::{every_key, webhook_configuration_key},
    finalizers::{self, FINALIZER, NO_POD_PLACEMENT_CONFIG},
    journal, observe,
    plan::{Component, Observed, Plan},
    release, rename, status,
    step::{
        BUSY_REQUEUE, IDLE_REQUEUE, ReconcileError, StepFailures, api_error, delete, now_time,
        write_status,
    },
};

const WHY: &str = "multiarch is being uninstalled (the ClusterPodPlacementConfig was deleted)";

pub async fn run(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<Duration, ReconcileError> {
    if !finalizers::has(cppc, FINALIZER) {
        return Ok(IDLE_REQUEUE);
    }
    let configs = observe::pod_placement_configs(&ctx.client).await?;
    // MTO's order: the no-pod-placement-config finalizer goes once the configs are gone.
    if configs.is_empty() && finalizers::set(ctx, cppc, &[(NO_POD_PLACEMENT_CONFIG, false)]).await?
    {
        return Ok(BUSY_REQUEUE);
    }
    if !configs.is_empty() {
        // The drain has not started: its clocks start when it does.
        ctx.drain_done(Drain::Uninstall);
        ctx.drain_done(Drain::UninstallSettle);
        let why = format!(
            "waiting for the PodPlacementConfigs to be deleted first: {} (pods stay routed meanwhile)",
            configs.join(", ")
        );
        return wait(
            ctx,
            cppc,
            Observed::default(),
            why,
            &StepFailures::default(),
        )
        .await;
    }
    delete(ctx, &webhook_configuration_key()).await?;
    // The route is seen gone (the delete answered): the drain and the settle run from here.
    let expired = ctx.drain_expired(Drain::Uninstall);
    // Taken before the pods are listed: the last look comes after the settle.
    let settled = ctx.drain_expired(Drain::UninstallSettle);
    let mut failures = StepFailures::default();
    let observed = Observed {
        rollouts: observe::rollouts(&ctx.client, &ctx.settings).await?,
        ..Observed::default()
    };
    let left = format!(
        "released by the operator in {} s",
        ctx.drain_left(Drain::Uninstall).as_secs()
    );
    let mut waiting_on = Vec::new();
    if !settled {
        waiting_on.push(format!(
            "admission reviews already under way to finish ({} s) before the last look for pods still gated or routed",
            ctx.drain_left(Drain::UninstallSettle).as_secs()
        ));
    }

    // Recreations a previous pass started: their copies must not go with the namespace.
    let unfinished = journal::replay_all(&ctx.client, &ctx.events, &ctx.settings.namespace)
        .await
        .map_err(api_error("read the journal of pods being recreated"))?;
    for pod in &unfinished {
        failures.record(
            ctx,
            "recreate a journaled pod",
            format!(
                "ConfigMap {}/{}: {}",
                ctx.settings.namespace, pod.entry, pod.error
            ),
        );
    }
    if !unfinished.is_empty() {
        waiting_on.push(format!(
            "{} journaled pods to be created again (their copies are kept in ConfigMaps until then)",
            unfinished.len()
        ));
    }

    let gated = observe::gated_pods(&ctx.client).await?;
    if !gated.is_empty() {
        if observed.available(Component::GateController) && !expired {
            waiting_on.push(format!(
                "{} gated pods to be processed by the gate controller ({left})",
                gated.len()
            ));
        } else {
            let still = release::ungate_all(ctx, &gated, WHY, &mut failures).await;
            if still.total() > 0 {
                waiting_on.push(format!("{} gated pods to be ungated", still.total()));
            }
        }
    }

    // Under the name the spec gives and any the scheduler placed before a rename.
    let scheduler_name = cppc.spec.placement_or_default().scheduler_name;
    let names = rename::every_name(rename::deployed(ctx).await?.as_ref(), &scheduler_name);
    let pending = rename::pods_waiting_for_any(ctx, &names).await?;
    let mut refused = 0;
    if !pending.is_empty() {
        if observed.available(Component::Scheduler) && !expired {
            waiting_on.push(format!(
                "{} pending pods to be placed by {scheduler_name} ({left})",
                pending.len()
            ));
        } else {
            let still = release::reset_all(ctx, &pending, WHY, &mut failures).await;
            refused = still.refused;
            if still.refused > 0 {
                waiting_on.push(format!(
                    "{} pending pods the API server refuses to create again (see their events: delete them, or allow their creation)",
                    still.refused
                ));
            }
            if still.failed > 0 {
                waiting_on.push(format!("{} pending pods to be recreated", still.failed));
            }
        }
    }
    ctx.metrics.pods_not_recreatable.set(refused as i64);

    let apis = observe::optional_apis(&ctx.client).await?;
    // The daemon first: no new reports while the handler drains the old ones.
    for key in every_key(&ctx.settings, apis)?
        .into_iter()
        .filter(|k| k.kind == "DaemonSet")
    {
        delete(ctx, &key).await?;
    }
    let reports = observe::enoexec_events(&ctx.client, &ctx.settings).await?;
    if !reports.is_empty() {
        if observed.available(Component::EnoexecHandler) && !expired {
            waiting_on.push(format!(
                "{} exec-format-error reports to be handled ({left})",
                reports.len()
            ));
        } else {
            delete_reports(ctx, &reports).await?;
        }
    }
    if !waiting_on.is_empty() {
        return wait(
            ctx,
            cppc,
            observed,
            format!("waiting for {}", waiting_on.join("; ")),
            &failures,
        )
        .await;
    }

    for key in every_key(&ctx.settings, apis)? {
        delete(ctx, &key).await?;
    }
    finalizers::set(ctx, cppc, &[(FINALIZER, false)]).await?;
    ctx.drain_done(Drain::Uninstall);
    ctx.drain_done(Drain::UninstallSettle);
    info!("uninstalled: every operand removed, finalizer released");
    Ok(IDLE_REQUEUE)
}

async fn wait(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    observed: Observed,
    why: String,
    failures: &StepFailures,
) -> Result<Duration, ReconcileError> {
    let nothing = Plan {
        scheduler: false,
        enoexec_daemon: false,
        enoexec_handler: false,
        routing: None,
        draining_scheduler: false,
        draining_enoexec: false,
    };
    let new_status = status::status(&status::Inputs {
        spec: &cppc.spec,
        generation: cppc.metadata.generation.unwrap_or(0),
        plan: &nothing,
        observed: &observed,
        deprovisioning: Some(why),
        architectures: ctx.architectures(),
        failures: failures.messages(),
        previous: cppc.status.as_ref(),
        now: now_time(),
    });
    write_status(ctx, cppc, new_status).await?;
    Ok(BUSY_REQUEUE)
}

/// Deletes the exec-format-error reports nobody will handle any more.
pub async fn delete_reports(ctx: &OperatorContext, names: &[String]) -> Result<(), ReconcileError> {
    // Metadata only: whatever their content, they go.
    let api: Api<kube::core::PartialObjectMeta<ENoExecEvent>> =
        Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_error("delete an exec-format-error report")(e)),
        }
    }
    if !names.is_empty() {
        info!(
            reports = names.len(),
            "unhandled exec-format-error reports deleted"
        );
    }
    Ok(())
}
