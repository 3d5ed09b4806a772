//! `multiarch gate-controller`: a controller over pending pods (the shared controller
//! loop: one pass per pod at a time, bounded concurrency, per-pod backoff on API errors)
//! that runs [`super::pass`] on each gated pod, leader-elected like the scheduler. A
//! PodPlacementConfig change re-runs the gated pods of its namespace (MTO's fix for
//! MULTIARCH-6239). The gauge of gated pods follows the controller's own cache.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{Controller, reflector::ObjectRef, watcher},
};
use multiarch_crd::PodPlacementConfig;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{
    backoff::Backoff,
    controller::{self, ControllerSettings},
    event_recorder::EventRecorder,
    placement_config::{self, CONFIG_PAGE},
    supervisor::Tasks,
};
use tokio_util::sync::CancellationToken;

use super::{
    context::GateContext, metrics::GateMetrics, options::GateOptions, pass, process::has_gate,
};

/// Starts the controller under `tasks`: it waits for the lease, then runs until shutdown;
/// losing the lease ends the role.
pub fn start(
    client: kube::Client,
    inspector: Arc<dyn ImageInspector>,
    options: GateOptions,
    metrics: GateMetrics,
    tasks: &Tasks,
) {
    let election = options.election.clone();
    let context = Arc::new(GateContext {
        events: EventRecorder::new(
            client.clone(),
            "multiarch-gate-controller",
            &options.identity,
        ),
        client: client.clone(),
        inspector,
        options,
        metrics,
        backoff_until: Mutex::default(),
        unreadable_configuration: Mutex::default(),
        configs: placement_config::follow(&client, tasks),
    });
    let work = |stop| run(context, stop);
    tasks.spawn_while_leading("gate controller", &client, election, work);
}

async fn run(context: Arc<GateContext>, stop: CancellationToken) {
    let pods = Api::<Pod>::all(context.client.clone());
    let controller = Controller::new(
        pods,
        watcher::Config::default().fields("status.phase=Pending"),
    );
    let cache = controller.store();
    let in_namespace = cache.clone();
    // Names are enough to know which pods to pass over again: a metadata watch, paged,
    // never the configs' rules.
    let controller = controller.watches(
        Api::<PartialObjectMeta<PodPlacementConfig>>::all(context.client.clone()),
        watcher::Config::default().page_size(CONFIG_PAGE),
        move |config: PartialObjectMeta<PodPlacementConfig>| {
            let namespace = config.namespace().unwrap_or_default();
            in_namespace
                .state()
                .into_iter()
                .filter(|pod| {
                    pod.namespace().as_deref() == Some(namespace.as_str()) && has_gate(pod)
                })
                .map(|pod| ObjectRef::from_obj(pod.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let gauge = {
        let metrics = context.metrics.clone();
        let stop = stop.clone();
        async move {
            loop {
                let gated = cache.state().iter().filter(|pod| has_gate(pod)).count();
                metrics.gated.set(i64::try_from(gated).unwrap_or(i64::MAX));
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    };
    let settings = ControllerSettings {
        name: "gate",
        concurrency: u16::try_from(context.options.concurrency.max(1)).unwrap_or(u16::MAX),
        backoff: Backoff::new(context.options.initial_backoff, context.options.max_backoff),
        debounce: Duration::ZERO,
    };
    tokio::join!(
        controller::run(controller, settings, context, pass::reconcile, stop),
        gauge
    );
}
