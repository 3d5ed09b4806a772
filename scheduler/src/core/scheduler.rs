//! The scheduler's core state machine, shared by `multiarch scheduler` and `simulate`:
//! cluster events in, one scheduling decision out per call. No I/O and no waiting.

use std::{sync::Arc, time::Instant};

use multiarch_crd::{ClusterPlugins, PodPlacementConfig, names::NODE_ARCH_LABEL};
use multiarch_plugins::{
    exemption,
    framework::CycleContext,
    image_platforms::{ContainerImagePlatforms, ImagePlatforms, PodImagePlatforms},
    model::{
        cluster::{ClusterEvent, ClusterState},
        node::NodeInfo,
        pod::{ContainerImage, PodInfo},
        selectors::Requirement,
    },
    preferences::{applied, architecture_preferences},
    profile::Profile,
};
use multiarch_runtime::backoff::Backoff;
use rand::{SeedableRng, rngs::SmallRng};

use super::{
    cycle::{self, Rotation},
    diagnosis::Diagnosis,
    image_source::{ImageLookup, ImageSource},
    queue::SchedulingQueue,
};

/// The parts of the configuration CRDs that placement reads.
#[derive(Clone, Debug, Default)]
pub struct PlacementInputs {
    pub cluster_plugins: Option<ClusterPlugins>,
    pub configs: Vec<PodPlacementConfig>,
    pub fallback_architecture: Option<String>,
}

/// Condition reason written on `PodScheduled=False`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Unschedulable,
    SchedulerError,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unschedulable => "Unschedulable",
            FailureKind::SchedulerError => "SchedulerError",
        }
    }
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// Assumed on `node`; the caller binds it.
    Scheduled {
        pod: Arc<PodInfo>,
        node: String,
        node_architecture: String,
        /// The text of the `Scheduled` event.
        message: String,
        attempts: u32,
    },
    Failed {
        pod: Arc<PodInfo>,
        kind: FailureKind,
        /// The text of the `FailedScheduling` event and the condition message.
        message: String,
        diagnosis: Box<Diagnosis>,
    },
    /// Some images are being inspected; the pod waits without blocking the cycle.
    WaitingForImages {
        pod: Arc<PodInfo>,
        images: Vec<ContainerImage>,
    },
    /// Not scheduled: being deleted, or already placed.
    Skipped {
        pod: Arc<PodInfo>,
        why: &'static str,
    },
}

pub struct SchedulerCore {
    pub cluster: ClusterState,
    pub queue: SchedulingQueue,
    profile: Profile,
    inputs: PlacementInputs,
    rotation: Rotation,
    rng: SmallRng,
}

