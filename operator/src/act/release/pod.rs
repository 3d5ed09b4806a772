//! Releasing pods that would be stranded, when the component they wait for goes away
//! (uninstall, a mode switch, a rename) and the drain timeout has passed: a gated pod
//! loses the gate; a pending pod that names the scheduler is recreated for the default
//! scheduler (`schedulerName` cannot be changed): deleted, so that its controller
//! recreates it through admission, or, a pod without a controller, recreated by the
//! operator from a copy journaled first (`journal`), so a crash between the delete and
//! the create loses nothing. Each pod gets an event saying why.
//!
//! Every write is precise: the gate is removed by a JSON patch of the one entry (never a
//! whole-object PUT, which would drop fields newer than the operator's API types), and
//! both writes carry the resourceVersion read, so a pod that changed meanwhile (bound,
//! relabelled by the gate controller) is read again, not overwritten or deleted. No pod
//! with a node is ever deleted, and none is deleted before a dry run shows that the API
//! server would let it be created again (or that only the namespace's quota, which the
//! original's deletion frees, stands in the way).

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions},
};
use multiarch_crd::names::{LABEL_SCHEDULING_GATE, SCHEDULING_GATE};
use multiarch_runtime::{event_reason::EventReason, event_recorder::EventRecorder};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::{
    act::{
        events::on_pod as publish,
        journal::{self, pods_as_sent},
    },
    pod_ref::PodRef,
};
use multiarch_crd::names::RECREATED_FROM;

/// Fresh reads of a pod that keeps changing under a release before the pass gives up on
/// it (the next pass tries again).
const CONFLICT_RETRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
#[error("cannot release pod {pod}: {source}")]
pub struct DrainError {
    pub pod: String,
    pub source: kube::Error,
}

pub(crate) fn failed(pod: &PodRef) -> impl FnOnce(kube::Error) -> DrainError + '_ {
    move |source| DrainError {
        pod: pod.to_string(),
        source,
    }
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// What a release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// Ungated or recreated.
    Done,
    /// Nothing to do: gone, replaced, bound, or no longer gated.
    Skipped,
    /// The API server would not create the pod again (a policy, a missing
    /// ServiceAccount, a terminating namespace): the pod is left as it is, for a person.
    Refused(String),
}

/// The pod as read now, if it is still the one listed.
async fn current(api: &Api<Pod>, pod: &PodRef) -> Result<Option<Pod>, DrainError> {
    let found = api.get_opt(&pod.name).await.map_err(failed(pod))?;
    Ok(found.filter(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str())))
}

/// The JSON patch that removes multiarch's gate from `pod` as read (its resourceVersion
/// a precondition) and marks it removed; `None` without the gate.
pub fn ungate_patch(pod: &Pod) -> Option<json_patch::Patch> {
    let index = pod
        .spec
        .as_ref()?
        .scheduling_gates
        .as_ref()?
        .iter()
        .position(|g| g.name == SCHEDULING_GATE)?;
    let label = format!(
        "/metadata/labels/{}",
        LABEL_SCHEDULING_GATE.replace('/', "~1")
    );
    let mut operations = vec![
        json!({"op": "replace", "path": "/metadata/resourceVersion", "value": pod.resource_version()}),
        json!({"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": SCHEDULING_GATE}),
        json!({"op": "remove", "path": format!("/spec/schedulingGates/{index}")}),
    ];
    if pod.metadata.labels.is_none() {
        operations.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
    }
    operations.push(json!({"op": "add", "path": label, "value": "removed"}));
    serde_json::from_value(Value::Array(operations)).ok()
}

/// Removes multiarch's scheduling gate from `pod` (no architecture constraint is added:
/// the gate controller is gone), with an event saying why.
pub async fn ungate(
    client: &kube::Client,
    events: &EventRecorder,
    pod: &PodRef,
    why: &str,
) -> Result<Released, DrainError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let mut last_conflict = None;
    for _ in 0..CONFLICT_RETRIES {
        let Some(current) = current(&api, pod).await? else {
            return Ok(Released::Skipped);
        };
        let Some(patch) = ungate_patch(&current) else {
            return Ok(Released::Skipped);
        };
        match api
            .patch(
                &pod.name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
        {
            Ok(_) => {
                info!(pod = %pod, "scheduling gate removed: {why}");
                let note = format!(
                    "Removed the {SCHEDULING_GATE} scheduling gate without an architecture constraint: {why}"
                );
                publish(
                    events,
                    pod,
                    EventReason::ArchAwareSchedGateRemovedByOperator,
                    note,
                )
                .await;
                return Ok(Released::Done);
            }
            Err(e) if code(&e) == Some(404) => return Ok(Released::Skipped),
            // Changed since it was read (the gate controller relabels pods it retries):
            // read it again.
            Err(e) if code(&e) == Some(409) => last_conflict = Some(e),
            Err(e) => return Err(failed(pod)(e)),
        }
    }
    match last_conflict {
        Some(e) => Err(failed(pod)(e)),
        None => Ok(Released::Skipped),
    }
}

