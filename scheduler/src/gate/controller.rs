//! `multiarch gate-controller`: watches gated pods, runs [`process`] on each with a fresh
//! read, writes the result with one update (a conflict is retried from a fresh read),
//! and retries failed inspections with exponential backoff. Bounded concurrency; one pod
//! is never processed twice at once; leader-elected like the scheduler.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::WatchStreamExt;
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
    runtime::{
        events::{Event, EventType as KubeEventType, Recorder, Reporter},
        watcher,
    },
};
use multiarch_crd::{ClusterPodPlacementConfig, PodPlacementConfig, names::SINGLETON_NAME};
use multiarch_inspector::{ImageInspector, InspectRequest};
use multiarch_plugins::model::{
    platform::{ContainerPlatforms, compatible_platforms},
    pod::PodInfo,
};
use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tokio::sync::{Semaphore, mpsc, watch as signal};
use tracing::{debug, warn};

use super::process::{EventType, GateInputs, Inspection, has_gate, needs_inspection, process};
use crate::runtime::leader::{ElectionConfig, Leadership, elect};

#[derive(Clone, Debug)]
pub struct GateOptions {
    pub own_namespace: String,
    pub identity: String,
    pub concurrency: usize,
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub election: Option<ElectionConfig>,
}

/// MTO's metric names, so existing dashboards keep working.
#[derive(Clone, Debug)]
pub struct GateMetrics {
    /// Pods carrying the gate right now, as this controller's watch sees them.
    pub gated: Gauge,
    pub processed: Counter,
    pub failed_inspections: Counter,
    pub seconds: Histogram,
}

impl Default for GateMetrics {
    fn default() -> Self {
        GateMetrics {
            gated: Gauge::default(),
            processed: Counter::default(),
            failed_inspections: Counter::default(),
            seconds: Histogram::new([
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                1.0, 2.0, 4.0,
            ]),
        }
    }
}

impl GateMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "mto_ppo_pods_gated",
            "Pods that carry the multiarch scheduling gate",
            self.gated.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_processed_pods",
            "Gated pods processed",
            self.processed.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_failed_image_inspection",
            "Failed image inspections",
            self.failed_inspections.clone(),
        );
        registry.register(
            "mto_ppo_ctrl_time_to_process_gated_pod_seconds",
            "Time to process a gated pod",
            self.seconds.clone(),
        );
    }
}

pub struct GateController {
    pub task: tokio::task::JoinHandle<()>,
    /// Dropped with the controller: the elector stops renewing.
    _alive: Option<signal::Sender<bool>>,
}

struct Shared {
    client: kube::Client,
    inspector: Arc<dyn ImageInspector>,
    options: GateOptions,
    metrics: GateMetrics,
    recorder: Recorder,
    queue: mpsc::UnboundedSender<String>,
    /// Keys being processed, and whether they changed meanwhile (process again).
    in_flight: Mutex<HashMap<String, bool>>,
    /// Gated pods by namespace, to re-enqueue them when a PodPlacementConfig changes.
    gated: Mutex<HashMap<String, HashSet<String>>>,
    /// Pods waiting out an inspection backoff: their own updates (labels written by the
    /// failed pass) must not trigger the next attempt early, as they did in MTO.
    backoff_until: Mutex<HashMap<String, Instant>>,
}

pub fn start(
    client: kube::Client,
    inspector: Arc<dyn ImageInspector>,
    options: GateOptions,
    metrics: GateMetrics,
) -> GateController {
    let (queue_tx, mut queue_rx) = mpsc::unbounded_channel::<String>();
    let Leadership {
        leading: leading_rx,
        alive,
    } = elect(&client, options.election.clone());
    let shared = Arc::new(Shared {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "multiarch-gate-controller".into(),
                instance: Some(options.identity.clone()),
            },
        ),
        client: client.clone(),
        inspector,
        metrics,
        queue: queue_tx,
        in_flight: Mutex::default(),
        gated: Mutex::default(),
        backoff_until: Mutex::default(),
        options,
    });
    watch_pods(shared.clone());
    watch_configs(shared.clone());
    let task = tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(shared.options.concurrency.max(1)));
        let mut leading = leading_rx;
        while let Some(key) = queue_rx.recv().await {
            if !*leading.borrow() {
                // Standby: keys come back when this replica leads (the watch relists then).
                let _ = leading.wait_for(|l| *l).await;
            }
            let waiting = shared
                .backoff_until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&key)
                .is_some_and(|until| *until > Instant::now());
            if waiting {
                continue;
            }
            {
                let mut in_flight = shared
                    .in_flight
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(dirty) = in_flight.get_mut(&key) {
                    *dirty = true;
                    continue;
                }
                in_flight.insert(key.clone(), false);
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let _permit = permit;
                shared.handle(&key).await;
                let again = shared
                    .in_flight
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&key)
                    .unwrap_or(false);
                if again {
                    let _ = shared.queue.send(key);
                }
            });
        }
    });
    GateController {
        task,
        _alive: alive,
    }
}

