//! One pass of the gate controller over a gated pod, against the API server: a fresh
//! read of the pod and of the placement configuration, the images inspected when the
//! pure [`process`] needs them, its result written with one JSON patch of what it changed
//! (a conflict is retried from a fresh read), its events published. Failed inspections wait out a backoff.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use multiarch_crd::names::SCHEDULING_GATE;
use multiarch_runtime::{
    backoff::Backoff,
    event_reason::EventReason,
    event_recorder::pod_reference,
    placement_config::{CATCH_UP, CurrentError, PlacementConfigs, current_for},
};
use tracing::debug;

use super::{
    context::GateContext,
    inspect::inspect,
    process::{GateInputs, Inspection, architecture_rule, has_gate, needs_inspection, process},
    rule_override,
};

/// Passes over a pod that keeps changing under the controller before it waits for the
/// next change.
const CONFLICT_RETRIES: usize = 3;

/// Why a pass failed: the controller retries it with its backoff.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("the placement configuration: {0}")]
    Configuration(CurrentError),
}

enum Pass {
    Done,
    Conflict,
    /// Inspection failed for the `n`th time: try again after a backoff.
    Retry(u32),
}

/// The controller's reconcile: `pod` is the cached copy that triggered it.
pub(super) async fn reconcile(
    pod: Arc<Pod>,
    context: Arc<GateContext>,
) -> Result<Action, PassError> {
    if !has_gate(&pod) {
        return Ok(Action::await_change());
    }
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let key = key(&namespace, &name);
    if let Some(wait) = waiting(&context, &key) {
        return Ok(Action::requeue(wait));
    }
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let mut outcome = Ok(Action::await_change());
    for _ in 0..CONFLICT_RETRIES {
        match pass(&context, &pods, &namespace, &name).await {
            Ok(Pass::Done) => {
                backoffs(&context).remove(&key);
                break;
            }
            Ok(Pass::Conflict) => {
                debug!(%key, "the pod changed meanwhile; processing a fresh copy");
            }
            Ok(Pass::Retry(attempts)) => {
                let options = &context.options;
                let delay =
                    Backoff::new(options.initial_backoff, options.max_backoff).after(attempts);
                backoffs(&context).insert(key.clone(), Instant::now() + delay);
                outcome = Ok(Action::requeue(delay));
                break;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    context
        .metrics
        .seconds
        .observe(started.elapsed().as_secs_f64());
    outcome
}

fn backoffs(
    context: &GateContext,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Instant>> {
    context
        .backoff_until
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long the pod still waits out an inspection backoff.
fn waiting(context: &GateContext, key: &str) -> Option<Duration> {
    let until = *backoffs(context).get(key)?;
    until.checked_duration_since(Instant::now())
}

async fn pass(
    context: &GateContext,
    pods: &Api<Pod>,
    namespace: &str,
    name: &str,
) -> Result<Pass, PassError> {
    let Some(pod) = pods.get_opt(name).await? else {
        return Ok(Pass::Done);
    };
    if !has_gate(&pod) {
        return Ok(Pass::Done);
    }
    // The followed configuration once it has caught up with the API server for this
    // namespace: a config created just before the pod is never missed, and no config's
    // rules are read or compiled per pod.
    let read = current_for(&context.client, namespace, &context.configs, CATCH_UP).await;
    let configs = match read {
        Ok(configs) => {
            unreadable(context).remove(&key(namespace, name));
            configs
        }
        Err(error) => configuration_unreadable(context, &pod, error).await?,
    };
    let spec = configs.cluster_or_default();
    let fallback = spec.fallback_architecture.map(|a| a.as_str().to_owned());
    let inputs = GateInputs {
        cluster_plugins: spec.plugins.as_ref(),
        configs: &configs.pod_configs,
        fallback_architecture: fallback.as_deref(),
        own_namespace: &context.options.own_namespace,
        max_attempts: context.options.max_attempts,
        architecture_rules: &configs.architecture_rules,
    };
    let rule = architecture_rule(&pod, &inputs);
    let inspection = if needs_inspection(&pod, &inputs) {
        inspect(context, &pod).await
    } else {
        Inspection::NotNeeded
    };
    if matches!(inspection, Inspection::Failed(_)) {
        context.metrics.failed_inspections.inc();
    }
    let Some(done) = process(&pod, &inputs, inspection) else {
        return Ok(Pass::Done);
    };
    match pods
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Json::<()>(changes(&pod, &done.pod)),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Pass::Conflict),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Pass::Done),
        Err(e) => {
            // MTO's event for a refused write: the pod stays gated and the pass is
            // retried with backoff (the caller's), so the pod's events say why it waits.
            if !has_gate(&done.pod) {
                let note = format!(
                    "Failed to remove the scheduling gate \"{SCHEDULING_GATE}\": {}",
                    api_answer(&e)
                );
                let reference = pod_reference(namespace, name, pod.uid());
                context
                    .publish(
                        &reference,
                        EventReason::ArchAwareSchedGateRemovalFailed,
                        note,
                    )
                    .await;
            }
            return Err(e.into());
        }
    }
    context.metrics.processed.inc();
    let reference = pod_reference(namespace, name, pod.uid());
    for event in done.events {
        context
            .publish(&reference, event.reason, event.message)
            .await;
    }
    if let Some(rule) = rule {
        rule_override::report(context, &pod, &reference, &rule).await;
    }
    Ok(match done.retry {
        Some(attempts) => Pass::Retry(attempts),
        None => Pass::Done,
    })
}

/// The pass's changes as a JSON patch on the pod as read: only what the pass changed is
/// written (a whole-object PUT of the typed pod would drop fields newer than the
/// controller's API types), and the resourceVersion read is a precondition (a pod changed
/// meanwhile is a conflict, processed again from a fresh read).
pub(super) fn changes(read: &Pod, processed: &Pod) -> json_patch::Patch {
    let before = serde_json::to_value(read).unwrap_or_default();
    let after = serde_json::to_value(processed).unwrap_or_default();
    let mut operations = vec![json_patch::PatchOperation::Replace(
        json_patch::ReplaceOperation {
            path: "/metadata/resourceVersion".parse().unwrap_or_default(),
            value: serde_json::Value::String(read.resource_version().unwrap_or_default()),
        },
    )];
    operations.extend(json_patch::diff(&before, &after).0);
    json_patch::Patch(operations)
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn unreadable(
    context: &GateContext,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, u32>> {
    context
        .unreadable_configuration
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Pods tracked at once; beyond it the oldest failures are forgotten (they start over
/// at one), so that pods deleted while failing cannot grow the map.
const MAX_TRACKED: usize = 10_000;

/// A failed configuration read is never read as "no configuration": the pass fails and
/// the controller retries it with backoff, the pod keeps its gate and is told why. After
/// `max_attempts` failures for the pod, MTO's fail-open rule applies to the
/// configuration only: the pod goes on without preferences or fallback, but still with
/// the architectures its images require.
async fn configuration_unreadable(
    context: &GateContext,
    pod: &Pod,
    error: CurrentError,
) -> Result<PlacementConfigs, PassError> {
    context.metrics.configuration_read_errors.inc();
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let failures = {
        let mut map = unreadable(context);
        if map.len() >= MAX_TRACKED {
            map.clear();
        }
        let failures = map.entry(key(&namespace, &name)).or_insert(0);
        *failures += 1;
        *failures
    };
    let max = context.options.max_attempts.max(1);
    let cause = match &error {
        CurrentError::Api(e) => api_answer(e),
        other => other.to_string(),
    };
    let (reason, note, outcome) = if failures < max {
        (
            EventReason::ArchAwareConfigurationUnreadable,
            format!(
                "cannot read the placement configuration (attempt {failures} of {max}; the gate stays until it is read): {cause}"
            ),
            Err(PassError::Configuration(error)),
        )
    } else {
        unreadable(context).remove(&key(&namespace, &name));
        (
            EventReason::ArchAwarePlacedWithoutConfiguration,
            format!(
                "cannot read the placement configuration after {failures} attempts; placing by the images' architectures without preferences or fallback: {cause}"
            ),
            Ok(PlacementConfigs::default()),
        )
    };
    tracing::warn!(pod = %key(&namespace, &name), failures, "{note}");
    let reference = pod_reference(&namespace, &name, pod.uid());
    context.publish(&reference, reason, note).await;
    outcome
}

/// The API server's answer, as an event's note quotes it.
fn api_answer(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}
