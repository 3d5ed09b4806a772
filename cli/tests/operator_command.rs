//! `multiarch operator` as a process, as its Deployment runs it: against the fake API
//! server with the CRDs in, it installs the components from the ClusterPodPlacementConfig
//! with the flags it was given, serves its conversion webhook over HTTPS, and a SIGTERM
//! ends it cleanly.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::kubeconfig;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubeconfig::kubeconfig;
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::json;

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_installs_the_components_and_stops_on_sigterm() {
    let server = FakeApiServer::start().await;
    for crd in multiarch_crd::render::crds().unwrap() {
        server.apply(
            "apiextensions.k8s.io/customresourcedefinitions",
            serde_json::to_value(crd).unwrap(),
        );
    }
    server.apply("namespaces", json!({"metadata": {"name": "multiarch"}}));
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &server);
    let mut child = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "operator",
            "--leader-elect",
            "false",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--operand-image",
            "registry.example.com/multiarch:9.9.9",
            "--operand-replicas",
            "3",
        ])
        .arg("--kubeconfig")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
               "metadata": {"name": "cluster"}, "spec": {}}),
    );
    wait_for("the scheduler's Deployment", || {
        server
            .get("apps/deployments", "multiarch", "multiarch-scheduler")
            .is_some()
    })
    .await;
    let scheduler = server
        .get("apps/deployments", "multiarch", "multiarch-scheduler")
        .unwrap();
    assert_eq!(scheduler["spec"]["replicas"], 3);
    assert_eq!(
        scheduler["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/multiarch:9.9.9"
    );
    // The CA and its own serving certificate, and the finalizer that orders an uninstall.
    wait_for("the CA", || {
        server.get("secrets", "multiarch", "multiarch-ca").is_some()
    })
    .await;
    let cppc = server
        .get(
            "multiarch.openshift.io/clusterpodplacementconfigs",
            "",
            "cluster",
        )
        .unwrap();
    assert_eq!(
        cppc["metadata"]["finalizers"],
        json!(["finalizers.multiarch.openshift.io/pod-placement"])
    );

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn bad_flags_are_refused_with_the_reason() {
    let output = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["operator", "--operand-replicas", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--operand-replicas"), "{stderr}");
}
