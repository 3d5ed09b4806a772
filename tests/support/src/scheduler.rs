//! The multiarch scheduler in a test, without leader election, for the binary's tests
//! that place pods through it (bundle images, misplaced-pod replacements).

use std::{sync::Arc, time::Duration};

use multiarch_inspector::ImageInspector;
use multiarch_runtime::supervisor::Supervisor;
use multiarch_scheduler::in_cluster::{
    RunningScheduler, SchedulerOptions, metrics::SchedulerMetrics,
};
use tokio_util::sync::CancellationToken;

/// A scheduler placing `multiarch-scheduler`'s pods with `inspector`, with its own
/// supervisor (kept alive by the returned pair).
pub fn start(
    client: kube::Client,
    inspector: Arc<dyn ImageInspector>,
) -> (RunningScheduler, Supervisor) {
    let supervisor = Supervisor::new(CancellationToken::new());
    let running = multiarch_scheduler::in_cluster::start(
        client,
        SchedulerOptions {
            scheduler_name: "multiarch-scheduler".into(),
            identity: "test".into(),
            election: None,
            bind_concurrency: 4,
            report_capacity: 100,
            inspection_retry: Duration::from_secs(30),
            config_grace: Duration::from_secs(5),
            api_qps: 0.0,
            api_burst: 1,
            volume_bind_timeout: Duration::from_secs(20),
        },
        inspector,
        SchedulerMetrics::default(),
        &supervisor.tasks(),
    );
    (running, supervisor)
}
