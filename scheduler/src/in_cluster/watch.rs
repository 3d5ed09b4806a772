//! Reflector-style watches feeding the loop: nodes, all non-terminal pods (every
//! scheduler's), namespaces, PodDisruptionBudgets and the storage objects the volume
//! plugins read. Each relist (initial or after `410 Gone`) reports as deleted what
//! disappeared meanwhile, then that the kind is listed. The configuration comes from the shared
//! `placement_config` watch.

use std::{collections::HashSet, fmt::Debug, hash::Hash};

use super::inbox_sender::InboxSender;

use futures_util::StreamExt;
use k8s_openapi::api::{
    core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod},
    policy::v1::PodDisruptionBudget,
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment},
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use multiarch_plugins::model::{
    disruption_budget::DisruptionBudget,
    node::NodeInfo,
    pod::PodInfo,
    storage::{
        ClaimInfo, CsiDriverInfo, CsiNodeInfo, PersistentVolumeInfo, StorageCapacityInfo,
        StorageClassInfo, VolumeAttachmentInfo,
    },
};
use multiarch_runtime::supervisor::Tasks;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::inbox::{Kind, LoopMessage};
use crate::engine::storage_objects::{StorageKey, StorageObject};

/// A watch of `api`'s objects, as `config` selects them, told to the loop as `kind`.
struct Watch<K: Resource> {
    name: &'static str,
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
}

impl<K> Watch<K>
where
    K: Resource<DynamicType = ()>,
{
    /// A watch of every object of `K`.
    fn all(client: &kube::Client, name: &'static str, kind: Kind) -> Self {
        Watch {
            name,
            api: Api::all(client.clone()),
            config: watcher::Config::default(),
            kind,
        }
    }
}

/// Spawns one watch; `upsert` turns an object into a message (None: unreadable, skipped),
/// `key` names it and `deleted` tells the loop it is gone. The watch remembers the keys it
/// has shown, so that a relist (initial, or after `410 Gone`) reports as deleted what it
/// no longer lists; the loop then hears it has listed `kind`.
fn spawn<K, Q>(
    tasks: &Tasks,
    inbox: InboxSender,
    watch: Watch<K>,
    upsert: fn(K) -> Option<LoopMessage>,
    key: fn(&K) -> Q,
    deleted: fn(Q) -> LoopMessage,
) where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    Q: Hash + Eq + Clone + Send + 'static,
{
    let Watch {
        name,
        api,
        config,
        kind,
    } = watch;
    let shutdown = tasks.shutdown().clone();
    tasks.spawn(name, async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut known: HashSet<Q> = HashSet::new();
        let mut relisted: HashSet<Q> = HashSet::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                event = stream.next() => match event {
                    Some(event) => event,
                    None => return Err("the watch stream ended"),
                },
            };
            let messages: Vec<LoopMessage> = match event {
                Ok(watcher::Event::Init) => {
                    relisted.clear();
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(object)) => {
                    relisted.insert(key(&object));
                    upsert(object).into_iter().collect()
                }
                Ok(watcher::Event::InitDone) => {
                    let gone = known.difference(&relisted).cloned().map(deleted);
                    let messages = gone.chain([LoopMessage::Listed(kind)]).collect();
                    known = std::mem::take(&mut relisted);
                    messages
                }
                Ok(watcher::Event::Apply(object)) => {
                    known.insert(key(&object));
                    upsert(object).into_iter().collect()
                }
                Ok(watcher::Event::Delete(object)) => {
                    let key = key(&object);
                    known.remove(&key);
                    vec![deleted(key)]
                }
                Err(e) => {
                    warn!(?kind, error = %e, "watch failed; retrying with backoff");
                    Vec::new()
                }
            };
            for message in messages {
                if inbox.send(message).await.is_err() {
                    // The loop ended: its own outcome is what matters.
                    shutdown.cancelled().await;
                    return Ok(());
                }
            }
        }
    });
}

/// Every watch the loop learns from.
pub fn start(client: &kube::Client, inbox: &InboxSender, tasks: &Tasks) {
    start_cluster_watches(client, inbox, tasks);
    start_storage_watches(client, inbox, tasks);
}

/// Nodes, pods, namespaces and disruption budgets.
fn start_cluster_watches(client: &kube::Client, inbox: &InboxSender, tasks: &Tasks) {
    spawn(
        tasks,
        inbox.clone(),
        Watch::<Node>::all(client, "node watch", Kind::Nodes),
        |node| match NodeInfo::from_node(&node) {
            Ok(info) => Some(LoopMessage::NodeUpsert(Box::new(info))),
            Err(e) => {
                warn!(node = %node.name_any(), error = %e, "node has an unreadable capacity; ignoring it");
                None
            }
        },
        ResourceExt::name_any,
        LoopMessage::NodeDelete,
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch {
            name: "pod watch",
            api: Api::<Pod>::all(client.clone()),
            config: watcher::Config::default()
                .fields("status.phase!=Succeeded,status.phase!=Failed"),
            kind: Kind::Pods,
        },
        |pod| match PodInfo::from_pod(&pod) {
            Ok(info) => Some(LoopMessage::PodUpsert(Box::new(info))),
            Err(e) => {
                let spec = pod.spec.as_ref();
                let identity = PodInfo {
                    uid: pod.uid().unwrap_or_default(),
                    namespace: pod.namespace().unwrap_or_default().into(),
                    name: pod.name_any(),
                    scheduler_name: spec
                        .and_then(|s| s.scheduler_name.as_deref())
                        .unwrap_or_default()
                        .into(),
                    node_name: spec.and_then(|s| s.node_name.clone()),
                    deleting: pod.metadata.deletion_timestamp.is_some(),
                    ..PodInfo::default()
                };
                Some(LoopMessage::PodUnreadable(
                    Box::new(identity),
                    e.to_string(),
                ))
            }
        },
        |pod| pod.uid().unwrap_or_default(),
        LoopMessage::PodDelete,
    );
}

