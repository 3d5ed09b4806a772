//! The misplaced-pod correction (the ClusterPodPlacementConfig's `misplacedPodCorrection`
//! plugin): pods running on a node their own images have no build for, found from exec
//! format errors and from a periodic comparison of running pods' images with their nodes,
//! are evicted through the Eviction API (PodDisruptionBudgets hold: a refusal is retried
//! at the next scan, never forced) when `verdict` allows it and the limits do; otherwise,
//! and in dry run, only reported. Every misplaced pod is labelled, for the status count.

mod limiter;
pub mod metrics;
mod scan;
pub mod verdict;

pub use scan::scan_every;

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{Namespace, Node, ObjectReference, Pod},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, EvictParams, Patch, PatchParams, Preconditions},
    core::PartialObjectMeta,
    runtime::reflector::Store,
};
use multiarch_crd::{
    ClusterPlugins, ClusterPodPlacementConfig, MisplacedPodCorrection, UnknownNodeLevel,
    names::{LABEL_MISPLACED, SINGLETON_NAME},
};
use multiarch_inspector::{ImageInspector, ImageRef, InspectRequest};
use multiarch_policy::platform::Platform;
use multiarch_policy::pod_images::PodImages;
use multiarch_policy::selectors::LabelSelector;
use multiarch_runtime::{
    event_reason::EventReason,
    event_recorder::{EventRecorder, pod_reference},
};
use tracing::{info, warn};

use self::{
    limiter::{EvictionLimiter, Limit},
    metrics::CorrectionMetrics,
    verdict::{Controller, Facts, JudgedImage, NotCorrected, decide, lacking, why_misplaced},
};

/// What one look at a pod came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The plugin is off.
    Off,
    /// Its images run on its node (or the node's architecture is unknown).
    Placed,
    /// An image could not be inspected: never judged.
    Unknown,
    Evicted,
    NotCorrected(NotCorrected),
}

pub struct Correction {
    client: kube::Client,
    /// Every node's metadata, from a watch: its `kubernetes.io/arch` and level label.
    nodes: Store<PartialObjectMeta<Node>>,
    /// Without retries of 429 (see `start`).
    evictions: kube::Client,
    inspector: Arc<dyn ImageInspector>,
    events: EventRecorder,
    metrics: CorrectionMetrics,
    limiter: Mutex<EvictionLimiter>,
    own_namespace: String,
    /// The last pod (namespace, name) the previous scan looked at: the next starts after.
    scan_cursor: Mutex<Option<(String, String)>>,
}

/// The plugin's settings and the routing the replacement would get, read per pass.
struct Settings {
    plugin: MisplacedPodCorrection,
    selector: Option<LabelSelector>,
    /// What an amd64 node whose level nothing says runs (`binaryInspection`).
    unknown_node_level: UnknownNodeLevel,
}

impl Correction {
    pub fn new(
        client: kube::Client,
        nodes: Store<PartialObjectMeta<Node>>,
        evictions: kube::Client,
        inspector: Arc<dyn ImageInspector>,
        events: EventRecorder,
        metrics: CorrectionMetrics,
        own_namespace: &str,
    ) -> Self {
        Correction {
            client,
            nodes,
            evictions,
            inspector,
            events,
            metrics,
            limiter: Mutex::new(EvictionLimiter::new(10, 1)),
            own_namespace: own_namespace.to_owned(),
            scan_cursor: Mutex::default(),
        }
    }

    async fn settings(&self) -> Result<Option<Settings>, kube::Error> {
        let Some(cppc) = Api::<ClusterPodPlacementConfig>::all(self.client.clone())
            .get_opt(SINGLETON_NAME)
            .await?
        else {
            return Ok(None);
        };
        let Some(plugin) = cppc
            .spec
            .plugins
            .as_ref()
            .and_then(|p| p.enabled_misplaced_pod_correction())
            .cloned()
        else {
            return Ok(None);
        };
        let limit = |n: i32| usize::try_from(n).unwrap_or(1);
        self.limiter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .set_limits(
                limit(plugin.max_evictions_per_minute),
                limit(plugin.max_evictions_per_controller_per_minute),
            );
        let unknown_node_level = cppc.spec.plugins.as_ref().map_or(
            UnknownNodeLevel::AnyLevel,
            ClusterPlugins::unknown_node_level,
        );
        Ok(Some(Settings {
            plugin,
            unknown_node_level,
            selector: cppc
                .spec
                .namespace_selector
                .as_ref()
                .map(LabelSelector::from),
        }))
    }

