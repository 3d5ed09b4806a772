//! The cluster's placement configuration, as every role reads it: the
//! ClusterPodPlacementConfig singleton (absent: defaults) and the PodPlacementConfigs,
//! kept current through watches ([`follow`]), with their architecture rules compiled
//! once per change, off every caller's path. A snapshot is shared, never copied: each
//! config is the watch's own `Arc`, the compiled rules an `Arc` that a new snapshot
//! reuses for every config that did not change. [`current_for`] gives a role that must
//! not miss a config created just before its pod (the gate controller) the followed
//! snapshot once it has caught up with the API server for that namespace.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures_util::{FutureExt, StreamExt};
use kube::{
    Api,
    api::ListParams,
    runtime::{WatchStreamExt, reflector, watcher},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, PodPlacementConfig,
    names::SINGLETON_NAME,
};
use multiarch_policy::{architecture_rules::ArchitectureRules, pod_configs::NamespacedConfigs};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::supervisor::Tasks;

/// PodPlacementConfigs per page of a list: one may be 1.1 MB, and a page is read whole
/// before it is parsed (500, the watcher's default, could be 550 MB).
pub const CONFIG_PAGE: u32 = 16;

/// A compile of the rules is followed by at least this many times its duration without
/// another (one fifth of a core at most, however fast a tenant edits its configs).
const COMPILE_PACE: u32 = 4;

/// How long a role waits for the followed snapshot to catch up with the API server
/// (see [`current_for`]): watch events arrive within milliseconds.
pub const CATCH_UP: Duration = Duration::from_secs(5);

/// One consistent view of the configuration.
#[derive(Clone, Debug, Default)]
pub struct PlacementConfigs {
    /// The spec of the `cluster` object; `None` when there is none.
    pub cluster: Option<ClusterPodPlacementConfigSpec>,
    /// Every PodPlacementConfig, by namespace.
    pub pod_configs: NamespacedConfigs,
    /// Their `celArchitecturePlacement` rules, compiled (within the rule budgets).
    pub architecture_rules: Arc<ArchitectureRules>,
    /// Both kinds have been listed at least once.
    pub synced: bool,
}

impl PlacementConfigs {
    /// The cluster-wide settings, with defaults when there is no `cluster` object.
    pub fn cluster_or_default(&self) -> ClusterPodPlacementConfigSpec {
        self.cluster.clone().unwrap_or_default()
    }

    /// `configs` with their rules compiled, reusing `previous`'s for unchanged configs.
    pub fn compiled(
        cluster: Option<ClusterPodPlacementConfigSpec>,
        pod_configs: NamespacedConfigs,
        previous: &ArchitectureRules,
        synced: bool,
    ) -> Self {
        let architecture_rules = Arc::new(ArchitectureRules::compile(&pod_configs, previous));
        PlacementConfigs {
            cluster,
            pod_configs,
            architecture_rules,
            synced,
        }
    }
}

/// Follows the configuration through two watches (relisting after a dropped watch). The
/// receiver always holds the latest snapshot; `synced` turns true once both lists are in.
/// Changes that arrive together make one snapshot, compiled on a blocking thread and
/// paced by what compiling costs ([`COMPILE_PACE`]).
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
            watcher::Config::default().page_size(CONFIG_PAGE),
        ),
    )
    .default_backoff()
    .map(|event| (Kind::PodConfigs, event.map(|e| phase(&e))))
    .boxed();
    let shutdown = tasks.shutdown().clone();
    tasks.spawn("placement configuration watch", async move {
        let mut events = futures_util::stream::select(cluster_events, pod_config_events);
        let mut listed = Listed::default();
        let mut next_compile = tokio::time::Instant::now();
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => return Ok::<(), FollowEnded>(()),
                next = events.next() => next.ok_or(FollowEnded::WatchEnded)?,
            };
            // What else is already there joins this snapshot: a burst of edits is
            // compiled once.
            let mut changed = listed.absorb(first);
            while let Some(Some(next)) = events.next().now_or_never() {
                changed |= listed.absorb(next);
            }
            if !changed {
                continue;
            }
            // Compiling is paced by what it cost: the next starts no sooner than
            // COMPILE_PACE times the last one's duration after it, whatever a tenant's
            // edits, and what arrives meanwhile joins it.
            let wait = tokio::time::sleep_until(next_compile);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = &mut wait => break,
                    next = events.next() => {
                        listed.absorb(next.ok_or(FollowEnded::WatchEnded)?);
                    }
                }
            }
            let cluster = clusters.state().first().map(|c| c.spec.clone());
            let configs = NamespacedConfigs::new(pod_configs.state());
            let previous = tx.borrow().architecture_rules.clone();
            let synced = listed.both();
            let started = tokio::time::Instant::now();
            let compile = move || PlacementConfigs::compiled(cluster, configs, &previous, synced);
            let snapshot = tokio::task::spawn_blocking(compile)
                .await
                .map_err(|_| FollowEnded::CompileFailed)?;
            next_compile = tokio::time::Instant::now() + started.elapsed() * COMPILE_PACE;
            if snapshot.synced && !tx.borrow().synced {
                info!("placement configuration listed");
            }
            let _ = tx.send(Arc::new(snapshot));
        }
    });
    rx
}

