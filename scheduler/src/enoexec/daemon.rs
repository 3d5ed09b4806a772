//! `multiarch enoexec-daemon`'s pipeline: kernel event → container (host only) → burst
//! filter → pod (runtime) → bounded queue → rate-limited `ENoExecEvent` writer.
//!
//! Nothing here blocks the kernel reader for long: the runtime is asked only about the first
//! event of a burst, and a full queue drops (and counts) instead of waiting.

use std::{
    num::NonZeroUsize,
    sync::Mutex,
    time::{Duration, Instant},
};

use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use multiarch_crd::{ENoExecEvent, ENoExecEventSpec, ENoExecEventStatus};
use multiarch_ebpf::{
    cri::{ContainerDirectory, ContainerInfo},
    event::{DecodeError, ExecEvent},
    locate::{Found, Locator},
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::burst::BurstFilter;
use crate::runtime::ratelimit::TokenBucket;

/// Label on every `ENoExecEvent` the daemon writes: the node it came from.
pub const NODE_LABEL: &str = "multiarch.openshift.io/node";

#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub node_name: String,
    /// Where `ENoExecEvent`s are created (multiarch's namespace).
    pub namespace: String,
    /// Steady `ENoExecEvent` writes per second, and how many may go at once.
    pub rate: f64,
    pub burst: u32,
    /// One report per container per window.
    pub dedup_window: Duration,
    /// Located events waiting for the writer; beyond this they are dropped and counted.
    pub queue_capacity: usize,
    /// Wait before the first retry of a failed write (doubled for the next).
    pub retry_backoff: Duration,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// `multiarch_enoexec_daemon_events_total{outcome}`: what became of each kernel report.
#[derive(Clone, Debug, Default)]
pub struct DaemonMetrics {
    pub events: Family<OutcomeLabel, Counter>,
    /// Reports the kernel program dropped because the ring buffer was full.
    pub lost: Counter,
}

impl DaemonMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "multiarch_enoexec_daemon_events",
            "Exec format errors seen on this node, by outcome: reported, duplicate, outside_container, process_gone, unresolved, queue_full, write_failed, undecodable",
            self.events.clone(),
        );
        registry.register(
            "multiarch_enoexec_daemon_lost_events",
            "Exec format errors the kernel program could not queue (ring buffer full)",
            self.lost.clone(),
        );
    }

    pub fn count(&self, outcome: &'static str) {
        self.events.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn get(&self, outcome: &'static str) -> u64 {
        self.events.get_or_create(&OutcomeLabel { outcome }).get()
    }
}

pub struct Daemon<D> {
    locator: Locator<D>,
    bursts: Mutex<BurstFilter>,
    queue: mpsc::Sender<Report>,
    metrics: DaemonMetrics,
}

impl<D: ContainerDirectory> Daemon<D> {
    /// Starts the writer task; [`Self::handle`] feeds it.
    pub fn start(
        client: kube::Client,
        locator: Locator<D>,
        options: DaemonOptions,
        metrics: DaemonMetrics,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (queue, rx) = mpsc::channel(options.queue_capacity.max(1));
        let bursts = BurstFilter::new(
            options.dedup_window,
            NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
        );
        let writer = tokio::spawn(write_loop(client, options, metrics.clone(), rx));
        let daemon = Self {
            locator,
            bursts: Mutex::new(bursts),
            queue,
            metrics,
        };
        (daemon, writer)
    }

    /// One record from the kernel program.
    pub async fn handle(&self, record: Result<ExecEvent, DecodeError>) {
        let event = match record {
            Ok(event) => event,
            Err(e) => {
                warn!(error = %e, "undecodable record from the kernel program");
                self.metrics.count("undecodable");
                return;
            }
        };
        let cgroup = match self.locator.find_cgroup(&event) {
            Found::Cgroup(cgroup) => cgroup,
            Found::Outside => {
                debug!(pid = event.tgid, comm = %event.comm, filename = ?event.filename, "exec format error outside Kubernetes containers");
                self.metrics.count("outside_container");
                return;
            }
            Found::Gone => {
                debug!(pid = event.tgid, comm = %event.comm, "process and cgroup gone before they could be read");
                self.metrics.count("process_gone");
                return;
            }
        };
        let admitted = self
            .bursts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(&cgroup.container_id, Instant::now());
        if !admitted {
            self.metrics.count("duplicate");
            return;
        }
        let info = match self.locator.describe(&cgroup).await {
            Ok(info) => info,
            Err(e) => {
                warn!(container = %cgroup.container_id, error = %e, "cannot find the pod of a container with an exec format error");
                // The next event of this container tries again.
                self.bursts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .forget(&cgroup.container_id);
                self.metrics.count("unresolved");
                return;
            }
        };
        info!(pod = %info.pod_name, namespace = %info.pod_namespace, container = %info.container_name, filename = ?event.filename, "exec format error");
        let report = Report {
            container: info,
            executable: event.filename,
        };
        if self.queue.try_send(report).is_err() {
            warn!("ENoExecEvent queue full; dropping a report");
            self.metrics.count("queue_full");
        }
    }
}

