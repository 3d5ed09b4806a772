//! `multiarch operator`: every replica serves the webhooks with the certificate the
//! leader keeps; the leader reconciles the ClusterPodPlacementConfig when it, an operand
//! or the nodes' architectures change, and at least every five minutes (certificates).

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures_util::StreamExt;
use k8s_openapi::{
    api::{
        admissionregistration::v1::MutatingWebhookConfiguration,
        apps::v1::{DaemonSet, Deployment},
        core::v1::{Node, Pod, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    runtime::{WatchStreamExt, reflector, watcher},
};
use multiarch_crd::{
    ClusterPodPlacementConfig,
    names::{LABEL_MISPLACED, NODE_ARCH_LABEL, SINGLETON_NAME},
};
use multiarch_runtime::{
    backoff::Backoff,
    https_server::{self, ServerLimits},
    leader_election::{ElectionConfig, Leadership},
    pod_events::PodEvents,
    serving_cert::{ReloadingCert, with_resolver},
    supervisor::Tasks,
};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    admission::{self, AdmissionState},
    apply::MANAGED_BY,
    certificates::expires_at,
    context::OperatorContext,
    install::{OPERATOR_TLS_SECRET, Settings},
    metrics::{OperatorMetrics, SecretLabel},
    reconcile::reconcile,
};

#[derive(Clone, Debug)]
pub struct OperatorOptions {
    pub settings: Settings,
    /// This replica, in the Lease and events.
    pub identity: String,
    pub election: Option<ElectionConfig>,
    pub drain_timeout: Duration,
    /// How long the components serving a removed route stay (`OperatorContext::route_settle`).
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
    let state = AdmissionState {
        client: client.clone(),
        serving: serving.clone(),
        registry: Arc::new(registry),
    };
    let shutdown = tasks.shutdown().clone();
    let tls = with_resolver(serving.clone());
    tasks.spawn("operator webhooks", async move {
        https_server::serve(
            listener,
            tls,
            admission::router(state),
            shutdown,
            ServerLimits::default(),
        )
        .await;
        Ok::<(), std::convert::Infallible>(())
    });

    let (nodes, node_writer) = reflector::store();
    let context = Arc::new(OperatorContext::new(
        client.clone(),
        options.settings.clone(),
        serving.clone(),
        options.drain_timeout,
        options.route_settle,
        nodes,
        PodEvents::new(client.clone(), "multiarch-operator", &options.identity),
        metrics,
    ));
    // Every replica serves the certificate the leader writes.
    let follower = context.clone();
    let period = options.certificate_check.min(Duration::from_secs(30));
    let shutdown = tasks.shutdown().clone();
    tasks.spawn("operator certificate follower", async move {
        loop {
            if let Err(e) = follower.authority.follow(&follower.serving).await {
                warn!(error = %e, "cannot read the operator's serving certificate");
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok::<(), std::convert::Infallible>(()),
                () = tokio::time::sleep(period) => {}
            }
        }
    });

    let running = Running {
        log_verbosity: context.log_verbosity.subscribe(),
        serving,
    };
    let leadership = Leadership::start(&client, options.election.clone(), tasks);
    let shutdown = tasks.shutdown().clone();
    tasks.spawn("operator controller", async move {
        leadership
            .run_while_leading(&shutdown, |stop| lead(context, node_writer, options, stop))
            .await
    });
    running
}

/// Wakes the reconcile loop; many wake-ups before it runs are one pass.
#[derive(Clone)]
struct Wake(tokio::sync::mpsc::Sender<()>);

impl Wake {
    fn wake(&self) {
        let _ = self.0.try_send(());
    }
}

/// Follows `api`'s objects (with `config`), waking the loop on every change.
async fn watch_into<K>(api: Api<K>, config: watcher::Config, wake: Wake, stop: CancellationToken)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let changes = watcher(api, config).default_backoff().touched_objects();
    tokio::pin!(changes);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            next = changes.next() => match next {
                Some(Ok(_)) => wake.wake(),
                Some(Err(e)) => warn!(error = %e, "operator watch failed; retrying"),
                None => return,
            },
        }
    }
}