/// The pod as it is recreated: same name, labels, annotations and spec, for the default
/// scheduler, without what the API server and the scheduler wrote. Built from the pod as
/// the API server sent it, so fields newer than the operator's API types are kept.
pub fn recreated(pod: &Value) -> Value {
    let mut copy = pod.clone();
    copy.as_object_mut().map(|o| o.remove("status"));
    if let Some(meta) = copy["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generateName",
        ] {
            meta.remove(field);
        }
    }
    copy["metadata"]["annotations"][RECREATED_FROM] = pod["metadata"]["uid"].clone();
    copy["spec"]["schedulerName"] = json!("default-scheduler");
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    copy
}

/// Whether the API server would create `copy` now: a dry run under a generated name
/// (the pod itself still holds the real one), through admission and validation.
/// A pod its controller recreates is probed without its owner references: the operator
/// never creates it, and may not be allowed to set `blockOwnerDeletion` on the controller
/// (OwnerReferencesPermissionEnforcement, on by default in OpenShift).
async fn creatable(
    api: &Api<DynamicObject>,
    copy: &Value,
    by_controller: bool,
) -> Result<(), kube::Error> {
    let mut probe = copy.clone();
    let name = copy["metadata"]["name"].as_str().unwrap_or("pod");
    if let Some(meta) = probe["metadata"].as_object_mut() {
        meta.remove("name");
        if by_controller {
            meta.remove("ownerReferences");
        }
        // A generated name is at most 63 characters; the base is cut as the server cuts it.
        let base: String = name.chars().take(57).collect();
        meta.insert("generateName".into(), json!(format!("{base}-")));
    }
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe: DynamicObject = serde_json::from_value(probe).map_err(kube::Error::SerdeError)?;
    api.create(&dry_run, &probe).await.map(|_| ())
}

/// A refusal that deleting the original lifts: the namespace's ResourceQuota is used up,
/// the original counting in it (the quota check runs last: every other check passed).
/// The copy takes the original's place, so the release goes on; a journaled copy whose
/// create the quota still refuses (its original not yet gone) is created again at the
/// next pass.
fn over_quota(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("exceeded quota"))
}

/// Releases a pending pod that names a scheduler which goes away.
pub async fn reset(
    client: &kube::Client,
    events: &EventRecorder,
    own_namespace: &str,
    pod: &PodRef,
    why: &str,
) -> Result<Released, DrainError> {
    let raw = pods_as_sent(client, &pod.namespace);
    let mut last_conflict = None;
    for _ in 0..CONFLICT_RETRIES {
        let Some(current) = still_waiting(&raw, pod).await? else {
            return Ok(Released::Skipped);
        };
        let copy = recreated(&current);
        let controller = controller_of(&current);
        if let Some(refusal) = refusal(&raw, &copy, controller.is_some(), pod).await? {
            warn!(pod = %pod, "left waiting: the API server would not create it again: {refusal}");
            let note = format!(
                "Left as it is ({why}): the API server refuses to create this pod again, so it is not deleted; delete it when its creation is allowed again, or recreate it yourself: {refusal}"
            );
            publish(
                events,
                pod,
                EventReason::CannotRecreateForDefaultScheduler,
                note,
            )
            .await;
            return Ok(Released::Refused(refusal));
        }
        // A pod without a controller: journal the copy, delete, create, clear.
        if controller.is_none() {
            journal::record(client, own_namespace, pod, &copy)
                .await
                .map_err(failed(pod))?;
        }
        match delete_as_read(client, pod, &current).await {
            Err(e) if code(&e) == Some(404) => {
                journal::forget(client, own_namespace, pod)
                    .await
                    .map_err(failed(pod))?;
                return Ok(Released::Skipped);
            }
            Err(e) if code(&e) == Some(409) => {
                journal::forget(client, own_namespace, pod)
                    .await
                    .map_err(failed(pod))?;
                last_conflict = Some(e);
            }
            Err(e) => return Err(failed(pod)(e)),
            Ok(()) => {
                if let Some(controller) = &controller {
                    info!(pod = %pod, "deleted for {controller} to recreate: {why}");
                }
                return recreated_by(client, events, own_namespace, pod, controller, why).await;
            }
        }
    }
    match last_conflict {
        Some(e) => Err(failed(pod)(e)),
        None => Ok(Released::Skipped),
    }
}

