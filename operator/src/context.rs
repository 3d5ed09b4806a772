//! What the reconciler works with: clients, settings, the CA, the nodes' architectures,
//! events, metrics and the drain clocks.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Instant,
};

use k8s_openapi::api::core::v1::Node;
use kube::{core::PartialObjectMeta, runtime::reflector::Store};
use multiarch_crd::{LogVerbosity, names::NODE_ARCH_LABEL};
use multiarch_runtime::{event_recorder::EventRecorder, serving_cert::ReloadingCert};

use crate::{
    apply::Applier,
    certificates::{authority::CertificateAuthority, operands::Keeper},
    clocks::{Clocks, Drain, Expired},
    install::Settings,
    metrics::OperatorMetrics,
};

pub struct OperatorContext {
    pub client: kube::Client,
    pub applier: Applier,
    pub settings: Settings,
    pub authority: CertificateAuthority,
    /// The operator's own serving certificate (its webhooks).
    pub serving: Arc<ReloadingCert>,
    /// Node metadata, for the cluster's architectures.
    pub nodes: Store<PartialObjectMeta<Node>>,
    pub events: EventRecorder,
    pub metrics: OperatorMetrics,
    /// The ClusterPodPlacementConfig's `logVerbosity`, for the operator's own log.
    pub log_verbosity: tokio::sync::watch::Sender<LogVerbosity>,
    /// One issuer of the operands' certificates at a time (reconcile, certificate loop).
    pub operand_certificates: tokio::sync::Mutex<()>,
    /// The drain and settle clocks: how long pods (and reports) may wait for a component
    /// that is being removed before the operator releases them itself, and how long after
    /// a route is seen removed the components serving it stay (longer than an admission
    /// review may take, plus the API servers' delay in seeing the change).
    clocks: Mutex<Clocks>,
}

impl OperatorContext {
    pub fn new(
        client: kube::Client,
        settings: Settings,
        serving: Arc<ReloadingCert>,
        clocks: Clocks,
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
            nodes,
            events,
            metrics,
            log_verbosity: tokio::sync::watch::channel(LogVerbosity::default()).0,
            operand_certificates: tokio::sync::Mutex::new(()),
            clocks: Mutex::new(clocks),
        }
    }

    /// What keeping the operands' certificates takes, from the context.
    pub fn certificate_keeper(&self) -> Keeper<'_> {
        Keeper {
            client: &self.client,
            settings: &self.settings,
            applier: &self.applier,
            authority: &self.authority,
            metrics: &self.metrics,
            one_at_a_time: &self.operand_certificates,
        }
    }

    /// Ticks the clocks: `running` run (as of `at`), the others stop.
    pub fn tick_clocks(&self, running: &BTreeSet<Drain>, at: Instant) -> Expired {
        self.clocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tick(running, at)
    }

    /// Tells the binary the ClusterPodPlacementConfig's `logVerbosity` when it changes.
    pub fn follow_log_verbosity(&self, verbosity: LogVerbosity) {
        self.log_verbosity.send_if_modified(|level| {
            let changed = *level != verbosity;
            *level = verbosity;
            changed
        });
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