/// `namespace/name` of a namespaced object.
fn namespaced_key<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

fn storage(object: StorageObject) -> Option<LoopMessage> {
    Some(LoopMessage::Storage(Box::new(object)))
}

/// The watches of what the scheduler reads besides nodes and pods.
pub fn start_others(client: &kube::Client, inbox: &InboxSender, tasks: &Tasks) {
    spawn(
        tasks,
        inbox.clone(),
        Watch::<Namespace>::all(client, "namespace watch", Kind::Namespaces),
        |ns| {
            Some(LoopMessage::Namespace(
                ns.name_any(),
                ns.metadata.labels.unwrap_or_default(),
            ))
        },
        ResourceExt::name_any,
        LoopMessage::NamespaceDelete,
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<PodDisruptionBudget>::all(
            client,
            "PodDisruptionBudget watch",
            Kind::DisruptionBudgets,
        ),
        |pdb| {
            Some(LoopMessage::DisruptionBudget(DisruptionBudget::from_api(
                &pdb,
            )))
        },
        namespaced_key,
        LoopMessage::DisruptionBudgetDelete,
    );
}

/// What volume binding reads: volumes, claims, classes, CSI nodes, drivers and capacity,
/// attachments.
fn start_storage_watches(client: &kube::Client, inbox: &InboxSender, tasks: &Tasks) {
    spawn(
        tasks,
        inbox.clone(),
        Watch::<PersistentVolume>::all(client, "PersistentVolume watch", Kind::PersistentVolumes),
        |pv| match PersistentVolumeInfo::from_api(&pv) {
            Ok(info) => storage(StorageObject::Volume(info)),
            Err(e) => {
                warn!(volume = %pv.name_any(), error = %e, "volume has an unreadable capacity; ignoring it");
                None
            }
        },
        ResourceExt::name_any,
        |name| LoopMessage::StorageDelete(StorageKey::Volume(name)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<PersistentVolumeClaim>::all(
            client,
            "PersistentVolumeClaim watch",
            Kind::PersistentVolumeClaims,
        ),
        |pvc| match ClaimInfo::from_api(&pvc) {
            Ok(info) => storage(StorageObject::Claim(info)),
            Err(e) => {
                warn!(claim = %namespaced_key(&pvc), error = %e, "claim has an unreadable request; ignoring it");
                None
            }
        },
        |pvc| (pvc.namespace().unwrap_or_default(), pvc.name_any()),
        |(namespace, name)| LoopMessage::StorageDelete(StorageKey::Claim(namespace, name)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<StorageClass>::all(client, "StorageClass watch", Kind::StorageClasses),
        |class| storage(StorageObject::Class(StorageClassInfo::from_api(&class))),
        ResourceExt::name_any,
        |name| LoopMessage::StorageDelete(StorageKey::Class(name)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<CSINode>::all(client, "CSINode watch", Kind::CsiNodes),
        |node| storage(StorageObject::CsiNode(CsiNodeInfo::from_api(&node))),
        ResourceExt::name_any,
        |name| LoopMessage::StorageDelete(StorageKey::CsiNode(name)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<CSIDriver>::all(client, "CSIDriver watch", Kind::CsiDrivers),
        |driver| storage(StorageObject::CsiDriver(CsiDriverInfo::from_api(&driver))),
        ResourceExt::name_any,
        |name| LoopMessage::StorageDelete(StorageKey::CsiDriver(name)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<CSIStorageCapacity>::all(
            client,
            "CSIStorageCapacity watch",
            Kind::StorageCapacities,
        ),
        |capacity| match StorageCapacityInfo::from_api(&capacity) {
            Ok(info) => storage(StorageObject::Capacity(info)),
            Err(e) => {
                warn!(capacity = %namespaced_key(&capacity), error = %e, "storage capacity is unreadable; ignoring it");
                None
            }
        },
        namespaced_key,
        |key| LoopMessage::StorageDelete(StorageKey::Capacity(key)),
    );
    spawn(
        tasks,
        inbox.clone(),
        Watch::<VolumeAttachment>::all(client, "VolumeAttachment watch", Kind::VolumeAttachments),
        |attachment| {
            storage(StorageObject::Attachment(VolumeAttachmentInfo::from_api(
                &attachment,
            )))
        },
        ResourceExt::name_any,
        |name| LoopMessage::StorageDelete(StorageKey::Attachment(name)),
    );
}