/// The leader's work: the certificates, and one reconcile loop woken by changes to the
/// ClusterPodPlacementConfig, its operands and the nodes' architectures.
async fn lead(
    context: Arc<OperatorContext>,
    node_writer: reflector::store::Writer<kube::core::PartialObjectMeta<Node>>,
    options: OperatorOptions,
    stop: CancellationToken,
) {
    info!(identity = %options.identity, "leading: reconciling the ClusterPodPlacementConfig");
    let client = context.client.clone();
    let (sender, mut woken) = tokio::sync::mpsc::channel(1);
    let wake = Wake(sender);
    let certificates = {
        let context = context.clone();
        let stop = stop.clone();
        async move {
            loop {
                check_certificates(&context).await;
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(options.certificate_check) => {}
                }
            }
        }
    };
    // The nodes' architectures: a pass when the set changes, not on every heartbeat.
    let nodes = {
        let wake = wake.clone();
        let stop = stop.clone();
        let store = node_writer.as_reader();
        let client = client.clone();
        async move {
            let mut seen: BTreeSet<String> = BTreeSet::new();
            let changes = reflector(
                node_writer,
                watcher(
                    Api::<kube::core::PartialObjectMeta<Node>>::all(client),
                    watcher::Config::default(),
                ),
            )
            .default_backoff()
            .touched_objects();
            tokio::pin!(changes);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    next = changes.next() => match next {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => warn!(error = %e, "node watch failed; retrying"),
                        None => return,
                    },
                }
                let now: BTreeSet<String> = store
                    .state()
                    .iter()
                    .filter_map(|n| n.metadata.labels.as_ref()?.get(NODE_ARCH_LABEL).cloned())
                    .collect();
                if now != seen {
                    seen = now;
                    wake.wake();
                }
            }
        }
    };
    let owned =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"));
    let namespace = context.settings.namespace.clone();
    // Optional APIs appearing or going (prometheus-operator installed after multiarch):
    // the pass finds them by discovery.
    let optional_apis = watch_into(
        Api::<CustomResourceDefinition>::all(client.clone()),
        watcher::Config::default().fields(&format!(
            "metadata.name={}",
            crate::install::SERVICE_MONITOR_CRD
        )),
        wake.clone(),
        stop.clone(),
    );
    // PodPlacementConfigs coming and going: the no-pod-placement-config finalizer follows.
    let pod_configs = watch_into(
        Api::<kube::core::PartialObjectMeta<multiarch_crd::PodPlacementConfig>>::all(
            client.clone(),
        ),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
    );
    // Pods the misplaced-pod correction labels (or that go): the status counts them.
    let misplaced = watch_into(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(&format!("{LABEL_MISPLACED}=true")),
        wake.clone(),
        stop.clone(),
    );
    let watches = futures_util::future::join5(
        watch_into(
            Api::<ClusterPodPlacementConfig>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={SINGLETON_NAME}")),
            wake.clone(),
            stop.clone(),
        ),
        watch_into(
            Api::<Deployment>::namespaced(client.clone(), &namespace),
            owned.clone(),
            wake.clone(),
            stop.clone(),
        ),
        watch_into(
            Api::<DaemonSet>::namespaced(client.clone(), &namespace),
            owned.clone(),
            wake.clone(),
            stop.clone(),
        ),
        watch_into(
            Api::<Secret>::namespaced(client.clone(), &namespace),
            owned.clone(),
            wake.clone(),
            stop.clone(),
        ),
        watch_into(
            Api::<MutatingWebhookConfiguration>::all(client.clone()),
            owned,
            wake.clone(),
            stop.clone(),
        ),
    );
    let passes = {
        let context = context.clone();
        let stop = stop.clone();
        async move {
            let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
            let mut failures = 0u32;
            let mut next = Duration::ZERO;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = woken.recv() => {
                        // Changes come in bursts (an apply touches many objects): one pass.
                        tokio::time::sleep(DEBOUNCE).await;
                        while woken.try_recv().is_ok() {}
                    }
                    () = tokio::time::sleep(next) => {}
                }
                next = match pass(&context).await {
                    Ok(after) => {
                        failures = 0;
                        after
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let wait = backoff.after(failures);
                        warn!(error = %e, failures, retry_in = ?wait, "reconcile of the ClusterPodPlacementConfig failed");
                        wait
                    }
                };
            }
        }
    };
    tokio::join!(
        certificates,
        nodes,
        watches,
        optional_apis,
        pod_configs,
        misplaced,
        passes
    );
}

/// How long the loop waits for a burst of changes to end.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// One pass: the ClusterPodPlacementConfig as it is now, reconciled.
async fn pass(context: &OperatorContext) -> Result<Duration, crate::step::ReconcileError> {
    let configs = Api::<ClusterPodPlacementConfig>::all(context.client.clone());
    match configs
        .get_opt(SINGLETON_NAME)
        .await
        .map_err(crate::step::api_error("read the ClusterPodPlacementConfig"))?
    {
        Some(cppc) => reconcile(&cppc, context).await,
        // Nothing to install; the certificates are kept by their own loop.
        None => Ok(crate::step::IDLE_REQUEUE),
    }
}

async fn check_certificates(context: &OperatorContext) {
    match context
        .authority
        .check(&context.serving, SystemTime::now())
        .await
    {
        Ok(renewed) => {
            if let Some(why) = renewed.authority {
                info!("CA renewed: {why}");
            }
            if let Some(why) = renewed.operator {
                info!("operator certificate renewed: {why}");
            }
            if renewed.bundle_injected {
                info!("CA bundle written into the conversion and validating webhooks");
            }
        }
        Err(e) => warn!(error = %e, "certificate check failed; retrying at the next check"),
    }
    // The operands' too: a reconcile that keeps failing never lets one expire.
    if let Err(e) = crate::operand_certificates::renew(context, SystemTime::now()).await {
        warn!(error = %e, "operand certificate renewal failed; retrying at the next check");
    }
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &context.settings.namespace);
    if let Ok(Some(secret)) = secrets.get_opt(OPERATOR_TLS_SECRET).await
        && let Some(expiry) = expires_at(&crate::authority::secret_data(&secret))
    {
        context
            .metrics
            .certificate_expiry
            .get_or_create(&SecretLabel {
                secret: OPERATOR_TLS_SECRET,
            })
            .set(expiry);
    }
}
