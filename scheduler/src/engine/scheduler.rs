//! The scheduler's core state machine, shared by `multiarch scheduler` and `simulate`:
//! cluster changes in, one scheduling decision out per call. No I/O and no waiting.

use std::{sync::Arc, time::Instant};

use multiarch_crd::names::NODE_ARCH_LABEL;
use multiarch_plugins::{
    events::{ClusterChange, EventKind, NodeChanges},
    framework::CycleContext,
    image_platforms::{ContainerImagePlatforms, ImagePlatforms, PodImagePlatforms},
    model::{
        cluster::{AssignedPodUpsert, ClusterState, NodeUpsert},
        node::NodeInfo,
        nominated::NominatedPods,
        pod::PodInfo,
        storage::VolumeBindingPlan,
    },
    profile::Profile,
};
use multiarch_policy::architecture_rules::RuleSubject;
use multiarch_policy::exemption;
use multiarch_policy::pod_images::ContainerImage;
use multiarch_policy::preferences::{applied, architecture_preferences};
use multiarch_policy::selectors::Requirement;
use multiarch_runtime::backoff::Backoff;
use rand::{SeedableRng, rngs::SmallRng};
use rustc_hash::FxHashMap;

use super::outcome::{FailureKind, Nomination, Outcome, Preemption};
use super::placement_inputs::PlacementInputs;
use super::storage_objects::{StorageKey, StorageObject};
use super::{
    cycle::{Cycle, NodeChoice, Rotation},
    diagnosis::{Diagnosis, NO_CLAIMS_TO_DEALLOCATE},
    image_source::{ImageLookup, ImageSource},
    placement_quality::QualityAudit,
    preemption::{self, PreemptionResult},
    queue::SchedulingQueue,
    rule_override::rule_override,
};

pub struct SchedulerCore {
    pub cluster: ClusterState,
    pub queue: SchedulingQueue,
    /// Pods preemption made room for.
    pub nominated: NominatedPods,
    profile: Profile,
    inputs: PlacementInputs,
    rotation: Rotation,
    rng: SmallRng,
    /// Volume decisions of assumed pods, undone if their binding fails.
    volume_plans: FxHashMap<String, VolumeBindingPlan>,
    /// `simulate --quality-sample`: some cycles also score every feasible node.
    quality: Option<QualityAudit>,
}

/// What a cycle decided, owned, once its borrows of the cluster end.
enum Decision {
    Chosen(NodeChoice),
    Failed(Diagnosis, Option<PreemptionResult>),
}

impl SchedulerCore {
    pub fn new(profile: Profile, inputs: PlacementInputs, seed: u64) -> Self {
        SchedulerCore {
            cluster: ClusterState::new(),
            queue: SchedulingQueue::new(Backoff::default()),
            nominated: NominatedPods::default(),
            profile,
            inputs,
            rotation: Rotation::default(),
            rng: SmallRng::seed_from_u64(seed),
            volume_plans: FxHashMap::default(),
            quality: None,
        }
    }

    /// From now on, one cycle in `every` also scores every feasible node, to compare its
    /// choice with the best (see `placement_quality`).
    pub fn audit_placement_quality(&mut self, every: u64) {
        self.quality = Some(QualityAudit::every(every));
    }

