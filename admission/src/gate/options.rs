//! How the gate controller is run.

use std::time::Duration;

use multiarch_runtime::leader_election::ElectionConfig;

#[derive(Clone, Debug)]
pub struct GateOptions {
    pub own_namespace: String,
    pub identity: String,
    pub concurrency: usize,
    /// A pod's images inspected at once: a pod with many images on a slow registry is
    /// not inspected one image after another.
    pub images_at_once: usize,
    /// The most one pass waits for a pod's images; then the pass fails (and is retried
    /// with backoff like any failed inspection), freeing its worker for other pods.
    pub pod_inspection_deadline: Duration,
    /// Inspection attempts before the fallback (or ungating without affinity).
    pub max_attempts: u32,
    /// Backoff between inspection attempts, and after API errors.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub election: Option<ElectionConfig>,
}