fn watch_pods(shared: Arc<Shared>) {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::all(shared.client.clone());
        let mut stream = watcher(
            api,
            watcher::Config::default().fields("status.phase=Pending"),
        )
        .default_backoff()
        .boxed();
        // Gated pods seen by the relist in progress: replaces the set when it completes, so
        // pods deleted while the watch was down do not stay counted.
        let mut relisted: Option<HashMap<String, HashSet<String>>> = None;
        while let Some(event) = stream.next().await {
            let pod = match event {
                Ok(watcher::Event::Init) => {
                    relisted = Some(HashMap::new());
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(fresh) = relisted.take() {
                        *shared.gated() = fresh;
                        shared.update_gauge();
                    }
                    continue;
                }
                Ok(watcher::Event::InitApply(p)) => {
                    if let Some(fresh) = relisted.as_mut()
                        && has_gate(&p)
                    {
                        fresh
                            .entry(p.namespace().unwrap_or_default())
                            .or_default()
                            .insert(p.name_any());
                    }
                    p
                }
                Ok(watcher::Event::Apply(p)) => p,
                Ok(watcher::Event::Delete(p)) => {
                    let ns = p.namespace().unwrap_or_default();
                    if let Some(set) = shared.gated().get_mut(&ns) {
                        set.remove(&p.name_any());
                    }
                    shared.update_gauge();
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "pod watch failed; retrying");
                    continue;
                }
            };
            let ns = pod.namespace().unwrap_or_default();
            let name = pod.name_any();
            let mut gated = shared.gated();
            if has_gate(&pod) {
                gated.entry(ns.clone()).or_default().insert(name.clone());
                drop(gated);
                shared.update_gauge();
                let _ = shared.queue.send(format!("{ns}/{name}"));
            } else if let Some(set) = gated.get_mut(&ns) {
                set.remove(&name);
                drop(gated);
                shared.update_gauge();
            }
        }
    });
}

/// A PodPlacementConfig created just before its pods must still apply: its changes
/// re-enqueue the namespace's gated pods (MTO's fix for MULTIARCH-6239).
fn watch_configs(shared: Arc<Shared>) {
    tokio::spawn(async move {
        let api: Api<PodPlacementConfig> = Api::all(shared.client.clone());
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let ns = match event {
                Ok(
                    watcher::Event::Apply(c)
                    | watcher::Event::Delete(c)
                    | watcher::Event::InitApply(c),
                ) => c.namespace().unwrap_or_default(),
                _ => continue,
            };
            let keys: Vec<String> = shared
                .gated()
                .get(&ns)
                .map(|s| s.iter().map(|n| format!("{ns}/{n}")).collect())
                .unwrap_or_default();
            for key in keys {
                let _ = shared.queue.send(key);
            }
        }
    });
}