/// Which kinds have been listed at least once.
#[derive(Default)]
struct Listed {
    cluster: bool,
    pod_configs: bool,
}

impl Listed {
    fn both(&self) -> bool {
        self.cluster && self.pod_configs
    }

    /// Takes in one event; whether it changes what a snapshot holds.
    fn absorb(&mut self, (kind, event): (Kind, Result<Phase, watcher::Error>)) -> bool {
        match event {
            Err(e) => {
                warn!(?kind, error = %e, "cannot watch the placement configuration; retrying");
                false
            }
            // A relist refills the store and swaps it in when done: publishing each
            // listed object would copy the store once per object.
            Ok(Phase::Relisting) => false,
            Ok(Phase::Listed) => {
                match kind {
                    Kind::Cluster => self.cluster = true,
                    Kind::PodConfigs => self.pod_configs = true,
                }
                true
            }
            Ok(Phase::Changed) => true,
        }
    }
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

/// Why following the configuration stopped (the role ends: it cannot go on without it).
#[derive(Debug, thiserror::Error)]
pub enum FollowEnded {
    #[error("the placement configuration watch ended")]
    WatchEnded,
    #[error("compiling the placement configuration's rules failed (a panic)")]
    CompileFailed,
}

/// Why the configuration for a namespace could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CurrentError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(
        "the followed placement configuration has not caught up with namespace {namespace}'s PodPlacementConfigs within {waited:?}"
    )]
    Behind { namespace: String, waited: Duration },
}

/// The configuration a pod of `namespace` created now must be placed by: the
/// ClusterPodPlacementConfig read now, and the followed snapshot once its configs of
/// `namespace` are those the API server lists now (names and resource versions: a
/// metadata-only list, so the configs' rules are never read per pod), waiting for it at
/// most `catch_up`. Without the CRDs there is no configuration (defaults); any other
/// error is returned.
pub async fn current_for(
    client: &kube::Client,
    namespace: &str,
    followed: &watch::Receiver<Arc<PlacementConfigs>>,
    catch_up: Duration,
) -> Result<PlacementConfigs, CurrentError> {
    let cluster = Api::<ClusterPodPlacementConfig>::all(client.clone())
        .get_opt(SINGLETON_NAME)
        .await?
        .map(|c| c.spec);
    let api = Api::<PodPlacementConfig>::namespaced(client.clone(), namespace);
    let mut listed = BTreeMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list_metadata(&params).await {
            Ok(page) => page,
            // No CRD: no PodPlacementConfig can exist, nor can the watch list any.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Ok(PlacementConfigs {
                    cluster,
                    synced: true,
                    ..PlacementConfigs::default()
                });
            }
            Err(e) => return Err(e.into()),
        };
        for config in page.items {
            listed.insert(
                config.metadata.name.unwrap_or_default(),
                config.metadata.resource_version,
            );
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let mut followed = followed.clone();
    let caught_up = tokio::time::timeout(
        catch_up,
        followed.wait_for(|snapshot| {
            snapshot.synced
                && snapshot.pod_configs.of(namespace).len() == listed.len()
                && snapshot.pod_configs.of(namespace).iter().all(|config| {
                    config.metadata.name.as_ref().and_then(|n| listed.get(n))
                        == Some(&config.metadata.resource_version)
                })
        }),
    )
    .await;
    let snapshot = match caught_up {
        Ok(Ok(snapshot)) => snapshot.clone(),
        _ => {
            return Err(CurrentError::Behind {
                namespace: namespace.to_owned(),
                waited: catch_up,
            });
        }
    };
    Ok(PlacementConfigs {
        cluster,
        ..(*snapshot).clone()
    })
}
