//! One reconcile of the ClusterPodPlacementConfig `cluster`: the finalizer, the
//! certificates, what to install (`plan`), writing it (`apply`, only what differs), and
//! the status; deletion goes to `uninstall`. A step that fails on one object (an operand
//! the API server refuses, a pod that cannot be recreated) is recorded in the Degraded
//! condition while the other steps, the status and the certificates go on.

use std::{
    collections::BTreeSet,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Resource, ResourceExt};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigStatus, PlacementMode, label_selector,
    names::SINGLETON_NAME,
};
use multiarch_runtime::event_recorder::Severity;
use tracing::{info, warn};

use crate::{
    apply::{Applied, ObjectKey},
    authority::CertificateAuthority,
    context::{Drain, OperatorContext},
    desired::{self, Owner, Wanted, every_key, webhook_certificate_key, webhook_configuration_key},
    finalizers::{self, FINALIZER, NO_POD_PLACEMENT_CONFIG},
    journal,
    metrics::ResultLabel,
    observe, operand_certificates,
    plan::{Component, Expired, Observed, Plan, plan},
    release, rename, status,
    step::{
        BUSY_REQUEUE, IDLE_REQUEUE, ReconcileError, StepFailures, delete, now_time, write_status,
        wrote,
    },
    uninstall,
};

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
    // MTO's finalizers: pod-placement always, no-pod-placement-config while any
    // PodPlacementConfig exists.
    let configs = observe::pod_placement_configs(&ctx.client).await;
    let mut wanted = vec![(FINALIZER, true)];
    if let Some(configs) = failures.keep(ctx, "list the PodPlacementConfigs", configs) {
        wanted.push((NO_POD_PLACEMENT_CONFIG, !configs.is_empty()));
    }
    if finalizers::set(ctx, cppc, &wanted).await? {
        // Written: the watch brings the object back as it is now, for the next pass
        // (a pass on the copy read before would be refused by its resourceVersion).
        return Ok(BUSY_REQUEUE);
    }
    finish_recreations(cppc, ctx, &mut failures).await;

    let spec = &cppc.spec;
    ctx.log_verbosity.send_if_modified(|level| {
        let changed = *level != spec.log_verbosity;
        *level = spec.log_verbosity;
        changed
    });
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

    // Pods and reports waiting for a component that is being removed.
    let leaving = deployed_scheduler
        .as_ref()
        .filter(|_| mode != PlacementMode::Scheduler);
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
    if clock(ctx, Drain::SchedulerPods, !waiting.is_empty()) && leaving.is_some() {
        let why = format!(
            "the ClusterPodPlacementConfig switched to gate mode, and the multiarch scheduler is being removed after waiting {:?} for it to place this pod",
            ctx.drain_timeout
        );
        let left = release::reset_all(ctx, &waiting, &why, &mut failures).await;
        refused = left.refused;
        observed.pods_waiting_for_scheduler = left.total();
    }
    ctx.metrics.pods_not_recreatable.set(refused as i64);
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
        enoexec_reports: clock(ctx, Drain::EnoexecReports, !reports.is_empty()),
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
    apply_operands(
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
    if plan.scheduler
        && deployed_scheduler
            .as_ref()
            .is_some_and(|d| d.name == scheduler_name)
        && observed
            .rollouts
            .get(&Component::Scheduler)
            .is_some_and(|r| r.rolled_out)
    {
        let renamed = rename::release_renamed(
            ctx,
            &previous_scheduler_names,
            &scheduler_name,
            &mut failures,
        )
        .await;
        failures.keep(
            ctx,
            "release pods waiting under an old scheduler name",
            renamed,
        );
    }
    observed.routing = plan.routing;
    ctx.metrics.routing.set(i64::from(plan.routing.is_some()));
    if plan.routing != routing_before {
        announce_routing(ctx, cppc, routing_before, plan.routing, mode).await;
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
                &reference(cppc),
                Severity::Warning,
                "PodNotRecreated",
                "Release",
                note,
            )
            .await
        {
            warn!(error = %e, "cannot publish the event");
        }
    }
}

/// What the operands are built from, besides the spec.
struct Operands<'a> {
    authority: &'a crate::certificates::Authority,
    now: SystemTime,
    plan: &'a Plan,
    apis: desired::OptionalApis,
    previous_scheduler_names: &'a [String],
}

