//! The daemon's x86-64 level label against the fake API server: written on a node that
//! lacks it, written back when someone changes or removes it, other nodes and labels left
//! alone, a failed write retried, and every call granted by the daemon's roles.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use multiarch_crd::names::NODE_VARIANT_LABEL;
use multiarch_enoexec::daemon::{metrics::DaemonMetrics, node_level::keep_node_level};
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::supervisor::Supervisor;
use multiarch_test_support::rbac;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn node(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {}})
}

fn label(server: &FakeApiServer, node: &str) -> Option<String> {
    server.get("nodes", "", node).unwrap()["metadata"]["labels"][NODE_VARIANT_LABEL]
        .as_str()
        .map(str::to_owned)
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_carries_its_level_whatever_is_done_to_the_label() {
    let server = FakeApiServer::start().await;
    server.apply(
        "nodes",
        node("amd-1", json!({"kubernetes.io/arch": "amd64", "team": "a"})),
    );
    server.apply(
        "nodes",
        node("amd-2", json!({"kubernetes.io/arch": "amd64"})),
    );
    // The first write fails with a server error: it is retried.
    server.fail_next_patches(500, 1);
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let metrics = DaemonMetrics::default();
    let supervisor = Supervisor::new(CancellationToken::new());
    let tasks = supervisor.tasks();
    tasks.spawn(
        "x86-64 level label",
        keep_node_level(
            client,
            "amd-1".into(),
            "v3".into(),
            metrics.clone(),
            tasks.shutdown().clone(),
        ),
    );

    // The count follows the write's answer, which follows the store's change.
    eventually("amd-1 labelled v3, the write counted", || {
        label(&server, "amd-1").as_deref() == Some("v3") && metrics.label_writes("written") == 1
    })
    .await;
    assert_eq!(metrics.label_writes("failed"), 1);

    // Someone lowers it: written back.
    let mut changed = server.get("nodes", "", "amd-1").unwrap();
    changed["metadata"]["labels"][NODE_VARIANT_LABEL] = json!("v1");
    server.apply("nodes", changed);
    eventually("amd-1 back to v3 after a change", || {
        label(&server, "amd-1").as_deref() == Some("v3")
    })
    .await;
    // Someone removes it: written back.
    let mut removed = server.get("nodes", "", "amd-1").unwrap();
    removed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(NODE_VARIANT_LABEL);
    server.apply("nodes", removed);
    eventually(
        "amd-1 back to v3 after a removal, three writes counted",
        || label(&server, "amd-1").as_deref() == Some("v3") && metrics.label_writes("written") == 3,
    )
    .await;

    // The other labels stay, the other node is never touched.
    let amd_1 = server.get("nodes", "", "amd-1").unwrap();
    assert_eq!(amd_1["metadata"]["labels"]["team"], "a");
    assert_eq!(label(&server, "amd-2"), None);
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .filter(|r| r.starts_with("PATCH "))
            .all(|r| r == "PATCH /api/v1/nodes/amd-1"),
        "{requests:#?}"
    );
    let rules = rbac::rules(&[multiarch_operator::install::enoexec_daemon_cluster_rules()]);
    rbac::assert_granted(&rules, &requests);

    // SIGTERM: the task ends at once.
    tasks.shutdown().cancel();
    supervisor.wait(Duration::from_secs(5)).await.unwrap();
}