impl Shared {
    fn gated(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.gated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn update_gauge(&self) {
        let count: usize = self.gated().values().map(HashSet::len).sum();
        self.metrics
            .gated
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    async fn handle(self: &Arc<Self>, key: &str) {
        let started = Instant::now();
        let Some((ns, name)) = key.split_once('/') else {
            return;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        for _ in 0..3 {
            match self.pass(&pods, ns, name).await {
                Ok(Pass::Done) => {
                    self.backoff_until
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(key);
                    break;
                }
                Ok(Pass::Conflict) => {
                    debug!(%key, "the pod changed meanwhile; processing a fresh copy");
                    continue;
                }
                Ok(Pass::Retry(attempts)) => {
                    let delay = self
                        .options
                        .initial_backoff
                        .saturating_mul(1 << (attempts.saturating_sub(1)).min(20))
                        .min(self.options.max_backoff);
                    self.backoff_until
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key.to_owned(), Instant::now() + delay);
                    let queue = self.queue.clone();
                    let key = key.to_owned();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = queue.send(key);
                    });
                    break;
                }
                Err(e) => {
                    warn!(%key, error = %e, "cannot process the gated pod; retrying");
                    let queue = self.queue.clone();
                    let key = key.to_owned();
                    let delay = self.options.initial_backoff;
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = queue.send(key);
                    });
                    break;
                }
            }
        }
        self.metrics
            .seconds
            .observe(started.elapsed().as_secs_f64());
    }

    async fn pass(&self, pods: &Api<Pod>, ns: &str, name: &str) -> Result<Pass, kube::Error> {
        let Some(pod) = pods.get_opt(name).await? else {
            return Ok(Pass::Done);
        };
        if !has_gate(&pod) {
            return Ok(Pass::Done);
        }
        // Read fresh: a config created just before the pod is never missed.
        let configs = Api::<PodPlacementConfig>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let cluster = Api::<ClusterPodPlacementConfig>::all(self.client.clone())
            .get_opt(SINGLETON_NAME)
            .await
            .ok()
            .flatten();
        let spec = cluster.map(|c| c.spec).unwrap_or_default();
        let fallback = spec.fallback_architecture.map(|a| a.as_str().to_owned());
        let inputs = GateInputs {
            cluster_plugins: spec.plugins.as_ref(),
            configs: &configs,
            fallback_architecture: fallback.as_deref(),
            own_namespace: &self.options.own_namespace,
            max_attempts: self.options.max_attempts,
        };
        let inspection = if needs_inspection(&pod, &inputs) {
            self.inspect(&pod).await
        } else {
            Inspection::NotNeeded
        };
        if matches!(inspection, Inspection::Failed(_)) {
            self.metrics.failed_inspections.inc();
        }
        let Some(done) = process(&pod, &inputs, inspection) else {
            return Ok(Pass::Done);
        };
        match pods.replace(name, &PostParams::default(), &done.pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Pass::Conflict),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Pass::Done),
            Err(e) => return Err(e),
        }
        self.metrics.processed.inc();
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            uid: pod.uid(),
            ..ObjectReference::default()
        };
        for event in done.events {
            let published = Event {
                type_: if event.type_ == EventType::Warning {
                    KubeEventType::Warning
                } else {
                    KubeEventType::Normal
                },
                reason: event.reason.into(),
                note: Some(event.message),
                action: "PlacingByArchitecture".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&published, &reference).await {
                debug!(error = %e, "cannot publish event");
            }
        }
        Ok(match done.retry {
            Some(attempts) => Pass::Retry(attempts),
            None => Pass::Done,
        })
    }

    /// The platforms all containers and init containers support, or the first error.
    async fn inspect(&self, pod: &Pod) -> Inspection {
        let info = match PodInfo::from_pod(pod) {
            Ok(info) => info,
            Err(e) => return Inspection::Failed(e.to_string()),
        };
        let mut per_image = Vec::new();
        for image in &info.images {
            let request = InspectRequest {
                image: image.image.clone(),
                namespace: info.namespace.clone(),
                pull_secrets: info.image_pull_secrets.clone(),
                service_account: info.service_account.clone(),
                bypass_cache: image.pull_always,
            };
            match self.inspector.inspect(&request).await {
                Ok(found) => per_image.push((image.container.clone(), found.platform_list())),
                Err(e) => return Inspection::Failed(e.to_string()),
            }
        }
        let containers: Vec<ContainerPlatforms<'_>> = per_image
            .iter()
            .map(|(container, platforms)| ContainerPlatforms {
                container,
                platforms,
            })
            .collect();
        Inspection::Compatible(compatible_platforms(&containers))
    }
}

enum Pass {
    Done,
    Conflict,
    Retry(u32),
}
