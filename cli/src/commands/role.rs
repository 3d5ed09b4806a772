//! What every long-running subcommand does around its role: logging, the supervisor that
//! ends the process on SIGTERM (after letting the tasks drain) or when a task dies, and
//! the operations server (`/metrics`, `/healthz`, `/readyz`).

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

#[cfg(any(feature = "scheduler", feature = "operator"))]
use multiarch_runtime::follow::SenderGone;
use multiarch_runtime::{
    logging::{self, FilterHandle, LogArgs},
    ops_server::{self, OpsState},
    shutdown,
    supervisor::{Supervisor, Tasks},
};
use prometheus_client::registry::Registry;

/// How long the tasks get to drain after SIGTERM: inside Kubernetes' default 30 s grace.
const DRAIN_GRACE: Duration = Duration::from_secs(25);

pub struct Role {
    supervisor: Supervisor,
    pub tasks: Tasks,
    /// Every metric of the role, served on `/metrics`.
    pub registry: Registry,
    /// `/readyz` answers 200 while this is true.
    pub ready: Arc<AtomicBool>,
}

impl Role {
    /// Logging set up, and a supervisor that shuts down on SIGTERM or SIGINT; with the
    /// handle that changes the log filter at run time (`None` when `RUST_LOG` pins it).
    pub fn begin(log: &LogArgs, ready: bool) -> (Self, Option<FilterHandle>) {
        let log_filter = logging::init_from(log);
        let supervisor = Supervisor::new(shutdown::on_signal());
        let mut role = Role {
            tasks: supervisor.tasks(),
            supervisor,
            registry: Registry::default(),
            ready: Arc::new(AtomicBool::new(ready)),
        };
        // Every role exports it; only the roles that compete for a Lease have values.
        role.tasks.leaders().register(&mut role.registry);
        (role, log_filter)
    }

    /// Serves the operations endpoint on `addr` and runs until the role ends: `Ok` after
    /// a clean shutdown, an error naming the task that failed otherwise.
    pub async fn serve_and_wait(self, addr: SocketAddr) -> anyhow::Result<()> {
        let state = OpsState {
            registry: Arc::new(self.registry),
            ready: self.ready,
        };
        self.tasks.spawn(
            "operations server",
            ops_server::serve(addr, state, self.tasks.shutdown().clone()),
        );
        self.supervisor.wait(DRAIN_GRACE).await?;
        Ok(())
    }

    /// `/readyz` follows `ready`, the role's own readiness, until shutdown.
    #[cfg(feature = "scheduler")]
    pub fn ready_from(&self, mut ready: tokio::sync::watch::Receiver<bool>) {
        let readiness = self.ready.clone();
        let store = move |now: bool| readiness.store(now, std::sync::atomic::Ordering::Relaxed);
        store(*ready.borrow_and_update());
        let keep_last = SenderGone::KeepLast;
        self.tasks.follow("readiness", ready, keep_last, store);
    }

    /// `/readyz` follows `is_ready`, asked every second, until shutdown.
    #[cfg(any(feature = "operator", feature = "scheduler"))]
    pub fn ready_when(&self, is_ready: impl Fn() -> bool + Send + 'static) {
        let readiness = self.ready.clone();
        let shutdown = self.tasks.shutdown().clone();
        self.tasks.spawn("readiness", async move {
            loop {
                readiness.store(is_ready(), std::sync::atomic::Ordering::Relaxed);
                tokio::select! {
                    () = shutdown.cancelled() => return Ok::<(), std::convert::Infallible>(()),
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
    }

    /// Runs until the role ends, for a role that serves its own `/metrics` and `/readyz`
    /// (the webhook, on its HTTPS port).
    #[cfg(feature = "admission")]
    pub async fn wait(self) -> anyhow::Result<()> {
        self.supervisor.wait(DRAIN_GRACE).await?;
        Ok(())
    }
}

/// Follows the ClusterPodPlacementConfig's `logVerbosity` (unless `RUST_LOG` pins the
/// level: no handle then).
#[cfg(any(feature = "scheduler", feature = "operator"))]
pub fn follow_log_verbosity(
    role: &Role,
    handle: Option<FilterHandle>,
    verbosity: tokio::sync::watch::Receiver<multiarch_crd::LogVerbosity>,
) {
    let Some(handle) = handle else { return };
    let keep_last = SenderGone::KeepLast;
    role.tasks
        .follow("log verbosity", verbosity, keep_last, move |level| {
            if handle
                .reload(tracing_subscriber::EnvFilter::new(level.filter_directive()))
                .is_ok()
            {
                tracing::info!(
                    ?level,
                    "log verbosity changed by the ClusterPodPlacementConfig"
                );
            }
        });
}
