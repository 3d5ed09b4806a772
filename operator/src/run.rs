//! `multiarch operator`: every replica serves the webhooks with the certificate the
//! leader keeps; the leader reconciles the ClusterPodPlacementConfig when it, an operand
//! or the nodes' architectures change, and at least every five minutes (certificates).

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Node;
use kube::{core::PartialObjectMeta, runtime::reflector};
use multiarch_runtime::server_limits::ServerLimits;
use multiarch_runtime::{
    event_recorder::EventRecorder,
    https_server::{self},
    leader_election::ElectionConfig,
    serving_cert::{ReloadingCert, with_resolver},
    supervisor::Tasks,
};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{
    certificate_check,
    clocks::Clocks,
    context::OperatorContext,
    controller,
    crd_webhooks::{self, AdmissionState},
    install::Settings,
    metrics::OperatorMetrics,
    rule_usage::ClusterRuleUsage,
};

#[derive(Clone, Debug)]
pub struct OperatorOptions {
    pub settings: Settings,
    /// This replica, in the Lease and events.
    pub identity: String,
    pub election: Option<ElectionConfig>,
    pub drain_timeout: Duration,
    /// How long the components serving a removed route stay (`clocks::Clocks`).
    pub route_settle: Duration,
    /// How often the leader checks the certificates (and the replicas reload theirs).
    pub certificate_check: Duration,
}

/// What the running operator shows its binary.
pub struct Running {
    /// The ClusterPodPlacementConfig's `logVerbosity`.
    pub log_verbosity: tokio::sync::watch::Receiver<multiarch_crd::LogVerbosity>,
    /// Serving the webhooks (a certificate is in place).
    pub serving: Arc<ReloadingCert>,
}

/// Starts the operator's tasks under `tasks`; `listener` serves the webhooks.
pub fn start(
    client: kube::Client,
    options: OperatorOptions,
    listener: tokio::net::TcpListener,
    registry: Registry,
    metrics: OperatorMetrics,
    tasks: &Tasks,
) -> Running {
    let serving = Arc::new(ReloadingCert::default());
    let state = AdmissionState::new(
        client.clone(),
        &options.settings.namespace,
        serving.clone(),
        Arc::new(registry),
        ClusterRuleUsage::follow(&client, tasks),
    );
    let shutdown = tasks.shutdown().clone();
    let tls = with_resolver(serving.clone());
    let router = crd_webhooks::router(state);
    let limits = ServerLimits::default();
    let server = https_server::serve(listener, tls, router, shutdown, limits);
    tasks.spawn_infallible("operator webhooks", server);

    let (nodes, node_writer) = reflector::store();
    let context = Arc::new(OperatorContext::new(
        client.clone(),
        options.settings.clone(),
        serving.clone(),
        Clocks::new(options.drain_timeout, options.route_settle),
        nodes,
        EventRecorder::new(client.clone(), "multiarch-operator", &options.identity),
        metrics,
    ));
    // Every replica serves the certificate the leader writes.
    let follow = certificate_check::follow(
        context.clone(),
        options.certificate_check.min(Duration::from_secs(30)),
        tasks.shutdown().clone(),
    );
    tasks.spawn_infallible("operator certificate follower", follow);

    let running = Running {
        log_verbosity: context.log_verbosity.subscribe(),
        serving,
    };
    let election = options.election.clone();
    let work = |stop| lead(context, node_writer, options, stop);
    tasks.spawn_while_leading("operator controller", &client, election, work);
    running
}

/// The leader's work: the certificates' clock and the reconciler, until `stop`.
async fn lead(
    context: Arc<OperatorContext>,
    nodes: reflector::store::Writer<PartialObjectMeta<Node>>,
    options: OperatorOptions,
    stop: CancellationToken,
) {
    info!(identity = %options.identity, "leading: reconciling the ClusterPodPlacementConfig");
    let certificates =
        certificate_check::keep(context.clone(), options.certificate_check, stop.clone());
    tokio::join!(certificates, controller::run(context, nodes, stop));
}
