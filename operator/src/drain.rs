//! Releasing pods that would be stranded, when the component they wait for goes away
//! (uninstall, a mode switch) and the drain timeout has passed: a gated pod loses the
//! gate; a pending pod that names the scheduler is recreated for the default scheduler
//! (`schedulerName` cannot be changed): deleted, so that its controller recreates it
//! through admission, or, a pod without a controller, recreated by the operator from a
//! copy journaled in a ConfigMap first, so a crash between the delete and the create
//! loses nothing. Each pod gets an event saying why.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions},
};
use multiarch_crd::names::{LABEL_SCHEDULING_GATE, SCHEDULING_GATE};
use multiarch_runtime::pod_events::{PodEvents, Severity, pod_reference};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::observe::PodRef;

/// Label of the ConfigMaps that journal a pod being recreated.
const JOURNAL_LABEL: &str = "multiarch.openshift.io/recreated-pod";
/// Annotation on a recreated pod: the UID of the pod it replaces.
pub const RECREATED_FROM: &str = "multiarch.openshift.io/recreated-from";

#[derive(Debug, thiserror::Error)]
#[error("cannot release pod {pod}: {source}")]
pub struct DrainError {
    pub pod: String,
    pub source: kube::Error,
}

fn failed(pod: &PodRef) -> impl FnOnce(kube::Error) -> DrainError + '_ {
    move |source| DrainError {
        pod: format!("{}/{}", pod.namespace, pod.name),
        source,
    }
}

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

/// Removes multiarch's scheduling gate from `pod` (no architecture constraint is added:
/// the gate controller is gone), with an event saying why.
pub async fn ungate(
    client: &kube::Client,
    events: &PodEvents,
    pod: &PodRef,
    why: &str,
) -> Result<(), DrainError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let Some(mut current) = api.get_opt(&pod.name).await.map_err(failed(pod))? else {
        return Ok(());
    };
    if current.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
        return Ok(());
    }
    if let Some(gates) = current
        .spec
        .as_mut()
        .and_then(|s| s.scheduling_gates.as_mut())
    {
        gates.retain(|g| g.name != SCHEDULING_GATE);
    }
    current
        .labels_mut()
        .insert(LABEL_SCHEDULING_GATE.into(), "removed".into());
    match api
        .replace(&pod.name, &PostParams::default(), &current)
        .await
    {
        Ok(_) => {}
        // Gone, or changed meanwhile: the next pass sees it afresh.
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(failed(pod)(e)),
    }
    info!(pod = %format!("{}/{}", pod.namespace, pod.name), "scheduling gate removed: {why}");
    let note = format!(
        "Removed the {SCHEDULING_GATE} scheduling gate without an architecture constraint: {why}"
    );
    publish(events, pod, "ArchAwareSchedGateRemovedByOperator", note).await;
    Ok(())
}

async fn publish(events: &PodEvents, pod: &PodRef, reason: &str, note: String) {
    let reference = pod_reference(&pod.namespace, &pod.name, Some(pod.uid.clone()));
    if let Err(e) = events
        .publish(&reference, Severity::Warning, reason, "Release", note)
        .await
    {
        warn!(pod = %pod.name, error = %e, "cannot publish the event");
    }
}

/// The pod as it is recreated: same name, labels, annotations and spec, for the default
/// scheduler, without what the API server and the scheduler wrote.
pub fn recreated(pod: &Pod) -> Value {
    let mut copy = serde_json::to_value(pod).unwrap_or(Value::Null);
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
    copy["metadata"]["annotations"][RECREATED_FROM] = json!(pod.metadata.uid);
    copy["spec"]["schedulerName"] = json!("default-scheduler");
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    copy
}

fn journal_name(pod: &PodRef) -> String {
    format!("multiarch-recreate-{}", pod.uid)
}

