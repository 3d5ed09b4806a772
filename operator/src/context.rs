//! What the reconciler works with: clients, settings, the CA, the nodes' architectures,
//! events, metrics and the drain clocks.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Node;
use kube::{core::PartialObjectMeta, runtime::reflector::Store};
use multiarch_crd::{LogVerbosity, names::NODE_ARCH_LABEL};
use multiarch_runtime::{event_recorder::EventRecorder, serving_cert::ReloadingCert};

use crate::{
    apply::Applier, authority::CertificateAuthority, install::Settings, metrics::OperatorMetrics,
};

/// What is draining, each with its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Drain {
    /// Pods wait for a scheduler that is being removed (mode switch).
    SchedulerPods,
    /// Reports wait for an exec-format-error handler that is being removed.
    EnoexecReports,
    /// The whole install is being removed.
    Uninstall,
    /// The webhook configuration is gone (uninstall): reviews already in flight, and API
    /// servers that have not seen the deletion yet, may still gate or route pods.
    UninstallSettle,
    /// The webhook configuration no longer routes to the scheduler (a mode switch): the
    /// same, for pods still routed to it.
    SchedulerRouteSettle,
}

impl Drain {
    /// Settle clocks run for `route_settle`; the others for the drain timeout.
    fn is_settle(self) -> bool {
        matches!(self, Drain::UninstallSettle | Drain::SchedulerRouteSettle)
    }
}

pub struct OperatorContext {
    pub client: kube::Client,
    pub applier: Applier,
    pub settings: Settings,
    pub authority: CertificateAuthority,
    /// The operator's own serving certificate (its webhooks).
    pub serving: Arc<ReloadingCert>,
    /// How long pods (and reports) may wait for a component that is being removed
    /// before the operator releases them itself.
    pub drain_timeout: Duration,
    /// How long after a route is removed (observed removed) the components serving it
    /// stay: longer than an admission review may take, plus the API servers' delay in
    /// seeing the change.
    pub route_settle: Duration,
    /// Node metadata, for the cluster's architectures.
    pub nodes: Store<PartialObjectMeta<Node>>,
    pub events: EventRecorder,
    pub metrics: OperatorMetrics,
    /// The ClusterPodPlacementConfig's `logVerbosity`, for the operator's own log.
    pub log_verbosity: tokio::sync::watch::Sender<LogVerbosity>,
    /// One issuer of the operands' certificates at a time (reconcile, certificate loop).
    pub operand_certificates: tokio::sync::Mutex<()>,
    drains: Mutex<BTreeMap<Drain, Instant>>,
}

impl OperatorContext {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        settings: Settings,
        serving: Arc<ReloadingCert>,
        drain_timeout: Duration,
        route_settle: Duration,
        nodes: Store<PartialObjectMeta<Node>>,
        events: EventRecorder,
        metrics: OperatorMetrics,
    ) -> Self {
        OperatorContext {
            applier: Applier::new(client.clone()),
            authority: CertificateAuthority::new(client.clone(), settings.clone()),
            client,
            settings,
            serving,
            drain_timeout,
            route_settle,
            nodes,
            events,
            metrics,
            log_verbosity: tokio::sync::watch::channel(LogVerbosity::default()).0,
            operand_certificates: tokio::sync::Mutex::new(()),
            drains: Mutex::default(),
        }
    }

    fn drains(&self) -> std::sync::MutexGuard<'_, BTreeMap<Drain, Instant>> {
        self.drains
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn timeout(&self, drain: Drain) -> Duration {
        if drain.is_settle() {
            self.route_settle
        } else {
            self.drain_timeout
        }
    }

    /// Starts `drain`'s clock (if not running) and says whether its timeout has passed.
    /// The clock lives in memory: a new leader starts it again (it waits longer, never
    /// less).
    pub fn drain_expired(&self, drain: Drain) -> bool {
        let started = *self.drains().entry(drain).or_insert_with(Instant::now);
        started.elapsed() >= self.timeout(drain)
    }

    /// How long `drain` has left, for messages.
    pub fn drain_left(&self, drain: Drain) -> Duration {
        let timeout = self.timeout(drain);
        self.drains()
            .get(&drain)
            .map(|started| timeout.saturating_sub(started.elapsed()))
            .unwrap_or(timeout)
    }

    /// Nothing drains: the clock stops.
    pub fn drain_done(&self, drain: Drain) {
        self.drains().remove(&drain);
    }

    /// Tells the binary the ClusterPodPlacementConfig's `logVerbosity` when it changes.
    pub fn follow_log_verbosity(&self, verbosity: LogVerbosity) {
        self.log_verbosity.send_if_modified(|level| {
            let changed = *level != verbosity;
            *level = verbosity;
            changed
        });
    }

    /// Runs `drain`'s clock while something waits; `true` once it has run out.
    pub fn drain_clock(&self, drain: Drain, waiting: bool) -> bool {
        if waiting {
            self.drain_expired(drain)
        } else {
            self.drain_done(drain);
            false
        }
    }

    /// The nodes' architectures, sorted.
    pub fn architectures(&self) -> Vec<String> {
        node_architectures(&self.nodes).into_iter().collect()
    }
}

/// The set of architectures the nodes in `nodes` have.
pub fn node_architectures(nodes: &Store<PartialObjectMeta<Node>>) -> BTreeSet<String> {
    nodes
        .state()
        .iter()
        .filter_map(|n| n.metadata.labels.as_ref()?.get(NODE_ARCH_LABEL).cloned())
        .collect()
}
