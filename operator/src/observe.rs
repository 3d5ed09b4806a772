//! What the reconciler reads from the cluster: the operands' rollouts, where the webhook
//! configuration routes pods, the pods that would be stranded, the exec-format-error
//! reports left, the PodPlacementConfigs. Reads only.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::Pod,
};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
    core::PartialObjectMeta,
};
use multiarch_crd::{
    ENoExecEvent, PlacementMode, PodPlacementConfig,
    names::{KUBE_SCHEDULER_NAME, LABEL_MISPLACED, LABEL_SCHEDULING_GATE},
};
use serde_json::Value;
use tracing::warn;

use crate::{
    apply::{Applier, ApplyError},
    desired::{OptionalApis, webhook_configuration_key},
    install::{
        ENOEXEC_DAEMON, ENOEXEC_HANDLER, GATE_CONTROLLER, INSPECTOR, SCHEDULER, Settings, WEBHOOK,
        review_path,
    },
    plan::{Component, Rollout},
};

#[derive(Debug, thiserror::Error)]
#[error("cannot read {what}: {source}")]
pub struct ObserveError {
    pub what: String,
    pub source: kube::Error,
}

fn read_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ObserveError {
    let what = what.into();
    move |source| ObserveError { what, source }
}

/// A Deployment's rollout, as MTO judges it: available with one replica, rolled out
/// when every replica is updated, ready and available for the current generation.
pub fn deployment_rollout(deployment: &Deployment) -> Rollout {
    let want = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    let current_generation =
        status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0);
    let rolled_out = updated == want
        && ready == want
        && available == want
        && status.replicas.unwrap_or(0) == want
        && status.unavailable_replicas.unwrap_or(0) == 0
        && current_generation;
    let mut detail = format!(
        "Deployment {}/{} has {available} of {want} replicas available",
        deployment.namespace().unwrap_or_default(),
        deployment.name_any()
    );
    if updated != want {
        detail.push_str(&format!(", {updated} updated"));
    }
    // The controller's own words on why, when it gives them.
    if let Some(problem) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.status == "False" && (c.type_ == "Available" || c.type_ == "Progressing"))
    {
        detail.push_str(&format!(
            " ({}: {})",
            problem.reason.as_deref().unwrap_or(&problem.type_),
            problem.message.as_deref().unwrap_or("")
        ));
    }
    Rollout {
        exists: true,
        available: available > 0,
        rolled_out,
        detail,
    }
}

/// A DaemonSet's rollout: available when a pod is (or no node wants one), rolled out
/// when every node's pod is updated and available.
pub fn daemon_set_rollout(daemon_set: &DaemonSet) -> Rollout {
    let status = daemon_set.status.clone().unwrap_or_default();
    let desired = status.desired_number_scheduled;
    let available = status.number_available.unwrap_or(0);
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let current_generation =
        status.observed_generation.unwrap_or(0) >= daemon_set.metadata.generation.unwrap_or(0);
    Rollout {
        exists: true,
        available: available > 0 || desired == 0,
        rolled_out: updated == desired && available == desired && current_generation,
        detail: format!(
            "DaemonSet {}/{} has {available} of {desired} pods available, {updated} updated",
            daemon_set.namespace().unwrap_or_default(),
            daemon_set.name_any()
        ),
    }
}

/// The rollout of every operand that exists.
pub async fn rollouts(
    client: &kube::Client,
    settings: &Settings,
) -> Result<BTreeMap<Component, Rollout>, ObserveError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &settings.namespace);
    let mut out = BTreeMap::new();
    for (component, name) in [
        (Component::Inspector, INSPECTOR),
        (Component::Webhook, WEBHOOK),
        (Component::GateController, GATE_CONTROLLER),
        (Component::Scheduler, SCHEDULER),
        (Component::EnoexecHandler, ENOEXEC_HANDLER),
    ] {
        if let Some(d) = deployments
            .get_opt(name)
            .await
            .map_err(read_error(format!("Deployment {name}")))?
        {
            out.insert(component, deployment_rollout(&d));
        }
    }
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), &settings.namespace);
    if let Some(ds) = daemon_sets
        .get_opt(ENOEXEC_DAEMON)
        .await
        .map_err(read_error(format!("DaemonSet {ENOEXEC_DAEMON}")))?
    {
        out.insert(Component::EnoexecDaemon, daemon_set_rollout(&ds));
    }
    Ok(out)
}

/// The mode the mutating webhook configuration routes to (by its path), if it exists
/// and is the operator's.
pub async fn routing(applier: &Applier) -> Result<Option<PlacementMode>, ApplyError> {
    let Some(stored) = applier.get(&webhook_configuration_key()).await? else {
        return Ok(None);
    };
    Ok(routing_of(&stored))
}

pub fn routing_of(configuration: &Value) -> Option<PlacementMode> {
    let path = configuration["webhooks"][0]["clientConfig"]["service"]["path"].as_str()?;
    [PlacementMode::Scheduler, PlacementMode::SchedulingGate]
        .into_iter()
        .find(|m| review_path(Some(*m)) == path)
}

/// A pod that would be stranded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Pods in pages of this many: 20,000 gated pods are read in bounded pieces.
const PAGE: u32 = 500;

