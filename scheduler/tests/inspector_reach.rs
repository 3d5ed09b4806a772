//! The scheduler tells whether it reaches the image inspector: on its own pod (the
//! condition the operator reads), in its gauge and to its readiness; an outage is told
//! after the probes in a row the threshold asks, and its end as soon as one is answered.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{net::SocketAddr, time::Duration};

use common::*;
use multiarch_crd::names::CONDITION_INSPECTOR_REACHABLE;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::{
    grpc::{self, RemoteInspector, ServiceLimits},
    reachability::InspectorReach,
};
use multiarch_runtime::supervisor::Supervisor;
use multiarch_scheduler::in_cluster::{
    inspector_reach::{self, OwnPod, ProbeOptions},
    metrics::SchedulerMetrics,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const POD: &str = "multiarch-scheduler-5c9d7-qh2vz";

/// An inspector service on `address`, until the token is cancelled; it stops at once.
async fn inspector_at(address: SocketAddr) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let stop = CancellationToken::new();
    let mut limits = ServiceLimits::default();
    limits.connections.shutdown_delay = Duration::ZERO;
    let served = tokio::spawn(grpc::serve(
        listener,
        None,
        inspector(),
        limits,
        stop.clone(),
    ));
    (stop, served)
}

fn condition(server: &FakeApiServer) -> Option<Value> {
    server.get("pods", "multiarch", POD)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == CONDITION_INSPECTOR_REACHABLE)
        .cloned()
}

/// The scheduler's own pod in the fake API server (with a Ready condition of its own).
fn own_pod(server: &FakeApiServer) {
    server.apply(
        "pods",
        json!({"metadata": {"name": POD, "namespace": "multiarch"},
            "spec": {"containers": [{"name": "scheduler", "image": "multiarch:1"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
}

/// An address nothing listens on (yet).
async fn free_address() -> SocketAddr {
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    free.local_addr().unwrap()
}

/// The probes of the inspector at `address` under their own supervisor, quick, with an
/// outage after `threshold` unanswered ones.
fn probing(
    server: &FakeApiServer,
    address: SocketAddr,
    threshold: u32,
    metrics: SchedulerMetrics,
) -> (Supervisor, tokio::sync::watch::Receiver<InspectorReach>) {
    let supervisor = Supervisor::new(CancellationToken::new());
    let probes = ProbeOptions {
        steady: Duration::from_millis(50),
        quick: Duration::from_millis(50),
        deadline: Duration::from_secs(5),
        threshold,
    };
    let reach = inspector_reach::start(
        RemoteInspector::new(&format!("http://{address}")).unwrap(),
        probes,
        Some(OwnPod {
            namespace: "multiarch".into(),
            name: POD.into(),
        }),
        client(server),
        metrics,
        &supervisor.tasks(),
    );
    (supervisor, reach)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_says_on_its_pod_whether_it_reaches_the_inspector() {
    let server = FakeApiServer::start().await;
    own_pod(&server);
    let address = free_address().await;
    let (stop, served) = inspector_at(address).await;
    let metrics = SchedulerMetrics::default();
    let (supervisor, mut reach) = probing(&server, address, 2, metrics.clone());
    reach.wait_for(InspectorReach::is_reachable).await.unwrap();
    eventually("the pod says it reaches it", || {
        condition(&server)
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "InspectorReachable")
    })
    .await;
    assert_eq!(metrics.inspector_reachable.get(), 1);
    // The pod's other conditions are its own (a strategic merge by type).
    let pod = server.get("pods", "multiarch", POD).unwrap();
    assert!(
        pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready")
    );

    // The inspector goes away.
    stop.cancel();
    served.await.unwrap();
    reach
        .wait_for(|r| matches!(r, InspectorReach::Unreachable { .. }))
        .await
        .unwrap();
    eventually("the pod says why it does not", || {
        condition(&server).is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "InspectorUnreachable"
                && c["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("cannot reach the image inspector: ")
        })
    })
    .await;
    assert_eq!(metrics.inspector_reachable.get(), 0);
    let down_since = condition(&server).unwrap()["lastTransitionTime"].clone();

    // It is back.
    let (stop, served) = inspector_at(address).await;
    reach.wait_for(InspectorReach::is_reachable).await.unwrap();
    eventually("the pod says it reaches it again", || {
        condition(&server).is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_ne!(
        condition(&server).unwrap()["lastTransitionTime"],
        down_since
    );
    assert_eq!(metrics.inspector_reachable.get(), 1);

    supervisor.tasks().shutdown().cancel();
    supervisor.wait(Duration::from_secs(10)).await.unwrap();
    stop.cancel();
    served.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspector_never_reached_is_told_from_the_start() {
    let server = FakeApiServer::start().await;
    own_pod(&server);
    let address = free_address().await;
    let (supervisor, reach) = probing(&server, address, 1000, SchedulerMetrics::default());
    eventually("the pod says it was not reached", || {
        condition(&server).is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "InspectorNotReached"
                && c["message"].as_str().unwrap().starts_with(
                    "Not reached since this scheduler started: cannot reach the image inspector: ",
                )
        })
    })
    .await;
    assert!(!reach.borrow().is_reachable());
    supervisor.tasks().shutdown().cancel();
    supervisor.wait(Duration::from_secs(10)).await.unwrap();
}
