//! One reconcile of the ClusterPodPlacementConfig `cluster`: the finalizer, the
//! certificates, what to install (`plan`), writing it (`apply`, only what differs), and
//! the status; deletion goes to `uninstall`.

use std::{
    collections::BTreeSet,
    time::{Duration, SystemTime},
};

use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigStatus, PlacementMode,
    names::SINGLETON_NAME,
};
use multiarch_runtime::pod_events::Severity;
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::{
    apply::{ApplyError, ObjectKey, Outcome},
    authority::{AuthorityError, CertificateAuthority, secret_data},
    certificates::{CertificateError, ensure_serving, expires_at},
    context::{Drain, OperatorContext},
    desired::{self, Owner, Wanted, every_key, webhook_configuration_key},
    drain::{self, DrainError},
    install::{WEBHOOK_TLS_SECRET, webhook_dns_names},
    metrics::{ActionLabel, ResultLabel, SecretLabel},
    observe::{self, ObserveError},
    plan::{Component, Expired, Observed, Plan, plan},
    status, uninstall,
};

/// MTO's finalizer: the operands are removed in order before the object goes.
pub const FINALIZER: &str = "finalizers.multiarch.openshift.io/pod-placement";
/// Requeue while something is in progress, and otherwise (certificates are checked then).
pub const BUSY_REQUEUE: Duration = Duration::from_secs(5);
pub const IDLE_REQUEUE: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error(transparent)]
    Drain(#[from] DrainError),
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        source: kube::Error,
    },
}

pub(crate) fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
    move |source| ReconcileError::Api { what, source }
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
    ensure_finalizer(cppc, ctx).await?;
    drain::replay_journal(&ctx.client, &ctx.events, &ctx.settings.namespace)
        .await
        .map_err(api_error("finish recreating pods"))?;

    let spec = &cppc.spec;
    ctx.log_verbosity.send_if_modified(|level| {
        let changed = *level != spec.log_verbosity;
        *level = spec.log_verbosity;
        changed
    });
    let mode = spec.placement_or_default().mode;
    let mut observed = Observed {
        rollouts: observe::rollouts(&ctx.client, &ctx.settings).await?,
        routing: observe::routing(&ctx.applier).await?,
        ..Observed::default()
    };
    let routing_before = observed.routing;

    // Pods and reports waiting for a component that is being removed.
    let waiting = if mode != PlacementMode::Scheduler && observed.exists(Component::Scheduler) {
        let name = deployed_scheduler_name(ctx).await?;
        observe::pods_waiting_for(&ctx.client, &name).await?
    } else {
        Vec::new()
    };
    observed.pods_waiting_for_scheduler = waiting.len();
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
    let expired = Expired {
        scheduler_pods: clock(ctx, Drain::SchedulerPods, !waiting.is_empty()),
        enoexec_reports: clock(ctx, Drain::EnoexecReports, !reports.is_empty()),
    };
    let plan = plan(spec, &observed, expired);

    // Past the drain timeout, release what still waits.
    if expired.scheduler_pods && !plan.scheduler {
        let why = format!(
            "the ClusterPodPlacementConfig switched to gate mode, and the multiarch scheduler is being removed after waiting {:?} for it to place this pod",
            ctx.drain_timeout
        );
        for pod in &waiting {
            drain::reset(&ctx.client, &ctx.events, &ctx.settings.namespace, pod, &why).await?;
            released(ctx, "recreated");
        }
    }
    if expired.enoexec_reports && !plan.enoexec_handler {
        uninstall::delete_reports(ctx, &reports).await?;
    }

    // Routing off first, so no pod is sent to what is about to change.
    if plan.routing.is_none() && routing_before.is_some() {
        delete(ctx, &webhook_configuration_key()).await?;
    }
    let webhook_tls = webhook_certificate(ctx, &authority, now).await?;
    let objects = desired::objects(&Wanted {
        settings: &ctx.settings,
        spec,
        plan: &plan,
        owner: &Owner {
            uid: cppc.uid().unwrap_or_default(),
        },
        ca_bundle: &CertificateAuthority::bundle_base64(&authority),
        webhook_tls: &webhook_tls,
        service_monitors: observe::service_monitors_installed(&ctx.client).await?,
    });
    let mut wanted = BTreeSet::new();
    for object in &objects {
        wanted.insert(ObjectKey::of(object));
        match ctx.applier.ensure(object).await? {
            Outcome::Unchanged => {}
            Outcome::Created => wrote(ctx, "created"),
            Outcome::Updated => wrote(ctx, "updated"),
        }
    }
    for key in every_key(&ctx.settings) {
        if !wanted.contains(&key) {
            delete(ctx, &key).await?;
        }
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
        previous: cppc.status.as_ref(),
        now: now_time(),
    });
    let progressing = is_true(&new_status, "Progressing");
    write_status(ctx, cppc, new_status).await?;
    Ok(if progressing || busy(&plan) {
        BUSY_REQUEUE
    } else {
        IDLE_REQUEUE
    })
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

