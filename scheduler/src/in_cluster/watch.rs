//! Reflector-style watches feeding the loop: nodes and all non-terminal pods (every
//! scheduler's). Each relist (initial or after `410 Gone`) is framed so the loop can drop
//! what disappeared meanwhile. The configuration comes from the shared
//! `placement_config` watch.

use std::fmt::Debug;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use multiarch_plugins::model::{node::NodeInfo, pod::PodInfo};
use multiarch_runtime::supervisor::Tasks;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::warn;

use super::inbox::{Inbox, Kind};

/// Spawns one watch; `upsert` turns an object into a message (None: unreadable, skipped),
/// `delete` and `key` name it.
#[allow(clippy::too_many_arguments)]
fn spawn<K>(
    tasks: &Tasks,
    name: &'static str,
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
    let shutdown = tasks.shutdown().clone();
    tasks.spawn(name, async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut seen: Vec<String> = Vec::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                event = stream.next() => match event {
                    Some(event) => event,
                    None => return Err("the watch stream ended"),
                },
            };
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
                // The loop ended: its own outcome is what matters.
                shutdown.cancelled().await;
                return Ok(());
            }
        }
    });
}

pub fn start(client: &kube::Client, inbox: &mpsc::UnboundedSender<Inbox>, tasks: &Tasks) {
    spawn(
        tasks,
        "node watch",
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
        tasks,
        "pod watch",
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
}