/// The pods `params` selects (those not being deleted), read as metadata only, page by
/// page.
async fn pod_refs(client: &kube::Client, params: ListParams) -> Result<Vec<PodRef>, kube::Error> {
    let api = Api::<PartialObjectMeta<Pod>>::all(client.clone());
    let mut params = params.limit(PAGE);
    let mut refs = Vec::new();
    loop {
        let page = api.list_metadata(&params).await?;
        refs.extend(
            page.items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| PodRef {
                    namespace: p.namespace().unwrap_or_default(),
                    name: p.name_any(),
                    uid: p.metadata.uid.clone().unwrap_or_default(),
                }),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(refs),
        }
    }
}

/// Pods as the API server sends them: every field kept, known to the operator's API
/// types or not (a pod from a newer release is recreated whole).
pub fn pods_as_sent(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::erase::<Pod>(&()),
    )
}

/// Unbound pending pods naming `scheduler_name`: never kube-scheduler's pods, whatever a
/// configuration stored before the CRD refused that name says (those are every pod of
/// the cluster waiting for the default scheduler, not multiarch's to release).
pub async fn pods_waiting_for(
    client: &kube::Client,
    scheduler_name: &str,
) -> Result<Vec<PodRef>, ObserveError> {
    if scheduler_name == KUBE_SCHEDULER_NAME {
        warn!(
            "the configuration names kube-scheduler's default-scheduler: its pods are never released"
        );
        return Ok(Vec::new());
    }
    let selector =
        format!("spec.schedulerName={scheduler_name},spec.nodeName=,status.phase=Pending");
    pod_refs(client, ListParams::default().fields(&selector))
        .await
        .map_err(read_error("pods waiting for the scheduler"))
}

/// Pods the misplaced-pod correction labelled misplaced.
pub async fn misplaced_pods(client: &kube::Client) -> Result<usize, ObserveError> {
    let pods = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&format!("{LABEL_MISPLACED}=true")))
        .await
        .map_err(read_error("misplaced pods"))?;
    Ok(pods.items.len())
}

/// Pods labelled gated: the webhook labels every pod it gates, and whoever removes the
/// gate relabels it. (A pod whose gate is gone under the old label is skipped when it is
/// released.)
pub async fn gated_pods(client: &kube::Client) -> Result<Vec<PodRef>, ObserveError> {
    pod_refs(
        client,
        ListParams::default().labels(&format!("{LABEL_SCHEDULING_GATE}=gated")),
    )
    .await
    .map_err(read_error("gated pods"))
}

/// ENoExecEvents left in multiarch's namespace.
pub async fn enoexec_events(
    client: &kube::Client,
    settings: &Settings,
) -> Result<Vec<String>, ObserveError> {
    // Names only: whatever their content, they are counted.
    let events =
        Api::<PartialObjectMeta<ENoExecEvent>>::namespaced(client.clone(), &settings.namespace)
            .list(&ListParams::default())
            .await
            .map_err(read_error("ENoExecEvents"))?;
    Ok(events.items.iter().map(ResourceExt::name_any).collect())
}

/// Every PodPlacementConfig, as `namespace/name`.
pub async fn pod_placement_configs(client: &kube::Client) -> Result<Vec<String>, ObserveError> {
    let configs = Api::<PartialObjectMeta<PodPlacementConfig>>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(read_error("PodPlacementConfigs"))?;
    Ok(configs
        .items
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect())
}

/// The optional APIs the cluster serves, by discovery. A group/version the API server
/// does not serve is a 404 (a plain `404 page not found`, not a Status): absent. Any
/// other failure is an error, never read as absence.
pub async fn optional_apis(client: &kube::Client) -> Result<OptionalApis, ObserveError> {
    Ok(OptionalApis {
        service_monitors: serves(
            client,
            crate::install::SERVICE_MONITOR_API_VERSION,
            crate::install::SERVICE_MONITOR_RESOURCE,
        )
        .await?,
        prometheus_rules: serves(
            client,
            crate::install::PROMETHEUS_RULE_API_VERSION,
            crate::install::PROMETHEUS_RULE_RESOURCE,
        )
        .await?,
    })
}

async fn serves(
    client: &kube::Client,
    api_version: &str,
    resource: &str,
) -> Result<bool, ObserveError> {
    match client.list_api_group_resources(api_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(ObserveError {
            what: format!("the discovery of {api_version}"),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rollouts_follow_mto_s_rules_and_say_why() {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "multiarch-scheduler", "namespace": "multiarch", "generation": 2},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1,
                       "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."}]},
        }))
        .unwrap();
        let rollout = deployment_rollout(&deployment);
        assert!(rollout.available && !rollout.rolled_out);
        assert_eq!(
            rollout.detail,
            "Deployment multiarch/multiarch-scheduler has 1 of 2 replicas available (MinimumReplicasUnavailable: Deployment does not have minimum availability.)"
        );
        let none: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "multiarch"},
            "status": {"desiredNumberScheduled": 0, "currentNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0},
        }))
        .unwrap();
        assert!(daemon_set_rollout(&none).available);
    }

    #[test]
    fn the_route_is_read_from_the_path() {
        let configuration =
            json!({"webhooks": [{"clientConfig": {"service": {"path": "/mutate-pods/gate"}}}]});
        assert_eq!(
            routing_of(&configuration),
            Some(PlacementMode::SchedulingGate)
        );
        let manual = json!({"webhooks": [{"clientConfig": {"service": {"path": "/mutate-pods"}}}]});
        assert_eq!(routing_of(&manual), None);
    }
}