/// Writes every operand the plan wants (only what differs) and deletes the others; one
/// object that fails is recorded and the others go on.
async fn apply_operands(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
    operands: &Operands<'_>,
    failures: &mut StepFailures,
) {
    let issued =
        operand_certificates::ensure_all(ctx, cppc, operands.authority, operands.now).await;
    // Without every certificate the workloads that mount them are left as they are.
    let Some(issued) = failures.keep(ctx, "issue a certificate", issued) else {
        return;
    };
    let [webhook_tls, inspector_tls, inspector_client_tls] = [&issued[0], &issued[1], &issued[2]];
    let objects = desired::objects(&Wanted {
        settings: &ctx.settings,
        spec: &cppc.spec,
        plan: operands.plan,
        owner: &Owner {
            uid: cppc.uid().unwrap_or_default(),
        },
        ca_bundle: &CertificateAuthority::bundle_base64(operands.authority),
        webhook_tls,
        inspector_tls,
        inspector_client_tls,
        apis: operands.apis,
        previous_scheduler_names: operands.previous_scheduler_names,
    });
    let selector_errors = cppc
        .spec
        .namespace_selector
        .as_ref()
        .map(|s| label_selector::selector_errors(s, "spec.namespaceSelector"))
        .unwrap_or_default();
    let mut wanted = BTreeSet::new();
    let mut routed = true;
    for object in &objects {
        let key = ObjectKey::of(object);
        wanted.insert(key.clone());
        // Refused by the CRD and the validating webhook; written while they were not
        // there: the configuration in place stays as it is, and the user is told.
        if key == webhook_configuration_key() && !selector_errors.is_empty() {
            routed = false;
            failures.record(
                ctx,
                "use the namespaceSelector",
                format!(
                    "the webhook configuration keeps its previous namespaceSelector: {}",
                    selector_errors.join("; ")
                ),
            );
            continue;
        }
        // The webhook's certificate follows its configuration: a certificate from a new
        // CA is served only once the API server has that CA.
        if key == webhook_certificate_key(&ctx.settings) && !routed {
            let bundle = CertificateAuthority::bundle_base64(operands.authority);
            let injected = ctx.authority.inject_mutating(&bundle).await;
            if failures
                .keep(
                    ctx,
                    "write the CA bundle into the webhook configuration",
                    injected,
                )
                .is_none()
            {
                continue;
            }
        }
        match ctx.applier.ensure(object).await {
            Ok(Applied::Unchanged) => {}
            Ok(Applied::Created) => wrote(ctx, "created"),
            Ok(Applied::Updated) => wrote(ctx, "updated"),
            Err(e) => {
                if key == webhook_configuration_key() {
                    routed = false;
                }
                failures.record(ctx, "apply an operand", format!("{key}: {e}"));
            }
        }
    }
    for key in every_key(&ctx.settings, operands.apis) {
        if !wanted.contains(&key) {
            let deleted = delete(ctx, &key).await;
            failures.keep(ctx, "delete an operand", deleted);
        }
    }
}

fn busy(plan: &Plan) -> bool {
    plan.draining_scheduler || plan.draining_enoexec
}

/// Runs `drain`'s clock while something waits; `true` once it has run out.
fn clock(ctx: &OperatorContext, drain: Drain, waiting: bool) -> bool {
    if waiting {
        ctx.drain_expired(drain)
    } else {
        ctx.drain_done(drain);
        false
    }
}

pub(crate) fn is_true(status: &ClusterPodPlacementConfigStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

pub(crate) fn reference(cppc: &ClusterPodPlacementConfig) -> ObjectReference {
    ObjectReference {
        api_version: Some("multiarch.openshift.io/v1beta1".into()),
        kind: Some("ClusterPodPlacementConfig".into()),
        name: Some(cppc.name_any()),
        uid: cppc.uid(),
        ..ObjectReference::default()
    }
}

async fn announce_routing(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    before: Option<PlacementMode>,
    after: Option<PlacementMode>,
    mode: PlacementMode,
) {
    let (severity, reason, note) = match after {
        Some(PlacementMode::Scheduler) => (
            Severity::Normal,
            "RoutingToScheduler",
            format!(
                "New pods in the selected namespaces now go to {}",
                cppc.spec.placement_or_default().scheduler_name
            ),
        ),
        Some(PlacementMode::SchedulingGate) => (
            Severity::Normal,
            "RoutingToGate",
            "New pods in the selected namespaces are now gated and given an architecture affinity (gate mode)".to_owned(),
        ),
        None => (
            Severity::Warning,
            "RoutingOff",
            format!(
                "The webhook configuration was removed: the components of {} are not available, so new pods are admitted unchanged (see the Degraded condition)",
                match mode {
                    PlacementMode::Scheduler => "scheduler mode",
                    PlacementMode::SchedulingGate => "gate mode",
                }
            ),
        ),
    };
    info!(?before, ?after, "routing changed");
    if let Err(e) = ctx
        .events
        .publish(&reference(cppc), severity, reason, "Route", note)
        .await
    {
        warn!(error = %e, "cannot publish the routing event");
    }
}
