//! Runs the real scheduler core on a scenario, and the same scenario once more without
//! `ImageArchitecture` to count what an architecture-blind scheduler would break. Pods
//! arrive in waves; between them, and whenever only backing-off pods are left, simulated
//! time moves on to the next backoff expiry. Optionally, nodes send status updates at a
//! given rate while the scheduler works (the heartbeats of a real cluster).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_plugins::{
    model::{node::NodeInfo, pod::PodInfo},
    plugins::image_architecture,
    profile::Profile,
};
use multiarch_policy::platform::{
    ContainerPlatforms, Platform, compatible_platforms, node_is_compatible,
};
use multiarch_policy::pod_configs::NamespacedConfigs;
use multiarch_policy::selectors::Labels;

use super::{
    controllers,
    scenario::{Scenario, ScenarioError},
};
use crate::engine::outcome::Outcome;
use crate::engine::placement_inputs::PlacementInputs;
use crate::engine::placement_quality::QualityAudit;
use crate::engine::quantile::quantile;
use crate::engine::{
    binder::{Binder, Binding, InMemoryBinder},
    image_source::CatalogImages,
    scheduler::SchedulerCore,
    storage_objects::StorageObject,
};

/// How far simulated time may move on waiting for backoffs before the run ends.
const MAX_SIMULATED: Duration = Duration::from_secs(15 * 60);

/// What else happens while the scheduler works.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Status updates per node per minute (wall-clock), changing nothing the plugins read.
    pub node_updates_per_minute: u32,
    /// Off: every registered event retries a waiting pod (the behaviour before queueing
    /// hints), to measure what they save.
    pub no_queueing_hints: bool,
    /// One cycle in this many also scores every feasible node, to tell how good the
    /// choices of a cycle scoring a share of them are (0: none). Its cost is taken out of
    /// the throughput and the cycle times.
    pub quality_sample: u64,
    /// Returns every pod's node in [`RunResult::placements`] (tests read them). Off, the
    /// run keeps no record of its own: at 130,000 nodes one was 40 MB beside the
    /// scheduler's model, which knows every pod's node anyway.
    pub keep_placements: bool,
}

/// A scenario turned into objects, ready to run. A run takes them over (the scheduler
/// holds the only copy, as in a cluster, so `simulate`'s peak memory is the scheduler's);
/// clone it, or prepare it again, to run it twice.
#[derive(Clone)]
pub struct Prepared {
    pub nodes: Vec<NodeInfo>,
    /// Shared, so that handing them to the scheduler copies nothing.
    pub pods: Vec<Arc<PodInfo>>,
    /// The wave each pod of `pods` arrives in.
    pub waves: Vec<u32>,
    pub storage: Vec<StorageObject>,
    /// Namespace name → labels.
    pub namespaces: Vec<(String, Labels)>,
    pub images: CatalogImages,
    pub inputs: PlacementInputs,
    pub profile_placement: multiarch_crd::PlacementSpec,
}

impl Prepared {
    pub fn new(scenario: &Scenario) -> Result<Self, ScenarioError> {
        let spec = scenario
            .cluster_pod_placement_config
            .clone()
            .unwrap_or_default();
        let placement = spec.placement_or_default();
        let (pods, waves) = scenario
            .pods_in_waves(&placement.scheduler_name)?
            .into_iter()
            .map(|(pod, wave)| (Arc::new(pod), wave))
            .unzip();
        let nodes = scenario.node_infos()?;
        Ok(Prepared {
            storage: scenario.storage_objects(&nodes)?,
            nodes,
            pods,
            waves,
            namespaces: scenario
                .namespaces
                .iter()
                .map(|n| (n.name.clone(), n.labels.clone()))
                .collect(),
            images: scenario.image_catalog()?,
            inputs: PlacementInputs::new(
                spec.plugins.clone(),
                NamespacedConfigs::owned(scenario.pod_placement_configs.iter().cloned()),
                spec.fallback_architecture.map(|a| a.as_str().to_owned()),
                &Default::default(),
            ),
            profile_placement: placement,
        })
    }
}

