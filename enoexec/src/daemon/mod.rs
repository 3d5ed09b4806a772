//! `multiarch enoexec-daemon`'s pipeline: kernel event → container (host only) → burst
//! filter → pod (runtime) → bounded queue → rate-limited `ENoExecEvent` writer. An exit
//! with status 127 takes the same way to the pod, then a queue of its own whose task
//! reads the container's log for the loader's refusal (most such exits are a shell's
//! "command not found") and hands the writer only the refusals.
//!
//! Nothing here blocks the kernel reader for long: the runtime is asked only about the first
//! event of a burst, logs are read by their own task, and a full queue drops (and counts)
//! instead of waiting.

pub mod burst;
mod exit_logs;
pub mod kernel_reader;
pub mod metrics;
pub mod node_level;
pub mod writer;
pub mod x86_64_level;

use std::{
    num::NonZeroUsize,
    sync::Mutex,
    time::{Duration, Instant},
};

use multiarch_ebpf::{
    cri::{ContainerDirectory, ContainerInfo},
    event::{DecodeError, ExecEvent, ExecSyscall},
    locate::{Found, Locator},
};
use multiarch_runtime::supervisor::Tasks;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use self::{
    burst::BurstFilter,
    metrics::DaemonMetrics,
    writer::{LocatedFailure, Observed, write_loop},
};

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
    /// Between reads of a container's log looking for the loader's refusal (the runtime
    /// copies the container's output to it a moment after the process wrote it).
    pub log_read_interval: Duration,
}

pub struct Daemon<D> {
    locator: Locator<D>,
    bursts: Mutex<BurstFilter>,
    queue: mpsc::Sender<LocatedFailure>,
    /// Containers whose process exited with 127, for their logs to be read.
    exits: mpsc::Sender<ContainerInfo>,
    metrics: DaemonMetrics,
}

impl<D: ContainerDirectory> Daemon<D> {
    /// Starts the writer under `tasks` (it writes what is queued, then stops on
    /// shutdown); [`Self::handle`] feeds it.
    pub fn start(
        client: kube::Client,
        locator: Locator<D>,
        options: DaemonOptions,
        metrics: DaemonMetrics,
        tasks: &Tasks,
    ) -> Self {
        let (queue, rx) = mpsc::channel(options.queue_capacity.max(1));
        let bursts = BurstFilter::new(
            options.dedup_window,
            NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
        );
        let (exits, exits_rx) = mpsc::channel(options.queue_capacity.max(1));
        let shutdown = tasks.shutdown().clone();
        tasks.spawn(
            "exit-127 log reader",
            exit_logs::read_exit_logs(
                exits_rx,
                queue.clone(),
                options.log_read_interval,
                metrics.clone(),
                shutdown.clone(),
            ),
        );
        tasks.spawn(
            "ENoExecEvent writer",
            write_loop(client, options, metrics.clone(), rx, shutdown),
        );
        Self {
            locator,
            bursts: Mutex::new(bursts),
            queue,
            exits,
            metrics,
        }
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
        let exited = event.syscall == ExecSyscall::ExitGroup;
        let cgroup = match self.locator.find_cgroup(&event) {
            Found::Cgroup(cgroup) => cgroup,
            // A process outside containers exiting with 127 is not ours to report.
            Found::Outside if exited => return,
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
        // Exits are de-duplicated apart from exec format errors: a shell's "command not
        // found" must not hide the same container's exec format error.
        let burst_key = if exited {
            format!("{}#exit", cgroup.container_id)
        } else {
            cgroup.container_id.clone()
        };
        let admitted = self
            .bursts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(&burst_key, Instant::now());
        if !admitted {
            self.metrics.count("duplicate");
            return;
        }
        let info = match self.locator.describe(&cgroup).await {
            Ok(info) => info,
            Err(e) => {
                warn!(container = %cgroup.container_id, error = %e, "cannot find the pod of a container with an exec format error or an exit with 127");
                // The next event of this container tries again.
                self.bursts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .forget(&burst_key);
                self.metrics.count("unresolved");
                return;
            }
        };
        if exited {
            debug!(pod = %info.pod_name, namespace = %info.pod_namespace, container = %info.container_name, comm = %event.comm, "a container's process exited with 127; its log is read for the loader's refusal");
            if self.exits.try_send(info).is_err() {
                warn!("exit-127 queue full; dropping an exit");
                self.metrics.count("queue_full");
            }
            return;
        }
        info!(pod = %info.pod_name, namespace = %info.pod_namespace, container = %info.container_name, filename = event.filename.as_deref().unwrap_or("unknown"), "exec format error");
        let report = LocatedFailure {
            container: info,
            observed: Observed::ExecFormatError {
                executable: event.filename,
            },
        };
        if self.queue.try_send(report).is_err() {
            warn!("ENoExecEvent queue full; dropping a report");
            self.metrics.count("queue_full");
        }
    }
}
