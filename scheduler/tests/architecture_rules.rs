//! `celArchitecturePlacement` in scheduler mode, end to end on the fake API server: the
//! rule's architectures place the pod whatever its images say, a rule against known
//! image builds is obeyed with a Warning event, no node of the rule's architecture leaves
//! the pod pending with the rule named, and no matching rule means the fallback.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::{events_for, eventually, node, node_of, pod, start};
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

fn rules() -> Value {
    json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
    "metadata": {"name": "tiers", "namespace": "shop"},
    "spec": {"priority": 1, "plugins": {"celArchitecturePlacement": {
        "enabled": true, "fallbackArchitectures": ["amd64"],
        "rules": [
            {"name": "arm-tier", "expression": "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'arm'", "architectures": ["arm64"]},
            {"name": "mainframe", "expression": "'licence' in self.metadata.annotations && self.metadata.annotations['licence'] == 'z'", "architectures": ["s390x"]}
        ]}}}})
}

fn labelled(name: &str, image: &str, labels: Value, annotations: Value) -> Value {
    let mut p = pod(name, image, "100m");
    p["metadata"]["labels"] = labels;
    p["metadata"]["annotations"] = annotations;
    p
}

fn event(server: &FakeApiServer, pod: &str, reason: &str) -> Option<String> {
    events_for(server, pod)
        .into_iter()
        .find(|e| e["reason"] == reason)
        .and_then(|e| e["note"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_place_pods_in_scheduler_mode() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64", "4"));
    server.apply("nodes", node("arm-1", "arm64", "4"));
    server.apply("multiarch.openshift.io/podplacementconfigs", rules());
    let runtime = start(&server, "a", false);
    // The fallback, first: it also makes the scheduler's cache know `amd:1`.
    server.apply("pods", labelled("plain", "amd:1", json!({}), json!({})));
    eventually("plain bound", || node_of(&server, "plain").is_some()).await;
    assert_eq!(node_of(&server, "plain").as_deref(), Some("amd-1"));
    eventually("plain's Scheduled event", || {
        event(&server, "plain", "Scheduled").is_some()
    })
    .await;
    assert_eq!(
        event(&server, "plain", "Scheduled").unwrap(),
        "Successfully assigned shop/plain to amd-1 (amd64); architectures amd64 from the fallback of PodPlacementConfig tiers"
    );

    // A rule against the images (amd64 only): obeyed, and said.
    server.apply(
        "pods",
        labelled("armed", "amd:1", json!({"tier": "arm"}), json!({})),
    );
    eventually("armed bound", || node_of(&server, "armed").is_some()).await;
    assert_eq!(node_of(&server, "armed").as_deref(), Some("arm-1"));
    eventually("the override warning", || {
        event(&server, "armed", "ArchitectureRuleOverridesImages").is_some()
    })
    .await;
    assert_eq!(
        event(&server, "armed", "ArchitectureRuleOverridesImages").unwrap(),
        "rule \"arm-tier\" of PodPlacementConfig tiers places the pod on arm64, where its images have no build (images support amd64); the rule is obeyed"
    );

    // No node of the rule's architecture: pending, the rule named.
    server.apply(
        "pods",
        labelled("ibm", "multi:1", json!({}), json!({"licence": "z"})),
    );
    eventually("ibm's condition", || {
        server.get("pods", "shop", "ibm").unwrap()["status"]["conditions"][0]["reason"]
            == "Unschedulable"
    })
    .await;
    let message = server.get("pods", "shop", "ibm").unwrap()["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("0/2 nodes are available: 2 node(s) didn't match the architectures of rule \"mainframe\" of PodPlacementConfig tiers (s390x)."),
        "{message}"
    );
    assert!(node_of(&server, "ibm").is_none());

    // The rule goes: the pending pod is placed by its images again.
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "tiers",
    );
    eventually("ibm bound by its images", || {
        node_of(&server, "ibm").is_some()
    })
    .await;
    runtime.shutdown().await.unwrap();
}
