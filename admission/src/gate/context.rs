//! What every pass of the gate controller shares.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use multiarch_inspector::ImageInspector;
use multiarch_policy::architecture_rules::ArchitectureRules;
use multiarch_runtime::event_recorder::EventRecorder;

use super::{metrics::GateMetrics, options::GateOptions};

/// What every pass shares.
pub struct GateContext {
    pub client: kube::Client,
    pub inspector: Arc<dyn ImageInspector>,
    pub options: GateOptions,
    pub metrics: GateMetrics,
    pub events: EventRecorder,
    /// Pods waiting out an inspection backoff: their own updates (labels written by the
    /// failed pass) must not trigger the next attempt early, as they did in MTO.
    pub backoff_until: Mutex<HashMap<String, Instant>>,
    /// Pods whose passes could not read the placement configuration, and how many times.
    pub unreadable_configuration: Mutex<HashMap<String, u32>>,
    /// The compiled `celArchitecturePlacement` rules of the namespaces passes have read
    /// (a namespace leaves when its configs stop enabling rules).
    pub architecture_rules: Mutex<ArchitectureRules>,
}