fn wrote(ctx: &OperatorContext, action: &'static str) {
    ctx.metrics
        .writes
        .get_or_create(&ActionLabel { action })
        .inc();
}

pub(crate) fn released(ctx: &OperatorContext, action: &'static str) {
    ctx.metrics
        .pods_released
        .get_or_create(&ActionLabel { action })
        .inc();
}

pub(crate) async fn delete(ctx: &OperatorContext, key: &ObjectKey) -> Result<bool, ReconcileError> {
    let deleted = ctx.applier.delete_ours(key).await?;
    if deleted {
        info!(object = %key, "deleted");
        wrote(ctx, "deleted");
    }
    Ok(deleted)
}

/// The name the running scheduler places: its pods may name an older one than the spec.
async fn deployed_scheduler_name(ctx: &OperatorContext) -> Result<String, ReconcileError> {
    let key = ObjectKey {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some(ctx.settings.namespace.clone()),
        name: crate::install::SCHEDULER.into(),
    };
    let deployed = ctx.applier.get(&key).await?;
    let from_args = deployed.as_ref().and_then(|d| {
        d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .find_map(|a| a.strip_prefix("--scheduler-name="))
            .map(str::to_owned)
    });
    Ok(from_args.unwrap_or_else(|| multiarch_crd::names::DEFAULT_SCHEDULER_NAME.to_owned()))
}

/// The webhook's serving certificate: the stored one while it is right, else a new one.
async fn webhook_certificate(
    ctx: &OperatorContext,
    authority: &crate::certificates::Authority,
    now: SystemTime,
) -> Result<crate::certificates::SecretData, ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    let stored = secrets
        .get_opt(WEBHOOK_TLS_SECRET)
        .await
        .map_err(api_error("read the webhook's certificate"))?
        .map(|s| secret_data(&s));
    let (data, renewed) = ensure_serving(
        stored.as_ref(),
        authority,
        &webhook_dns_names(&ctx.settings),
        now,
    )?;
    if let Some(why) = renewed {
        info!(
            secret = WEBHOOK_TLS_SECRET,
            "serving certificate issued: {why}"
        );
    }
    if let Some(expiry) = expires_at(&data) {
        ctx.metrics
            .certificate_expiry
            .get_or_create(&SecretLabel {
                secret: WEBHOOK_TLS_SECRET,
            })
            .set(expiry);
    }
    Ok(data)
}

async fn ensure_finalizer(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
) -> Result<(), ReconcileError> {
    if cppc.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let mut finalizers = cppc.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .patch(
            SINGLETON_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": cppc.resource_version()}})),
        )
        .await
        .map_err(api_error("add the finalizer"))?;
    Ok(())
}

/// Now, to the second (as the API server stores times).
pub(crate) fn now_time() -> Time {
    let now = Timestamp::now().as_second();
    Time(Timestamp::from_second(now).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub(crate) fn is_true(status: &ClusterPodPlacementConfigStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Writes the status when it changed (a merge patch of the whole status).
pub(crate) async fn write_status(
    ctx: &OperatorContext,
    cppc: &ClusterPodPlacementConfig,
    status: ClusterPodPlacementConfigStatus,
) -> Result<(), ReconcileError> {
    if cppc.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut value = serde_json::to_value(&status).unwrap_or(Value::Null);
    // Absent fields are cleared, not left as they were.
    for field in [
        "conditions",
        "observedGeneration",
        "routing",
        "architectures",
    ] {
        if value.get(field).is_none() {
            value[field] = Value::Null;
        }
    }
    Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .patch_status(
            SINGLETON_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": value})),
        )
        .await
        .map_err(api_error("write the status"))?;
    Ok(())
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
