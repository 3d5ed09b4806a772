//! `multiarch bench` against a real kube-apiserver 1.36.2 without kube-controller-manager
//! (the kit of `../shared/k8s`, its API server alone), as the bench's docs advise and as
//! scheduler_perf runs: nothing there finishes a namespace's deletion, so the bench must
//! leave its namespace gone for the next run. Two runs in a row in the same namespace,
//! pods created live for a scheduler the bench starts. Without the kit it says SKIPPED.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{path::Path, process::Command};

use multiarch_test_support::kit::{self, ApiServer};

/// The kit's SLOT for this test: apart from the e2e tier's (3), a developer's default (0)
/// and the other tests' (6).
const SLOT: &str = "7";

#[test]
fn runs_follow_each_other_on_an_api_server_without_a_namespace_controller() {
    let (kit, bin) = match kit::find() {
        Ok(found) => found,
        Err(why) => {
            println!("SKIPPED: bench against kube-apiserver: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::up(&kit, &bin, &dir.path().join("cluster"), SLOT);
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let applied = server.kubectl(&["apply", "-k", crds.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let platforms = dir.path().join("platforms.yaml");
    std::fs::write(
        &platforms,
        "images:\n  quay.io/shop/web:1: [linux/amd64, linux/arm64]\n  quay.io/edge/inference:1: [linux/arm64]\n",
    )
    .unwrap();
    let binary = env!("CARGO_BIN_EXE_multiarch");
    let kubeconfig = server.kubeconfig();
    for round in 0..2 {
        let out = Command::new(binary)
            .arg("bench")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--platforms")
            .arg(&platforms)
            .args(["--nodes", "20", "--pods", "50", "--create-rate", "100"])
            .args(["--timeout", "120s", "-o", "json", "--", binary, "scheduler"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--image-platforms")
            .arg(&platforms)
            .args(["--leader-elect", "false", "--metrics-addr", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["runs"][0]["bound"], 50, "round {round}: {report}");
        assert_eq!(
            report["runs"][0]["incompatible"], 0,
            "round {round}: {report}"
        );
        let namespace = server.kubectl(&["get", "namespace", "multiarch-bench"]);
        assert!(
            String::from_utf8_lossy(&namespace.stderr).contains("NotFound"),
            "round {round}: the namespace is left: {}",
            String::from_utf8_lossy(&namespace.stdout)
        );
        let events = server.kubectl(&["get", "events", "-n", "multiarch-bench", "-o", "name"]);
        assert!(events.status.success());
        assert!(
            events.stdout.is_empty(),
            "round {round}: events are left: {}",
            String::from_utf8_lossy(&events.stdout)
        );
        let nodes = server.kubectl(&["get", "nodes", "-o", "name"]);
        assert!(
            nodes.stdout.is_empty(),
            "round {round}: {}",
            String::from_utf8_lossy(&nodes.stdout)
        );
    }
}
