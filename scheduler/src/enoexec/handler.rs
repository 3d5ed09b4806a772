//! `multiarch enoexec-handler`: each `ENoExecEvent` becomes a Warning event `ExecFormatError`
//! on its pod and the label `multiarch.openshift.io/exec-format-error=true`, then is
//! deleted. Objects whose pod or node is gone (or that never got a status) are deleted and
//! counted as invalid; API errors are retried with backoff. Leader-elected.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        watcher,
    },
};
use multiarch_crd::ENoExecEvent;
use multiarch_inspector::{ImageInspector, InspectRequest};
use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use tokio::sync::{mpsc, watch as signal};
use tracing::{info, warn};

use super::{
    daemon::OutcomeLabel,
    message::{Failure, REASON, message},
};
use crate::runtime::leader::{ElectionConfig, Leadership, elect};

/// The pod label users (and alerts) can select on.
pub const EXEC_FORMAT_ERROR_LABEL: &str = "multiarch.openshift.io/exec-format-error";
const ARCH_LABEL: &str = "kubernetes.io/arch";

#[derive(Clone, Debug)]
pub struct HandlerOptions {
    pub namespace: String,
    pub identity: String,
    /// How long an object may wait for the daemon to set its status.
    pub incomplete_grace: Duration,
    /// First and longest wait before retrying after an API error.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub election: Option<ElectionConfig>,
}

/// MTO's names (`mto_enoexecevents_total`, `mto_enoexecevents_invalid_total`) plus
/// `multiarch_enoexec_handler_events_total{outcome}`.
#[derive(Clone, Debug, Default)]
pub struct HandlerMetrics {
    pub reported: Counter,
    pub invalid: Counter,
    pub outcomes: Family<OutcomeLabel, Counter>,
}

impl HandlerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "mto_enoexecevents",
            "Exec format errors reported on pods",
            self.reported.clone(),
        );
        registry.register(
            "mto_enoexecevents_invalid",
            "ENoExecEvents deleted without a report: pod or node gone, pod moved, no status",
            self.invalid.clone(),
        );
        registry.register(
            "multiarch_enoexec_handler_events",
            "ENoExecEvents handled, by outcome: reported, pod_gone, pod_moved, node_gone, incomplete, api_error",
            self.outcomes.clone(),
        );
    }

    fn count(&self, outcome: &'static str) {
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn get(&self, outcome: &'static str) -> u64 {
        self.outcomes.get_or_create(&OutcomeLabel { outcome }).get()
    }
}

pub struct Handler {
    pub task: tokio::task::JoinHandle<()>,
    /// Dropped with the handler: the elector stops renewing and releases the lease.
    _alive: Option<signal::Sender<bool>>,
}

struct Shared {
    client: kube::Client,
    inspector: Option<Arc<dyn ImageInspector>>,
    options: HandlerOptions,
    metrics: HandlerMetrics,
    recorder: Recorder,
    queue: mpsc::UnboundedSender<String>,
    /// Names queued or being handled: one pass per object at a time.
    pending: Mutex<HashSet<String>>,
    /// Objects seen without a status, and since when.
    incomplete_since: Mutex<HashMap<String, Instant>>,
}

enum Pass {
    Done,
    /// Look again after this long (status not written yet, or an API error).
    Later(Duration),
}

pub fn start(
    client: kube::Client,
    inspector: Option<Arc<dyn ImageInspector>>,
    options: HandlerOptions,
    metrics: HandlerMetrics,
) -> Handler {
    let (queue, mut rx) = mpsc::unbounded_channel::<String>();
    let Leadership {
        leading: leading_rx,
        alive,
    } = elect(&client, options.election.clone());
    let shared = Arc::new(Shared {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "multiarch-enoexec-handler".into(),
                instance: Some(options.identity.clone()),
            },
        ),
        client,
        inspector,
        options,
        metrics,
        queue,
        pending: Mutex::default(),
        incomplete_since: Mutex::default(),
    });
    watch_objects(shared.clone());
    let task = tokio::spawn(async move {
        let mut leading = leading_rx;
        // Consecutive API errors per object: its own backoff, not its neighbours'.
        let mut failures: HashMap<String, u32> = HashMap::new();
        while let Some(name) = rx.recv().await {
            if !*leading.borrow() {
                let _ = leading.wait_for(|l| *l).await;
            }
            let pass = shared.handle(&name).await;
            if matches!(pass, Ok(Pass::Done)) {
                shared
                    .incomplete_since
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&name);
            }
            shared
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&name);
            match pass {
                Ok(Pass::Done) => {
                    failures.remove(&name);
                }
                Ok(Pass::Later(delay)) => shared.requeue_after(name, delay),
                Err(e) => {
                    let count = failures.entry(name.clone()).or_insert(0);
                    *count = count.saturating_add(1);
                    let delay = shared
                        .options
                        .initial_backoff
                        .saturating_mul(1 << count.saturating_sub(1).min(16))
                        .min(shared.options.max_backoff);
                    warn!(%name, error = %e, retry_in = ?delay, "cannot handle ENoExecEvent");
                    shared.metrics.count("api_error");
                    shared.requeue_after(name, delay);
                }
            }
        }
    });
    Handler {
        task,
        _alive: alive,
    }
}

