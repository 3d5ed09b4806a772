//! Extended resources a DeviceClass maps (`spec.extendedResourceName`) against the fake
//! API server: a pod asking for one is refused by name while a class maps it (kube-
//! scheduler's DynamicResources plugin would allocate it), and placed by its device
//! plugin's resource once none does.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::json;

const DEVICE_CLASSES: &str = "resource.k8s.io/deviceclasses";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_asking_for_a_mapped_name_is_refused_while_a_class_maps_it() {
    let server = FakeApiServer::start().await;
    let mut gpu_node = node("gpu-1", "amd64", "4");
    gpu_node["status"]["allocatable"]["example.com/gpu"] = json!("2");
    gpu_node["status"]["capacity"]["example.com/gpu"] = json!("2");
    server.apply("nodes", gpu_node);
    server.apply(
        DEVICE_CLASSES,
        json!({"metadata": {"name": "gpu.example.com"},
            "spec": {"extendedResourceName": "example.com/gpu"}}),
    );
    let mut trainer = pod("trainer", "amd:1", "100m");
    trainer["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = json!("1");
    trainer["spec"]["containers"][0]["resources"]["limits"] = json!({"example.com/gpu": "1"});

    let runtime = start(&server, "a", false);
    // Ready once the DeviceClasses are read, as every list it schedules from.
    ready(&runtime).await;
    server.apply("pods", trainer);
    eventually("FailedScheduling for trainer", || {
        !events_for(&server, "trainer").is_empty()
    })
    .await;
    let note = events_for(&server, "trainer")[0]["note"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        note.contains("pod uses extended resources of a DeviceClass"),
        "{note}"
    );
    assert!(node_of(&server, "trainer").is_none());

    // The class goes: the device plugin's resource places the pod.
    server.delete(DEVICE_CLASSES, "", "gpu.example.com");
    eventually("trainer bound to gpu-1", || {
        node_of(&server, "trainer").as_deref() == Some("gpu-1")
    })
    .await;
    runtime.shutdown().await.unwrap();
}