    pub fn quality_audit(&self) -> Option<&QualityAudit> {
        self.quality.as_ref()
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn scheduler_name(&self) -> &str {
        &self.profile.scheduler_name
    }

    /// New weights or preferences: pods waiting on configuration may fit now.
    pub fn set_configuration(
        &mut self,
        mut profile: Profile,
        inputs: PlacementInputs,
        now: Instant,
    ) {
        profile.queueing_hints = self.profile.queueing_hints;
        self.profile = profile;
        self.inputs = inputs;
        self.event(&ClusterChange::ConfigChanged, now);
    }

    /// Whether this scheduler places the pod (kube-scheduler's `responsibleForPod`, plus
    /// the conditions under which a pod may be scheduled at all).
    pub fn responsible_for(&self, pod: &PodInfo) -> bool {
        *pod.scheduler_name == *self.profile.scheduler_name
            && !exemption::assigned(pod.node_name.as_deref())
            && pod.extras().scheduling_gates.is_empty()
            && !pod.deleting
    }

    fn event(&mut self, change: &ClusterChange<'_>, now: Instant) {
        self.queue
            .on_event(change, now, &self.profile, &self.cluster);
    }

    /// See [`ClusterState::reserve_nodes`].
    pub fn reserve_nodes(&mut self, additional: usize) {
        self.cluster.reserve_nodes(additional);
    }

    pub fn apply_node(&mut self, node: NodeInfo, now: Instant) {
        let name = node.name.clone();
        match self.cluster.upsert_node(node) {
            NodeUpsert::Added => {
                if let Some(new) = self.cluster.node(&name) {
                    let change = ClusterChange::NodeAdded(new);
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
            NodeUpsert::Updated { old, changes } => {
                if let Some(new) = self.cluster.node(&name) {
                    let change = ClusterChange::NodeUpdated {
                        old: &old,
                        new,
                        changes,
                    };
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
            NodeUpsert::Unchanged if self.profile.queueing_hints => {
                self.queue.unchanged(EventKind::NodeUpdate);
            }
            // Without hints, every update is an event (what the scheduler did before them).
            NodeUpsert::Unchanged => {
                if let Some(new) = self.cluster.node(&name) {
                    let change = ClusterChange::NodeUpdated {
                        old: new,
                        new,
                        changes: NodeChanges::default(),
                    };
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
        }
    }

    pub fn delete_node(&mut self, name: &str, now: Instant) {
        if let Some(old) = self.cluster.remove_node(name) {
            self.event(&ClusterChange::NodeDeleted(&old), now);
        }
    }

    /// A pod was added or changed. Assigned pods (any scheduler) go into the cluster
    /// model; our pending pods into the queue (and their nominations into the
    /// nominator); anything else leaves the queue.
    pub fn apply_pod(&mut self, pod: PodInfo, now: Instant) {
        // Its labels are shared there (the new `Arc` is held by nothing else).
        self.apply_shared_pod(Arc::new(pod), now);
    }

    /// [`apply_pod`](Self::apply_pod) of a pod already shared (`simulate` hands its
    /// prepared pods over without copying them).
    pub fn apply_shared_pod(&mut self, mut pod: Arc<PodInfo>, now: Instant) {
        // A pod someone else holds too keeps its own labels (copying it to share them
        // would cost more than it saves).
        if let Some(unshared) = Arc::get_mut(&mut pod) {
            self.cluster.share_repeated_values(unshared);
        }
        if pod.node_name.is_some() {
            self.queue.delete(&pod.uid);
            self.nominated.remove(&pod.uid);
            self.volume_plans.remove(&pod.uid);
            match self.cluster.add_assigned_pod(pod.clone()) {
                AssignedPodUpsert::Added => {
                    self.event(&ClusterChange::AssignedPodAdded(&pod), now);
                }
                AssignedPodUpsert::Updated { old } => {
                    self.event(
                        &ClusterChange::AssignedPodUpdated {
                            old: &old,
                            new: &pod,
                        },
                        now,
                    );
                }
                AssignedPodUpsert::Unchanged => {}
            }
        } else if self.responsible_for(&pod) {
            if !self.cluster.is_assumed(&pod.uid) {
                match &pod.extras().nominated_node {
                    Some(node) if self.nominated.node_of(&pod.uid) != Some(node.as_str()) => {
                        self.nominated.nominate(pod.clone(), node);
                    }
                    // A version without the nomination the scheduler just made (its
                    // status patch is still on the way) keeps it.
                    _ => self.nominated.update(&pod),
                }
                self.queue.add_or_update(pod, now);
            }
        } else {
            self.queue.delete(&pod.uid);
            self.nominated.remove(&pod.uid);
        }
    }

    pub fn delete_pod(&mut self, uid: &str, now: Instant) {
        self.queue.delete(uid);
        self.nominated.remove(uid);
        if let Some(plan) = self.volume_plans.remove(uid) {
            self.cluster.storage_mut().revert(&plan);
        }
        if let Some(old) = self.cluster.remove_pod(uid) {
            self.event(&ClusterChange::AssignedPodDeleted(&old), now);
        }
    }

    /// The API refused or failed the binding (not 404/409: those drop the pod): undo the
    /// assumption and retry with backoff.
    pub fn binding_failed(&mut self, pod: Arc<PodInfo>, attempts: u32, now: Instant) {
        self.undo_assumption(&pod.uid, now);
        // The outcome's pod is the placed one; it waits unassigned again.
        let mut pod = Arc::unwrap_or_clone(pod);
        pod.node_name = None;
        let pod = Arc::new(pod);
        // `attempts` already counts this attempt; the error backoff counts it once more.
        self.queue
            .requeue_after_bind_error(pod, attempts.saturating_sub(1), now);
    }

    /// The binding target is gone for good (pod deleted, replaced or bound by someone
    /// else): forget it.
    pub fn binding_dropped(&mut self, uid: &str, now: Instant) {
        self.undo_assumption(uid, now);
        self.queue.delete(uid);
        self.nominated.remove(uid);
    }

    fn undo_assumption(&mut self, uid: &str, now: Instant) {
        if let Some(plan) = self.volume_plans.remove(uid) {
            self.cluster.storage_mut().revert(&plan);
        }
        if let Some(forgotten) = self.cluster.forget(uid) {
            self.event(&ClusterChange::AssignedPodDeleted(&forgotten), now);
        }
    }

    /// The evictions of a preemption were sent (`ok`) or failed: the pod is retried now,
    /// or after an error backoff without its nomination.
    pub fn preemption_done(&mut self, uid: &str, ok: bool, now: Instant) {
        if ok {
            self.queue.preemption_done(uid);
        } else {
            self.nominated.remove(uid);
            self.queue.error(uid, now);
        }
    }

    pub fn images_resolved(&mut self, images: &[String], now: Instant) {
        self.queue.images_resolved(images);
        self.event(&ClusterChange::ImagesResolved(images), now);
    }

    /// Timers: backoff expiry and the 5-minute unschedulable flush.
    pub fn tick(&mut self, now: Instant) {
        self.queue.flush(now);
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

        let rule = self.inputs.architecture_rules.decide(RuleSubject {
            name: &pod.name,
            namespace: &pod.namespace,
            labels: &pod.labels,
            annotations: &pod.extras().annotations,
        });
        let (containers, pending) = looked_up(images, &pod);
        // A rule decides without the images: what they answered so far only tells
        // whether the rule sends the pod where they have no build.
        if !pending.is_empty() && rule.is_none() {
            self.queue
                .wait_for_images(&pod.uid, pending.iter().map(|i| i.image.clone()).collect());
            return Some(Outcome::WaitingForImages {
                pod,
                images: pending,
            });
        }
        let pod_images = PodImagePlatforms { containers };
        let rule_override = rule
            .as_ref()
            .filter(|_| pending.is_empty())
            .and_then(|r| rule_override(r, &pod_images));

        let own_preferences = own_architecture_preferences(&pod);
        let preferences = applied(&architecture_preferences(
            &pod.namespace,
            &pod.labels,
            &own_preferences,
            &self.inputs.configs,
            self.inputs.cluster_plugins.as_ref(),
        ));
        let nominated_node = self.nominated.node_of(&pod.uid).map(str::to_owned);
        // A nominated node is tried alone first: nothing to compare that choice with.
        let mut audit = self
            .quality
            .as_mut()
            .filter(|_| nominated_node.is_none())
            .and_then(|audit| audit.next_is_sampled().then_some(audit));
        let (decision, every_score) = {
            let ctx = CycleContext {
                pod: &pod,
                cluster: &self.cluster,
                images: &pod_images,
                arch_preferences: &preferences,
                fallback_architecture: self.inputs.fallback_architecture.as_deref(),
                architecture_rule: rule.as_ref(),
                nominated: &self.nominated,
                unknown_node_level: self.inputs.unknown_node_level(),
            };
            let every_score = audit
                .as_mut()
                .and_then(|a| a.score_every_node(&self.profile, &ctx));
            let decision = decide(
                &self.profile,
                &ctx,
                &mut self.rotation,
                &mut self.rng,
                nominated_node.as_deref(),
            );
            (decision, every_score)
        };
        if let (Some(audit), Some(scores), Decision::Chosen(choice)) =
            (audit, &every_score, &decision)
        {
            audit.record(scores, choice.node);
        }
        let outcome = match decision {
            Decision::Chosen(choice) => {
                self.scheduled(pod, choice, &pod_images, popped.attempts + 1)
            }
            Decision::Failed(diagnosis, preemption) => {
                self.failed(pod, diagnosis, preemption, nominated_node.is_some(), now)
            }
        };
        Some(outcome.with_architecture_rule(rule, rule_override))
    }

    fn scheduled(
        &mut self,
        pod: Arc<PodInfo>,
        choice: NodeChoice,
        images: &PodImagePlatforms,
        attempts: u32,
    ) -> Outcome {
        let node = &self.cluster.nodes()[choice.node];
        let node_name = node.name.clone();
        let node_architecture = node.platform.to_string();
        let mut message = format!(
            "Successfully assigned {}/{} to {} ({})",
            pod.namespace, pod.name, node_name, node_architecture
        );
        match &choice.compatible {
            Some(c) if c.decided_by.is_some() => message.push_str(&format!(
                "; architectures {} from {}",
                c.describe(),
                c.decided_by.as_deref().unwrap_or_default()
            )),
            Some(c) if c.fallback_used => message.push_str(&format!(
                "; image inspection failed, so the pod was placed on its fallback architecture {}",
                c.describe()
            )),
            Some(c) => message.push_str(&format!("; images support {}", c.describe())),
            None => {}
        }
        for left_out in images
            .containers
            .iter()
            .filter_map(|c| c.left_out.as_deref())
        {
            message.push_str("; ");
            message.push_str(left_out);
        }
        // The queue and the nominator let go of the pod first, so the model takes it
        // without a copy.
        self.nominated.remove(&pod.uid);
        self.queue.done(&pod.uid);
        let pod = self.cluster.assume(pod, &node_name);
        if !choice.volumes.is_empty() {
            self.cluster
                .storage_mut()
                .assume(&choice.volumes, &node_name);
            self.volume_plans
                .insert(pod.uid.clone(), choice.volumes.clone());
        }
        Outcome::Scheduled {
            pod,
            node: node_name,
            node_architecture,
            message,
            attempts,
            volumes: choice.volumes,
            architecture_rule: None,
            rule_override: None,
        }
    }

    fn failed(
        &mut self,
        pod: Arc<PodInfo>,
        mut diagnosis: Diagnosis,
        preemption: Option<PreemptionResult>,
        had_nomination: bool,
        now: Instant,
    ) -> Outcome {
        let rejectors: Vec<&'static str> = diagnosis.rejectors.iter().copied().collect();
        let mut kinds: Vec<EventKind> = rejectors
            .iter()
            .flat_map(|r| self.profile.events_of(r).iter().copied())
            .collect();
        kinds.sort();
        kinds.dedup();
        let mut nomination = Nomination::Unchanged;
        let mut order = None;
        match preemption {
            Some(PreemptionResult::Nominated {
                node,
                victims,
                displaced,
            }) => {
                diagnosis.post_filter_message = None;
                for d in &displaced {
                    self.nominated.remove(&d.uid);
                }
                self.nominated.nominate(pod.clone(), &node);
                nomination = Nomination::Set(node.clone());
                order = Some(Preemption {
                    node,
                    victims,
                    displaced,
                });
            }
            Some(PreemptionResult::NotPossible { message, clear }) => {
                diagnosis.post_filter_message =
                    Some(format!("{NO_CLAIMS_TO_DEALLOCATE}, preemption: {message}"));
                if clear && had_nomination {
                    self.nominated.remove(&pod.uid);
                    nomination = Nomination::Clear;
                }
            }
            None => {}
        }
        let message = diagnosis.message();
        let kind = if diagnosis.error.is_some() {
            self.queue.error(&pod.uid, now);
            FailureKind::SchedulerError
        } else if order.is_some() {
            self.queue.wait_for_preemption(&pod.uid, rejectors, kinds);
            FailureKind::Unschedulable
        } else {
            self.queue.unschedulable(
                &pod.uid,
                rejectors,
                kinds,
                diagnosis.retry_with_backoff,
                now,
            );
            FailureKind::Unschedulable
        };
        Outcome::Failed {
            pod,
            kind,
            message,
            diagnosis: Box::new(diagnosis),
            nomination,
            preemption: order,
            architecture_rule: None,
            rule_override: None,
        }
    }
}

/// One cycle, and preemption when no node fits for a reason evictions can fix.
fn decide(
    profile: &Profile,
    ctx: &CycleContext<'_>,
    rotation: &mut Rotation,
    rng: &mut SmallRng,
    nominated_node: Option<&str>,
) -> Decision {
    if ctx.cluster.nodes().is_empty() {
        return Decision::Failed(Diagnosis::default(), None);
    }
    let mut cycle = match Cycle::pre_filter(profile, ctx) {
        Ok(cycle) => cycle,
        // kube-scheduler's DefaultPreemption does not run after a PreFilter rejection.
        Err(diagnosis) => return Decision::Failed(*diagnosis, None),
    };
    match cycle.run(rotation, rng, nominated_node) {
        Ok(choice) => Decision::Chosen(choice),
        Err(diagnosis) if diagnosis.error.is_some() => Decision::Failed(*diagnosis, None),
        Err(diagnosis) => {
            let result = preemption::preempt(&cycle, &diagnosis, nominated_node, rng);
            Decision::Failed(*diagnosis, Some(result))
        }
    }
}

/// What `images` answered for each of the pod's images: the platforms known (or the
/// failures), and the images not read yet.
fn looked_up(
    images: &dyn ImageSource,
    pod: &PodInfo,
) -> (Vec<ContainerImagePlatforms>, Vec<ContainerImage>) {
    let mut pending = Vec::new();
    let mut containers = Vec::with_capacity(pod.images.len());
    for image in pod.images.iter() {
        let mut left_out = None;
        let platforms = match images.lookup(pod, image) {
            ImageLookup::Known {
                platforms,
                left_out: not_runnable,
            } => {
                left_out = not_runnable;
                ImagePlatforms::Known(platforms)
            }
            ImageLookup::Anywhere => ImagePlatforms::Anywhere,
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
            left_out,
        });
    }
    (containers, pending)
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
mod architecture_rule_tests;
mod cluster_changes;
#[cfg(test)]
mod tests;
