//! A scheduler that cannot reach the image inspector: the ClusterPodPlacementConfig is
//! not Available and says why (from the condition the scheduler writes on its pod), the
//! route is taken off until it reaches it again.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use multiarch_crd::names::CONDITION_INSPECTOR_REACHABLE;
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

const SCHEDULER_POD: &str = "multiarch-scheduler-7d9f8-x2x4q";

/// The scheduler's pod, as the Deployment's ReplicaSet would make it, carrying what its
/// probes say of the inspector.
fn scheduler_pod(server: &FakeApiServer, status: &str, reason: &str, message: &str) -> Value {
    let deployment = get(server, "apps/deployments", "multiarch-scheduler").unwrap();
    let labels = deployment["spec"]["selector"]["matchLabels"].clone();
    assert!(labels.as_object().is_some_and(|l| !l.is_empty()));
    json!({"metadata": {"name": SCHEDULER_POD, "namespace": NS, "labels": labels},
    "spec": {"containers": [{"name": "scheduler", "image": "registry.example.com/multiarch:1.2.3"}]},
    "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": if status == "True" { "True" } else { "False" }},
        {"type": CONDITION_INSPECTOR_REACHABLE, "status": status, "reason": reason, "message": message},
    ]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_that_cannot_reach_the_inspector_makes_the_configuration_unavailable() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(1)).await;
    assert_eq!(route(&server).as_deref(), Some("/mutate-pods/scheduler"));

    // Its probes fail: it says so on its pod, and its readiness fails (the Deployment
    // has no available replica).
    let why = "cannot reach the image inspector: dns error: failed to lookup address information: Name or service not known; pods whose images were not read yet wait until it answers.";
    server.apply(
        "pods",
        scheduler_pod(&server, "False", "InspectorUnreachable", why),
    );
    rollouts.hold("multiarch-scheduler");
    eventually("not Available, naming the inspector", || {
        condition(&server, "Available").is_some_and(|c| {
            c["status"] == "False"
                && c["message"].as_str().unwrap().contains(&format!(
                    "pod {SCHEDULER_POD} cannot reach the image inspector (InspectorUnreachable: cannot reach the image inspector: dns error"
                ))
        })
    })
    .await;
    let degraded = condition(&server, "Degraded").unwrap();
    assert_eq!(degraded["status"], "True");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("cannot reach the image inspector"),
        "{degraded}"
    );
    // Pods go to the default scheduler unchanged meanwhile, not to one that cannot read
    // their images.
    eventually("the route taken off", || route(&server).is_none()).await;

    // It reaches the inspector again.
    server.apply(
        "pods",
        scheduler_pod(
            &server,
            "True",
            "InspectorReachable",
            "The image inspector answers.",
        ),
    );
    rollouts.release("multiarch-scheduler");
    eventually("Available again", || {
        condition(&server, "Available").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(route(&server).as_deref(), Some("/mutate-pods/scheduler"));
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_alone_makes_the_scheduler_unavailable() {
    // Readiness lags its probes (and a scheduler whose readiness is not wired says
    // nothing): the condition alone is enough.
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(1)).await;
    server.apply(
        "pods",
        scheduler_pod(
            &server,
            "False",
            "InspectorUnreachable",
            "cannot reach the image inspector: connection refused.",
        ),
    );
    // A change of the configuration starts a pass (a pod's status does not).
    patch_spec(&server, json!({"logVerbosity": "Debug"})).await;
    eventually("not Available", || {
        condition(&server, "Available").is_some_and(|c| {
            c["status"] == "False"
                && c["message"].as_str().unwrap().contains(
                    "(InspectorUnreachable: cannot reach the image inspector: connection refused)",
                )
        })
    })
    .await;
    let scheduler = condition(&server, "SchedulerNotRolledOut").unwrap();
    assert_eq!(scheduler["status"], "True", "{scheduler}");
    operator.stop().await;
}
