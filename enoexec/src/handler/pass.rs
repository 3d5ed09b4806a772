//! One pass over an `ENoExecEvent`, on a fresh read: the report on its pod (label first,
//! then the Warning event, `ExecFormatError` or, for a loader's refusal, `CPULevelTooLow`,
//! then the object deleted), or the object deleted without a report when its pod or node
//! is gone, the pod moved, or its status never came.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use multiarch_crd::{ENoExecEvent, ENoExecEventStatus};
use multiarch_inspector::{ImageInfo, InspectRequest};
use multiarch_policy::{node_level::node_variant, platform::variant_level, pod_images::PodImages};
use multiarch_runtime::{event_reason::EventReason, event_recorder::pod_reference};
use tracing::{info, warn};

use super::{
    HandlerContext, NODE_ARCH_LABEL,
    message::{Failure, LoaderFailure, loader_message, message},
};
use crate::loader_refusal::LoaderRefusal;
use multiarch_crd::names::EXEC_FORMAT_ERROR_LABEL;

/// How often a report waiting for the kubelet's status looks again.
const STATUS_POLL: Duration = Duration::from_secs(1);

pub(super) enum Pass {
    Done,
    /// Look again after this long (the status is not written yet).
    Later(Duration),
}

impl HandlerContext {
    /// One pass over a fresh read of the object.
    pub(super) async fn handle(&self, name: &str) -> Result<Pass, kube::Error> {
        let objects: Api<ENoExecEvent> =
            Api::namespaced(self.client.clone(), &self.options.namespace);
        let Some(object) = objects.get_opt(name).await? else {
            return Ok(Pass::Done);
        };
        let status = object.status.clone().unwrap_or_default();
        let (Some(pod_name), Some(pod_ns), Some(node_name)) = (
            status.pod_name.clone(),
            status.pod_namespace.clone(),
            status.node_name.clone(),
        ) else {
            if let Some(wait) = self.still_waiting(name) {
                return Ok(Pass::Later(wait));
            }
            return self.discard(&objects, name, "incomplete").await;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod_ns);
        let Some(pod) = pods.get_opt(&pod_name).await? else {
            return self.discard(&objects, name, "pod_gone").await;
        };
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node_name.as_str()) {
            // A pod of the same name now on another node: the report is about its predecessor.
            return self.discard(&objects, name, "pod_moved").await;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let Some(node) = nodes.get_opt(&node_name).await? else {
            return self.discard(&objects, name, "node_gone").await;
        };
        let node_arch = node.labels().get(NODE_ARCH_LABEL).cloned().or_else(|| {
            node.status
                .as_ref()?
                .node_info
                .as_ref()
                .map(|i| i.architecture.clone())
        });
        let container = status
            .container_id
            .as_deref()
            .and_then(|id| container_of(&pod, id));
        if container.is_none() && status.container_id.is_some() {
            // The kubelet records a new container's ID in the pod's status a moment after
            // starting it, and a binary that cannot exec fails at once: the report can
            // arrive first. Wait for the status (bounded), so the event can name the
            // container and its image; past the grace, report what is known.
            if let Some(wait) = self.still_waiting(name) {
                return Ok(Pass::Later(wait.min(STATUS_POLL)));
            }
        }
        let inspected = match &container {
            Some((_, image)) if report_needs_the_image(&status, node_arch.as_deref()) => {
                self.inspect(&pod, image).await
            }
            _ => None,
        };
        let Report {
            reason,
            outcome,
            note,
            may_be_misplaced,
        } = report_of(
            &status,
            container.as_ref().map(|(n, i)| (n.as_str(), i.as_str())),
            inspected.as_deref(),
            &node,
            node_arch.as_deref(),
        );
        // The label first: it is idempotent, so a pass retried after an API error does not
        // post the event twice.
        let label = serde_json::json!({"metadata": {"labels": {EXEC_FORMAT_ERROR_LABEL: "true"}}});
        match pods
            .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&label))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return self.discard(&objects, name, "pod_gone").await;
            }
            Err(e) => return Err(e),
        }
        let reference = pod_reference(&pod_ns, &pod_name, pod.uid());
        self.events
            .publish(&reference, reason, "DetectExecFormatError", note.clone())
            .await?;
        info!(pod = %pod_name, namespace = %pod_ns, node = %node_name, message = %note, "reported {}", reason.as_str());
        // The correction judges the pod by its images and the node (a loader refusal
        // moves it only where the image's level is known to be above the node's).
        if may_be_misplaced
            && let Some(correction) = &self.correction
            && node_arch.is_some()
            && let Err(e) = correction.consider(&pod, &node_name).await
        {
            warn!(pod = %pod_name, namespace = %pod_ns, error = %e, "cannot correct the misplaced pod; the next scan tries again");
        }
        delete(&objects, name).await?;
        if reason == EventReason::ExecFormatError {
            self.metrics.reported.inc();
        }
        self.metrics.count(outcome);
        Ok(Pass::Done)
    }

    /// How much longer `name` may wait for what it lacks (the daemon's status, the
    /// kubelet's), counted from when this replica first saw it wait; `None` once the grace
    /// is over. Timed here: the API server's whole-second timestamps and clock skew make
    /// creationTimestamp too coarse for this.
    fn still_waiting(&self, name: &str) -> Option<Duration> {
        let first_seen = *self
            .incomplete_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.to_owned())
            .or_insert_with(Instant::now);
        self.options
            .incomplete_grace
            .checked_sub(first_seen.elapsed())
            .filter(|left| !left.is_zero())
    }

    async fn discard(
        &self,
        objects: &Api<ENoExecEvent>,
        name: &str,
        outcome: &'static str,
    ) -> Result<Pass, kube::Error> {
        info!(%name, %outcome, "deleting ENoExecEvent without a report");
        delete(objects, name).await?;
        self.metrics.invalid.inc();
        self.metrics.count(outcome);
        Ok(Pass::Done)
    }

    /// The image as the inspector reads it; `None` without an inspector or when the
    /// registry cannot say (the message then does not guess).
    async fn inspect(&self, pod: &Pod, image: &str) -> Option<Arc<ImageInfo>> {
        let inspector = self.inspector.as_ref()?;
        let info = PodImages::of(pod);
        let container = info.images.iter().find(|c| c.image == image)?;
        let request = InspectRequest {
            // The image already ran: a cached answer is good enough.
            bypass_cache: false,
            ..InspectRequest::for_container(info.credentials(), container)
        };
        match inspector.inspect(&request).await {
            Ok(info) => Some(info),
            Err(e) => {
                warn!(%image, error = %e, "cannot inspect the image for the report's message");
                None
            }
        }
    }
}

