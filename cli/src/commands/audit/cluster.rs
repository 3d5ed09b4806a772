//! `--cluster`: what the audit reads from the API server. Every list is paged; an error
//! (a kind the user may not list, an unreachable server) ends the audit with its reason
//! rather than leaving those workloads out.

use std::{collections::BTreeMap, fmt::Debug};

use anyhow::{Context, bail};
use k8s_openapi::{
    api::{
        apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet},
        batch::v1::{CronJob, Job},
        core::v1::{Namespace, Node, Pod, ReplicationController},
    },
    serde::{Serialize, de::DeserializeOwned},
};
use kube::{
    Api, Resource,
    api::{ListParams, ObjectList},
};
use multiarch_audit::{cluster::ClusterWorkloads, routing::RoutingScope};
use multiarch_crd::{
    ClusterPodPlacementConfig, PodPlacementConfig, UnknownNodeLevel, names::SINGLETON_NAME,
};
use serde_json::Value;

/// Objects per list request.
const PAGE: u32 = 500;
/// A list whose continue token expires (410) halfway is started again, this often.
const RESTARTS: usize = 3;

/// Every object of `K` (in `namespace`, or all), page by page.
async fn list_all<K>(client: &kube::Client, namespace: Option<&str>) -> anyhow::Result<Vec<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    list_pages(&api).await
}

async fn list_pages<K>(api: &Api<K>) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let plural = K::plural(&());
    let mut restarts = 0;
    'restart: loop {
        let mut items = Vec::new();
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page: ObjectList<K> = match api.list(&params).await {
                Ok(page) => page,
                Err(kube::Error::Api(e)) if e.code == 410 && restarts < RESTARTS => {
                    restarts += 1;
                    tracing::warn!(%plural, "the list's continue token expired; listing again");
                    continue 'restart;
                }
                Err(e) => return Err(e).with_context(|| format!("cannot list {plural}")),
            };
            items.extend(page.items);
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(items),
            }
        }
    }
}

/// Objects as JSON with their `kind`, as the audit reads manifests.
fn values<K: Serialize>(objects: Vec<K>) -> anyhow::Result<Vec<Value>> {
    objects
        .into_iter()
        .map(|o| serde_json::to_value(o).context("cannot serialize an object"))
        .collect()
}

/// The workloads of the cluster (or of `namespace`), its silent amd64 nodes read as
/// `unknown` says.
pub async fn read(
    client: &kube::Client,
    namespace: Option<&str>,
    unknown: UnknownNodeLevel,
) -> anyhow::Result<ClusterWorkloads> {
    let mut objects = Vec::new();
    objects.extend(values(list_all::<Deployment>(client, namespace).await?)?);
    objects.extend(values(list_all::<StatefulSet>(client, namespace).await?)?);
    objects.extend(values(list_all::<DaemonSet>(client, namespace).await?)?);
    objects.extend(values(list_all::<ReplicaSet>(client, namespace).await?)?);
    objects.extend(values(
        list_all::<ReplicationController>(client, namespace).await?,
    )?);
    objects.extend(values(list_all::<CronJob>(client, namespace).await?)?);
    objects.extend(values(list_all::<Job>(client, namespace).await?)?);
    objects.extend(values(list_all::<Pod>(client, namespace).await?)?);
    objects.extend(values(pod_placement_configs(client, namespace).await?)?);
    let nodes: Vec<Node> = list_pages(&Api::all(client.clone())).await?;
    Ok(ClusterWorkloads::read(objects, &nodes, unknown)?)
}

/// What an amd64 node that does not say its x86-64 level runs: `flag` when given, else
/// what placement reads (the ClusterPodPlacementConfig's `binaryInspection`), else every
/// level. A ClusterPodPlacementConfig that cannot be read ends the audit: judged by the
/// wrong meaning, its pods would be reported wrongly.
pub async fn unknown_node_level(
    client: &kube::Client,
    flag: Option<UnknownNodeLevel>,
) -> anyhow::Result<UnknownNodeLevel> {
    if let Some(level) = flag {
        return Ok(level);
    }
    let configs: Api<ClusterPodPlacementConfig> = Api::all(client.clone());
    let config = match configs.get_opt(SINGLETON_NAME).await {
        Ok(config) => config,
        // multiarch's CRDs are not installed: nothing places by level.
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => {
            return Err(e).context(
                "cannot read the ClusterPodPlacementConfig (for binaryInspection.unknownNodeLevel; --unknown-node-level sets it instead)",
            );
        }
    };
    Ok(config
        .and_then(|c| c.spec.plugins)
        .map_or(UnknownNodeLevel::AnyLevel, |p| p.unknown_node_level()))
}

/// The PodPlacementConfigs (their architecture rules decide for workloads); none when
/// multiarch's CRDs are not installed.
async fn pod_placement_configs(
    client: &kube::Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<PodPlacementConfig>> {
    match list_all::<PodPlacementConfig>(client, namespace).await {
        Ok(configs) => Ok(configs),
        Err(e)
            if e.chain().any(|cause| {
                matches!(cause.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404)
            }) =>
        {
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// What `--routed-only` selects with: the ClusterPodPlacementConfig's namespaceSelector
/// and every namespace's labels.
pub async fn routing(client: &kube::Client, own_namespace: &str) -> anyhow::Result<RoutingScope> {
    let configs: Api<ClusterPodPlacementConfig> = Api::all(client.clone());
    let config = configs
        .get_opt(SINGLETON_NAME)
        .await
        .context("cannot read the ClusterPodPlacementConfig")?;
    let Some(config) = config else {
        bail!(
            "--routed-only: there is no ClusterPodPlacementConfig named {SINGLETON_NAME}, so routing is off and no workload is routed"
        );
    };
    let namespaces: Vec<Namespace> = list_pages(&Api::all(client.clone())).await?;
    let labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .into_iter()
        .filter_map(|ns| Some((ns.metadata.name?, ns.metadata.labels.unwrap_or_default())))
        .collect();
    Ok(RoutingScope::new(
        config.spec.namespace_selector.as_ref(),
        labels,
        own_namespace,
    ))
}

/// The cluster's nodes per `kubernetes.io/arch` (for `--bundle --cluster`).
pub async fn node_architectures(client: &kube::Client) -> anyhow::Result<BTreeMap<String, usize>> {
    let nodes: Vec<Node> = list_pages(&Api::all(client.clone())).await?;
    // Only architectures are read here: the level meaning does not matter.
    Ok(ClusterWorkloads::read(Vec::new(), &nodes, UnknownNodeLevel::AnyLevel)?.architectures)
}
