//! `multiarch scheduler` in a cluster: watches feed the core, the core decides, the
//! binder binds, the reporter tells users; one loop owns the state, nothing in it waits
//! on the network.

pub mod binder;
pub mod evictions;
pub mod file_images;
pub mod image_lookups;
mod in_flight;
pub mod inbox;
pub mod inbox_sender;
pub mod inspector_reach;
pub mod metrics;
pub mod pod_identity;
pub mod pod_reports;
mod scheduling_loop;
pub mod volume_writer;
pub mod watch;

use inbox_sender::{INBOX_CAPACITY, InboxSender};
use std::{collections::HashMap, sync::Arc, time::Duration};

use multiarch_crd::PlacementSpec;
use multiarch_inspector::ImageInspector;
use multiarch_plugins::profile::Profile;
use multiarch_runtime::{
    device_classes,
    event_recorder::EventRecorder,
    follow::SenderGone,
    leader_election::{ElectionConfig, Leadership, LostLease},
    placement_config,
    rate_limit::TokenBucket,
    supervisor::Tasks,
};
use tokio::sync::watch as signal;
use tokio_util::sync::CancellationToken;

use self::{
    binder::KubeBinder,
    evictions::Evictions,
    image_lookups::InspectedImages,
    inbox::LoopMessage,
    metrics::SchedulerMetrics,
    pod_reports::PodReports,
    scheduling_loop::{Exports, Loop, Writers},
};
use crate::engine::placement_inputs::PlacementInputs;
use crate::engine::scheduler::SchedulerCore;

#[derive(Clone, Debug)]
pub struct SchedulerOptions {
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
    /// How long a pod's claims may take to be bound before its binding fails
    /// (kube-scheduler's VolumeBinding `bindTimeoutSeconds`, 600 s).
    pub volume_bind_timeout: Duration,
}

/// A running scheduler.
pub struct RunningScheduler {
    /// True once the initial lists are in (readiness).
    pub ready: signal::Receiver<bool>,
    pub leading: signal::Receiver<bool>,
    /// `logVerbosity` of the ClusterPodPlacementConfig, for the log filter.
    pub log_verbosity: signal::Receiver<multiarch_crd::LogVerbosity>,
    /// The scheduling loop: ends on shutdown, or with [`LostLease`].
    pub task: tokio::task::JoinHandle<Result<(), LostLease>>,
    stop: CancellationToken,
}

impl RunningScheduler {
    /// Stops scheduling (and every task of `tasks`) and returns when the loop has ended.
    pub async fn shutdown(self) -> Result<(), LostLease> {
        self.stop.cancel();
        self.task.await.unwrap_or(Ok(()))
    }
}

/// Starts the scheduler; its watches, writers and elector run under `tasks` and stop
/// with its shutdown token.
pub fn start(
    client: kube::Client,
    options: SchedulerOptions,
    inspector: Arc<dyn ImageInspector>,
    metrics: SchedulerMetrics,
    tasks: &Tasks,
) -> RunningScheduler {
    let (tx, rx) = InboxSender::channel(INBOX_CAPACITY);
    watch::start(&client, &tx, tasks);
    watch::start_others(&client, &tx, tasks);
    forward(
        placement_config::follow(&client, tasks),
        LoopMessage::PlacementConfigs,
        (
            "configuration to the scheduling loop",
            "the configuration watch ended",
        ),
        tx.clone(),
        tasks,
    );
    forward(
        device_classes::follow(&client, tasks),
        LoopMessage::DeviceClasses,
        (
            "DeviceClasses to the scheduling loop",
            "the DeviceClass watch ended",
        ),
        tx.clone(),
        tasks,
    );
    let images = InspectedImages::new(inspector, tx.clone(), options.inspection_retry);
    let limiter = Arc::new(TokenBucket::new(options.api_qps, options.api_burst));
    let binder = KubeBinder::new(
        client.clone(),
        options.bind_concurrency,
        tx.clone(),
        metrics.clone(),
        limiter.clone(),
        options.volume_bind_timeout,
    );
    // The report writer stops once the loop has ended (however it ends: the guard is
    // dropped with the loop), so the bindings the loop finishes at shutdown are reported.
    let reports_done = CancellationToken::new();
    let events = EventRecorder::new(client.clone(), &options.scheduler_name, &options.identity);
    let reports = PodReports::start(
        client.clone(),
        events,
        options.report_capacity,
        metrics.clone(),
        limiter.clone(),
        reports_done.clone(),
        tasks,
    );
    let evictions = Evictions::new(
        client.clone(),
        tx.clone(),
        limiter.clone(),
        reports.clone(),
        metrics.clone(),
        &options.scheduler_name,
    );
    let leadership = Leadership::start(&client, options.election.clone(), tasks);
    let leading = leadership.subscribe();
    let (verbosity_tx, verbosity_rx) = signal::channel(multiarch_crd::LogVerbosity::Normal);
    let (ready_tx, ready_rx) = signal::channel(false);
    let core = SchedulerCore::new(
        Profile::new(&PlacementSpec {
            scheduler_name: options.scheduler_name.clone(),
            ..PlacementSpec::default()
        }),
        PlacementInputs::default(),
        rand_seed(),
    );
    let stop = tasks.shutdown().clone();
    let writers = Writers {
        binder,
        reports,
        evictions,
    };
    let exports = Exports {
        metrics,
        ready: ready_tx,
        verbosity: verbosity_tx,
        exported_hints: HashMap::new(),
    };
    let state = Loop::new(core, options, images, writers, exports, leadership);
    let loop_end = reports_done.drop_guard();
    let run = state.run(rx, stop.clone());
    let task = tokio::spawn(async move {
        let _loop_end = loop_end;
        run.await
    });
    RunningScheduler {
        ready: ready_rx,
        leading,
        log_verbosity: verbosity_rx,
        task,
        stop,
    }
}

/// A followed value (the placement configuration, the DeviceClasses) reaches the loop
/// through its inbox, like every other change, as the task `name`; the role ends if its
/// source does (`source_gone` says why).
fn forward<T: Clone + Send + Sync + 'static>(
    values: signal::Receiver<T>,
    to_message: fn(T) -> LoopMessage,
    (name, source_gone): (&'static str, &'static str),
    inbox: InboxSender,
    tasks: &Tasks,
) {
    tasks.follow_async(name, values, SenderGone::Fail(source_gone), move |value| {
        let inbox = inbox.clone();
        // A closed inbox means the loop ended, which its own task reports.
        async move {
            let _ = inbox.send(to_message(value)).await;
        }
    });
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
