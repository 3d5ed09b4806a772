//! Reflector-style watches feeding the loop: nodes, all non-terminal pods (every
//! scheduler's), and the two configuration CRDs. Each relist (initial or after `410
//! Gone`) is framed so the loop can drop what disappeared meanwhile.

use std::fmt::Debug;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use multiarch_crd::{ClusterPodPlacementConfig, PodPlacementConfig};
use multiarch_plugins::model::{node::NodeInfo, pod::PodInfo};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::warn;

use super::inbox::{Inbox, Kind};

/// Spawns one watch; `upsert` turns an object into a message (None: unreadable, skipped),
/// `delete` and `key` name it.
fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    inbox: mpsc::UnboundedSender<Inbox>,
    upsert: fn(K) -> Option<Inbox>,
    delete: fn(&K) -> Inbox,
    key: fn(&K) -> String,
) where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut seen: Vec<String> = Vec::new();
        while let Some(event) = stream.next().await {
            let message = match event {
                Ok(watcher::Event::Init) => {
                    seen.clear();
                    Some(Inbox::RelistStarted(kind))
                }
                Ok(watcher::Event::InitApply(object)) => {
                    seen.push(key(&object));
                    upsert(object)
                }
                Ok(watcher::Event::InitDone) => {
                    Some(Inbox::RelistDone(kind, std::mem::take(&mut seen)))
                }
                Ok(watcher::Event::Apply(object)) => upsert(object),
                Ok(watcher::Event::Delete(object)) => Some(delete(&object)),
                Err(e) => {
                    warn!(?kind, error = %e, "watch failed; retrying with backoff");
                    None
                }
            };
            if let Some(message) = message
                && inbox.send(message).is_err()
            {
                return;
            }
        }
    });
}

pub fn start(client: &kube::Client, inbox: &mpsc::UnboundedSender<Inbox>) {
    spawn(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        Kind::Nodes,
        inbox.clone(),
        |node| match NodeInfo::from_node(&node) {
            Ok(info) => Some(Inbox::NodeUpsert(Box::new(info))),
            Err(e) => {
                warn!(node = %node.name_any(), error = %e, "node has an unreadable capacity; ignoring it");
                None
            }
        },
        |node| Inbox::NodeDelete(node.name_any()),
        ResourceExt::name_any,
    );
    spawn(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
        Kind::Pods,
        inbox.clone(),
        |pod| match PodInfo::from_pod(&pod) {
            Ok(info) => Some(Inbox::PodUpsert(Box::new(info))),
            Err(e) => {
                warn!(pod = %pod.name_any(), error = %e, "pod has an unreadable request; ignoring it");
                None
            }
        },
        |pod| Inbox::PodDelete(pod.uid().unwrap_or_default()),
        |pod| pod.uid().unwrap_or_default(),
    );
    spawn(
        Api::<ClusterPodPlacementConfig>::all(client.clone()),
        watcher::Config::default(),
        Kind::ClusterConfig,
        inbox.clone(),
        |config| Some(Inbox::ClusterConfig(Some(Box::new(config.spec)))),
        |_| Inbox::ClusterConfig(None),
        ResourceExt::name_any,
    );
    spawn(
        Api::<PodPlacementConfig>::all(client.clone()),
        watcher::Config::default(),
        Kind::PodConfigs,
        inbox.clone(),
        |config| Some(Inbox::PodConfigUpsert(Box::new(config))),
        |config| Inbox::PodConfigDelete(config_key(config)),
        config_key,
    );
}

pub fn config_key(config: &PodPlacementConfig) -> String {
    format!(
        "{}/{}",
        config.namespace().unwrap_or_default(),
        config.name_any()
    )
}
