//! `multiarch scheduler` on Kubernetes: watches feed the core, the core decides, the
//! binder binds, the reporter tells users; one loop owns the state, nothing in it waits
//! on the network.

pub mod binder;
pub mod images;
pub mod inbox;
pub mod leader;
pub mod metrics;
pub mod ratelimit;
pub mod report;
pub mod watch;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_crd::{ClusterPodPlacementConfigSpec, Placement, PodPlacementConfig};
use multiarch_inspector::ImageInspector;
use multiarch_plugins::{model::pod::PodInfo, profile::Profile};
use tokio::sync::{mpsc, watch as signal};
use tracing::{info, warn};

use self::{
    binder::KubeBinder,
    images::AsyncImages,
    inbox::{BindOutcome, Inbox, Kind},
    leader::{ElectionConfig, Elector},
    metrics::{QueueLabel, ResultLabel, SchedulerMetrics, TypeLabel},
    report::{Report, Reports},
};
use crate::core::{
    binder::{Binder, Binding},
    scheduler::{FailureKind, Outcome, PlacementInputs, SchedulerCore},
};

#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    pub scheduler_name: String,
    /// This replica's name in events and the lease.
    pub identity: String,
    /// `None`: no election, this replica always leads (one replica only!).
    pub election: Option<ElectionConfig>,
    pub bind_concurrency: usize,
    /// Events and status writes waiting to be sent; more are dropped and counted.
    pub report_capacity: usize,
    /// How long a failed inspection is trusted before the inspector is asked again.
    pub inspection_retry: Duration,
    /// How long to wait for the configuration CRDs before scheduling with defaults.
    pub config_grace: Duration,
    /// Client QPS and burst for per-pod writes (bindings, events, status), as
    /// kube-scheduler's `clientConnection` (default 50 / 100). QPS 0: unlimited.
    pub api_qps: f64,
    pub api_burst: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("lost the leader lease; exiting so that a fresh replica takes over with a fresh cache")]
    LostLeadership,
}

/// A running scheduler.
pub struct Runtime {
    /// True once the initial lists are in (readiness).
    pub ready: signal::Receiver<bool>,
    pub leading: signal::Receiver<bool>,
    /// `logVerbosity` of the ClusterPodPlacementConfig, for the log filter.
    pub log_verbosity: signal::Receiver<multiarch_crd::LogVerbosity>,
    pub task: tokio::task::JoinHandle<Result<(), RuntimeError>>,
    stop: signal::Sender<bool>,
}

impl Runtime {
    /// Stops scheduling and returns when the loop has ended.
    pub async fn shutdown(self) -> Result<(), RuntimeError> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or(Ok(()))
    }
}

