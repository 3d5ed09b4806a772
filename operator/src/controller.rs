//! The leader's reconciler, read as kube-rs's controller-rs example reads: kube-runtime's
//! `Controller` over the ClusterPodPlacementConfig `cluster`, triggered by what the
//! reconcile reads (its operands, the PodPlacementConfigs, misplaced pods, the
//! ServiceMonitor CRD) and by changes to the set of the nodes' architectures, run by the
//! house's `controller::run` (per-object backoff, errors logged with the object's name,
//! graceful shutdown). A burst of changes (an apply touches many objects) is one pass.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures_util::{Stream, StreamExt, future};
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
    core::PartialObjectMeta,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher},
};
use multiarch_crd::{
    ClusterPodPlacementConfig, PodPlacementConfig,
    names::{LABEL_MISPLACED, SINGLETON_NAME},
};
use multiarch_runtime::{
    backoff::Backoff,
    controller::{self, ControllerSettings},
};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{
    apply::MANAGED_BY,
    context::{OperatorContext, node_architectures},
    install::{PROMETHEUS_RULE_CRD, SERVICE_MONITOR_CRD},
    reconcile::{ReconcileError, reconcile},
};

/// How long a burst of changes is waited out before the one pass it causes.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Runs the reconciler until `stop`; `nodes` fills the context's node store.
pub async fn run(
    context: Arc<OperatorContext>,
    nodes: reflector::store::Writer<PartialObjectMeta<Node>>,
    stop: CancellationToken,
) {
    let client = context.client.clone();
    let namespace = context.settings.namespace.clone();
    // Operands, whether the ClusterPodPlacementConfig owns them or not (the CA outlives it).
    let operands =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"));
    let controller = Controller::new(
        Api::<ClusterPodPlacementConfig>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={SINGLETON_NAME}")),
    )
    .reconcile_all_on(changes(
        Api::<Deployment>::namespaced(client.clone(), &namespace),
        operands.clone(),
    ))
    .reconcile_all_on(changes(
        Api::<DaemonSet>::namespaced(client.clone(), &namespace),
        operands.clone(),
    ))
    .reconcile_all_on(changes(
        Api::<Secret>::namespaced(client.clone(), &namespace),
        operands.clone(),
    ))
    .reconcile_all_on(changes(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        operands,
    ))
    // Optional APIs appearing or going (prometheus-operator installed after multiarch):
    // the pass finds them by discovery.
    .reconcile_all_on(changes(
        Api::<CustomResourceDefinition>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={SERVICE_MONITOR_CRD}")),
    ))
    .reconcile_all_on(changes(
        Api::<CustomResourceDefinition>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={PROMETHEUS_RULE_CRD}")),
    ))
    // PodPlacementConfigs coming and going: the no-pod-placement-config finalizer follows.
    .reconcile_all_on(changes(
        Api::<PartialObjectMeta<PodPlacementConfig>>::all(client.clone()),
        watcher::Config::default(),
    ))
    // Pods the misplaced-pod correction labels (or that go): the status counts them.
    .reconcile_all_on(changes(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(&format!("{LABEL_MISPLACED}=true")),
    ))
    .reconcile_all_on(architecture_changes(client, nodes));
    let settings = ControllerSettings {
        name: "operator",
        concurrency: 1,
        backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
        debounce: DEBOUNCE,
    };
    controller::run(controller, settings, context, reconcile_config, stop).await;
}

/// One item per change to `api`'s objects (with `config`). Each watch backs off on its
/// own and its errors are logged here, never passed on: the Controller backs off its
/// whole trigger stream on any error, so one failing watch would starve the others
/// (the ClusterPodPlacementConfig's own included).
fn changes<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = ()> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&Default::default()).into_owned();
    watcher(api, config)
        .default_backoff()
        .touched_objects()
        .filter_map(move |change| {
            if let Err(e) = &change {
                warn!(%kind, error = %e, "operator watch failed; retrying");
            }
            future::ready(change.ok().map(|_| ()))
        })
}

async fn reconcile_config(
    cppc: Arc<ClusterPodPlacementConfig>,
    context: Arc<OperatorContext>,
) -> Result<Action, ReconcileError> {
    reconcile(&cppc, &context).await.map(Action::requeue)
}

/// One item each time the set of the nodes' architectures changes, not on every
/// heartbeat; the node store is filled on the way.
fn architecture_changes(
    client: kube::Client,
    nodes: reflector::store::Writer<PartialObjectMeta<Node>>,
) -> impl Stream<Item = ()> + Send + 'static {
    let store = nodes.as_reader();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    reflector(
        nodes,
        watcher(
            Api::<PartialObjectMeta<Node>>::all(client),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(move |change| {
        let changed = match change {
            Ok(_) => {
                let now = node_architectures(&store);
                let changed = now != seen;
                seen = now;
                changed
            }
            Err(e) => {
                warn!(error = %e, "node watch failed; retrying");
                false
            }
        };
        future::ready(changed.then_some(()))
    })
}