fn watch_objects(shared: Arc<Shared>) {
    tokio::spawn(async move {
        let api: Api<ENoExecEvent> =
            Api::namespaced(shared.client.clone(), &shared.options.namespace);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    shared.enqueue(o.name_any());
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "ENoExecEvent watch failed; retrying"),
            }
        }
    });
}

impl Shared {
    fn enqueue(&self, name: String) {
        let fresh = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.clone());
        if fresh {
            let _ = self.queue.send(name);
        }
    }

    fn requeue_after(self: &Arc<Self>, name: String, delay: Duration) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            shared.enqueue(name);
        });
    }

    /// One pass over a fresh read of the object.
    async fn handle(&self, name: &str) -> Result<Pass, kube::Error> {
        let objects: Api<ENoExecEvent> =
            Api::namespaced(self.client.clone(), &self.options.namespace);
        let Some(object) = objects.get_opt(name).await? else {
            return Ok(Pass::Done);
        };
        let status = object.status.clone().unwrap_or_default();
        let (Some(pod_name), Some(pod_ns), Some(node_name)) =
            (status.pod_name, status.pod_namespace, status.node_name)
        else {
            // Timed from when this replica first saw it: the API server's whole-second
            // timestamps and clock skew make creationTimestamp too coarse for this.
            let first_seen = *self
                .incomplete_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(name.to_owned())
                .or_insert_with(Instant::now);
            let waited = first_seen.elapsed();
            if waited < self.options.incomplete_grace {
                return Ok(Pass::Later(self.options.incomplete_grace - waited));
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
        let node_arch = node.labels().get(ARCH_LABEL).cloned().or_else(|| {
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
        let image_has_arch = match (&container, &node_arch) {
            (Some((_, image)), Some(arch)) => self.image_has_arch(&pod, image, arch).await,
            _ => None,
        };
        let failure = Failure {
            container: container.as_ref().map(|(n, i)| (n.as_str(), i.as_str())),
            node_arch: node_arch.as_deref(),
            image_has_arch,
            executable: status.executable.as_deref(),
        };
        let note = message(&failure);
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
        let event = Event {
            type_: EventType::Warning,
            reason: REASON.into(),
            note: Some(note.clone()),
            action: "DetectExecFormatError".into(),
            secondary: None,
        };
        self.recorder.publish(&event, &pod.object_ref(&())).await?;
        info!(pod = %pod_name, namespace = %pod_ns, node = %node_name, message = %note, "reported exec format error");
        delete(&objects, name).await?;
        self.metrics.reported.inc();
        self.metrics.count("reported");
        Ok(Pass::Done)
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

    /// Whether the image has a build for `arch`; `None` without an inspector or when the
    /// registry cannot say (the message then does not guess).
    async fn image_has_arch(&self, pod: &Pod, image: &str, arch: &str) -> Option<bool> {
        let inspector = self.inspector.as_ref()?;
        let spec = pod.spec.as_ref();
        let request = InspectRequest {
            image: image.to_owned(),
            namespace: pod.namespace().unwrap_or_default(),
            pull_secrets: spec
                .and_then(|s| s.image_pull_secrets.as_ref())
                .map(|list| list.iter().map(|r| r.name.clone()).collect())
                .unwrap_or_default(),
            service_account: spec.and_then(|s| s.service_account_name.clone()),
            bypass_cache: false,
        };
        match inspector.inspect(&request).await {
            // The probe runs on Linux nodes only.
            Ok(info) => Some(
                info.platforms
                    .iter()
                    .any(|p| p.os == "linux" && p.architecture == arch),
            ),
            Err(e) => {
                warn!(%image, error = %e, "cannot inspect the image for the ExecFormatError message");
                None
            }
        }
    }
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
    [
        status.container_statuses.as_deref(),
        status.init_container_statuses.as_deref(),
        status.ephemeral_container_statuses.as_deref(),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|s| s.container_id.as_deref() == Some(container_id))
    .map(|s| (s.name.clone(), s.image.clone()))
}