impl SchedulerCore {
    pub fn new(profile: Profile, inputs: PlacementInputs, seed: u64) -> Self {
        SchedulerCore {
            cluster: ClusterState::new(),
            queue: SchedulingQueue::new(Backoff::default()),
            profile,
            inputs,
            rotation: Rotation::default(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn scheduler_name(&self) -> &str {
        &self.profile.scheduler_name
    }

    /// New weights or preferences: pods waiting on configuration may fit now.
    pub fn set_configuration(&mut self, profile: Profile, inputs: PlacementInputs, now: Instant) {
        self.profile = profile;
        self.inputs = inputs;
        self.event(ClusterEvent::ConfigChanged, now);
    }

    /// Whether this scheduler places the pod (kube-scheduler's `responsibleForPod`, plus
    /// the conditions under which a pod may be scheduled at all).
    pub fn responsible_for(&self, pod: &PodInfo) -> bool {
        pod.scheduler_name == self.profile.scheduler_name
            && !exemption::assigned(pod.node_name.as_deref())
            && pod.scheduling_gates.is_empty()
            && !pod.deleting
    }

    pub fn apply_node(&mut self, node: NodeInfo, now: Instant) {
        let event = self.cluster.upsert_node(node);
        self.event(event, now);
    }

    pub fn delete_node(&mut self, name: &str) {
        self.cluster.remove_node(name);
    }

    /// A pod was added or changed. Assigned pods (any scheduler) go into the cluster
    /// model; our pending pods into the queue; anything else leaves the queue.
    pub fn apply_pod(&mut self, pod: PodInfo, now: Instant) {
        let pod = Arc::new(pod);
        if pod.node_name.is_some() {
            self.queue.delete(&pod.uid);
            let event = self.cluster.add_assigned_pod(pod);
            self.event(event, now);
        } else if self.responsible_for(&pod) {
            if !self.cluster.is_assumed(&pod.uid) {
                self.queue.add_or_update(pod, now);
            }
        } else {
            self.queue.delete(&pod.uid);
        }
    }

    pub fn delete_pod(&mut self, uid: &str, now: Instant) {
        self.queue.delete(uid);
        if let Some(event) = self.cluster.remove_pod(uid) {
            self.event(event, now);
        }
    }

    /// The API refused or failed the binding (not 404/409: those drop the pod): undo the
    /// assumption and retry with backoff.
    pub fn binding_failed(&mut self, pod: Arc<PodInfo>, attempts: u32, now: Instant) {
        if self.cluster.forget(&pod.uid) {
            self.event(ClusterEvent::AssignedPodDeleted, now);
        }
        // `attempts` already counts this attempt; the error backoff counts it once more.
        self.queue
            .requeue_after_bind_error(pod, attempts.saturating_sub(1), now);
    }

    /// The binding target is gone for good (pod deleted, replaced or bound by someone
    /// else): forget it.
    pub fn binding_dropped(&mut self, uid: &str, now: Instant) {
        if self.cluster.forget(uid) {
            self.event(ClusterEvent::AssignedPodDeleted, now);
        }
        self.queue.delete(uid);
    }

    pub fn images_resolved(&mut self, images: &[String], now: Instant) {
        self.queue.images_resolved(images, now);
    }

    /// Timers: backoff expiry and the 5-minute unschedulable flush.
    pub fn tick(&mut self, now: Instant) {
        self.queue.flush(now);
    }

    fn event(&mut self, event: ClusterEvent, now: Instant) {
        let profile = &self.profile;
        self.queue
            .on_event(event, now, |plugin| profile.events_of(plugin));
    }

    /// Pops one pod and decides. `None` when no pod is active.
    pub fn schedule_next(&mut self, images: &dyn ImageSource, now: Instant) -> Option<Outcome> {
        let popped = self.queue.pop()?;
        let pod = popped.pod;
        if pod.deleting {
            self.queue.done(&pod.uid);
            return Some(Outcome::Skipped {
                pod,
                why: "the pod is being deleted",
            });
        }
        if self.cluster.node_of(&pod.uid).is_some() {
            self.queue.done(&pod.uid);
            return Some(Outcome::Skipped {
                pod,
                why: "the pod is already placed",
            });
        }

        let mut pending = Vec::new();
        let mut containers = Vec::with_capacity(pod.images.len());
        for image in &pod.images {
            let platforms = match images.lookup(&pod, image) {
                ImageLookup::Known(p) => ImagePlatforms::Known(p),
                ImageLookup::Failed(e) => ImagePlatforms::Failed(e),
                ImageLookup::Pending => {
                    pending.push(image.clone());
                    continue;
                }
            };
            containers.push(ContainerImagePlatforms {
                container: image.container.clone(),
                image: image.image.clone(),
                platforms,
            });
        }
        if !pending.is_empty() {
            self.queue
                .wait_for_images(&pod.uid, pending.iter().map(|i| i.image.clone()).collect());
            return Some(Outcome::WaitingForImages {
                pod,
                images: pending,
            });
        }
        let pod_images = PodImagePlatforms { containers };

        let own_preferences = own_architecture_preferences(&pod);
        let preferences = applied(&architecture_preferences(
            &pod.namespace,
            &pod.labels,
            &own_preferences,
            &self.inputs.configs,
            self.inputs.cluster_plugins.as_ref(),
        ));
        let ctx = CycleContext {
            pod: &pod,
            cluster: &self.cluster,
            images: &pod_images,
            arch_preferences: &preferences,
            fallback_architecture: self.inputs.fallback_architecture.as_deref(),
        };
        match cycle::run(&self.profile, &ctx, &mut self.rotation, &mut self.rng) {
            Ok(placement) => {
                let node = &self.cluster.nodes()[placement.node];
                let node_name = node.name.clone();
                let node_architecture = node.platform.to_string();
                let mut message = format!(
                    "Successfully assigned {}/{} to {} ({})",
                    pod.namespace, pod.name, node_name, node_architecture
                );
                match &placement.compatible {
                    Some(c) if c.fallback_used => message.push_str(&format!(
                        "; image inspection failed, so the pod was placed on its fallback architecture {}",
                        c.describe()
                    )),
                    Some(c) => message.push_str(&format!("; images support {}", c.describe())),
                    None => {}
                }
                self.cluster.assume(&pod, &node_name);
                self.queue.done(&pod.uid);
                Some(Outcome::Scheduled {
                    pod,
                    node: node_name,
                    node_architecture,
                    message,
                    attempts: popped.attempts + 1,
                })
            }
            Err(diagnosis) => {
                let message = diagnosis.message();
                let kind = if diagnosis.error.is_some() {
                    self.queue.error(&pod.uid, now);
                    FailureKind::SchedulerError
                } else {
                    self.queue.unschedulable(
                        &pod.uid,
                        diagnosis.rejectors.iter().copied().collect(),
                        diagnosis.retry_with_backoff,
                        now,
                    );
                    FailureKind::Unschedulable
                };
                Some(Outcome::Failed {
                    pod,
                    kind,
                    message,
                    diagnosis: Box::new(diagnosis),
                })
            }
        }
    }
}

/// Architectures the pod itself prefers through preferred node affinity on
/// `kubernetes.io/arch`: configured preferences then stay out of its way.
fn own_architecture_preferences(pod: &PodInfo) -> Vec<String> {
    pod.preferred_node_affinity
        .iter()
        .flat_map(|(_, term)| &term.expressions)
        .filter_map(|r| match r {
            Requirement::In(key, values) if key == NODE_ARCH_LABEL => Some(values.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, time::Duration};

    use multiarch_plugins::model::{node::NodeBuilder, platform::Platform, pod::PodBuilder};

    use super::*;
    use crate::core::image_source::CatalogImages;

    const SCHED: &str = "multiarch-scheduler";

    fn catalog() -> CatalogImages {
        let mut images = HashMap::new();
        for (image, archs) in [
            ("multi:1", &["amd64", "arm64"][..]),
            ("amd:1", &["amd64"][..]),
            ("arm:1", &["arm64"][..]),
        ] {
            images.insert(
                image.to_owned(),
                archs
                    .iter()
                    .map(|a| Platform::linux(a))
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        CatalogImages { images }
    }

    fn core() -> SchedulerCore {
        let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
        let now = Instant::now();
        core.apply_node(
            NodeBuilder::new("amd", "amd64")
                .capacity("2", "4Gi", 110)
                .info(),
            now,
        );
        core.apply_node(
            NodeBuilder::new("arm", "arm64")
                .capacity("2", "4Gi", 110)
                .info(),
            now,
        );
        core
    }

    fn pod(name: &str, image: &str, cpu: &str) -> PodInfo {
        PodBuilder::new("ns", name)
            .scheduler(SCHED)
            .container("c", image, cpu, "100Mi")
            .info()
    }

    #[test]
    fn schedules_on_a_compatible_node_and_says_why() {
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(pod("web", "arm:1", "1"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Scheduled { node, message, .. }) => {
                assert_eq!(node, "arm");
                assert_eq!(
                    message,
                    "Successfully assigned ns/web to arm (arm64); images support arm64"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(core.cluster.is_assumed("uid-ns-web"));
        assert!(core.schedule_next(&catalog(), now).is_none());
    }

    #[test]
    fn ignores_pods_of_other_schedulers_gated_or_bound_pods() {
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(
            PodBuilder::new("ns", "default")
                .container("c", "amd:1", "", "")
                .info(),
            now,
        );
        core.apply_pod(
            PodBuilder::new("ns", "gated")
                .scheduler(SCHED)
                .gate("x/y")
                .info(),
            now,
        );
        core.apply_pod(
            PodBuilder::new("ns", "bound")
                .scheduler(SCHED)
                .node("amd")
                .container("c", "amd:1", "1", "")
                .info(),
            now,
        );
        assert!(core.schedule_next(&catalog(), now).is_none());
        // The bound pod's resources count.
        assert_eq!(core.cluster.node("amd").unwrap().requested.milli_cpu, 1000);
    }

    #[test]
    fn a_failed_pod_retries_when_capacity_frees_up() {
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(
            PodBuilder::new("ns", "hog")
                .node("amd")
                .container("c", "amd:1", "2", "")
                .info(),
            now,
        );
        core.apply_pod(pod("late", "amd:1", "1"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Failed { kind, message, .. }) => {
                assert_eq!(kind, FailureKind::Unschedulable);
                assert_eq!(
                    message,
                    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match the pod's \
                     image architectures (images support amd64). preemption: not attempted, \
                     multiarch-scheduler does not evict lower-priority pods."
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(core.queue.counts().unschedulable, 1);
        let later = now + Duration::from_secs(2);
        core.delete_pod("uid-ns-hog", later);
        match core.schedule_next(&catalog(), later) {
            Some(Outcome::Scheduled { node, .. }) => assert_eq!(node, "amd"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn waits_for_images_without_blocking_and_resumes() {
        struct Slow;
        impl ImageSource for Slow {
            fn lookup(&self, pod: &PodInfo, image: &ContainerImage) -> ImageLookup {
                if image.image == "slow:1" {
                    ImageLookup::Pending
                } else {
                    catalog().lookup(pod, image)
                }
            }
        }
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(pod("slow", "slow:1", "100m"), now);
        core.apply_pod(
            pod("fast", "multi:1", "100m"),
            now + Duration::from_millis(1),
        );
        assert!(matches!(
            core.schedule_next(&Slow, now),
            Some(Outcome::WaitingForImages { .. })
        ));
        assert!(matches!(
            core.schedule_next(&Slow, now),
            Some(Outcome::Scheduled { .. })
        ));
        assert!(core.schedule_next(&Slow, now).is_none());
        core.images_resolved(&["slow:1".into()], now);
        let mut ready = catalog();
        ready
            .images
            .insert("slow:1".into(), vec![Platform::linux("arm64")].into());
        assert!(
            matches!(core.schedule_next(&ready, now), Some(Outcome::Scheduled { node, .. }) if node == "arm")
        );
    }

    #[test]
    fn binding_failure_forgets_and_retries_with_backoff() {
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(pod("p", "multi:1", "1"), now);
        let Some(Outcome::Scheduled { pod, attempts, .. }) = core.schedule_next(&catalog(), now)
        else {
            panic!("not scheduled");
        };
        core.binding_failed(pod, attempts, now);
        assert!(!core.cluster.is_assumed("uid-ns-p"));
        assert_eq!(core.queue.counts().backoff, 1);
        core.tick(now + Duration::from_secs(2));
        assert!(matches!(
            core.schedule_next(&catalog(), now),
            Some(Outcome::Scheduled { .. })
        ));
    }

    #[test]
    fn deleting_pods_are_skipped() {
        let mut core = core();
        let now = Instant::now();
        let mut p = pod("gone", "multi:1", "1");
        core.apply_pod(p.clone(), now);
        p.deleting = true;
        p.resource_version = "2".into();
        // A deleting pod is no longer ours to schedule.
        core.apply_pod(p, now);
        assert!(core.schedule_next(&catalog(), now).is_none());
    }

    #[test]
    fn fallback_architecture_places_pods_whose_images_cannot_be_read() {
        let inputs = PlacementInputs {
            fallback_architecture: Some("arm64".into()),
            ..PlacementInputs::default()
        };
        let mut core = SchedulerCore::new(Profile::default(), inputs, 1);
        let now = Instant::now();
        core.apply_node(NodeBuilder::new("amd", "amd64").info(), now);
        core.apply_node(NodeBuilder::new("arm", "arm64").info(), now);
        core.apply_pod(pod("private", "private:1", "100m"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Scheduled { node, message, .. }) => {
                assert_eq!(node, "arm");
                assert!(message.ends_with("image inspection failed, so the pod was placed on its fallback architecture arm64"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn inspection_failure_without_fallback_waits_with_backoff() {
        let mut core = core();
        let now = Instant::now();
        core.apply_pod(pod("private", "private:1", "100m"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Failed { kind, message, .. }) => {
                assert_eq!(kind, FailureKind::Unschedulable);
                assert!(
                    message.contains("image private:1 is not in the simulation's image catalog"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(core.queue.counts().backoff, 1);
    }
}
