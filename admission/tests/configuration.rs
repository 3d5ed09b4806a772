//! The webhook's configuration as the `webhook` command starts it, against the fake API
//! server: it follows the ClusterPodPlacementConfig in what the command line leaves free,
//! so a renamed scheduler is where routed pods go next.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use multiarch_admission::webhook::{configuration, decision::WebhookConfig};
use multiarch_crd::PlacementMode;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CPPCS: &str = "multiarch.openshift.io/clusterpodplacementconfigs";

fn renamed_in_gate_mode() -> serde_json::Value {
    json!({"metadata": {"name": "cluster"}, "spec": {
        "placement": {"mode": "SchedulingGate", "schedulerName": "renamed-scheduler"}}})
}

fn read(config: &Arc<RwLock<WebhookConfig>>) -> (bool, PlacementMode, String) {
    let config = config.read().unwrap();
    (config.known, config.mode, config.scheduler_name.clone())
}

/// Waits (a generous bound, for a busy machine) until `config` shows `want`.
async fn until(config: &Arc<RwLock<WebhookConfig>>, want: (bool, PlacementMode, &str)) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (known, mode, name) = read(config);
        if (known, mode, name.as_str()) == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the configuration stayed at {:?}, not {want:?}",
            (known, mode, name)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn started(
    server: &FakeApiServer,
    mode: Option<PlacementMode>,
    scheduler_name: Option<&str>,
) -> (Supervisor, CancellationToken, Arc<RwLock<WebhookConfig>>) {
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let shutdown = CancellationToken::new();
    let supervisor = Supervisor::new(shutdown.clone());
    let config = configuration::start(
        mode,
        scheduler_name,
        "multiarch",
        Some(&client),
        &supervisor.tasks(),
    );
    (supervisor, shutdown, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_and_the_scheduler_name_follow_the_cluster_config() {
    let server = FakeApiServer::start().await;
    let (supervisor, shutdown, config) = started(&server, None, None).await;
    // Known (the webhook ready) once the list shows no ClusterPodPlacementConfig: the
    // defaults.
    until(
        &config,
        (true, PlacementMode::Scheduler, "multiarch-scheduler"),
    )
    .await;
    server.apply(CPPCS, renamed_in_gate_mode());
    until(
        &config,
        (true, PlacementMode::SchedulingGate, "renamed-scheduler"),
    )
    .await;
    shutdown.cancel();
    supervisor.wait(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_command_line_pins_stays() {
    let server = FakeApiServer::start().await;
    server.apply(CPPCS, renamed_in_gate_mode());
    let (supervisor, shutdown, config) = started(&server, None, Some("pinned-scheduler")).await;
    until(
        &config,
        (true, PlacementMode::SchedulingGate, "pinned-scheduler"),
    )
    .await;
    shutdown.cancel();
    supervisor.wait(Duration::from_secs(5)).await.unwrap();

    let (supervisor, shutdown, config) =
        started(&server, Some(PlacementMode::Scheduler), None).await;
    until(
        &config,
        (true, PlacementMode::Scheduler, "renamed-scheduler"),
    )
    .await;
    shutdown.cancel();
    supervisor.wait(Duration::from_secs(5)).await.unwrap();
}

#[test]
fn without_a_client_the_command_line_and_the_defaults_hold_and_are_known() {
    let supervisor = Supervisor::new(CancellationToken::new());
    let config = configuration::start(
        Some(PlacementMode::SchedulingGate),
        None,
        "multiarch",
        None,
        &supervisor.tasks(),
    );
    assert_eq!(
        read(&config),
        (
            true,
            PlacementMode::SchedulingGate,
            "multiarch-scheduler".into()
        )
    );
}
