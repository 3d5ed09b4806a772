//! One pass over the ClusterPodPlacementConfig `cluster`: observe (one snapshot), tick
//! the clocks, decide (a plan, no I/O), act (the plan's writes, in order), and write the
//! status computed from the three. A step that fails on one object (an operand the API
//! server refuses, a pod that cannot be recreated) is recorded in the Degraded condition
//! while the other steps, the status and the certificates go on.

use std::time::{Duration, SystemTime};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::ResourceExt;
use multiarch_crd::{
    ClusterPodPlacementConfig, cluster_pod_placement_config::conditions::PROGRESSING,
    names::SINGLETON_NAME,
};

use crate::{
    act::{self, ActError, Aftermath, With, failures::StepFailures},
    certificates::{CertificateError, authority::AuthorityError},
    context::OperatorContext,
    decide::{Plan, Requeue, Stage, decide, running_clocks, spec_in_force},
    metrics::ResultLabel,
    observe::{Snapshot, reads::ObserveError},
    scheduler_name_check::NameTaken,
    status,
};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Act(#[from] ActError),
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    #[error(transparent)]
    Certificate(#[from] CertificateError),
}

/// Reconciles `cppc` once; `Ok` says when to look again (sooner on any change).
pub async fn reconcile(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<Duration, ReconcileError> {
    let result = pass(cppc, ctx).await;
    let result_label = if result.is_ok() { "ok" } else { "error" };
    let label = ResultLabel {
        result: result_label,
    };
    ctx.metrics.reconciles.get_or_create(&label).inc();
    result
}

async fn pass(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<Duration, ReconcileError> {
    if cppc.name_any() != SINGLETON_NAME {
        return Ok(Requeue::LATER);
    }
    let now = SystemTime::now();
    let (authority, _) = ctx.authority.authority(now).await?;
    let (spec, refused_name) = spec_in_force(&cppc.spec);
    ctx.follow_log_verbosity(spec.log_verbosity);

    let snapshot = Snapshot::read(&ctx.client, &ctx.settings, cppc, &spec).await?;
    let expired = ctx.tick_clocks(&running_clocks(&spec, &snapshot), snapshot.seen_at);
    let plan = decide(&spec, &snapshot, &expired);
    let failures = failures_before(ctx, refused_name, &snapshot);
    let apis = snapshot.apis;
    let with = With {
        cppc,
        spec: &spec,
        authority: &authority,
        now,
        apis,
    };
    let outcome = act::carry_out(ctx, &with, &plan, failures).await?;

    let clean = outcome.failures.is_empty();
    let quiet = matches!(plan.stage, Stage::Ignored | Stage::Finalizing)
        || (plan.stage == Stage::Uninstalled && clean);
    if quiet {
        return Ok(plan.requeue.after());
    }
    let progressing = report(ctx, &with, &plan, &snapshot, &outcome).await?;
    let busy = progressing || !clean || plan.requeue == Requeue::Soon;
    Ok(if busy { Requeue::SOON } else { Requeue::LATER })
}

/// What failed before the plan is carried out: the spec's refused scheduler name, the
/// reads the pass went on without.
fn failures_before(
    ctx: &OperatorContext,
    refused_name: Option<NameTaken>,
    snapshot: &Snapshot,
) -> StepFailures {
    let mut failures = StepFailures::default();
    // (Being deleted, nothing is placed under any name: nothing to say.)
    if let Some(refused) = refused_name.filter(|_| !snapshot.deleting) {
        failures.record(ctx, "use the configuration's schedulerName", refused);
    }
    for (what, why) in &snapshot.unread {
        failures.record(ctx, what, why);
    }
    failures
}

/// Writes the status the pass computes; whether it says Progressing.
async fn report(
    ctx: &OperatorContext,
    with: &With<'_>,
    plan: &Plan,
    snapshot: &Snapshot,
    outcome: &Aftermath,
) -> Result<bool, ActError> {
    let status = status::of(&status::Inputs {
        spec: with.spec,
        generation: with.cppc.metadata.generation.unwrap_or(0),
        plan,
        snapshot,
        failures: outcome.failures.messages(),
        ungated_left: outcome.ungated_left,
        recreated_left: outcome.recreated_left,
        architectures: ctx.architectures(),
        previous: with.cppc.status.as_ref(),
        now: now_time(),
    });
    let progressing = status::is_true(&status, PROGRESSING);
    act::writes::write_status(ctx, with.cppc, status).await?;
    Ok(progressing)
}

/// Now, to the second (as the API server stores times).
fn now_time() -> Time {
    let now = Timestamp::now().as_second();
    Time(Timestamp::from_second(now).unwrap_or(Timestamp::UNIX_EPOCH))
}
