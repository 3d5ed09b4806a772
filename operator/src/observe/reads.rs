//! Each thing the reconcile reads from the cluster, one function each: the operands'
//! workloads, the webhook configuration, the pods that would be stranded, the
//! exec-format-error reports left, the PodPlacementConfigs, the journal, the optional
//! APIs. Reads only; `Snapshot::read` calls them.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration,
    apps::v1::{DaemonSet, Deployment},
    core::v1::{ConfigMap, Pod},
};
use kube::{Api, ResourceExt, api::ListParams, core::PartialObjectMeta};
use multiarch_crd::{
    ENoExecEvent, PlacementMode, PodPlacementConfig,
    names::{KUBE_SCHEDULER_NAME, LABEL_MISPLACED, LABEL_SCHEDULING_GATE},
};
use serde_json::Value;
use tracing::warn;

use crate::{
    component::{Component, Rollout},
    install::{
        ENOEXEC_DAEMON, ENOEXEC_HANDLER, GATE_CONTROLLER, INSPECTOR, SCHEDULER, Settings, WEBHOOK,
        review_path,
    },
    observe::{
        rollout::{daemon_set_rollout, deployment_rollout, with_inspector_reach},
        scheduler_names::DeployedScheduler,
    },
    pod_ref::PodRef,
};

/// Label of the ConfigMaps that journal a pod being recreated (`act::journal`).
pub const JOURNAL_LABEL: &str = "multiarch.openshift.io/recreated-pod";

/// Optional APIs the operator writes objects of when the cluster serves them, as
/// discovery found them. A kind the cluster does not serve has no objects: the operator
/// neither writes nor deletes any (the API server answers such a path with a plain
/// `404 page not found`, which is no object's absence).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalApis {
    /// prometheus-operator's `monitoring.coreos.com/v1` ServiceMonitors.
    pub service_monitors: bool,
    /// Its PrometheusRules: multiarch's alerts.
    pub prometheus_rules: bool,
}

/// A read the pass cannot go on without.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("cannot read {what}: {source}")]
    Read { what: String, source: kube::Error },
}

fn read_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ObserveError {
    let what = what.into();
    move |source| ObserveError::Read { what, source }
}

/// The rollout of every operand that exists, and the names the scheduler's Deployment
/// places (`None` without one).
pub async fn workloads(
    client: &kube::Client,
    settings: &Settings,
) -> Result<(BTreeMap<Component, Rollout>, Option<DeployedScheduler>), ObserveError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &settings.namespace);
    let mut out = BTreeMap::new();
    let mut scheduler = None;
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
            let mut rollout = deployment_rollout(&d);
            if component == Component::Scheduler {
                scheduler = Some(DeployedScheduler::of(&d));
                let pods = pods_of(client, &d).await?;
                rollout = with_inspector_reach(rollout, &pods);
            }
            out.insert(component, rollout);
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
    Ok((out, scheduler))
}

/// The pods of a Deployment, by its selector's labels (the operator's Deployments select
/// by labels only): a few replicas, read whole for their conditions.
async fn pods_of(client: &kube::Client, deployment: &Deployment) -> Result<Vec<Pod>, ObserveError> {
    let labels = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .filter(|l| !l.is_empty());
    let Some(labels) = labels else {
        return Ok(Vec::new());
    };
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let namespace = deployment.namespace().unwrap_or_default();
    Api::<Pod>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&selector.join(",")))
        .await
        .map(|list| list.items)
        .map_err(read_error(format!(
            "the pods of Deployment {}",
            deployment.name_any()
        )))
}

/// Whether the operator's mutating webhook configuration exists, and the mode it routes
/// to (by its path).
pub async fn route(client: &kube::Client) -> Result<(bool, Option<PlacementMode>), ObserveError> {
    let stored = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(WEBHOOK)
        .await
        .map_err(read_error("the mutating webhook configuration"))?;
    Ok(match stored {
        Some(configuration) => {
            let configuration = serde_json::to_value(&configuration).unwrap_or(Value::Null);
            (true, routing_of(&configuration))
        }
        None => (false, None),
    })
}

pub fn routing_of(configuration: &Value) -> Option<PlacementMode> {
    let path = configuration["webhooks"][0]["clientConfig"]["service"]["path"].as_str()?;
    [PlacementMode::Scheduler, PlacementMode::SchedulingGate]
        .into_iter()
        .find(|m| review_path(Some(*m)) == path)
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
        Err(source) => Err(ObserveError::Read {
            what: format!("the discovery of {api_version}"),
            source,
        }),
    }
}

/// The journal of pods being recreated (`act::journal`), oldest first.
pub async fn journal(
    client: &kube::Client,
    settings: &Settings,
) -> Result<Vec<ConfigMap>, ObserveError> {
    let entries = Api::<ConfigMap>::namespaced(client.clone(), &settings.namespace)
        .list(&ListParams::default().labels(&format!("{JOURNAL_LABEL}=true")))
        .await
        .map_err(read_error("the journal of pods being recreated"))?;
    Ok(entries.items)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
