//! Observe: everything a pass decides from, read once at its start (`Snapshot::read`).
//! Reads only; the decision (`decide`) never reads the cluster, and the writes (`act`)
//! never read it to decide.

pub mod reads;
pub mod rollout;
pub mod scheduler_names;

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Resource, ResourceExt};
use multiarch_crd::{ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, PlacementMode};

use crate::{
    component::{Component, Rollout},
    install::Settings,
    observe::{
        reads::{ObserveError, OptionalApis},
        scheduler_names::{DeployedScheduler, every_name, previous_names},
    },
    pod_ref::PodRef,
};

/// What the cluster looked like at the start of a pass.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The ClusterPodPlacementConfig is being deleted.
    pub deleting: bool,
    pub finalizers: Vec<String>,
    pub rollouts: BTreeMap<Component, Rollout>,
    /// The operator's mutating webhook configuration exists.
    pub route_configured: bool,
    /// The mode it routes to (`None`: no configuration, or a path that is no mode's).
    pub routing: Option<PlacementMode>,
    /// When the route was seen, before any pod was listed: the clocks run from here (a
    /// clock started here started after the route was seen gone; one found expired here
    /// expired before the pods were listed).
    pub seen_at: Instant,
    /// The names the scheduler's Deployment places and placed (`None` without one).
    pub deployed_scheduler: Option<DeployedScheduler>,
    /// Unbound pending pods per scheduler name, for the names that matter this pass: a
    /// scheduler being removed (every name it had), and the names a rename left behind.
    pub waiting: BTreeMap<String, Vec<PodRef>>,
    /// Pods with multiarch's scheduling gate (read when uninstalling).
    pub gated: Vec<PodRef>,
    /// ENoExecEvents left (read while the monitor is off and its handler is there, and
    /// when uninstalling).
    pub reports: Vec<String>,
    /// Pods labelled misplaced (read while the correction is on).
    pub misplaced_pods: Option<usize>,
    pub apis: OptionalApis,
    /// Every PodPlacementConfig as `namespace/name` (`None`: it could not be read).
    pub pod_placement_configs: Option<Vec<String>>,
    /// The journal's entries: pods deleted to be recreated, not yet created again.
    pub journal: Vec<ConfigMap>,
    /// Reads that failed without stopping the pass: (what, why).
    pub unread: Vec<(&'static str, String)>,
}

impl Snapshot {
    /// Reads the cluster for one pass over `cppc` (whose spec in force is `spec`). An
    /// uninstall cannot go on without any of it; an installed pass goes on without the
    /// PodPlacementConfigs and the journal (named in `unread`).
    pub async fn read(
        client: &kube::Client,
        settings: &Settings,
        cppc: &ClusterPodPlacementConfig,
        spec: &ClusterPodPlacementConfigSpec,
    ) -> Result<Snapshot, ObserveError> {
        let deleting = cppc.meta().deletion_timestamp.is_some();
        let (rollouts, deployed_scheduler) = reads::workloads(client, settings).await?;
        let (route_configured, routing) = reads::route(client).await?;
        let seen_at = Instant::now();
        let mut waiting = BTreeMap::new();
        for name in names_to_watch(spec, deleting, deployed_scheduler.as_ref()) {
            let pods = reads::pods_waiting_for(client, &name).await?;
            waiting.insert(name, pods);
        }
        let gated = if deleting {
            reads::gated_pods(client).await?
        } else {
            Vec::new()
        };
        let plugins = spec.plugins.as_ref();
        let monitor = plugins.is_some_and(|p| p.exec_format_error_monitor_enabled());
        let handler = rollouts.contains_key(&Component::EnoexecHandler);
        let reports = if deleting || (!monitor && handler) {
            reads::enoexec_events(client, settings).await?
        } else {
            Vec::new()
        };
        let correction = plugins.is_some_and(|p| p.enabled_misplaced_pod_correction().is_some());
        let misplaced_pods = if correction && !deleting {
            Some(reads::misplaced_pods(client).await?)
        } else {
            None
        };
        let mut unread = Vec::new();
        let configs = reads::pod_placement_configs(client).await;
        let journal = reads::journal(client, settings).await;
        let (pod_placement_configs, journal) = if deleting {
            (Some(configs?), journal?)
        } else {
            (
                kept(configs, "list the PodPlacementConfigs", &mut unread),
                kept(
                    journal,
                    "read the journal of pods being recreated",
                    &mut unread,
                )
                .unwrap_or_default(),
            )
        };
        Ok(Snapshot {
            deleting,
            finalizers: cppc.finalizers().to_vec(),
            rollouts,
            route_configured,
            routing,
            seen_at,
            deployed_scheduler,
            waiting,
            gated,
            reports,
            misplaced_pods,
            apis: reads::optional_apis(client).await?,
            pod_placement_configs,
            journal,
            unread,
        })
    }

    pub fn available(&self, component: Component) -> bool {
        self.rollouts.get(&component).is_some_and(|r| r.available)
    }

    pub fn exists(&self, component: Component) -> bool {
        self.rollouts.get(&component).is_some_and(|r| r.exists)
    }

    pub fn rolled_out(&self, component: Component) -> bool {
        self.rollouts.get(&component).is_some_and(|r| r.rolled_out)
    }

    /// Every pod waiting under any name read: each once, as a pod names one scheduler.
    pub fn waiting_pods(&self) -> Vec<PodRef> {
        self.waiting.values().flatten().cloned().collect()
    }
}

/// The scheduler names whose waiting pods matter: while uninstalling or switching away
/// from scheduler mode, every name the scheduler has or had and the one the spec gives;
/// otherwise the names a rename left behind (the scheduler's own pending pods are its
/// business, and are not listed every pass).
fn names_to_watch(
    spec: &ClusterPodPlacementConfigSpec,
    deleting: bool,
    deployed: Option<&DeployedScheduler>,
) -> Vec<String> {
    let placement = spec.placement_or_default();
    if deleting {
        return every_name(deployed, &placement.scheduler_name);
    }
    match deployed {
        Some(_) if placement.mode != PlacementMode::Scheduler => {
            every_name(deployed, &placement.scheduler_name)
        }
        Some(_) => previous_names(deployed, &placement.scheduler_name),
        None => Vec::new(),
    }
}

fn kept<T>(
    read: Result<T, ObserveError>,
    what: &'static str,
    unread: &mut Vec<(&'static str, String)>,
) -> Option<T> {
    read.map_err(|e| unread.push((what, e.to_string()))).ok()
}
