//! What the scheduler's end-to-end tests share: a scheduler on the fake API server and
//! the objects and waits they use.
#![allow(dead_code, clippy::unwrap_used)] // each test file uses part of it

pub use multiarch_test_support::table_inspector;

use std::{sync::Arc, time::Duration};

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::{leader_election::ElectionConfig, supervisor::Supervisor};
use multiarch_scheduler::in_cluster::{
    RunningScheduler, SchedulerOptions, metrics::SchedulerMetrics,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub fn inspector() -> Arc<dyn ImageInspector> {
    table_inspector::standard()
}

pub fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

pub fn options(identity: &str, election: bool) -> SchedulerOptions {
    SchedulerOptions {
        scheduler_name: "multiarch-scheduler".into(),
        identity: identity.into(),
        election: election.then(|| ElectionConfig {
            namespace: "multiarch".into(),
            lease_name: "multiarch-scheduler".into(),
            identity: identity.into(),
            lease_duration: Duration::from_millis(1500),
            renew_deadline: Duration::from_millis(1000),
            retry_period: Duration::from_millis(150),
        }),
        bind_concurrency: 4,
        report_capacity: 1000,
        inspection_retry: Duration::from_secs(30),
        config_grace: Duration::from_secs(5),
        api_qps: 0.0,
        api_burst: 1,
        volume_bind_timeout: Duration::from_secs(20),
    }
}

pub fn start(server: &FakeApiServer, identity: &str, election: bool) -> RunningScheduler {
    start_with(server, options(identity, election))
}

/// A scheduler with its own supervisor (its tasks stop with `shutdown`).
pub fn start_with(server: &FakeApiServer, options: SchedulerOptions) -> RunningScheduler {
    start_with_metrics(server, options, SchedulerMetrics::default())
}

pub fn start_with_metrics(
    server: &FakeApiServer,
    options: SchedulerOptions,
    metrics: SchedulerMetrics,
) -> RunningScheduler {
    start_with_inspector(server, options, metrics, inspector())
}

/// A scheduler asking `inspector` for its pods' images.
pub fn start_with_inspector(
    server: &FakeApiServer,
    options: SchedulerOptions,
    metrics: SchedulerMetrics,
    inspector: Arc<dyn ImageInspector>,
) -> RunningScheduler {
    let supervisor = Supervisor::new(CancellationToken::new());
    // The replica's identity as its User-Agent: the fake's commit log says who wrote what.
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&options.identity).unwrap(),
    ));
    multiarch_scheduler::in_cluster::start(
        kube::Client::try_from(config).unwrap(),
        options,
        inspector,
        metrics,
        &supervisor.tasks(),
    )
}

pub fn node(name: &str, arch: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
           "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}, "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
           "conditions": [{"type": "Ready", "status": "True"}]}})
}

pub fn pod(name: &str, image: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"},
           "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "app", "image": image, "resources": {"requests": {"cpu": cpu}}}]},
           "status": {"phase": "Pending"}})
}

/// Binding requests sent for `pod` (of namespace `shop`), successful or not.
pub fn bindings(server: &FakeApiServer, pod: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| *r == &format!("POST /api/v1/namespaces/shop/pods/{pod}/binding"))
        .count()
}

/// Replica `replica-a` leading, then `replica-b` started as its standby.
pub async fn leader_and_standby(server: &FakeApiServer) -> (RunningScheduler, RunningScheduler) {
    let a = start(server, "replica-a", true);
    let mut a_leading = a.leading.clone();
    tokio::time::timeout(Duration::from_secs(5), a_leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    let b = start(server, "replica-b", true);
    (a, b)
}

pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn node_of_in(server: &FakeApiServer, namespace: &str, name: &str) -> Option<String> {
    server.get("pods", namespace, name)?["spec"]["nodeName"]
        .as_str()
        .map(str::to_owned)
}

pub fn node_of(server: &FakeApiServer, name: &str) -> Option<String> {
    node_of_in(server, "shop", name)
}

pub fn events_for(server: &FakeApiServer, pod: &str) -> Vec<Value> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod)
        .collect()
}

pub async fn ready(runtime: &RunningScheduler) {
    let mut ready = runtime.ready.clone();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .unwrap()
        .unwrap();
}

/// A recorded fixture of `tests/fixtures/kube-scheduler/`.
pub fn recorded(file: &str) -> Value {
    let path = format!(
        "{}/../tests/fixtures/kube-scheduler/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The note of the recorded event `reason` about `pod`.
pub fn recorded_note(file: &str, reason: &str, pod: &str) -> String {
    recorded(file)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == reason && e["regarding"]["name"] == pod)
        .and_then(|e| e["note"].as_str())
        .unwrap()
        .to_owned()
}
