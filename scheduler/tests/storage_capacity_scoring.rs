//! StorageCapacityScoring against the fake API server: with
//! `spec.placement.storageCapacityScoring` set, a claim that waits for its first consumer
//! is provisioned on the node whose published storage capacity the shape prefers; two
//! shapes that prefer opposite ends pick opposite nodes of an otherwise equal pair.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

const CLASS: &str = "topolvm";
const DRIVER: &str = "topolvm.io";

fn capacity(node: &str, size: &str) -> Value {
    json!({"metadata": {"name": format!("capacity-{node}"), "namespace": "kube-system"},
           "storageClassName": CLASS,
           "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
           "capacity": size})
}

/// Two equal amd64 nodes whose driver publishes 100 GiB free on amd-1 and 20 GiB on
/// amd-2, a 10 GiB claim waiting for its first consumer, and the placement `shape`
/// (`None`: the default). Returns the node the claim is provisioned on.
async fn provisioned_on(shape: Option<Value>) -> String {
    let server = FakeApiServer::start().await;
    for name in ["amd-1", "amd-2"] {
        let mut n = node(name, "amd64", "4");
        n["metadata"]["labels"]["kubernetes.io/hostname"] = json!(name);
        server.apply("nodes", n);
    }
    server.apply(
        "storage.k8s.io/csidrivers",
        json!({"metadata": {"name": DRIVER}, "spec": {"storageCapacity": true}}),
    );
    server.apply(
        "storage.k8s.io/storageclasses",
        json!({"metadata": {"name": CLASS}, "provisioner": DRIVER, "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    server.apply(
        "storage.k8s.io/csistoragecapacities",
        capacity("amd-1", "100Gi"),
    );
    server.apply(
        "storage.k8s.io/csistoragecapacities",
        capacity("amd-2", "20Gi"),
    );
    server.apply(
        "persistentvolumeclaims",
        json!({"metadata": {"name": "data", "namespace": "shop"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                        "storageClassName": CLASS, "volumeMode": "Filesystem"},
               "status": {"phase": "Pending"}}),
    );
    let scoring = shape.map_or_else(|| json!({}), |shape| json!({"shape": shape}));
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"},
               "spec": {"placement": {"storageCapacityScoring": scoring}}}),
    );
    let runtime = start(&server, "a", false);
    let mut app = pod("app", "amd:1", "100m");
    app["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    server.apply("pods", app);
    let selected = || {
        server
            .get("persistentvolumeclaims", "shop", "data")
            .unwrap()["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
            .as_str()
            .map(str::to_owned)
    };
    eventually("the claim's selected node", || selected().is_some()).await;
    runtime.shutdown().await.unwrap();
    selected().unwrap()
}

/// kube-scheduler's default shape prefers the node whose storage stays the emptiest:
/// 10 of 100 GiB (score 90) over 10 of 20 (score 50).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_shape_provisions_where_the_most_capacity_is_left() {
    assert_eq!(provisioned_on(None).await, "amd-1");
}

/// A shape that rises with utilization packs volumes: the fuller node wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rising_shape_provisions_where_the_least_capacity_is_left() {
    let rising = json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]);
    assert_eq!(provisioned_on(Some(rising)).await, "amd-2");
}