#[derive(Debug, Default)]
pub struct RunResult {
    /// Pods bound at the end of the run (evicted ones are not).
    pub bound: usize,
    /// pod UID → node name, with [`RunOptions::keep_placements`] only.
    pub placements: HashMap<String, String>,
    /// SHA-256 of every `pod=node` placement in pod order (first 16 hex digits): two runs
    /// with the same digest placed every pod on the same node, whatever the timings.
    pub placement_digest: String,
    pub bound_by_arch: BTreeMap<String, usize>,
    /// `FailedScheduling` message → pods still pending with it.
    pub unschedulable: BTreeMap<String, usize>,
    pub cycle_times: Vec<Duration>,
    pub elapsed: Duration,
    /// Scheduling attempts that evicted pods, and the pods they evicted.
    pub preemptions: usize,
    pub victims: usize,
    /// Claims bound to pre-created volumes, and provisioned.
    pub volumes_bound: usize,
    pub volumes_provisioned: usize,
    /// Node status updates sent during the run.
    pub node_updates: u64,
    /// Scheduling attempts (pods popped from the queue).
    pub attempts: usize,
    /// Unschedulable pods cluster changes moved back to the queue, and left waiting.
    pub requeued: u64,
    pub left_waiting: u64,
    /// Bound pods whose images have no build for their node's platform (an
    /// architecture-blind profile's damage; images outside the catalog are not judged).
    pub incompatible: usize,
    /// Of those, the pods on a node of the right architecture below the level their
    /// images need (an x86-64-v3 build on a v2 node).
    pub below_level: usize,
    /// The placement-quality audit, when `quality_sample` asked for one.
    pub quality: Option<QualityAudit>,
    /// The process's memory on transparent huge pages at the run's end, the model still
    /// held (Linux `AnonHugePages`).
    pub huge_pages_bytes: Option<u64>,
}

impl RunResult {
    pub fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.cycle_times.clone();
        sorted.sort_unstable();
        quantile(&sorted, p).unwrap_or(Duration::ZERO)
    }

    /// A result with room for one cycle per pod: grown by doubling, the old vector was
    /// kept beside the new one.
    fn for_pods(pods: usize) -> Self {
        RunResult {
            cycle_times: Vec::with_capacity(pods),
            ..RunResult::default()
        }
    }

    pub fn pods_per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let bound = self.bound as f64;
        if secs > 0.0 { bound / secs } else { 0.0 }
    }
}

pub fn run(prepared: Prepared, profile: Profile, seed: u64) -> RunResult {
    run_with(prepared, profile, seed, RunOptions::default())
}

/// Status updates due after `elapsed` of wall-clock time.
fn updates_due(nodes: usize, options: RunOptions, elapsed: Duration) -> u64 {
    let per_second = nodes as f64 * f64::from(options.node_updates_per_minute) / 60.0;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let due = (elapsed.as_secs_f64() * per_second) as u64;
    due
}

