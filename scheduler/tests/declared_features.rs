//! NodeDeclaredFeatures against the fake API server: a pod that needs a node feature
//! goes only to a node declaring it, waits with kube-scheduler's words while none does,
//! and is placed once a node's status declares it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_go_to_nodes_that_declare_what_they_need() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64", "4"));
    let mut declaring = node("amd-2", "amd64", "4");
    declaring["status"]["declaredFeatures"] = json!(["RestartAllContainersOnContainerExits"]);
    server.apply("nodes", declaring);

    let mut restarter = pod("restarter", "amd:1", "100m");
    restarter["spec"]["containers"][0]["restartPolicyRules"] = json!([
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
    ]);
    let mut userns = pod("userns", "amd:1", "100m");
    userns["spec"]["hostNetwork"] = json!(true);
    userns["spec"]["hostUsers"] = json!(false);
    server.apply("pods", restarter);
    server.apply("pods", userns);
    server.apply("pods", pod("plain", "amd:1", "100m"));

    let runtime = start(&server, "a", false);
    eventually("restarter and plain bound", || {
        node_of(&server, "restarter").is_some() && node_of(&server, "plain").is_some()
    })
    .await;
    assert_eq!(node_of(&server, "restarter").as_deref(), Some("amd-2"));
    eventually("FailedScheduling for userns", || {
        !events_for(&server, "userns").is_empty()
    })
    .await;
    assert_eq!(
        events_for(&server, "userns")[0]["note"],
        "0/2 nodes are available: 2 node(s) didn't match Pod's required features. no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert!(node_of(&server, "userns").is_none());

    // A kubelet that now declares the feature: the waiting pod is placed there.
    let mut upgraded = server.get("nodes", "", "amd-1").unwrap();
    upgraded["status"]["declaredFeatures"] = json!(["UserNamespacesHostNetworkSupport"]);
    server.apply("nodes", upgraded);
    eventually("userns bound after amd-1 declared the feature", || {
        node_of(&server, "userns").as_deref() == Some("amd-1")
    })
    .await;
    runtime.shutdown().await.unwrap();
}
