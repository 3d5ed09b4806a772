//! Bundle images are data, not programs (MTO parity, its MULTIARCH-5546 / OCPBUGS-38823):
//! OLM's unpack Job runs a bundle image that is usually built for one architecture. A
//! real registry serves an amd64-only bundle image (OLM's labels in its config) and an
//! amd64-only application image beside it; on a cluster whose only node is s390x the
//! scheduler binds the unpack pod and not the application pod, the gate path ungates it
//! without an architecture constraint, and admission writes none.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;
use multiarch_test_support::scheduler;

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use base64::Engine;
use multiarch_admission::{
    gate::{controller, metrics::GateMetrics, options::GateOptions},
    webhook::{
        admission_affinity::AdmissionAffinityResult,
        decision::WebhookConfig,
        image_lookup::{AdmissionLookup, Credentials},
        metrics::{ReviewResultLabel, WebhookMetrics},
        server::{WebhookState, answer},
    },
};
use multiarch_crd::PlacementMode;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_runtime::supervisor::Supervisor;
use registry::{Options, Registry, bundle_labels, push_image, push_image_with_files};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The registry with `ops/etcd-bundle:v1` (amd64, OLM's labels) and `ops/app:1` (amd64).
struct Images {
    registry: Registry,
    bundle: String,
    app: String,
}

async fn images() -> Images {
    let registry = Registry::start(Options::default());
    push_image_with_files(
        &registry,
        "ops/etcd-bundle",
        "v1",
        "amd64",
        bundle_labels("etcd"),
        &[(
            "manifests/etcd.clusterserviceversion.yaml",
            "kind: ClusterServiceVersion\nmetadata: {name: etcd.v1}\n",
        )],
    )
    .await;
    push_image(
        &registry,
        "ops/app",
        "linux",
        "amd64",
        None,
        false,
        Some("1"),
    )
    .await;
    Images {
        bundle: format!("{}/ops/etcd-bundle:v1", registry.addr),
        app: format!("{}/ops/app:1", registry.addr),
        registry,
    }
}

fn inspector(registry: &Registry) -> Arc<Inspector> {
    let file = registry.dir().join("bundle-test-registries.yaml");
    std::fs::write(&file, registry.settings_yaml()).unwrap();
    Arc::new(Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions {
            total_timeout: Duration::from_secs(20),
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    ))
}

fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// A pod as OLM's unpack Job makes it, with `image` as its only container's.
fn unpack_pod(name: &str, image: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "olm", "labels": {"job-name": name}},
           "spec": {"containers": [{"name": "extract", "image": image}], "restartPolicy": "Never"},
           "status": {"phase": "Pending"}})
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_says_a_bundle_image_confines_nothing() {
    let images = images().await;
    let inspector = inspector(&images.registry);
    let request = |image: &str| InspectRequest {
        image: image.to_owned(),
        ..InspectRequest::default()
    };
    let bundle = inspector.inspect(&request(&images.bundle)).await.unwrap();
    assert!(bundle.operator_bundle);
    assert_eq!(bundle.platforms.len(), 1, "its own platform is still told");
    assert_eq!(bundle.placement_platforms(), None);
    let app = inspector.inspect(&request(&images.app)).await.unwrap();
    assert!(!app.operator_bundle);
    assert_eq!(app.placement_platforms().unwrap().len(), 1);

    // `multiarch inspect -o json` tells a person too.
    let settings = images.registry.dir().join("bundle-test-registries.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "inspect",
            &images.bundle,
            "-o",
            "json",
            "--registries-config",
        ])
        .arg(&settings)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["operatorBundle"], true, "{json}");
    assert_eq!(json["platforms"][0]["architecture"], "amd64");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["inspect", &images.bundle, "--registries-config"])
        .arg(&settings)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("an OLM bundle image"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_binds_an_unpack_pod_on_any_architecture() {
    let images = images().await;
    let server = FakeApiServer::start().await;
    server.apply(
        "nodes",
        json!({"metadata": {"name": "z-1", "labels": {"kubernetes.io/arch": "s390x", "kubernetes.io/os": "linux", "kubernetes.io/hostname": "z-1"}},
               "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let mut unpack = unpack_pod("unpack", &images.bundle);
    unpack["spec"]["schedulerName"] = json!("multiarch-scheduler");
    server.apply("pods", unpack);
    let mut app = unpack_pod("app", &images.app);
    app["spec"]["schedulerName"] = json!("multiarch-scheduler");
    server.apply("pods", app);

    let (running, _supervisor) = scheduler::start(client(&server), inspector(&images.registry));
    let node_of = |name: &str| {
        server.get("pods", "olm", name).unwrap()["spec"]["nodeName"]
            .as_str()
            .map(str::to_owned)
    };
    eventually("the unpack pod bound", || node_of("unpack").is_some()).await;
    assert_eq!(node_of("unpack").as_deref(), Some("z-1"));
    // The application image, amd64 only too, is a program: it is told why it waits.
    eventually("the app pod told why", || {
        server.get("pods", "olm", "app").unwrap()["status"]["conditions"][0]["reason"]
            == "Unschedulable"
    })
    .await;
    assert_eq!(node_of("app"), None);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_path_ungates_an_unpack_pod_without_an_architecture_constraint() {
    let images = images().await;
    let server = FakeApiServer::start().await;
    let gate = json!([{"name": "multiarch.openshift.io/scheduling-gate"}]);
    for (name, image) in [("unpack", &images.bundle), ("app", &images.app)] {
        let mut pod = unpack_pod(name, image);
        pod["spec"]["schedulingGates"] = gate.clone();
        server.apply("pods", pod);
    }
    let shutdown = CancellationToken::new();
    let supervisor = Supervisor::new(shutdown.clone());
    controller::start(
        client(&server),
        inspector(&images.registry),
        GateOptions {
            own_namespace: "multiarch".into(),
            identity: "bundle-test".into(),
            concurrency: 2,
            images_at_once: 2,
            pod_inspection_deadline: Duration::from_secs(30),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            election: None,
        },
        GateMetrics::default(),
        &supervisor.tasks(),
    );
    let ungated = |name: &str| {
        let pod = server.get("pods", "olm", name).unwrap();
        pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
            .then_some(pod)
    };
    eventually("both pods ungated", || {
        ungated("unpack").is_some() && ungated("app").is_some()
    })
    .await;
    let unpack = ungated("unpack").unwrap();
    assert!(unpack["spec"].get("affinity").is_none(), "{unpack}");
    assert_eq!(
        unpack["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
        "not-set"
    );
    // Events are recorded after the write that ungates.
    eventually("the ArchAwareOperatorBundle event", || {
        server
            .list("events.k8s.io/events")
            .into_iter()
            .any(|e| e["regarding"]["name"] == "unpack" && e["reason"] == "ArchAwareOperatorBundle")
    })
    .await;
    // The application pod gets its amd64 constraint as before.
    let app = ungated("app").unwrap();
    assert_eq!(
        app["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["amd64"])
    );
    shutdown.cancel();
    supervisor.wait(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_writes_no_constraint_for_an_unpack_pod() {
    let images = images().await;
    let state = WebhookState {
        config: Arc::new(RwLock::new(WebhookConfig::new(
            PlacementMode::Scheduler,
            "multiarch-scheduler",
            "multiarch",
        ))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: Some(AdmissionLookup::new(
            inspector(&images.registry),
            Duration::from_secs(20),
            4,
            Credentials::Anonymous,
        )),
        reviews_need_client_certificate: false,
    };
    let patch_for = |image: &str| {
        let state = &state;
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "7c1f0e2a-0000-4000-8000-000000000001",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "olm", "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
                "object": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"generateName": "unpack-", "namespace": "olm"},
                    "spec": {"containers": [{"name": "extract", "image": image}]}}}
        }))
        .unwrap();
        async move {
            let config = state.config.read().unwrap().clone();
            let (response, _) = answer(state, &config, body.into()).await.unwrap();
            let patch = response["response"]["patch"].as_str().unwrap_or_default();
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(patch)
                    .unwrap(),
            )
            .unwrap()
        }
    };
    let counted = |result: AdmissionAffinityResult| {
        state
            .metrics
            .admission_affinity
            .get_or_create(&ReviewResultLabel {
                result: result.as_str(),
            })
            .get()
    };
    let unpack = patch_for(&images.bundle).await;
    assert!(unpack.contains("/spec/schedulerName"), "routed: {unpack}");
    assert!(!unpack.contains("affinity"), "{unpack}");
    assert_eq!(counted(AdmissionAffinityResult::Unconstrained), 1);
    let app = patch_for(&images.app).await;
    assert!(app.contains("affinity") && app.contains("amd64"), "{app}");
    assert_eq!(counted(AdmissionAffinityResult::Set), 1);
}