    /// Looks at `pod` on node `node_name` (an exec format error was reported there),
    /// the node's platform read as the scan reads it.
    pub async fn consider(&self, pod: &Pod, node_name: &str) -> Result<Judgement, kube::Error> {
        let Some(settings) = self.settings().await? else {
            return Ok(Judgement::Off);
        };
        let Some(nodes) = self.node_platforms(settings.unknown_node_level).await else {
            return Ok(Judgement::Unknown);
        };
        let Some(node) = nodes.get(node_name) else {
            // Gone, or without an architecture label: nothing to judge it by.
            return Ok(Judgement::Placed);
        };
        let platforms = distinct(nodes.values());
        self.judge(pod, node, &settings, &platforms).await
    }

    async fn judge(
        &self,
        pod: &Pod,
        node: &Platform,
        settings: &Settings,
        node_platforms: &[Platform],
    ) -> Result<Judgement, kube::Error> {
        // Already going (evicted by an earlier pass, or deleted): nothing to move.
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(Judgement::Placed);
        }
        let Some(containers) = self.images(pod).await else {
            self.metrics.skipped(metrics::UNINSPECTABLE);
            return Ok(Judgement::Unknown);
        };
        if lacking(&containers, node).is_empty() {
            return Ok(Judgement::Placed);
        }
        self.metrics.found.inc();
        let namespace = pod.namespace().unwrap_or_default();
        // A dry run writes nothing but events.
        if !settings.plugin.dry_run {
            self.label(pod).await?;
        }
        let facts = Facts {
            containers: &containers,
            node_platforms,
            not_routed: self.not_routed(&namespace, settings).await?,
            job_retries_left: self.job_retries_left(pod).await?,
            own_namespace: &self.own_namespace,
        };
        let why_misplaced = why_misplaced(&containers, node);
        let controller = match decide(pod, &facts) {
            Ok(controller) => controller,
            Err(reason) => return self.not_corrected(pod, None, &why_misplaced, reason).await,
        };
        if settings.plugin.dry_run {
            return self
                .not_corrected(pod, Some(&controller), &why_misplaced, NotCorrected::DryRun)
                .await;
        }
        let taken = self
            .limiter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(&controller.key(), Instant::now());
        if let Err(limit) = taken {
            let which = match limit {
                Limit::Cluster => "maxEvictionsPerMinute",
                Limit::Controller => "maxEvictionsPerControllerPerMinute",
            };
            return self
                .not_corrected(
                    pod,
                    Some(&controller),
                    &why_misplaced,
                    NotCorrected::RateLimited(which),
                )
                .await;
        }
        self.evict(pod, &controller, &why_misplaced).await
    }

    /// Evicts `pod` for `controller` to recreate; a refusal (its disruption budget) is
    /// told on the pod, and the limiter's token given back.
    async fn evict(
        &self,
        pod: &Pod,
        controller: &Controller,
        why_misplaced: &str,
    ) -> Result<Judgement, kube::Error> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.evictions.clone(), &namespace);
        match pods.evict(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                self.give_back(controller);
                self.metrics.refused.inc();
                // The budget's own words ("needs 1 healthy pods and has 1") are the cause's.
                let mut message = s.message.clone();
                for cause in s.details.iter().flat_map(|d| &d.causes) {
                    message.push(' ');
                    message.push_str(&cause.message);
                }
                return self
                    .not_corrected(
                        pod,
                        Some(controller),
                        why_misplaced,
                        NotCorrected::DisruptionBudget(message),
                    )
                    .await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.give_back(controller);
                return Ok(Judgement::Placed);
            }
            Err(e) => {
                self.give_back(controller);
                return Err(e);
            }
        }
        self.metrics.evicted.inc();
        let note = format!(
            "Evicted: {why_misplaced}; {} {} recreates it, routed to a compatible node",
            controller.kind, controller.name
        );
        info!(pod = %name, %namespace, controller = %controller.key(), "evicted a misplaced pod");
        self.publish(
            pod,
            Some(controller),
            EventReason::MisplacedPodEvicted,
            note,
        )
        .await;
        Ok(Judgement::Evicted)
    }

    fn give_back(&self, controller: &Controller) {
        self.limiter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .give_back(&controller.key());
    }

    async fn not_corrected(
        &self,
        pod: &Pod,
        controller: Option<&Controller>,
        why_misplaced: &str,
        reason: NotCorrected,
    ) -> Result<Judgement, kube::Error> {
        self.metrics.skipped(reason.label());
        let controller = controller.cloned().or_else(|| verdict::controller_of(pod));
        let note = format!("Not moved: {why_misplaced}; {}", reason.describe());
        self.publish(
            pod,
            controller.as_ref(),
            EventReason::MisplacedPodNotCorrected,
            note,
        )
        .await;
        Ok(Judgement::NotCorrected(reason))
    }

    /// The event on the pod, and on its controller when it has one.
    async fn publish(
        &self,
        pod: &Pod,
        controller: Option<&Controller>,
        reason: EventReason,
        note: String,
    ) {
        let namespace = pod.namespace().unwrap_or_default();
        let mut regarding = vec![pod_reference(&namespace, &pod.name_any(), pod.uid())];
        if let Some(c) = controller {
            regarding.push(ObjectReference {
                api_version: Some(c.api_version.clone()),
                kind: Some(c.kind.clone()),
                name: Some(c.name.clone()),
                namespace: Some(c.namespace.clone()),
                uid: Some(c.uid.clone()),
                ..ObjectReference::default()
            });
        }
        for object in &regarding {
            if let Err(e) = self
                .events
                .publish(object, reason, "CorrectMisplacedPod", note.clone())
                .await
            {
                warn!(pod = %pod.name_any(), error = %e, "cannot publish the event");
            }
        }
    }

    /// Every container's image platforms, or `None` when one cannot be inspected. A
    /// container that runs is judged by the digest it runs (its status's `imageID`), not
    /// by what its tag points to now.
    async fn images(&self, pod: &Pod) -> Option<Vec<JudgedImage>> {
        let info = PodImages::of(pod);
        let mut out = Vec::new();
        for image in &info.images {
            let mut request = InspectRequest::for_container(info.credentials(), image);
            if let Some(running) = running_image(pod, &image.container, &image.image) {
                request.image = running;
                request.bypass_cache = false;
            }
            match self.inspector.inspect(&request).await {
                Ok(found) => out.push(JudgedImage {
                    container: image.container.clone(),
                    image: image.image.clone(),
                    platforms: found.placement_platforms(),
                }),
                Err(e) => {
                    warn!(pod = %pod.name_any(), image = %request.image, error = %e, "cannot inspect: the pod is not judged");
                    return None;
                }
            }
        }
        Some(out)
    }

    async fn label(&self, pod: &Pod) -> Result<(), kube::Error> {
        if pod
            .labels()
            .get(LABEL_MISPLACED)
            .is_some_and(|v| v == "true")
        {
            return Ok(());
        }
        let patch = serde_json::json!({"metadata": {"labels": {LABEL_MISPLACED: "true"}}});
        match Api::<Pod>::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default())
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Why a replacement in `namespace` would not be routed, `None` when it would.
    async fn not_routed(
        &self,
        namespace: &str,
        settings: &Settings,
    ) -> Result<Option<String>, kube::Error> {
        let Some(selector) = &settings.selector else {
            return Ok(None);
        };
        let labels = Api::<Namespace>::all(self.client.clone())
            .get_opt(namespace)
            .await?
            .and_then(|n| n.metadata.labels)
            .unwrap_or_default();
        Ok((!selector.matches(&labels)).then(|| {
            format!("the ClusterPodPlacementConfig's namespaceSelector does not select namespace {namespace}")
        }))
    }

    /// For a Job's pod: whether the Job may fail once more.
    async fn job_retries_left(&self, pod: &Pod) -> Result<Option<bool>, kube::Error> {
        let Some(controller) = verdict::controller_of(pod).filter(|c| c.kind == "Job") else {
            return Ok(None);
        };
        let job = Api::<Job>::namespaced(self.client.clone(), &controller.namespace)
            .get_opt(&controller.name)
            .await?;
        Ok(job.map(|job| {
            let limit = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
            let failed = job.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
            failed + 1 < limit
        }))
    }
}

/// The image `container` runs, by digest: `image`'s repository at the digest of the
/// container's status's `imageID` (`registry/repo@sha256:...`, possibly after a
/// `docker-pullable://` scheme); `None` when it has not started (or the runtime reports
/// only a local image ID), and the image as written is judged.
fn running_image(pod: &Pod, container: &str, image: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    let image_id = &statuses.into_iter().find(|s| s.name == container)?.image_id;
    let (_, digest) = image_id.rsplit_once('@')?;
    if !digest.starts_with("sha256:") {
        return None;
    }
    let reference = ImageRef::parse(image).ok()?;
    Some(reference.with_digest(digest).to_string())
}

fn distinct<'a>(platforms: impl Iterator<Item = &'a Platform>) -> Vec<Platform> {
    let mut out: Vec<Platform> = platforms.cloned().collect();
    out.sort();
    out.dedup();
    out
}