async fn write_loop(
    client: kube::Client,
    options: DaemonOptions,
    metrics: DaemonMetrics,
    mut rx: mpsc::Receiver<Report>,
) {
    let api: Api<ENoExecEvent> = Api::namespaced(client, &options.namespace);
    let bucket = TokenBucket::new(options.rate, options.burst);
    while let Some(report) = rx.recv().await {
        let info = &report.container;
        let mut attempt = 1;
        loop {
            bucket.acquire().await;
            match write(&api, &options.node_name, &report).await {
                Ok(Written::Created) => metrics.count("reported"),
                Ok(Written::AlreadyThere) => metrics.count("duplicate"),
                Err(e) if attempt < WRITE_ATTEMPTS && retriable(&e) => {
                    let delay = options.retry_backoff.saturating_mul(1 << (attempt - 1));
                    debug!(pod = %info.pod_name, error = %e, retry_in = ?delay, "ENoExecEvent write failed; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
                Err(e) => {
                    warn!(pod = %info.pod_name, namespace = %info.pod_namespace, error = %e, "cannot write the ENoExecEvent");
                    metrics.count("write_failed");
                }
            }
            break;
        }
    }
}

/// Attempts per report before it is dropped (and counted as `write_failed`).
const WRITE_ATTEMPTS: u32 = 3;

/// Server errors, throttling and lost connections pass; a 4xx answer will not change.
fn retriable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        _ => true,
    }
}

/// A located error waiting for the writer.
struct Report {
    container: ContainerInfo,
    /// The file passed to exec, when the kernel program could read it.
    executable: Option<String>,
}

enum Written {
    Created,
    /// Reported before (by this daemon before a restart) and not handled yet.
    AlreadyThere,
}

/// The object is named after the container, so a restarted daemon cannot report a
/// container twice while its first report waits for the handler.
pub fn object_name(container_id: &str) -> String {
    let id = container_id
        .rsplit_once("://")
        .map_or(container_id, |(_, id)| id);
    format!("enoexec-{id}")
}

/// Creates the object, then sets its status (the API server ignores status on create). An
/// object whose status cannot be set is deleted again, as MTO does, so the handler never
/// sees it half-written for long.
async fn write(
    api: &Api<ENoExecEvent>,
    node: &str,
    report: &Report,
) -> Result<Written, kube::Error> {
    let info = &report.container;
    let name = object_name(&info.container_id);
    let object = ENoExecEvent {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(NODE_LABEL.to_owned(), node.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: ENoExecEventSpec {},
        status: None,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(Written::AlreadyThere),
        Err(e) => return Err(e),
    }
    let status = ENoExecEventStatus {
        node_name: Some(node.to_owned()),
        pod_name: Some(info.pod_name.clone()),
        pod_namespace: Some(info.pod_namespace.clone()),
        container_id: Some(info.container_id.clone()),
        executable: report.executable.clone().filter(|e| !e.is_empty()),
    };
    let patch = serde_json::json!({ "status": status });
    if let Err(e) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        if let Err(cleanup) = api.delete(&name, &DeleteParams::default()).await {
            warn!(%name, error = %cleanup, "cannot delete the half-written ENoExecEvent");
        }
        return Err(e);
    }
    Ok(Written::Created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_follow_the_container() {
        let id = "4d3c1f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";
        assert_eq!(
            object_name(&format!("cri-o://{id}")),
            format!("enoexec-{id}")
        );
        assert_eq!(object_name(id), format!("enoexec-{id}"));
    }
}
