//! The journal of pods being recreated: before the operator deletes a pending pod that
//! has no controller, it writes the copy it will create into a ConfigMap in its own
//! namespace, so that a crash between the delete and the create loses nothing; each pass
//! finishes what a previous one started. A copy that cannot be created (the API server
//! refuses it long after the dry run passed) stays in the journal and is reported; it
//! never stops the rest of the reconcile.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ObjectMeta, PostParams},
};
use multiarch_runtime::{event_reason::EventReason, event_recorder::EventRecorder};
use serde_json::Value;
use tracing::{info, warn};

use crate::{act::events, observe::reads::JOURNAL_LABEL, pod_ref::PodRef};

const COPY_KEY: &str = "pod.json";

/// Pods as the API server sends them: every field kept, known to the operator's API
/// types or not (a pod from a newer release is recreated whole).
pub fn pods_as_sent(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::erase::<Pod>(&()),
    )
}

fn entry_name(uid: &str) -> String {
    format!("multiarch-recreate-{uid}")
}

/// Writes the copy of `pod` that will be created (kept if it is already there).
pub async fn record(
    client: &kube::Client,
    own_namespace: &str,
    pod: &PodRef,
    copy: &Value,
) -> Result<(), kube::Error> {
    let entry = ConfigMap {
        metadata: ObjectMeta {
            name: Some(entry_name(&pod.uid)),
            labels: Some(BTreeMap::from([(
                JOURNAL_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(COPY_KEY.to_owned(), copy.to_string())])),
        ..ConfigMap::default()
    };
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    match journal.create(&PostParams::default(), &entry).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Drops the entry of a pod that was not deleted after all.
pub async fn forget(
    client: &kube::Client,
    own_namespace: &str,
    pod: &PodRef,
) -> Result<(), kube::Error> {
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    match journal
        .delete(&entry_name(&pod.uid), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the pod `pod`'s entry holds, then removes the entry.
pub async fn replay_one(
    client: &kube::Client,
    recorder: &EventRecorder,
    own_namespace: &str,
    pod: &PodRef,
    why: &str,
) -> Result<(), kube::Error> {
    let journal: Api<ConfigMap> = Api::namespaced(client.clone(), own_namespace);
    match journal.get_opt(&entry_name(&pod.uid)).await? {
        Some(entry) => replay(client, recorder, own_namespace, &entry, why).await,
        None => Ok(()),
    }
}

/// Creates the pod an entry holds (unless its name is taken again), then removes the
/// entry.
async fn replay(
    client: &kube::Client,
    recorder: &EventRecorder,
    own_namespace: &str,
    entry: &ConfigMap,
    why: &str,
) -> Result<(), kube::Error> {
    let copy: Option<Value> = entry
        .data
        .as_ref()
        .and_then(|d| d.get(COPY_KEY))
        .and_then(|text| serde_json::from_str(text).ok());
    if let Some(copy) = copy {
        let namespace = copy["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // Raw JSON: every field the pod had is created again, known to the operator or not.
        let api = pods_as_sent(client, &namespace);
        let copy: DynamicObject = serde_json::from_value(copy).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &copy).await {
            Ok(created) => {
                let created = serde_json::to_value(&created).unwrap_or(Value::Null);
                let pod = PodRef {
                    namespace,
                    name: created["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    uid: created["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                };
                info!(pod = %pod, "recreated for the default scheduler: {why}");
                events::on_pod(
                    recorder,
                    &pod,
                    EventReason::RecreatedForDefaultScheduler,
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

/// A journal entry whose pod could not be created this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfinished {
    /// The ConfigMap holding the copy, in the operator's namespace.
    pub entry: String,
    pub error: String,
}

/// Finishes the recreations a previous pass started (a crash between delete and
/// create): the pods `entries` hold. One entry that fails is reported and left; the
/// others go on.
pub async fn finish(
    client: &kube::Client,
    recorder: &EventRecorder,
    own_namespace: &str,
    entries: &[ConfigMap],
) -> Vec<Unfinished> {
    let mut unfinished = Vec::new();
    for entry in entries {
        let why = "the scheduler it waited for was removed";
        if let Err(e) = replay(client, recorder, own_namespace, entry, why).await {
            let error = match &e {
                kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
                other => other.to_string(),
            };
            warn!(entry = %entry.name_any(), %error, "cannot recreate a journaled pod");
            unfinished.push(Unfinished {
                entry: entry.name_any(),
                error,
            });
        }
    }
    unfinished
}
