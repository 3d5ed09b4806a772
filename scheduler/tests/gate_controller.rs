//! The gate controller against the fake API server: success, inspection failures with
//! backoff then fallback, no common architecture, a PodPlacementConfig created just
//! before the pod, and a pod modified between read and write.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "../../tests/support/table_inspector.rs"]
mod table_inspector;

use std::time::Duration;

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_scheduler::gate::controller::{GateController, GateMetrics, GateOptions, start};
use serde_json::{Value, json};

fn controller(server: &FakeApiServer) -> GateController {
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let inspector = table_inspector::standard();
    let options = GateOptions {
        own_namespace: "multiarch".into(),
        identity: "test".into(),
        concurrency: 4,
        max_attempts: 3,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        election: None,
    };
    start(client, inspector, options, GateMetrics::default())
}

fn gated(name: &str, images: &[&str], labels: Value) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "shop", "labels": labels},
           "spec": {"containers": containers, "schedulingGates": [{"name": "multiarch.openshift.io/scheduling-gate"}]},
           "status": {"phase": "Pending"}})
}

async fn ungated(server: &FakeApiServer, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let pod = server.get("pods", "shop", name).unwrap();
        if pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            return pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} still gated: {pod}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reasons(server: &FakeApiServer, pod: &str) -> Vec<String> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod)
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect()
}

fn required(pod: &Value) -> Value {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_pods_get_the_architecture_affinity_and_lose_the_gate() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    server.apply("pods", gated("web", &["multi:1", "amd:1"], json!({})));
    let pod = ungated(&server, "web").await;
    assert_eq!(
        required(&pod),
        json!([{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}])
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
        "set"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
        "removed"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/single-arch"],
        ""
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = reasons(&server, "web");
    assert!(
        r.contains(&"ArchAwarePredicateSet".to_owned())
            && r.contains(&"ArchAwareSchedGateRemovalSuccess".to_owned()),
        "{r:?}"
    );

    server.apply(
        "pods",
        gated("nothing-common", &["amd:1", "arm:1"], json!({})),
    );
    let pod = ungated(&server, "nothing-common").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["key"],
        "multiarch.openshift.io/no-supported-arch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_inspections_back_off_then_use_the_fallback() {
    let server = FakeApiServer::start().await;
    server.apply("multiarch.openshift.io/clusterpodplacementconfigs", json!({"metadata": {"name": "cluster"}, "spec": {"fallbackArchitecture": "arm64", "placement": {"mode": "SchedulingGate"}}}));
    let _c = controller(&server);
    let started = std::time::Instant::now();
    server.apply("pods", gated("private", &["quay.io/private:1"], json!({})));
    let pod = ungated(&server, "private").await;
    // Three attempts with 100 ms and 200 ms waits between them.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/image-inspect-error-count"],
        "3"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/fallback-arch"],
        "arm64"
    );
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["arm64"])
    );
    assert!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/image-inspect-error"]
            .as_str()
            .unwrap()
            .starts_with("unauthorized at quay.io")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_created_just_before_the_pod_applies() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {}}),
    );
    server.apply("multiarch.openshift.io/podplacementconfigs", json!({"metadata": {"name": "prefer-arm", "namespace": "shop"},
        "spec": {"priority": 5, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 60}]}}}}));
    server.apply("pods", gated("fresh", &["multi:1"], json!({"app": "web"})));
    let pod = ungated(&server, "fresh").await;
    let preferred =
        &pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(preferred[0]["weight"], 60);
    assert_eq!(
        preferred[0]["preference"]["matchExpressions"][0]["values"],
        json!(["arm64"])
    );
    assert_eq!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/preferred-affinity-sources"],
        "arm64:60:PodPlacementConfig-prefer-arm"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/preferred-node-affinity"],
        "set"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_modified_between_read_and_write_is_processed_again() {
    let server = FakeApiServer::start().await;
    server.fail_next_updates(409, 1);
    let _c = controller(&server);
    server.apply("pods", gated("raced", &["multi:1"], json!({})));
    let pod = ungated(&server, "raced").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["amd64", "arm64"])
    );
    let puts = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("PUT /api/v1/namespaces/shop/pods/raced"))
        .count();
    assert_eq!(puts, 2, "the conflict was retried from a fresh read");
}
