//! What every reconcile step shares: its error, when to look again, the finalizer, and
//! the writes it makes and counts (deletes, released pods, the status).

use std::time::Duration;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigStatus, names::SINGLETON_NAME,
};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::{
    apply::{ApplyError, ObjectKey},
    authority::AuthorityError,
    certificates::CertificateError,
    context::OperatorContext,
    drain::DrainError,
    metrics::{ActionLabel, StepLabel},
    observe::ObserveError,
};

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
    #[error(transparent)]
    Flags(#[from] multiarch_flags::FlagsError),
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        source: kube::Error,
    },
}

/// What failed in a pass without stopping it: the other steps, the status and the
/// certificates go on; each failure is counted and named in the Degraded condition.
#[derive(Debug, Default)]
pub struct StepFailures(Vec<String>);

impl StepFailures {
    pub fn record(
        &mut self,
        ctx: &OperatorContext,
        step: &'static str,
        error: impl std::fmt::Display,
    ) {
        warn!(step, %error, "reconcile step failed; the others go on");
        ctx.metrics
            .step_failures
            .get_or_create(&StepLabel { step })
            .inc();
        self.0.push(format!("{step}: {error}"));
    }

    /// Runs `result`'s step: its value, or `None` with the failure recorded.
    pub fn keep<T, E: std::fmt::Display>(
        &mut self,
        ctx: &OperatorContext,
        step: &'static str,
        result: Result<T, E>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.record(ctx, step, e);
                None
            }
        }
    }

    pub fn messages(&self) -> &[String] {
        &self.0
    }
}

pub(crate) fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
    move |source| ReconcileError::Api { what, source }
}

pub(crate) fn wrote(ctx: &OperatorContext, action: &'static str) {
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

/// Now, to the second (as the API server stores times).
pub(crate) fn now_time() -> Time {
    let now = Timestamp::now().as_second();
    Time(Timestamp::from_second(now).unwrap_or(Timestamp::UNIX_EPOCH))
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