/// Releases a pending pod that names a scheduler which goes away.
pub async fn reset(
    client: &kube::Client,
    events: &PodEvents,
    own_namespace: &str,
    pod: &PodRef,
    why: &str,
) -> Result<(), DrainError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let Some(current) = api.get_opt(&pod.name).await.map_err(failed(pod))? else {
        return Ok(());
    };
    if current.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
        return Ok(());
    }
    // Bound since it was listed: it no longer waits for anyone.
    if current.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
        return Ok(());
    }
    let controller = current
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{} {}", o.kind, o.name));
    let delete = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    if let Some(controller) = controller {
        publish(
            events,
            pod,
            "RecreatedForDefaultScheduler",
            format!("Deleted so that {controller} recreates it for the default scheduler: {why}"),
        )
        .await;
        return match api.delete(&pod.name, &delete).await {
            Ok(_) => Ok(()),
            Err(e) if gone(&e) => Ok(()),
            Err(e) => Err(failed(pod)(e)),
        };
    }
    // A pod without a controller: journal the copy, delete, create, clear the journal.
    let copy = recreated(&current);
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    let entry = ConfigMap {
        metadata: ObjectMeta {
            name: Some(journal_name(pod)),
            labels: Some(BTreeMap::from([(
                JOURNAL_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("pod.json".to_owned(), copy.to_string())])),
        ..ConfigMap::default()
    };
    match journal.create(&PostParams::default(), &entry).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(failed(pod)(e)),
    }
    match api.delete(&pod.name, &delete).await {
        Ok(_) => {}
        Err(e) if gone(&e) => {}
        Err(e) => return Err(failed(pod)(e)),
    }
    replay(client, events, own_namespace, &entry, why)
        .await
        .map_err(failed(pod))
}

/// Creates the pod a journal entry holds (unless its name is taken again), then removes
/// the entry.
async fn replay(
    client: &kube::Client,
    events: &PodEvents,
    own_namespace: &str,
    entry: &ConfigMap,
    why: &str,
) -> Result<(), kube::Error> {
    let copy: Option<Pod> = entry
        .data
        .as_ref()
        .and_then(|d| d.get("pod.json"))
        .and_then(|text| serde_json::from_str(text).ok());
    if let Some(copy) = copy {
        let namespace = copy.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        match api.create(&PostParams::default(), &copy).await {
            Ok(created) => {
                let pod = PodRef {
                    namespace,
                    name: created.name_any(),
                    uid: created.metadata.uid.clone().unwrap_or_default(),
                };
                info!(pod = %format!("{}/{}", pod.namespace, pod.name), "recreated for the default scheduler: {why}");
                publish(
                    events,
                    &pod,
                    "RecreatedForDefaultScheduler",
                    format!("Recreated for the default scheduler: {why}"),
                )
                .await;
            }
            // The name was taken meanwhile: that pod stands.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    } else {
        warn!(entry = %entry.name_any(), "unreadable pod journal entry dropped");
    }
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    match journal
        .delete(&entry.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Finishes recreations a previous run started (a crash between delete and create).
pub async fn replay_journal(
    client: &kube::Client,
    events: &PodEvents,
    own_namespace: &str,
) -> Result<usize, kube::Error> {
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    let entries = journal
        .list(&ListParams::default().labels(&format!("{JOURNAL_LABEL}=true")))
        .await?;
    for entry in &entries.items {
        replay(
            client,
            events,
            own_namespace,
            entry,
            "the scheduler it waited for was removed",
        )
        .await?;
    }
    Ok(entries.items.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recreated_pod_keeps_its_spec_for_the_default_scheduler() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "9",
                         "labels": {"app": "web"}, "creationTimestamp": "2026-11-23T06:28:23Z"},
            "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"},
        }))
        .unwrap();
        let copy = recreated(&pod);
        assert_eq!(copy["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(copy["metadata"]["annotations"][RECREATED_FROM], "u-1");
        assert_eq!(copy["metadata"]["labels"]["app"], "web");
        assert!(copy["metadata"]["uid"].is_null() && copy["metadata"]["resourceVersion"].is_null());
        assert!(copy["status"].is_null());
        assert_eq!(copy["spec"]["containers"][0]["image"], "i");
    }
}
