//! Act: carries out a pass's plan, action by action in its order, and says what failed
//! and which pods are left. It never reads the cluster to decide: every read here is of
//! the object it writes (a pod read again before its release, an operand compared before
//! it is applied).

pub mod events;
pub mod failures;
pub mod finalizers;
pub mod journal;
pub mod operands;
pub mod release;
pub mod writes;

use std::time::SystemTime;

use kube::{Api, api::DeleteParams, core::PartialObjectMeta};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, ENoExecEvent, PlacementMode,
};
use tracing::info;

use crate::{
    act::{failures::StepFailures, operands::Operands},
    certificates::Authority,
    context::OperatorContext,
    decide::{Action, Left, Plan, Release, Stage},
    desired::{every_key, webhook_configuration_key},
    observe::reads::OptionalApis,
};
use multiarch_crd::names::FINALIZER_POD_PLACEMENT;

/// A write the pass cannot go on without (the finalizers, the status).
#[derive(Debug, thiserror::Error)]
#[error("cannot {what}: {source}")]
pub struct ActError {
    pub what: &'static str,
    pub source: kube::Error,
}

impl ActError {
    pub fn api(what: &'static str) -> impl FnOnce(kube::Error) -> ActError {
        move |source| ActError { what, source }
    }
}

/// What carrying out a plan left.
#[derive(Debug, Default)]
pub struct Aftermath {
    pub failures: StepFailures,
    /// Gated pods this pass's releases left gated.
    pub ungated_left: Left,
    /// Pending pods this pass's releases left waiting.
    pub recreated_left: Left,
    /// Failures recorded before the actions (reads the pass went on without).
    failed_before: usize,
}

/// What the actions are carried out with, besides the context.
pub struct With<'a> {
    pub cppc: &'a ClusterPodPlacementConfig,
    /// The spec in force (`decide::spec_in_force`), not always the object's as written.
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub authority: &'a Authority,
    pub now: SystemTime,
    pub apis: OptionalApis,
}

/// Carries out `plan`'s actions in order; `failures` holds what failed before (reads).
pub async fn carry_out(
    ctx: &OperatorContext,
    with: &With<'_>,
    plan: &Plan,
    failures: StepFailures,
) -> Result<Aftermath, ActError> {
    // What failed before (reads) is reported, but only a failed action holds the
    // finalizer.
    let failed_before = failures.messages().len();
    let mut outcome = Aftermath {
        failures,
        failed_before,
        ..Aftermath::default()
    };
    for action in &plan.actions {
        one(ctx, with, action, &mut outcome).await?;
    }
    if !matches!(plan.stage, Stage::Ignored | Stage::Finalizing) {
        let refused = outcome.recreated_left.refused;
        ctx.metrics.pods_not_recreatable.set(refused as i64);
        let routed = plan.target.routing.is_some();
        ctx.metrics.routing.set(i64::from(routed));
    }
    Ok(outcome)
}

async fn one(
    ctx: &OperatorContext,
    with: &With<'_>,
    action: &Action,
    outcome: &mut Aftermath,
) -> Result<(), ActError> {
    let failures = &mut outcome.failures;
    match action {
        Action::SetFinalizers(wanted) => {
            finalizers::set(ctx, with.cppc, wanted).await?;
        }
        Action::FinishRecreations(entries) => {
            finish_recreations(ctx, with, entries, failures).await
        }
        Action::DeleteReports(names) => {
            let deleted = delete_reports(ctx, names).await;
            failures.keep(ctx, "delete unhandled exec-format-error reports", deleted);
        }
        Action::DeleteRoute => {
            let deleted = writes::delete(ctx, &webhook_configuration_key()).await;
            failures.keep(ctx, "remove the webhook configuration", deleted);
        }
        Action::ApplyOperands {
            target,
            previous_scheduler_names,
        } => {
            let operands = Operands {
                spec: with.spec,
                authority: with.authority,
                now: with.now,
                target,
                apis: with.apis,
                previous_scheduler_names,
            };
            operands::apply(with.cppc, ctx, &operands, failures).await;
        }
        Action::Release { how, pods, why } => {
            let left = release::all(ctx, *how, pods, why, failures).await;
            match how {
                Release::Ungate => outcome.ungated_left.add(left),
                Release::Recreate => outcome.recreated_left.add(left),
            }
        }
        Action::DeleteDaemonSets => {
            delete_operands(ctx, with.apis, |kind| kind == "DaemonSet", failures).await
        }
        Action::DeleteOperands => delete_operands(ctx, with.apis, |_| true, failures).await,
        Action::ReleaseFinalizer => {
            // Only after a pass in which every other action went through.
            if failures.messages().len() == outcome.failed_before {
                finalizers::set(ctx, with.cppc, &[(FINALIZER_POD_PLACEMENT, false)]).await?;
                info!("uninstalled: every operand removed, finalizer released");
            }
        }
        Action::AnnounceRouting { before, after } => announce(ctx, with, *before, *after).await,
    }
    Ok(())
}

/// Finishes the recreations a previous pass started; one that fails is reported (an
/// event on the ClusterPodPlacementConfig, Degraded) and left, never stopping the pass.
async fn finish_recreations(
    ctx: &OperatorContext,
    with: &With<'_>,
    entries: &[k8s_openapi::api::core::v1::ConfigMap],
    failures: &mut StepFailures,
) {
    let namespace = &ctx.settings.namespace;
    for unfinished in journal::finish(&ctx.client, &ctx.events, namespace, entries).await {
        let (entry, error) = (&unfinished.entry, &unfinished.error);
        let step = "recreate a journaled pod";
        failures.record(ctx, step, format!("ConfigMap {namespace}/{entry}: {error}"));
        events::pod_not_recreated(ctx, with.cppc, entry, error).await;
    }
}

async fn announce(
    ctx: &OperatorContext,
    with: &With<'_>,
    before: Option<PlacementMode>,
    after: Option<PlacementMode>,
) {
    events::announce(ctx, with.cppc, with.spec, before, after).await;
}

/// Deletes the operands whose kind `which` accepts; one that fails is recorded.
async fn delete_operands(
    ctx: &OperatorContext,
    apis: OptionalApis,
    which: impl Fn(&str) -> bool,
    failures: &mut StepFailures,
) {
    let Some(keys) = failures.keep(ctx, "list the operands", every_key(&ctx.settings, apis)) else {
        return;
    };
    for key in keys.into_iter().filter(|k| which(&k.kind)) {
        let deleted = writes::delete(ctx, &key).await;
        failures.keep(ctx, "delete an operand", deleted);
    }
}

/// Deletes the exec-format-error reports nobody will handle any more.
async fn delete_reports(ctx: &OperatorContext, names: &[String]) -> Result<(), ActError> {
    // Metadata only: whatever their content, they go.
    let api: Api<PartialObjectMeta<ENoExecEvent>> =
        Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(ActError::api("delete an exec-format-error report")(e)),
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