pub fn start(
    client: kube::Client,
    options: RuntimeOptions,
    inspector: Arc<dyn ImageInspector>,
    metrics: SchedulerMetrics,
) -> Runtime {
    let (tx, rx) = mpsc::unbounded_channel();
    watch::start(&client, &tx);
    let images = AsyncImages::new(inspector, tx.clone(), options.inspection_retry);
    let limiter = Arc::new(ratelimit::TokenBucket::new(
        options.api_qps,
        options.api_burst,
    ));
    let binder = KubeBinder::new(
        client.clone(),
        options.bind_concurrency,
        tx.clone(),
        metrics.clone(),
        limiter.clone(),
    );
    let reports = Reports::start(
        client.clone(),
        &options.scheduler_name,
        &options.identity,
        options.report_capacity,
        metrics.clone(),
        limiter,
    );
    let (verbosity_tx, verbosity_rx) = signal::channel(multiarch_crd::LogVerbosity::Normal);
    let (leading_tx, leading_rx) = signal::channel(options.election.is_none());
    // Owned by the loop: when the loop ends, however it ends, the elector stops renewing.
    let (alive_tx, alive_rx) = signal::channel(false);
    if let Some(election) = options.election.clone() {
        tokio::spawn(Elector::new(client, election).run(leading_tx, alive_rx));
        let mut changes = leading_rx.clone();
        let inbox = tx.clone();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let leading = *changes.borrow();
                if inbox.send(Inbox::Leader(leading)).is_err() {
                    return;
                }
            }
        });
    }
    let (ready_tx, ready_rx) = signal::channel(false);
    let (stop_tx, stop_rx) = signal::channel(false);
    let state = Loop {
        core: SchedulerCore::new(
            Profile::new(&Placement {
                scheduler_name: options.scheduler_name.clone(),
                ..Placement::default()
            }),
            PlacementInputs::default(),
            rand_seed(),
        ),
        leading: options.election.is_none(),
        led: false,
        options,
        images,
        binder,
        reports,
        metrics,
        synced: HashSet::new(),
        known_pods: HashSet::new(),
        known_nodes: HashSet::new(),
        cluster_config: None,
        pod_configs: BTreeMap::new(),
        in_flight: HashMap::new(),
        last_failure: HashMap::new(),
        ready: ready_tx,
        alive: alive_tx,
        verbosity: verbosity_tx,
        started: Instant::now(),
    };
    let task = tokio::spawn(state.run(rx, stop_rx));
    Runtime {
        ready: ready_rx,
        leading: leading_rx,
        log_verbosity: verbosity_rx,
        task,
        stop: stop_tx,
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

struct InFlight {
    pod: Arc<PodInfo>,
    attempts: u32,
    message: String,
}

struct Loop {
    core: SchedulerCore,
    options: RuntimeOptions,
    images: AsyncImages,
    binder: KubeBinder,
    reports: Reports,
    metrics: SchedulerMetrics,
    leading: bool,
    /// Led at some point: losing the lease afterwards ends the process.
    led: bool,
    synced: HashSet<Kind>,
    known_pods: HashSet<String>,
    known_nodes: HashSet<String>,
    cluster_config: Option<ClusterPodPlacementConfigSpec>,
    pod_configs: BTreeMap<String, PodPlacementConfig>,
    in_flight: HashMap<String, InFlight>,
    /// The last FailedScheduling message per pod: unchanged failures are not re-reported.
    last_failure: HashMap<String, String>,
    ready: signal::Sender<bool>,
    /// Dropped with the loop; `true` is sent on a graceful stop (release the lease).
    alive: signal::Sender<bool>,
    verbosity: signal::Sender<multiarch_crd::LogVerbosity>,
    started: Instant,
}

/// Pods decided per turn before the inbox is read again, so watch events and binding
/// results are never starved by a long queue.
const PODS_PER_TURN: usize = 256;

impl Loop {
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<Inbox>,
        mut stop: signal::Receiver<bool>,
    ) -> Result<(), RuntimeError> {
        let mut last_gauges = Instant::now();
        loop {
            let wait = if self.can_schedule() && self.core.queue.counts().active > 0 {
                Duration::ZERO
            } else {
                Duration::from_millis(200)
            };
            tokio::select! {
                message = inbox.recv() => match message {
                    Some(m) => self.handle(m)?,
                    None => return Ok(()),
                },
                _ = stop.changed() => {
                    let _ = self.alive.send(true);
                    // Give the elector a moment to release the lease.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return Ok(());
                }
                () = tokio::time::sleep(wait) => {}
            }
            for _ in 0..10_000 {
                match inbox.try_recv() {
                    Ok(m) => self.handle(m)?,
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            self.core.tick(now);
            if !self.synced.contains(&Kind::ClusterConfig)
                && now.duration_since(self.started) > self.options.config_grace
            {
                warn!(
                    "no ClusterPodPlacementConfig list yet (CRD missing?); scheduling with defaults"
                );
                self.synced.insert(Kind::ClusterConfig);
                self.synced.insert(Kind::PodConfigs);
            }
            let ready = [
                Kind::Nodes,
                Kind::Pods,
                Kind::ClusterConfig,
                Kind::PodConfigs,
            ]
            .iter()
            .all(|k| self.synced.contains(k));
            self.ready
                .send_if_modified(|r| std::mem::replace(r, ready) != ready);
            if self.can_schedule() {
                for _ in 0..PODS_PER_TURN {
                    let started = Instant::now();
                    let Some(outcome) = self.core.schedule_next(&self.images, now) else {
                        break;
                    };
                    self.metrics
                        .attempt_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.outcome(outcome);
                }
            }
            if last_gauges.elapsed() > Duration::from_secs(1) {
                self.gauges();
                self.images.expire();
                last_gauges = Instant::now();
            }
        }
    }

    fn can_schedule(&self) -> bool {
        self.leading && *self.ready.borrow()
    }

    fn gauges(&self) {
        let c = self.core.queue.counts();
        for (queue, n) in [
            ("active", c.active),
            ("backoff", c.backoff),
            ("unschedulable", c.unschedulable),
            ("waiting_for_images", c.waiting_for_images),
        ] {
            self.metrics
                .pending_pods
                .get_or_create(&QueueLabel { queue })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let cluster = &self.core.cluster;
        for (r#type, n) in [
            ("nodes", cluster.nodes().len()),
            ("pods", cluster.pod_count()),
            ("assumed_pods", cluster.assumed_count()),
        ] {
            self.metrics
                .cache_size
                .get_or_create(&TypeLabel { r#type })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.metrics.is_leader.set(i64::from(self.leading));
    }

    fn handle(&mut self, message: Inbox) -> Result<(), RuntimeError> {
        let now = Instant::now();
        match message {
            Inbox::RelistStarted(_) => {}
            Inbox::RelistDone(kind, keep) => {
                let keep: HashSet<String> = keep.into_iter().collect();
                match kind {
                    Kind::Pods => {
                        for uid in self
                            .known_pods
                            .difference(&keep)
                            .cloned()
                            .collect::<Vec<_>>()
                        {
                            self.core.delete_pod(&uid, now);
                        }
                        self.known_pods = keep;
                    }
                    Kind::Nodes => {
                        for name in self
                            .known_nodes
                            .difference(&keep)
                            .cloned()
                            .collect::<Vec<_>>()
                        {
                            self.core.delete_node(&name);
                        }
                        self.known_nodes = keep;
                    }
                    Kind::ClusterConfig => {
                        if keep.is_empty() {
                            self.cluster_config = None;
                        }
                        self.reconfigure(now);
                    }
                    Kind::PodConfigs => {
                        self.pod_configs.retain(|k, _| keep.contains(k));
                        self.reconfigure(now);
                    }
                }
                if self.synced.insert(kind) {
                    info!(?kind, "initial list received");
                }
            }
            Inbox::NodeUpsert(node) => {
                self.known_nodes.insert(node.name.clone());
                self.core.apply_node(*node, now);
            }
            Inbox::NodeDelete(name) => {
                self.known_nodes.remove(&name);
                self.core.delete_node(&name);
            }
            Inbox::PodUpsert(pod) => {
                self.known_pods.insert(pod.uid.clone());
                if pod.node_name.is_some() {
                    self.last_failure.remove(&pod.uid);
                }
                self.core.apply_pod(*pod, now);
            }
            Inbox::PodDelete(uid) => {
                self.known_pods.remove(&uid);
                self.last_failure.remove(&uid);
                self.core.delete_pod(&uid, now);
            }
            Inbox::ClusterConfig(spec) => {
                self.cluster_config = spec.map(|s| *s);
                self.reconfigure(now);
            }
            Inbox::PodConfigUpsert(config) => {
                self.pod_configs.insert(watch::config_key(&config), *config);
                self.reconfigure(now);
            }
            Inbox::PodConfigDelete(key) => {
                self.pod_configs.remove(&key);
                self.reconfigure(now);
            }
            Inbox::ImagesResolved(images) => self.core.images_resolved(&images, now),
            Inbox::Bind { uid, outcome } => self.bound(&uid, outcome, now),
            Inbox::Leader(leading) => {
                self.leading = leading;
                if leading {
                    self.led = true;
                } else if self.led {
                    return Err(RuntimeError::LostLeadership);
                }
            }
        }
        Ok(())
    }

    fn reconfigure(&mut self, now: Instant) {
        let spec = self.cluster_config.clone().unwrap_or_default();
        self.verbosity
            .send_if_modified(|v| std::mem::replace(v, spec.log_verbosity) != spec.log_verbosity);
        let mut placement = spec.placement_or_default();
        // The name comes from the command line (the operator keeps both in step).
        placement
            .scheduler_name
            .clone_from(&self.options.scheduler_name);
        let inputs = PlacementInputs {
            cluster_plugins: spec.plugins.clone(),
            configs: self.pod_configs.values().cloned().collect(),
            fallback_architecture: spec.fallback_architecture.map(|a| a.as_str().to_owned()),
        };
        self.core
            .set_configuration(Profile::new(&placement), inputs, now);
    }

    fn outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Scheduled {
                pod,
                node,
                message,
                attempts,
                ..
            } => {
                self.metrics
                    .attempts
                    .get_or_create(&ResultLabel {
                        result: "scheduled",
                    })
                    .inc();
                self.binder.bind(Binding::of(&pod, &node));
                self.in_flight.insert(
                    pod.uid.clone(),
                    InFlight {
                        pod,
                        attempts,
                        message,
                    },
                );
            }
            Outcome::Failed {
                pod, kind, message, ..
            } => {
                let result = if kind == FailureKind::SchedulerError {
                    "error"
                } else {
                    "unschedulable"
                };
                self.metrics
                    .attempts
                    .get_or_create(&ResultLabel { result })
                    .inc();
                if self.last_failure.get(&pod.uid) != Some(&message) {
                    self.last_failure.insert(pod.uid.clone(), message.clone());
                    self.reports.send(Report::about(
                        &pod,
                        true,
                        "FailedScheduling",
                        "Scheduling",
                        message,
                        Some(kind.as_str()),
                    ));
                }
            }
            Outcome::WaitingForImages { .. } | Outcome::Skipped { .. } => {}
        }
    }

    fn bound(&mut self, uid: &str, outcome: BindOutcome, now: Instant) {
        let Some(flight) = self.in_flight.remove(uid) else {
            return;
        };
        let pod = &flight.pod;
        match outcome {
            BindOutcome::Bound => {
                self.last_failure.remove(uid);
                self.reports.send(Report::about(
                    pod,
                    false,
                    "Scheduled",
                    "Binding",
                    flight.message,
                    None,
                ));
            }
            BindOutcome::Gone(reason) => {
                info!(pod = %pod.key(), %reason, "binding target is gone; dropping the pod");
                self.core.binding_dropped(uid, now);
            }
            BindOutcome::Failed(reason) => {
                self.metrics
                    .attempts
                    .get_or_create(&ResultLabel { result: "error" })
                    .inc();
                let note = format!("Binding rejected: {reason}");
                self.reports.send(Report::about(
                    pod,
                    true,
                    "FailedScheduling",
                    "Scheduling",
                    note.clone(),
                    Some(FailureKind::SchedulerError.as_str()),
                ));
                self.last_failure.insert(uid.to_owned(), note);
                self.core.binding_failed(flight.pod, flight.attempts, now);
            }
        }
    }
}