/// What the pod is told, and whether the correction should look at it.
struct Report {
    reason: EventReason,
    /// The handler's outcome label.
    outcome: &'static str,
    note: String,
    may_be_misplaced: bool,
}

/// Whether [`report_of`] reads the inspected image: for the level a loader's line does not
/// name, or for whether the image has a build for the node's (known) architecture.
fn report_needs_the_image(status: &ENoExecEventStatus, node_arch: Option<&str>) -> bool {
    match status.loader_error.as_deref() {
        Some(line) => LoaderRefusal::of_line(line)
            .and_then(|r| r.level_needed)
            .is_none(),
        None => node_arch.is_some(),
    }
}

/// The report of an `ENoExecEvent`: an exec format error, or a loader's refusal (which
/// the correction judges by the image's level against the node's).
fn report_of(
    status: &ENoExecEventStatus,
    container: Option<(&str, &str)>,
    inspected: Option<&ImageInfo>,
    node: &Node,
    node_arch: Option<&str>,
) -> Report {
    if let Some(line) = status.loader_error.as_deref() {
        let level_needed = LoaderRefusal::of_line(line)
            .and_then(|r| r.level_needed)
            .map(u32::from)
            .or_else(|| inspected.and_then(amd64_level_needed));
        let node_level = node_arch
            .and_then(|arch| node_variant(node.labels(), arch))
            .and_then(|v| variant_level(&v));
        return Report {
            reason: EventReason::CPULevelTooLow,
            outcome: "loader_refusal",
            note: loader_message(&LoaderFailure {
                container,
                loader_line: line,
                node_level,
                level_needed,
            }),
            may_be_misplaced: true,
        };
    }
    let image_has_arch = match (inspected, node_arch) {
        // The probe runs on Linux nodes only.
        (Some(info), Some(arch)) => Some(
            info.platforms
                .iter()
                .any(|p| p.os == "linux" && p.architecture == arch),
        ),
        _ => None,
    };
    Report {
        reason: EventReason::ExecFormatError,
        outcome: "reported",
        note: message(&Failure {
            container,
            node_arch,
            image_has_arch,
            executable: status.executable.as_deref(),
        }),
        // The image has no build for the node: the correction may move the pod.
        may_be_misplaced: image_has_arch == Some(false),
    }
}

/// The lowest x86-64 level among the image's linux/amd64 builds (as their binaries were
/// read, else as the index says); `None` without such a build or when any runs on every
/// level.
fn amd64_level_needed(info: &ImageInfo) -> Option<u32> {
    info.runnable_platforms()
        .iter()
        .filter(|p| p.os == "linux" && p.architecture == "amd64")
        .map(|p| p.variant.as_deref().and_then(variant_level).unwrap_or(1))
        .min()
        .filter(|level| *level > 1)
}

async fn delete(objects: &Api<ENoExecEvent>, name: &str) -> Result<(), kube::Error> {
    match objects.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The name and image of the container with this runtime ID, in any of the pod's
/// container lists.
fn container_of(pod: &Pod, container_id: &str) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    let name = [
        status.container_statuses.as_deref(),
        status.init_container_statuses.as_deref(),
        status.ephemeral_container_statuses.as_deref(),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|s| {
        // The running container, or the one before it (a crash-looping container is
        // replaced before a late report is handled).
        s.container_id.as_deref() == Some(container_id)
            || s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .and_then(|t| t.container_id.as_deref())
                == Some(container_id)
    })?
    .name
    .clone();
    // The image as the pod asks for it (the status may hold the runtime's normalised or
    // resolved reference instead).
    let spec = pod.spec.as_ref()?;
    let image = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.image.clone())
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == name)
                .and_then(|c| c.image.clone())
        })?;
    Some((name, image))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_inspected_only_where_the_report_reads_it() {
        let status = |loader_error: Option<&str>| ENoExecEventStatus {
            loader_error: loader_error.map(str::to_owned),
            ..ENoExecEventStatus::default()
        };
        let cases = [
            // An exec format error: whether the image has the node's architecture.
            (status(None), Some("arm64"), true),
            // ... which a node that says no architecture cannot ask.
            (status(None), None, false),
            // glibc's line names the level: nothing to read.
            (
                status(Some("Fatal glibc error: CPU does not support x86-64-v3")),
                Some("amd64"),
                false,
            ),
            // The ISA note check names none: the image's builds say it.
            (
                status(Some("/app: CPU ISA level is lower than required")),
                Some("amd64"),
                true,
            ),
            (
                status(Some("/app: CPU ISA level is lower than required")),
                None,
                true,
            ),
        ];
        for (status, node_arch, expected) in cases {
            assert_eq!(
                report_needs_the_image(&status, node_arch),
                expected,
                "{status:?} on {node_arch:?}"
            );
        }
    }
}
