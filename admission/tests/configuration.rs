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

/// The webhook's configuration as `configuration::start` runs it, under its own supervisor.
struct Followed {
    supervisor: Supervisor,
    shutdown: CancellationToken,
    config: Arc<RwLock<WebhookConfig>>,
}

impl Followed {
    fn start(
        server: &FakeApiServer,
        mode: Option<PlacementMode>,
        scheduler_name: Option<&str>,
    ) -> Self {
        let url = server.url().parse().unwrap();
        let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(shutdown.clone());
        let tasks = supervisor.tasks();
        let config = configuration::start(mode, scheduler_name, "multiarch", Some(&client), &tasks);
        Followed {
            supervisor,
            shutdown,
            config,
        }
    }

    /// Waits (a generous bound, for a busy machine) until the configuration shows `want`.
    async fn until(&self, want: (bool, PlacementMode, &str)) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (known, mode, name) = read(&self.config);
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

    /// Shuts down; its follower must drain cleanly.
    async fn stop(self) {
        self.shutdown.cancel();
        self.supervisor.wait(Duration::from_secs(5)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_and_the_scheduler_name_follow_the_cluster_config() {
    let server = FakeApiServer::start().await;
    let webhook = Followed::start(&server, None, None);
    // Known (the webhook ready) once the list shows no ClusterPodPlacementConfig: the
    // defaults.
    let defaults = (true, PlacementMode::Scheduler, "multiarch-scheduler");
    webhook.until(defaults).await;
    server.apply(CPPCS, renamed_in_gate_mode());
    let renamed = (true, PlacementMode::SchedulingGate, "renamed-scheduler");
    webhook.until(renamed).await;
    webhook.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_command_line_pins_stays() {
    let server = FakeApiServer::start().await;
    server.apply(CPPCS, renamed_in_gate_mode());
    let name_pinned = Followed::start(&server, None, Some("pinned-scheduler"));
    let mode_followed = (true, PlacementMode::SchedulingGate, "pinned-scheduler");
    name_pinned.until(mode_followed).await;
    name_pinned.stop().await;

    let mode_pinned = Followed::start(&server, Some(PlacementMode::Scheduler), None);
    let name_followed = (true, PlacementMode::Scheduler, "renamed-scheduler");
    mode_pinned.until(name_followed).await;
    mode_pinned.stop().await;
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

const DEVICE_CLASSES: &str = "resource.k8s.io/deviceclasses";

fn gpu_pod() -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "quay.io/ml/train:1",
            "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_asking_for_a_name_a_device_class_maps_is_not_routed() {
    use multiarch_admission::webhook::decision::decide;
    use multiarch_policy::routing::Unsupported;

    let server = FakeApiServer::start().await;
    server.apply(
        DEVICE_CLASSES,
        json!({"metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                     "extendedResourceName": "example.com/gpu"}}),
    );
    let webhook = Followed::start(&server, None, None);
    let decided = |webhook: &Followed| {
        let config = webhook.config.read().unwrap();
        config
            .not_ready()
            .is_none()
            .then(|| decide(&gpu_pod(), "ml", &config))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let gated = loop {
        if let Some(decision) = decided(&webhook) {
            break decision;
        }
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        gated.unsupported,
        [Unsupported::DeviceClassExtendedResources]
    );
    assert!(
        gated.gated,
        "left with the default scheduler, gated: {gated:?}"
    );

    // The class no longer maps the name: the pod is routed like any other.
    server.delete(DEVICE_CLASSES, "", "gpu.example.com");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let decision = decided(&webhook).unwrap();
        if decision.unsupported.is_empty() {
            assert!(!decision.gated);
            assert_eq!(decision.patch[0]["path"], "/spec/schedulerName");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still not routed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    webhook.stop().await;
}
