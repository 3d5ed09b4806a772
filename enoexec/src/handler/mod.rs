//! `multiarch enoexec-handler`: each `ENoExecEvent` becomes a Warning event `ExecFormatError`
//! on its pod and the label `multiarch.openshift.io/exec-format-error=true`, then is
//! deleted. Objects whose pod or node is gone (or that never got a status) are deleted and
//! counted as invalid; API errors are retried with a backoff per object. Leader-elected;
//! built on the shared controller loop.

pub mod correction;
pub mod message;
pub mod metrics;
mod pass;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        reflector::{self, Store},
        watcher,
    },
};
use multiarch_crd::ENoExecEvent;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{
    backoff::Backoff,
    controller::{self, ControllerSettings},
    event_recorder::EventRecorder,
    leader_election::ElectionConfig,
    supervisor::Tasks,
};
use tokio_util::sync::CancellationToken;

use self::{correction::Correction, metrics::HandlerMetrics, pass::Pass};
use multiarch_crd::names::NODE_ARCH_LABEL;

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
    /// How often running pods are compared with their nodes (`misplacedPodCorrection`).
    pub correction_scan_interval: Duration,
    /// Pods one scan looks at, at most.
    pub correction_scan_max_pods: usize,
}

struct HandlerContext {
    client: kube::Client,
    inspector: Option<Arc<dyn ImageInspector>>,
    options: HandlerOptions,
    metrics: HandlerMetrics,
    events: EventRecorder,
    /// The misplaced-pod correction (needs the inspector).
    correction: Option<Arc<Correction>>,
    /// Objects seen without a status, and since when (this replica's clock: the API
    /// server's whole-second timestamps and clock skew make creationTimestamp too coarse).
    incomplete_since: Mutex<HashMap<String, Instant>>,
}

/// Starts the handler under `tasks`: it waits for the lease, then runs until shutdown;
/// losing the lease ends the role. `evictions` is a client without kube's retries of 429
/// (`multiarch_runtime::client::connect_without_retries`): a PodDisruptionBudget's
/// refusal must reach the correction at once.
pub fn start(
    client: kube::Client,
    evictions: kube::Client,
    inspector: Option<Arc<dyn ImageInspector>>,
    options: HandlerOptions,
    metrics: HandlerMetrics,
    tasks: &Tasks,
) {
    let election = options.election.clone();
    let events = EventRecorder::new(
        client.clone(),
        "multiarch-enoexec-handler",
        &options.identity,
    );
    let correction = inspector.as_ref().map(|inspector| {
        Arc::new(Correction::new(
            client.clone(),
            follow_nodes(&client, tasks),
            evictions,
            inspector.clone(),
            events.clone(),
            metrics.correction.clone(),
            &options.namespace,
        ))
    });
    let context = Arc::new(HandlerContext {
        events,
        correction,
        client: client.clone(),
        inspector,
        options,
        metrics,
        incomplete_since: Mutex::default(),
    });
    let work = |stop| run(context, stop);
    tasks.spawn_while_leading("ENoExecEvent handler", &client, election, work);
}

/// Every node's metadata (its architecture label), followed by a watch, paged, on every
/// replica: a standby takes over with it warm.
fn follow_nodes(client: &kube::Client, tasks: &Tasks) -> Store<PartialObjectMeta<Node>> {
    let (nodes, writer) = reflector::store();
    let watch = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default().page_size(500),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(|event| {
        if let Err(e) = event {
            tracing::warn!(error = %e, "cannot watch the nodes; retrying");
        }
        std::future::ready(())
    });
    let shutdown = tasks.shutdown().clone();
    tasks.spawn_infallible("node architecture watch", async move {
        tokio::select! {
            () = watch => {}
            () = shutdown.cancelled() => {}
        }
    });
    nodes
}

/// The report loop and, with an inspector, the misplaced-pod scans: both only while
/// leading (a replica that may no longer lead writes nothing).
async fn run(context: Arc<HandlerContext>, stop: CancellationToken) {
    let scans = context.correction.clone().map(|correction| {
        correction::scan_every(
            correction,
            context.options.correction_scan_interval,
            context.options.correction_scan_max_pods,
            stop.clone(),
        )
    });
    let reports = run_reports(context, stop);
    match scans {
        Some(scans) => {
            tokio::join!(reports, scans);
        }
        None => reports.await,
    }
}

async fn run_reports(context: Arc<HandlerContext>, stop: CancellationToken) {
    let objects =
        Api::<ENoExecEvent>::namespaced(context.client.clone(), &context.options.namespace);
    let settings = ControllerSettings {
        name: "enoexec-handler",
        // Reports of different containers are independent (each labels its pod, posts
        // an event and deletes itself); a burst after a bad rollout is worked in
        // parallel, each object still one reconcile at a time.
        concurrency: 8,
        backoff: Backoff::new(context.options.initial_backoff, context.options.max_backoff),
        debounce: Duration::ZERO,
    };
    controller::run(
        Controller::new(objects, watcher::Config::default()),
        settings,
        context,
        reconcile,
        stop,
    )
    .await;
}

async fn reconcile(
    object: Arc<ENoExecEvent>,
    context: Arc<HandlerContext>,
) -> Result<Action, kube::Error> {
    let name = kube::ResourceExt::name_any(object.as_ref());
    match context.handle(&name).await {
        Ok(Pass::Done) => {
            context.incomplete().remove(&name);
            Ok(Action::await_change())
        }
        Ok(Pass::Later(delay)) => Ok(Action::requeue(delay)),
        Err(e) => {
            context.metrics.count("api_error");
            Err(e)
        }
    }
}

impl HandlerContext {
    fn incomplete(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.incomplete_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