pub fn run_with(
    prepared: Prepared,
    mut profile: Profile,
    seed: u64,
    options: RunOptions,
) -> RunResult {
    let Prepared {
        nodes,
        pods,
        waves,
        storage,
        namespaces,
        images,
        inputs,
        profile_placement: _,
    } = prepared;
    profile.queueing_hints = !options.no_queueing_hints;
    let mut core = SchedulerCore::new(profile, inputs, seed);
    if options.quality_sample > 0 {
        core.audit_placement_quality(options.quality_sample);
    }
    let audit_time = |core: &SchedulerCore| core.quality_audit().map_or(Duration::ZERO, |a| a.time);
    let start = Instant::now();
    for (name, labels) in namespaces {
        core.apply_namespace(&name, labels, start);
    }
    // Heartbeats re-send a node as its kubelet would: only then does the run keep a copy.
    let heartbeat_nodes = if options.node_updates_per_minute > 0 {
        nodes.clone()
    } else {
        Vec::new()
    };
    core.reserve_nodes(nodes.len());
    for node in nodes {
        core.apply_node(node, start);
    }
    for object in storage {
        core.apply_storage(object, start);
    }
    let mut result = RunResult::for_pods(pods.len());
    let mut by_wave: BTreeMap<u32, Vec<Arc<PodInfo>>> = BTreeMap::new();
    for (pod, wave) in pods.into_iter().zip(waves) {
        by_wave.entry(wave).or_default().push(pod);
    }

    let mut binder = InMemoryBinder::default();
    let mut last_failure: HashMap<String, String> = HashMap::new();
    let mut now = start;
    let began = Instant::now();
    for pods in by_wave.into_values() {
        for pod in pods {
            core.apply_shared_pod(pod, now);
        }
        loop {
            loop {
                let due = updates_due(heartbeat_nodes.len(), options, began.elapsed());
                while result.node_updates < due {
                    let index =
                        usize::try_from(result.node_updates).unwrap_or(0) % heartbeat_nodes.len();
                    core.apply_node(heartbeat_nodes[index].clone(), now);
                    result.node_updates += 1;
                }
                let audited_before = audit_time(&core);
                let cycle_start = Instant::now();
                let Some(outcome) = core.schedule_next(&images, now) else {
                    break;
                };
                result.attempts += 1;
                handle(
                    &mut core,
                    &mut binder,
                    &mut result,
                    &mut last_failure,
                    outcome,
                    now,
                );
                result.cycle_times.push(
                    cycle_start
                        .elapsed()
                        .saturating_sub(audit_time(&core) - audited_before),
                );
            }
            // Only backing-off pods left: time moves on to the next expiry.
            match core.queue.next_backoff_expiry() {
                Some(at) if at.duration_since(start) <= MAX_SIMULATED => {
                    now = now.max(at);
                    core.tick(now);
                }
                _ => break,
            }
        }
    }
    result.elapsed = began.elapsed().saturating_sub(audit_time(&core));
    record_waiting(&core, &last_failure, &mut result);
    record_placements(&core, &images, options, &mut result);
    result.quality = core.quality_audit().cloned();
    result.huge_pages_bytes = super::report::huge_pages_bytes();
    result
}

/// The pods left pending, by their last failure, and what the queueing hints did.
fn record_waiting(
    core: &SchedulerCore,
    last_failure: &HashMap<String, String>,
    result: &mut RunResult,
) {
    for pod in core.queue.pending() {
        let message = last_failure
            .get(&pod.uid)
            .cloned()
            .unwrap_or_else(|| "not attempted".to_owned());
        *result.unschedulable.entry(message).or_default() += 1;
    }
    for (_, hint, count) in core.queue.hint_counts() {
        match hint {
            multiarch_plugins::events::QueueingHint::Queue => result.requeued += count,
            multiarch_plugins::events::QueueingHint::QueueSkip => result.left_waiting += count,
        }
    }
}

/// The run's placements, read from the scheduler's model at its end: it holds every one
/// (evicted pods are gone from it), so the run keeps no record of its own.
fn record_placements(
    core: &SchedulerCore,
    images: &CatalogImages,
    options: RunOptions,
    result: &mut RunResult,
) {
    let mut placements: Vec<(&str, &str)> = core.cluster.placements().collect();
    placements.sort_unstable();
    result.bound = placements.len();
    result.placement_digest = placement_digest(&placements);
    count_incompatible_placements(core, images, &placements, result);
    if options.keep_placements {
        result.placements = placements
            .iter()
            .map(|(pod, node)| ((*pod).to_owned(), (*node).to_owned()))
            .collect();
    }
}

