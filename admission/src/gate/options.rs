//! How the gate controller is run.

use std::time::Duration;

use multiarch_runtime::leader_election::ElectionConfig;

#[derive(Clone, Debug)]
pub struct GateOptions {
    pub own_namespace: String,
    pub identity: String,
    pub concurrency: usize,
    /// Inspection attempts before the fallback (or ungating without affinity).
    pub max_attempts: u32,
    /// Backoff between inspection attempts, and after API errors.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub election: Option<ElectionConfig>,
}