/// The pod as read now, if it is still the one listed and still waits: unbound and not
/// being deleted (a pod bound since it was listed no longer waits for anyone, and is
/// never deleted).
async fn still_waiting(
    raw: &Api<DynamicObject>,
    pod: &PodRef,
) -> Result<Option<Value>, DrainError> {
    let Some(current) = raw.get_opt(&pod.name).await.map_err(failed(pod))? else {
        return Ok(None);
    };
    let current = serde_json::to_value(&current).unwrap_or(Value::Null);
    let same = current["metadata"]["uid"].as_str() == Some(pod.uid.as_str());
    let bound = current["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let going = !current["metadata"]["deletionTimestamp"].is_null();
    Ok((same && !bound && !going).then_some(current))
}

/// The pod's controller as events name it (`ReplicaSet web`), if it has one.
fn controller_of(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == json!(true))
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap_or(""),
                o["name"].as_str().unwrap_or("")
            )
        })
}

/// Why the API server would not create `copy` again (`None`: it would, or only the
/// quota the original's deletion frees stands in the way). Its own failures (5xx, 429,
/// no answer) are errors, tried again next pass.
async fn refusal(
    raw: &Api<DynamicObject>,
    copy: &Value,
    by_controller: bool,
    pod: &PodRef,
) -> Result<Option<String>, DrainError> {
    let Err(e) = creatable(raw, copy, by_controller).await else {
        return Ok(None);
    };
    if over_quota(&e) {
        return Ok(None);
    }
    if code(&e).is_none_or(|c| c >= 500 || c == 429) {
        return Err(failed(pod)(e));
    }
    Ok(Some(match &e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }))
}

/// Deletes the pod as read: its uid and resourceVersion are preconditions, so a pod
/// that changed meanwhile (bound) is read again, never deleted.
async fn delete_as_read(
    client: &kube::Client,
    pod: &PodRef,
    current: &Value,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let version = current["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned);
    let delete = DeleteParams {
        // Unbound: the API server deletes it at once; no grace is forced on anything.
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: version,
        }),
        ..DeleteParams::default()
    };
    pods.delete(&pod.name, &delete).await.map(|_| ())
}

/// After the delete: the controller recreates the pod, or the operator does from the
/// journal.
async fn recreated_by(
    client: &kube::Client,
    events: &EventRecorder,
    own_namespace: &str,
    pod: &PodRef,
    controller: Option<String>,
    why: &str,
) -> Result<Released, DrainError> {
    match controller {
        Some(controller) => {
            let note = format!(
                "Deleted so that {controller} recreates it for the default scheduler: {why}"
            );
            publish(events, pod, EventReason::RecreatedForDefaultScheduler, note).await;
            Ok(Released::Done)
        }
        None => journal::replay_one(client, events, own_namespace, pod, why)
            .await
            .map(|()| Released::Done)
            .map_err(failed(pod)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recreated_pod_keeps_its_spec_and_unknown_fields_for_the_default_scheduler() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "9",
                         "labels": {"app": "web"}, "creationTimestamp": "2026-11-23T06:28:23Z"},
            "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "c", "image": "i"}],
                     "fieldFromANewerRelease": {"kept": true}},
            "status": {"phase": "Pending"},
        });
        let copy = recreated(&pod);
        assert_eq!(copy["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(copy["metadata"]["annotations"][RECREATED_FROM], "u-1");
        assert_eq!(copy["metadata"]["labels"]["app"], "web");
        assert!(copy["metadata"]["uid"].is_null() && copy["metadata"]["resourceVersion"].is_null());
        assert!(copy["status"].is_null());
        assert_eq!(copy["spec"]["containers"][0]["image"], "i");
        assert_eq!(copy["spec"]["fieldFromANewerRelease"]["kept"], true);
    }

    #[test]
    fn the_gate_patch_removes_only_multiarch_s_gate_of_the_pod_as_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "resourceVersion": "41"},
            "spec": {"containers": [], "schedulingGates": [{"name": "other"}, {"name": SCHEDULING_GATE}]},
        }))
        .unwrap();
        let patch = serde_json::to_value(ungate_patch(&pod).unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/spec/schedulingGates/1/name", "value": SCHEDULING_GATE},
                {"op": "remove", "path": "/spec/schedulingGates/1"},
                {"op": "add", "path": "/metadata/labels", "value": {}},
                {"op": "add", "path": "/metadata/labels/multiarch.openshift.io~1scheduling-gate", "value": "removed"},
            ])
        );
        let ungated: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"containers": [], "schedulingGates": [{"name": "other"}]},
        }))
        .unwrap();
        assert!(ungate_patch(&ungated).is_none());
    }
}
