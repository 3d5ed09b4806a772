//! The cluster's placement configuration, as every role reads it: the
//! ClusterPodPlacementConfig singleton (absent: defaults) and the PodPlacementConfigs.
//! [`read`] asks the API server now (the gate controller, which must not miss a config
//! created just before its pod); [`follow`] keeps a snapshot current through watches (the
//! webhook and the scheduler).

use std::sync::Arc;

use futures_util::StreamExt;
use kube::{
    Api,
    api::ListParams,
    runtime::{WatchStreamExt, reflector, watcher},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, PodPlacementConfig,
    names::SINGLETON_NAME,
};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::supervisor::Tasks;

/// One consistent view of the configuration.
#[derive(Clone, Debug, Default)]
pub struct PlacementConfigs {
    /// The spec of the `cluster` object; `None` when there is none.
    pub cluster: Option<ClusterPodPlacementConfigSpec>,
    /// Every PodPlacementConfig read (of one namespace for [`read`]).
    pub pod_configs: Arc<Vec<PodPlacementConfig>>,
    /// Both kinds have been listed at least once.
    pub synced: bool,
}

impl PlacementConfigs {
    /// The cluster-wide settings, with defaults when there is no `cluster` object.
    pub fn cluster_or_default(&self) -> ClusterPodPlacementConfigSpec {
        self.cluster.clone().unwrap_or_default()
    }
}

/// Reads the configuration now: `cluster` and the PodPlacementConfigs of `namespace`.
/// Without the CRDs there is no configuration (defaults); any other error is returned.
pub async fn read(client: &kube::Client, namespace: &str) -> Result<PlacementConfigs, kube::Error> {
    let cluster = Api::<ClusterPodPlacementConfig>::all(client.clone())
        .get_opt(SINGLETON_NAME)
        .await?
        .map(|c| c.spec);
    let pod_configs = match Api::<PodPlacementConfig>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(PlacementConfigs {
        cluster,
        pod_configs: Arc::new(pod_configs),
        synced: true,
    })
}

/// Follows the configuration through two watches (relisting after a dropped watch). The
/// receiver always holds the latest snapshot; `synced` turns true once both lists are in.
pub fn follow(client: &kube::Client, tasks: &Tasks) -> watch::Receiver<Arc<PlacementConfigs>> {
    let (tx, rx) = watch::channel(Arc::new(PlacementConfigs::default()));
    let (clusters, cluster_writer) = reflector::store::<ClusterPodPlacementConfig>();
    let (pod_configs, pod_config_writer) = reflector::store::<PodPlacementConfig>();
    let cluster_events = reflector(
        cluster_writer,
        watcher(
            Api::<ClusterPodPlacementConfig>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={SINGLETON_NAME}")),
        ),
    )
    .default_backoff()
    .map(|event| (Kind::Cluster, event.map(|e| phase(&e))))
    .boxed();
    let pod_config_events = reflector(
        pod_config_writer,
        watcher(
            Api::<PodPlacementConfig>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|event| (Kind::PodConfigs, event.map(|e| phase(&e))))
    .boxed();
    let shutdown = tasks.shutdown().clone();
    tasks.spawn("placement configuration watch", async move {
        let mut events = futures_util::stream::select(cluster_events, pod_config_events);
        let (mut cluster_listed, mut pod_configs_listed) = (false, false);
        loop {
            let (kind, event) = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                next = events.next() => match next {
                    Some(next) => next,
                    None => return Err(WatchEnded),
                },
            };
            match event {
                Err(e) => {
                    warn!(?kind, error = %e, "cannot watch the placement configuration; retrying");
                    continue;
                }
                // A relist refills the store and swaps it in when done: publishing each
                // listed object would copy the store once per object.
                Ok(Phase::Relisting) => continue,
                Ok(Phase::Listed) => match kind {
                    Kind::Cluster => cluster_listed = true,
                    Kind::PodConfigs => pod_configs_listed = true,
                },
                Ok(Phase::Changed) => {}
            }
            let snapshot = PlacementConfigs {
                cluster: clusters.state().first().map(|c| c.spec.clone()),
                pod_configs: Arc::new(pod_configs.state().iter().map(|c| (**c).clone()).collect()),
                synced: cluster_listed && pod_configs_listed,
            };
            if snapshot.synced && !tx.borrow().synced {
                info!("placement configuration listed");
            }
            let _ = tx.send(Arc::new(snapshot));
        }
    });
    rx
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Cluster,
    PodConfigs,
}

enum Phase {
    Relisting,
    Listed,
    Changed,
}

fn phase<K>(event: &watcher::Event<K>) -> Phase {
    match event {
        watcher::Event::Init | watcher::Event::InitApply(_) => Phase::Relisting,
        watcher::Event::InitDone => Phase::Listed,
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => Phase::Changed,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the placement configuration watch ended")]
pub struct WatchEnded;