/// SHA-256 of `pod=node` lines sorted by pod UID, its first 16 hex digits.
fn placement_digest(sorted: &[(&str, &str)]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (pod, node) in sorted {
        hasher.update(pod.as_bytes());
        hasher.update(b"=");
        hasher.update(node.as_bytes());
        hasher.update(b"\n");
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn handle(
    core: &mut SchedulerCore,
    binder: &mut InMemoryBinder,
    result: &mut RunResult,
    last_failure: &mut HashMap<String, String>,
    outcome: Outcome,
    now: Instant,
) {
    match outcome {
        Outcome::Scheduled {
            pod,
            node,
            node_architecture,
            volumes,
            ..
        } => {
            if !volumes.is_empty() {
                result.volumes_bound += volumes.bindings.len();
                result.volumes_provisioned += volumes.provisions.len();
                controllers::bind_volumes(core, &volumes, &node, now);
            }
            binder.bind(Binding::of(&pod, &node, volumes));
            // Confirm as the watch would.
            let mut bound = (*pod).clone();
            bound.node_name = Some(node.clone());
            core.apply_pod(bound, now);
            last_failure.remove(&pod.uid);
            *result.bound_by_arch.entry(node_architecture).or_default() += 1;
        }
        Outcome::Failed {
            pod,
            message,
            preemption,
            ..
        } => {
            if let Some(preemption) = preemption {
                result.preemptions += 1;
                // An evicted pod is gone from the cluster (its controller, if any,
                // would create a new one): it no longer counts on its node's platform.
                for victim in &preemption.victims {
                    let arch = core
                        .cluster
                        .node_of(&victim.uid)
                        .and_then(|node| core.cluster.node(node))
                        .map(|n| n.platform.to_string());
                    if let Some(count) = arch.and_then(|a| result.bound_by_arch.get_mut(&a)) {
                        *count = count.saturating_sub(1);
                    }
                }
                result.victims += controllers::evict(core, &pod, &preemption, now);
            }
            last_failure.insert(pod.uid.clone(), message);
        }
        Outcome::WaitingForImages { .. } | Outcome::Skipped { .. } => {}
    }
}

/// How many placements put a pod on a node its images cannot run on, and how many of
/// those only because the node is below the level they need, read from the scheduler's
/// own model at the end of the run.
fn count_incompatible_placements(
    core: &SchedulerCore,
    images: &CatalogImages,
    placements: &[(&str, &str)],
    result: &mut RunResult,
) {
    let (mut incompatible, mut below_level) = (0, 0);
    for &(uid, node) in placements {
        let (Some(pod), Some(node)) = (core.cluster.pod(uid), core.cluster.node(node)) else {
            continue;
        };
        let platforms: Vec<(&str, &[Platform])> = pod
            .images
            .iter()
            .filter_map(|i| {
                images
                    .images
                    .get(&i.image)
                    .map(|p| (i.container.as_str(), &p[..]))
            })
            .collect();
        if platforms.len() != pod.images.len() {
            continue; // unknown images: nothing to judge
        }
        let containers: Vec<ContainerPlatforms<'_>> = platforms
            .iter()
            .map(|(container, platforms)| ContainerPlatforms {
                container,
                platforms,
            })
            .collect();
        let supported = compatible_platforms(&containers);
        if node_is_compatible(&supported, &node.platform) {
            continue;
        }
        incompatible += 1;
        let any_level = Platform::new(&node.platform.os, &node.platform.architecture, None);
        if node.platform.variant.is_some() && node_is_compatible(&supported, &any_level) {
            below_level += 1;
        }
    }
    result.incompatible = incompatible;
    result.below_level = below_level;
}

/// The profile of the scenario, and the same one without `ImageArchitecture`.
pub fn profiles(prepared: &Prepared) -> (Profile, Profile) {
    (
        Profile::new(&prepared.profile_placement),
        Profile::new(&prepared.profile_placement).without(image_architecture::NAME),
    )
}
